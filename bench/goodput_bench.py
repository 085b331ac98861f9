"""goodput_bench: training goodput under faults on a 3-host Phalanx cluster (network namespaces
on one machine, tests/multihost/netns.py: each host its own address and hostname, links cut
with `ip link set`), against the elastic regression job of the chaos suite (one rank per host,
replicas 3, min 2, max 3; examples/cpp/elastic_regression).

    /usr/bin/python3 bench/goodput_bench.py [--soak-s 600] [--fault-every-s 30] [--seed 1]
    (as root; build first: build/bin/elastic_regression and build/bin/phalanx)

1. Baseline: a fault-free job of --baseline-s worth of steps; its committed steps/s at full
   strength (3 ranks) is the baseline rate.
2. Soak, in the same run and on the same cluster: a job long enough for --soak-s plus a tail,
   and one fault every --fault-every-s (the first half a period in), its kind drawn at random
   (--seed) from a bag holding each kind once, refilled when empty:
     rank-kill        SIGKILL of a random rank
     oom              a random rank allocates past its memory limit (the spec's policy
                      respawns it with 1.5x the memory)
     sigstop-rank     SIGSTOP of a random rank (SIGCONT after --hold-s; it is replaced as hung)
     sigstop-ctl      SIGSTOP of the elastic controller (SIGCONT after --hold-s)
     node-kill        SIGKILL of a non-head host's node manager; the operator (this script)
                      starts it again after --repair-after-s, as systemd would
     link-down-up     a non-head host's link down, up again after --repair-after-s
     gcs-kill         SIGKILL of the GCS, started again 0.2 s later
   A fault waits (at most half a period) until the job is back at 3 ranks, so that each fault
   meets a whole job.
3. After the soak the job runs on to its last step, and must end SUCCEEDED with the known
   weights.

Reported, from the controller's step log ("step unix_ms world" per agreed step) and the
ranks' update log (a line per applied update: "pid step updates_before unix_ms world"):
  goodput           committed steps/s during the soak / the baseline's steps/s
  capacity goodput  the same with each committed step weighed by world/3 (a step taken with 2
                    of 3 ranks counts 2/3: what the job lost by running short while a host was
                    out; the trainer's global batch is fixed, so a step with fewer ranks costs
                    the same wall time here where a real one would cost more)
  steps lost        committed steps lost: how far the agreed step ever went backwards, plus
                    updates applied from a state that did not hold every step before them
                    (updates_before != the step's 0-based index), read from the ranks'
                    state
  healed            faults after which the job agreed a step before the next fault (for a
                    SIGSTOP: while the process was still stopped) and was back at 3 ranks
  per kind          time to heal (fault -> the step ending the stall it caused) and the steps
                    it cost (the baseline's steps in the fault's period minus those committed)
The last line:
RESULT goodput=.. capacity_goodput=.. steps_lost=.. faults=.. healed=.. baseline_steps_per_s=..
       soak_s=.. strays=..
Peers (published, printed for scale): ByteRobust 97% effective training time ratio on 9,600
GPUs; DLRover and SageMaker HyperPod 95%.
"""

import argparse
import os
import random
import signal
import statistics
import sys
import time

import _netns_bench  # also puts tests/multihost on the path
import cluster_info  # noqa: E402
import netns  # noqa: E402
from jobs import ElasticRun, analyze_steps, now_ms, read_int_rows  # noqa: E402

KINDS = ["rank-kill", "oom", "sigstop-rank", "sigstop-ctl", "node-kill", "link-down-up",
         "gcs-kill"]
WORLD = 3


def log(*a):
    print(*a, flush=True)


def policies():
    return ("- event: oom\n  action: respawnLarger\n  memoryGrowth: 1.5\n"
            "- exitCodes: \"137\"\n  action: restart\n")


class Soak:
    """The faults of one soak against one job, and the repairs they need."""

    def __init__(self, cluster, hosts, run, oom_trigger, args, rng):
        self.cluster = cluster
        self.hosts = hosts
        self.run = run
        self.oom_trigger = oom_trigger
        self.args = args
        self.rng = rng
        self.bag = []
        self.pending = []   # [(due unix s, what, fn)]: SIGCONT, link up, node restart
        self.faults = []    # dicts: kind, target, ms, stopped_until_ms, note

    def next_kind(self):
        if not self.bag:
            self.bag = list(self.args.kinds)
            self.rng.shuffle(self.bag)
        return self.bag.pop()

    def due(self, now_s, force=False):
        """Runs the repairs that are due (all of them with force)."""
        keep = []
        for when, what, fn in self.pending:
            if force or when <= now_s:
                try:
                    fn()
                except Exception as e:  # noqa: BLE001 -- logged; the run's verdict decides
                    log(f"  repair {what} failed: {e!r}")
            else:
                keep.append((when, what, fn))
        self.pending = keep

    def rank_pid(self):
        ranks = cluster_info.ranks(self.cluster)
        if not ranks:
            raise RuntimeError("no alive rank to fault")
        return self.rng.choice(ranks)

    def restart_node(self, victim):
        self.cluster.phalanx(victim, "stop", "--grace", "3", timeout=60)
        self.cluster.start_node(victim)

    def inject(self, kind):
        """Injects one fault; returns its record."""
        rec = {"kind": kind, "target": "", "ms": None, "stopped_until_ms": None, "note": ""}
        hold = self.args.hold_s
        repair = self.args.repair_after_s
        victim = self.rng.choice(range(1, len(self.hosts)))
        if kind == "rank-kill":
            host, pid, _ = self.rank_pid()
            rec["target"] = f"rank pid {pid} on host {host}"
            rec["ms"] = now_ms()
            os.kill(pid, signal.SIGKILL)
        elif kind == "oom":
            rank = self.rng.randrange(WORLD)
            rec["target"] = f"rank {rank}"
            rec["ms"] = now_ms()
            with open(f"{self.oom_trigger}.{rank}", "w"):
                pass
        elif kind in ("sigstop-rank", "sigstop-ctl"):
            if kind == "sigstop-rank":
                host, pid, _ = self.rank_pid()
                rec["target"] = f"rank pid {pid} on host {host}"
            else:
                ctl = cluster_info.wait_controller(self.cluster, self.run.job_id, timeout=10)
                if not ctl:
                    raise RuntimeError("no alive controller to stop")
                host, pid = ctl[0], ctl[1]
                rec["target"] = f"controller pid {pid} on host {host}"
            rec["ms"] = now_ms()
            os.kill(pid, signal.SIGSTOP)

            def cont(pid=pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass  # replaced meanwhile (a stopped rank is killed once it counts as hung)
            rec["stopped_until_ms"] = rec["ms"] + int(hold * 1000)
            self.pending.append((time.time() + hold, f"SIGCONT {pid}", cont))
        elif kind == "node-kill":
            pid = self.cluster.pid_of(victim, "node")
            rec["target"] = f"node manager pid {pid} on host {victim}"
            rec["ms"] = now_ms()
            os.kill(pid, signal.SIGKILL)
            self.pending.append((time.time() + repair, f"restart node on host {victim}",
                                 lambda v=victim: self.restart_node(v)))
        elif kind == "link-down-up":
            rec["target"] = f"host {victim}'s link"
            rec["ms"] = now_ms()
            self.hosts[victim].link_down()
            self.pending.append((time.time() + repair, f"link up host {victim}",
                                 self.hosts[victim].link_up))
        elif kind == "gcs-kill":
            pid = self.cluster.pid_of(0, "gcs")
            rec["target"] = f"GCS pid {pid}"
            rec["ms"] = now_ms()
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            self.cluster.restart_gcs()
        else:
            raise ValueError(kind)
        self.faults.append(rec)
        return rec


def full_rate(steps, skip=20):
    """Committed steps/s while the world was full: from the first step at full strength (plus
    `skip` steps of warm-up) to the last."""
    full = [s for s in steps if s[2] == WORLD]
    if len(full) <= skip + 2:
        return None
    a, b = full[skip], full[-1]
    return (b[0] - a[0]) / ((b[1] - a[1]) / 1000.0)


def step_at(steps, t_ms):
    """The last agreed step at or before unix ms t_ms (0 before any)."""
    last = 0
    for s in steps:
        if s[1] > t_ms:
            break
        last = s[0]
    return last


def job_config(hosts, tag):
    """The same hooks in the baseline and the soak: the update log and the OOM trigger."""
    return {"updateLog": os.path.join(hosts.dir, f"{tag}-updates.log"),
            "oomTrigger": os.path.join(hosts.dir, f"{tag}-oom-trigger")}


def run_baseline(cluster, hosts, args):
    steps = int(args.baseline_s * 1000 / args.step_ms)
    run = ElasticRun(cluster, hosts.dir, tag="baseline", steps=steps, step_ms=args.step_ms,
                     hang_s=args.hang_s, silent_s=args.silent_s, policies=policies(),
                     config=job_config(hosts, "baseline"))
    run.submit()
    rc = run.wait_done(timeout=args.baseline_s * 4 + 120)
    if rc != 0:
        raise RuntimeError(f"the baseline job did not succeed (rc {rc}):\n{run.output()[-3000:]}")
    rate = full_rate(run.steps())
    if not rate:
        raise RuntimeError(f"the baseline job has too few steps at {WORLD} ranks")
    return rate, run.weights_error()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--soak-s", type=float, default=600)
    p.add_argument("--fault-every-s", type=float, default=30)
    p.add_argument("--baseline-s", type=float, default=60)
    p.add_argument("--tail-s", type=float, default=30,
                   help="steps past the soak, at the baseline rate, before the job ends")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--step-ms", type=int, default=25)
    p.add_argument("--hang-s", type=float, default=5, help="the spec's hang.timeoutSeconds")
    p.add_argument("--silent-s", type=float, default=None,
                   help="the spec's hang.silentSeconds (default: the spec's, 1 s; 0: no "
                        "liveness probe, hung ranks are found by the hang timeout alone)")
    p.add_argument("--hold-s", type=float, default=8, help="how long a SIGSTOP lasts")
    p.add_argument("--repair-after-s", type=float, default=10,
                   help="when a killed node manager is started again or a link is put back")
    p.add_argument("--node-timeout-ms", type=int, default=2000)
    p.add_argument("--heartbeat-ms", type=int, default=250)
    args = p.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        p.error(f"--kinds: unknown {unknown}; choose from {', '.join(KINDS)}")
    if args.fault_every_s < args.hold_s + 5 or args.fault_every_s < args.repair_after_s + 5:
        p.error("--fault-every-s must leave 5 s past --hold-s and --repair-after-s")
    if not _netns_bench.ready("goodput_bench", "elastic_regression", p, log):
        log("RESULT skipped=1")
        return 0
    rng = random.Random(args.seed)
    strays = 0
    with netns.Hosts(3, log=log) as hosts:
        cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=args.node_timeout_ms,
                                heartbeat_ms=args.heartbeat_ms)
        try:
            cluster.start()
            if not cluster.wait_alive(3, 60):
                raise RuntimeError("the cluster did not reach 3 alive nodes")
            log(f"cluster: 3 hosts, node timeout {args.node_timeout_ms} ms, heartbeats every "
                f"{args.heartbeat_ms} ms; steps of {args.step_ms} ms, hang timeout "
                f"{args.hang_s} s, silent ranks after "
                f"{1 if args.silent_s is None else args.silent_s} s (0: no probe)")
            rate, base_err = run_baseline(cluster, hosts, args)
            log(f"baseline: {rate:.2f} committed steps/s at {WORLD} ranks, fault-free "
                f"(weights off by {base_err:.1e})")
            verdict = soak(cluster, hosts, args, rng, rate)
        finally:
            left = cluster.stop()
            strays = len(left)
            for h, pid, cmd in left:
                log(f"stray after stop: host {h} pid {pid}: {cmd}")
    verdict["strays"] = strays
    log(f"RESULT goodput={verdict['goodput']:.4f} "
        f"capacity_goodput={verdict['capacity_goodput']:.4f} steps_lost={verdict['lost']} "
        f"faults={verdict['faults']} healed={verdict['healed']} "
        f"baseline_steps_per_s={rate:.2f} soak_s={args.soak_s:.0f} strays={strays}")
    ok = (verdict["lost"] == 0 and verdict["healed"] == verdict["faults"] and strays == 0
          and verdict["succeeded"])
    return 0 if ok else 1


def soak(cluster, hosts, args, rng, rate):
    steps_total = int(rate * (args.soak_s + args.tail_s)) + 200
    config = job_config(hosts, "soak")
    run = ElasticRun(cluster, hosts.dir, tag="soak", steps=steps_total, step_ms=args.step_ms,
                     hang_s=args.hang_s, silent_s=args.silent_s, policies=policies(),
                     restart_limit=1000,
                     config=config)
    run.submit()
    if run.wait_world(WORLD, timeout=60) is None:
        raise RuntimeError(f"the soak job never reached {WORLD} ranks:\n{run.output()[-3000:]}")
    run.wait_step(run.last_step()[0] + 20, timeout=30)
    s = Soak(cluster, hosts, run, config["oomTrigger"], args, rng)
    start = time.time()
    start_ms = int(start * 1000)
    end = start + args.soak_s
    n_faults = int(args.soak_s // args.fault_every_s)
    log(f"soak: {steps_total} steps; {n_faults} faults, one every {args.fault_every_s:.0f} s "
        f"for {args.soak_s:.0f} s, from {', '.join(args.kinds)}")
    k = 0
    late = []
    while time.time() < end:
        now = time.time()
        s.due(now)
        fault_at = start + (k + 0.5) * args.fault_every_s
        if k < n_faults and now >= fault_at and not s.pending:
            last = run.last_step()
            waited = now - fault_at
            if last[2] == WORLD or waited > args.fault_every_s / 2:
                if last[2] != WORLD:
                    late.append(k)
                kind = s.next_kind()
                try:
                    rec = s.inject(kind)
                    log(f"  t={now - start:6.1f} s fault {k + 1}/{n_faults}: {kind} "
                        f"({rec['target']}) at step {last[0]}, world {last[2]}"
                        + (f", {waited:.1f} s late" if waited > 1 else ""))
                except Exception as e:  # noqa: BLE001 -- counted as a fault not healed
                    s.faults.append({"kind": kind, "target": "", "ms": now_ms(),
                                     "stopped_until_ms": None, "note": f"inject: {e!r}"})
                    log(f"  fault {k + 1}: {kind} could not be injected: {e!r}")
                k += 1
        if run.proc.poll() is not None:
            log("  the job ended during the soak")
            break
        time.sleep(0.05)
    end_ms = min(now_ms(), int(end * 1000))
    s.due(time.time(), force=True)
    remaining = steps_total - run.last_step()[0]
    rc = run.wait_done(timeout=remaining / rate * 3 + 120)
    steps = run.steps()
    weights_err = None
    if rc == 0:
        try:
            weights_err = run.weights_error()
        except AssertionError as e:
            log(f"  weights: {e}")
    else:
        log(f"  the soak job did not succeed (rc {rc}):\n{run.output()[-3000:]}")
        if rc is None:
            cluster.phalanx(0, "job", "stop", run.job_id, "--grace", "2", timeout=60)
            run.wait_done(timeout=30)
    succeeded = rc == 0 and weights_err is not None and weights_err < 1e-3

    # Goodput over the soak window.
    committed = step_at(steps, end_ms) - step_at(steps, start_ms)
    window_s = (end_ms - start_ms) / 1000.0
    goodput = committed / window_s / rate
    weighted = sum(st[2] / WORLD for st in steps if start_ms < st[1] <= end_ms)
    capacity = weighted / window_s / rate
    a = analyze_steps(steps, start_ms)
    updates = read_int_rows(config["updateLog"], 5)
    mismatched = [u for u in updates if u[2] != u[1]]  # steps are 0-based here
    lost = a["lost"] + len({u[1] for u in mismatched})

    # Each fault: healed, time to heal, steps it cost.
    by_kind = {}
    healed = 0
    log("")
    log(f"{'#':>3} {'kind':<13} {'heal_s':>7} {'cost_steps':>10} {'back_to_3_s':>11}  target")
    for i, f in enumerate(s.faults):
        nxt = s.faults[i + 1]["ms"] if i + 1 < len(s.faults) else end_ms
        window = [st for st in steps if st[1] < nxt]
        ok, heal, cost, back = False, None, None, None
        if f["ms"] is not None and not f["note"]:
            fa = analyze_steps(window, f["ms"])
            after = [st for st in window if st[1] > f["ms"]]
            if f["stopped_until_ms"]:
                # A step agreed while the process was still stopped (past the one that may
                # have been in flight when it stopped): the job went on without it.
                progressed = any(f["ms"] + 1000 < st[1] < f["stopped_until_ms"] for st in after)
            else:
                progressed = bool(after)
            full_again = [st for st in after if st[2] == WORLD and
                          any(x[2] < WORLD for x in after if x[1] <= st[1])]
            shrank = any(st[2] < WORLD for st in after)
            back_ok = (not shrank) or bool(full_again)
            if full_again:
                back = (full_again[0][1] - f["ms"]) / 1000.0
            ok = progressed and back_ok and fa["lost"] == 0
            heal = fa["heal_s"]
            period_s = (nxt - f["ms"]) / 1000.0
            cost = rate * period_s - (step_at(steps, nxt) - step_at(steps, f["ms"]))
        healed += ok
        d = by_kind.setdefault(f["kind"], {"n": 0, "healed": 0, "heal": [], "cost": []})
        d["n"] += 1
        d["healed"] += ok
        if heal is not None:
            d["heal"].append(heal)
        if cost is not None:
            d["cost"].append(cost)
        fmt = (lambda x: "-" if x is None else f"{x:.2f}")
        log(f"{i + 1:>3} {f['kind']:<13} {fmt(heal):>7} {fmt(cost):>10} {fmt(back):>11}  "
            f"{f['target']}{'' if ok else '  NOT HEALED'} {f['note']}")
    log("")
    log(f"{'kind':<13} {'faults':>6} {'healed':>6} {'median_heal_s':>13} {'max_heal_s':>10} "
        f"{'steps_cost_each':>15}")
    for kind in KINDS:
        d = by_kind.get(kind)
        if not d:
            continue
        med = statistics.median(d["heal"]) if d["heal"] else None
        mx = max(d["heal"]) if d["heal"] else None
        cost = statistics.mean(d["cost"]) if d["cost"] else None
        fmt = (lambda x: "-" if x is None else f"{x:.2f}")
        log(f"{kind:<13} {d['n']:>6} {d['healed']:>6} {fmt(med):>13} {fmt(mx):>10} "
            f"{fmt(cost):>15}")
    log("")
    log(f"soak: {window_s:.1f} s, {committed} steps committed (the baseline would have "
        f"committed {rate * window_s:.0f}); goodput {goodput:.4f}, capacity goodput "
        f"{capacity:.4f}; steps lost {lost} (the agreed step went back by {a['lost']}, "
        f"{len(mismatched)} of {len(updates)} updates applied from a state that lacked a "
        f"step before them); {healed}/{len(s.faults)} faults healed; "
        f"{len(late)} injected before the job was back at {WORLD} ranks; the job "
        + ("SUCCEEDED with the known weights" if succeeded else "did NOT succeed"))
    log("peers (published, for scale): ByteRobust 97% effective training time ratio "
        "(9,600 GPUs); DLRover 95%; SageMaker HyperPod 95%")
    return {"goodput": goodput, "capacity_goodput": capacity, "lost": lost,
            "faults": len(s.faults), "healed": healed, "succeeded": succeeded}


if __name__ == "__main__":
    sys.exit(main())
