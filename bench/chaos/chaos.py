"""Chaos suite: host-level faults on a 3-host Phalanx cluster (network namespaces on one
machine, tests/multihost/netns.py), each against an elastic regression job with one rank per
host (replicas 3, min 2, max 3; examples/cpp/elastic_regression), repeated --runs times.

    scripts/chaos.sh [--runs N] [--scenarios a,b,...] [--steps S] [--step-ms MS]

Scenarios: link-down, link-down-up, controller-host-down, sigstop-{rank,controller,node,gcs,
redis}, kill9-{rank,node,gcs,redis}, oom. Per run: the job is submitted with `phalanx job
submit -f` on host 0, the fault lands at step --fault-step, and the run is healed when the job
ends SUCCEEDED with the known weights. From the controller's step log ("step unix_ms world"):
time to heal (fault -> the step that ends the longest stall the fault caused; see
tests/multihost/jobs.py) and committed steps lost (how far the agreed step went backwards).
One cluster serves every run of a scenario: between runs the faulted host is repaired as an
operator would (link up, `phalanx stop` + `phalanx start --address` on it, the GCS or Redis
started again); when repair fails the cluster is rebuilt. After the last run the cluster is
stopped with `phalanx stop` on every host and the processes left are counted (strays).

Per scenario: runs, healed, median and max time to heal, steps lost, strays. The last line:
RESULT scenarios=.. runs=.. healed=.. max_heal_s=.. steps_lost=.. strays=..
"""

import argparse
import os
import signal
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "multihost"))

import cluster_info  # noqa: E402
import netns  # noqa: E402
from jobs import ElasticRun, format_analysis, now_ms  # noqa: E402

SCENARIOS = ["link-down", "link-down-up", "controller-host-down",
             "sigstop-rank", "sigstop-controller", "sigstop-node", "sigstop-gcs", "sigstop-redis",
             "kill9-rank", "kill9-node", "kill9-gcs", "kill9-redis", "oom"]


def log(*a):
    print(*a, flush=True)


class Scenario:
    def __init__(self, name, args, hosts, cluster):
        self.name = name
        self.args = args
        self.hosts = hosts
        self.cluster = cluster


def other_host(cluster, ctl):
    """A non-head host that does not hold the controller."""
    return next(i for i in range(1, len(cluster.hosts)) if ctl is None or i != ctl[0])


def inject(name, cluster, hosts, run, args):
    """Waits for the fault step, injects the fault, and returns (fault_ms, undo) where undo()
    ends a fault that lasts (SIGCONT) -- called once the job made progress without it."""
    ctl = cluster_info.wait_controller(cluster, run.job_id)
    if name == "oom":
        # The rank allocates past its limit at oomAtStep by itself; the fault begins when the
        # step before it is agreed.
        entry = run.wait_step(args.fault_step, timeout=90)
        steps = [s for s in run.steps() if s[0] == args.fault_step]
        return (steps[0][1] if steps else entry[1]), None
    if name == "controller-host-down" and ctl and ctl[0] == 0:
        return None, None  # the controller is on the head: resubmit (see run_once)
    run.wait_step(args.fault_step, timeout=90)
    victim = other_host(cluster, ctl)
    if name in ("link-down", "link-down-up"):
        t = now_ms()
        hosts[victim].link_down()
        if name == "link-down":
            return t, None
        def up():
            hosts[victim].link_up()
        return t, ("world2", up)
    if name == "controller-host-down":
        t = now_ms()
        hosts[ctl[0]].link_down()
        return t, None
    kind, what = name.split("-", 1)
    if what == "controller":
        pid = ctl[1]
    elif what == "rank":
        ranks = [r for r in cluster_info.ranks(cluster) if r[0] not in (0, ctl[0] if ctl else -1)]
        pid = ranks[0][1]
    elif what == "node":
        pid = cluster.pid_of(victim, "node")
    else:
        pid = cluster.pid_of(0, what)
    t = now_ms()
    if kind == "sigstop":
        os.kill(pid, signal.SIGSTOP)
        def cont():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # replaced meanwhile (a stopped rank is killed once it counts as hung)
        return t, ("hold", cont)
    os.kill(pid, signal.SIGKILL)
    if what == "gcs":
        time.sleep(0.2)
        cluster.restart_gcs()
    elif what == "redis":
        time.sleep(0.2)
        cluster.restart_redis()
    return t, None


def run_once(name, i, cluster, hosts, args):
    """One run: (healed, heal_s, steps_lost, back at full size, detail). Healed: the job
    SUCCEEDED with the known weights and, for a SIGSTOP, made progress while the process was
    stopped (not only once it was let go)."""
    config = {}
    if name == "oom":
        config = {"oomAtStep": str(args.fault_step), "faultRank": "1",
                  "faultMarker": os.path.join(hosts.dir, f"oom-marker-{i}")}
    for attempt in range(8):
        run = ElasticRun(cluster, hosts.dir, tag=f"{name}-{i}-{attempt}", steps=args.steps,
                         step_ms=args.step_ms, hang_s=args.hang_s, config=config)
        run.submit()
        if run.wait_world(3, timeout=60) is None:
            return False, None, 0, False, f"never reached world size 3: {run.output()[-2000:]}"
        fault_ms, undo = inject(name, cluster, hosts, run, args)
        if fault_ms is not None:
            break
        cluster.phalanx(0, "job", "stop", run.job_id, "--grace", "2", timeout=60)
        run.wait_done(timeout=30)
        # The controller asks for no resources, so the scheduler puts it on the node with the
        # lowest id (pack: all equal, the first wins). A cluster started again has new ids for
        # every node, the head's too: 1 chance in 3 that the head's is the lowest again.
        cluster.restart()
    else:
        return False, None, 0, False, "the controller landed on the head every time"
    note = ""
    try:
        if undo:
            kind, fn = undo
            if kind == "world2":      # link back once the job went on without the host
                run.wait_world(2, after_ms=fault_ms, timeout=40)
                up_ms = now_ms()
                fn()
                grown = run.wait_world(3, after_ms=up_ms, timeout=30)
                note = (f"; back to world size 3 {(grown[1] - up_ms) / 1000.0:.2f} s after the "
                        f"link came back" if grown else "; did not grow back to 3 after the link "
                        "came back")
            else:                     # SIGCONT once the job made progress without it
                progressed = run.wait_step_after(fault_ms + 6000, timeout=45)
                fn()
                if not progressed:
                    # It only went on once the process was let go: not healed.
                    note = "; NO step agreed while it was stopped (it resumed after SIGCONT)"
    except Exception as e:  # noqa: BLE001 -- the run's verdict comes from the job
        if undo:
            undo[1]()
        note = f"; {e!r}"
    rc = run.wait_done(timeout=args.run_timeout)
    a = run.analyze(fault_ms)
    healed = rc == 0 and "NO step" not in note
    detail = format_analysis(a) + note
    if rc == 0:
        try:
            err = run.weights_error()
            if err >= 1e-3:
                healed = False
                detail += f"; weights {err:.2e} off"
        except AssertionError as e:
            healed = False
            detail += f"; {e}"
    else:
        detail += f"; submit rc {rc}: " + " | ".join(run.output().strip().split("\n")[-4:])
        if rc is None:
            cluster.phalanx(0, "job", "stop", run.job_id, "--grace", "2", timeout=60)
            run.wait_done(timeout=30)
    if args.verbose:
        log(f"  fault at unix ms {fault_ms}; the job's output:\n{run.output()[-4000:]}")
    steps = run.steps()
    full = bool(steps) and steps[-1][2] == 3
    return healed, a["heal_s"], a["lost"], full, detail


def repair(cluster, hosts):
    """Brings the cluster back to 3 alive nodes, as an operator would: link up, `phalanx stop`
    and `phalanx start --address` on every host without an alive node. True when it is."""
    for h in hosts:
        if not h.link_is_up():
            h.link_up()
    if cluster.pid_of(0, "gcs") is None or not os.path.exists(f"/proc/{cluster.pid_of(0, 'gcs')}"):
        return False
    deadline = time.time() + 30
    while time.time() < deadline:
        by_ip = {n["address"].rsplit(":", 1)[0] for n in cluster.alive_nodes()}
        missing = [h for h in hosts if h.ip not in by_ip]
        if not missing:
            return True
        for h in missing:
            if h.index == 0:
                return False
            cluster.phalanx(h, "stop", "--grace", "3", timeout=60)
            try:
                cluster.start_node(h.index)
            except RuntimeError as e:
                log(f"  repair: {e}")
        time.sleep(0.5)
    return False


def run_scenario(name, args):
    results = []
    strays = 0
    runs_left = args.runs
    while runs_left > 0:
        with netns.Hosts(3, log=log) as hosts:
            cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=args.node_timeout_ms,
                                    heartbeat_ms=args.heartbeat_ms)
            try:
                cluster.start()
                while runs_left > 0:
                    i = args.runs - runs_left
                    runs_left -= 1
                    t0 = time.time()
                    try:
                        healed, heal_s, lost, full, detail = run_once(name, i, cluster, hosts,
                                                                      args)
                    except Exception as e:  # noqa: BLE001 -- a failed run, counted
                        healed, heal_s, lost, full, detail = False, None, 0, False, f"error: {e!r}"
                        if args.verbose:
                            traceback.print_exc()
                    results.append((healed, heal_s, lost, full))
                    log(f"  {name} run {i + 1}/{args.runs}: {'healed' if healed else 'NOT HEALED'}"
                        f" in {time.time() - t0:.1f} s wall; {detail}")
                    if runs_left > 0 and not repair(cluster, hosts):
                        log(f"  {name}: the cluster could not be repaired; a new one")
                        break
            finally:
                left = cluster.stop()
                strays += len(left)
                for h, p, c in left:
                    log(f"  stray after stop: host {h} pid {p}: {c}")
    return results, strays


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--steps", type=int, default=600)  # outlasts a SIGSTOP held 6 s past the fault
    p.add_argument("--step-ms", type=int, default=25)
    p.add_argument("--fault-step", type=int, default=100)
    p.add_argument("--hang-s", type=float, default=5)
    p.add_argument("--node-timeout-ms", type=int, default=2000)
    p.add_argument("--heartbeat-ms", type=int, default=250)
    p.add_argument("--run-timeout", type=float, default=150)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    why = netns.unavailable()
    if why:
        print(f"chaos: {why}")
        print("RESULT scenarios=0 runs=0 healed=0 max_heal_s=0 steps_lost=0 strays=0")
        return 0
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    if not os.path.exists(os.path.join(netns.bin_dir(), "elastic_regression")):
        p.error(f"build first: {netns.bin_dir()}/elastic_regression is missing")
    table = []
    for name in names:
        log(f"== {name} ×{args.runs}")
        results, strays = run_scenario(name, args)
        heals = [h for ok, h, _, _ in results if ok and h is not None]
        table.append((name, len(results), sum(r[0] for r in results),
                      statistics.median(heals) if heals else None, max(heals) if heals else None,
                      sum(r[2] for r in results), strays, sum(r[3] for r in results)))
    log("")
    log(f"{'scenario':<22} {'runs':>4} {'healed':>6} {'median_heal_s':>13} {'max_heal_s':>10} "
        f"{'steps_lost':>10} {'strays':>6} {'ended_at_3':>10}")
    for name, runs, healed, med, mx, lost, strays, full in table:
        f = (lambda x: "-" if x is None else f"{x:.2f}")
        log(f"{name:<22} {runs:>4} {healed:>6} {f(med):>13} {f(mx):>10} {lost:>10} {strays:>6} "
            f"{full:>10}")
    log("(heal: fault -> the step that ended the stall it caused, from the controller's step "
        "log; healed: SUCCEEDED with the known weights, and for SIGSTOP progress while stopped; "
        "ended_at_3: runs whose last step had the full world size 3)")
    all_heals = [t[4] for t in table if t[4] is not None]
    log(f"RESULT scenarios={len(table)} runs={sum(t[1] for t in table)} "
        f"healed={sum(t[2] for t in table)} "
        f"max_heal_s={max(all_heals) if all_heals else 0:.2f} "
        f"steps_lost={sum(t[5] for t in table)} strays={sum(t[6] for t in table)}")
    # Exit 1 unless every run healed with no committed step lost and no process left behind.
    return 0 if all(t[1] == t[2] and t[5] == 0 and t[6] == 0 for t in table) else 1


if __name__ == "__main__":
    sys.exit(main())
