"""Observability on a live two-host cluster (network namespaces), with the real parts:

- a real Prometheus (Debian's `prometheus`) on the head's host, configured by
  `phalanx metrics-config` (file_sd targets the head keeps current, the cluster token as a
  bearer token, HTTPS checked against the cluster's CA), scrapes the head and both node
  managers while an elastic job runs and one of its ranks is SIGKILLed. Prometheus's HTTP
  API then answers: `up == 1` for every target, the recovery histograms have a sample, and
  the world size went 3 → 2 → 3;
- headless Chromium (Debian's `chromium`, `chromium-driver`, `python3-selenium`) signs in to
  the dashboard with the token (after a wrong one), sees both nodes, opens the job and sees
  the dip and the recovery in its chart; the screenshot lands in build/test-artifacts/;
- no token or a wrong one: 401 on every path, from curl on the head's host.

Prometheus and Chromium are skipped (with the reason) when their packages are missing;
scripts/setup.sh installs them."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

import cluster_info
from jobs import ElasticRun, now_ms
from netns import REPO

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
CHROMEDRIVER = "/usr/bin/chromedriver"
PROM_PORT = 9090
SCRAPE_INTERVAL = "200ms"
# A step long enough that the world size of 2 lasts several scrapes and record writes.
STEP_MS = 300
KILL_STEP = 25
STEPS = 90
ARTIFACTS = os.path.join(REPO, "build", "test-artifacts")


def _have_prometheus():
    return os.access(PROMETHEUS, os.X_OK)


def _have_browser():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return os.access(CHROMEDRIVER, os.X_OK) and shutil.which("chromium") is not None


def curl(host, url, *args, timeout=20):
    """curl on `host` (the head's namespace); (status code, body)."""
    r = host.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time",
                  str(timeout - 2), *args, url], timeout=timeout)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


class Prometheus:
    """A Prometheus server on the head's host, scraping what `phalanx metrics-config` says."""

    def __init__(self, cluster, workdir):
        self.cluster = cluster
        self.dir = os.path.join(workdir, "prometheus")
        os.makedirs(self.dir, exist_ok=True)
        r = cluster.phalanx(0, "metrics-config", timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        # As printed, with the test's shorter intervals (the dip lasts a few hundred ms).
        config = (r.stdout.replace("scrape_interval: 5s", f"scrape_interval: {SCRAPE_INTERVAL}")
                  .replace("refresh_interval: 5s", "refresh_interval: 1s"))
        self.config_text = config
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write(config)
        self.proc = cluster.head.spawn(
            [PROMETHEUS, f"--config.file={self.config}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
             f"--web.listen-address=127.0.0.1:{PROM_PORT}", "--log.level=warn"],
            log=os.path.join(self.dir, "prometheus.log"))

    def query(self, q, at=None):
        args = ["-G", "--data-urlencode", f"query={q}"]
        if at is not None:
            args += ["--data-urlencode", f"time={at}"]
        code, body = curl(self.cluster.head, f"http://127.0.0.1:{PROM_PORT}/api/v1/query", *args)
        assert code == 200, (q, code, body)
        return json.loads(body)["data"]["result"]

    def query_range(self, q, start, end, step="0.1"):
        code, body = curl(self.cluster.head, f"http://127.0.0.1:{PROM_PORT}/api/v1/query_range",
                          "-G", "--data-urlencode", f"query={q}", "--data-urlencode",
                          f"start={start}", "--data-urlencode", f"end={end}",
                          "--data-urlencode", f"step={step}")
        assert code == 200, (q, code, body)
        return json.loads(body)["data"]["result"]

    def wait(self, what, check, timeout=30):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = check()
            except AssertionError as e:  # not listening yet, or not ready
                last = e
            if last and not isinstance(last, AssertionError):
                return last
            time.sleep(0.5)
        with open(os.path.join(self.dir, "prometheus.log"), errors="replace") as f:
            log = f.read()[-3000:]
        raise AssertionError(f"Prometheus: {what} within {timeout} s (last answer {last!r})\n"
                             f"config:\n{self.config_text}\nlog:\n{log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def dashboard_url(cluster):
    """https://IP:PORT of the head's dashboard, as `phalanx status` prints it."""
    r = cluster.phalanx(0, "status", timeout=30)
    for line in r.stdout.split("\n"):
        if line.startswith("Dashboard: "):
            return line.split()[1].rstrip("/")
    raise AssertionError(f"`phalanx status` names no dashboard:\n{r.stdout}")


@pytest.mark.hosts(2)
def test_prometheus_and_the_dashboard_see_a_sigkilled_rank_heal(cluster, hosts):
    url = dashboard_url(cluster)
    assert url.startswith("https://"), url
    ca = os.path.join(cluster.session(0), "tls", "ca.pem")

    # No token or a wrong one: 401 on every path (curl checks the CA and the name).
    for path in ["/", "/metrics", "/api/cluster", "/api/jobs", "/dashboard.js", "/login"]:
        for auth in [[], ["-H", "Authorization: Bearer wrong"]]:
            code, _ = curl(cluster.head, url + path, "--cacert", ca, *auth)
            assert code == 401, (path, auth, code)
    code, body = curl(cluster.head, url + "/metrics", "--cacert", ca, "-H",
                      f"Authorization: Bearer {cluster.token}")
    assert code == 200 and "phalanx_nodes{state=\"alive\"} 2" in body, (code, body[:2000])

    prom = Prometheus(cluster, hosts.dir) if _have_prometheus() else None
    run = ElasticRun(cluster, hosts.dir, steps=STEPS, step_ms=STEP_MS, replicas=3,
                     min_replicas=2, max_replicas=3, cpu=1)
    try:
        if prom:
            # Every target up: the head's port and both node managers, through file_sd.
            up = prom.wait("3 targets up", lambda: (
                lambda r: r if len(r) == 3 and all(x["value"][1] == "1" for x in r) else None)(
                    prom.query("up")))
            print("\n[prometheus] up:", [(x["metric"].get("phalanx_role"),
                                          x["metric"]["instance"]) for x in up])
        start_s = time.time()
        run.submit()
        run.wait_world(3, timeout=60)
        run.wait_step(KILL_STEP, timeout=60)
        # A rank on the other host, not the head's.
        victim = next((r for r in cluster_info.ranks(cluster) if r[0] == 1), None)
        assert victim, cluster.phalanx(0, "list", "actors").stdout
        kill_ms = now_ms()
        os.kill(victim[1], signal.SIGKILL)
        assert run.wait_world(2, after_ms=kill_ms, timeout=30), run.steps()[-5:]
        assert run.wait_world(3, after_ms=kill_ms, timeout=60), run.steps()[-5:]
        rc = run.wait_done(timeout=90)
        assert rc == 0, run.output()[-3000:]
        end_s = time.time()

        job = run.job_json()
        recoveries = job["elastic"].get("recoveries", [])
        assert recoveries and recoveries[0]["kind"] == "signal", recoveries
        r = recoveries[0]
        print(f"[timeline] fault→detected {(int(r['detected_ms']) - int(r['fault_ms']))} ms, "
              f"detected→resumed {(int(r['resumed_ms']) - int(r['detected_ms']))} ms, "
              f"fault→full strength {(int(r['full_strength_ms']) - int(r['fault_ms']))} ms "
              f"(the test's kill at {kill_ms}, the node's time of death {r['fault_ms']})")
        assert 0 <= int(r["fault_ms"]) - kill_ms < 2000, (kill_ms, r)

        if prom:
            job_sel = f'job_id="{run.job_id}"'
            hist = prom.wait("a recovery sample", lambda: prom.query(
                f'phalanx_elastic_recovery_full_strength_seconds_count{{{job_sel}}}'))
            assert any(x["metric"]["kind"] == "signal" and float(x["value"][1]) >= 1
                       for x in hist), hist
            for phase in ["detect", "resume"]:
                got = prom.query(f'phalanx_elastic_recovery_{phase}_seconds_count{{{job_sel}}}')
                assert got and float(got[0]["value"][1]) >= 1, (phase, got)
            restarts = prom.query(f'phalanx_elastic_restarts_total{{{job_sel}}}')
            assert any(x["metric"]["cause"] == "signal" for x in restarts), restarts
            # The world size over the run, as Prometheus stored it: 3, then 2, then 3.
            series = prom.query_range(f"phalanx_elastic_world_size{{{job_sel}}}", start_s, end_s)
            assert series, "no phalanx_elastic_world_size samples"
            sizes = [int(float(v)) for _, v in series[0]["values"]]
            dedup = [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]
            print("[prometheus] world size over the run:", dedup)
            assert [3, 2, 3] == [s for s in dedup if s in (2, 3)][:3], dedup
            up = prom.query("up")
            assert len(up) == 3 and all(x["value"][1] == "1" for x in up), up
        else:
            print(f"[prometheus] skipped: {PROMETHEUS} is not installed (scripts/setup.sh)")

        if _have_browser():
            os.makedirs(ARTIFACTS, exist_ok=True)
            shot = os.path.join(ARTIFACTS, "dashboard.png")
            b = cluster.head.run(["/usr/bin/python3",
                                  os.path.join(REPO, "tests", "multihost", "dashboard_browser.py"),
                                  url, cluster.token, run.job_id, shot],
                                 timeout=120, env={"HOME": hosts.dir})
            assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
            seen = json.loads(b.stdout.strip().split("\n")[-1])
            print("[chromium]", {k: v for k, v in seen.items() if k != "nodes"})
            assert seen["wrong_token_refused"]
            assert len(seen["nodes"]) == 2 and all(h.hostname in "\n".join(seen["nodes"])
                                                   for h in hosts), seen["nodes"]
            w = seen["world_sizes"]
            dip = [s for i, s in enumerate(w) if i == 0 or s != w[i - 1]]
            assert [3, 2, 3] == [s for s in dip if s in (2, 3)][:3], w
            assert seen["recoveries"] and "signal" in seen["recoveries"][0], seen["recoveries"]
            assert os.path.getsize(shot) > 10000, shot
        else:
            print("[chromium] skipped: chromium, chromium-driver or python3-selenium is missing")
    finally:
        if prom:
            prom.stop()
