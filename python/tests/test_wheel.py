"""`pip install .` as a user runs it: a wheel built from this checkout (pyproject.toml, setup.py)
and installed into a fresh virtual environment, whose own `phalanx` command starts a cluster
that runs a user's program's workers with that environment's interpreter and package; an actor
of it SIGKILLed is restarted. Nothing of the checkout is on the program's path."""

import glob
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import _free_port

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_TIMEOUT_S = 600  # the build reuses build/: seconds when it is up to date
RUN_TIMEOUT_S = 120

PROGRAM = textwrap.dedent("""
    import os, signal, sys
    import phalanx as ray

    ray.init(address=sys.argv[1] if len(sys.argv) > 1 else None)

    @ray.remote
    def where():
        import phalanx
        return sys.executable, phalanx.__file__

    @ray.remote(max_restarts=1, max_task_retries=-1)
    class Counter:
        def __init__(self):
            self.n = 0
        def incr(self):
            self.n += 1
            return self.n
        def pid(self):
            return os.getpid()

    print("WHERE", *ray.get(where.remote()))
    c = Counter.remote()
    print("COUNT", ray.get([c.incr.remote() for _ in range(3)])[-1])
    old = ray.get(c.pid.remote())
    os.kill(old, signal.SIGKILL)
    print("AFTER", ray.get(c.incr.remote()), ray.get(c.pid.remote()) != old)
    ray.shutdown()
""")


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PHALANX_ADDRESS", "PHALANX_TOKEN", "PHALANX_PYTHON",
                        "PHALANX_PYTHONPATH", "PHALANX_BIN_DIR")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A virtual environment (Debian's numpy, msgpack and cloudpickle seen through
    --system-site-packages) with the wheel of this checkout installed."""
    root = tmp_path_factory.mktemp("wheel")
    wheels = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
         str(wheels), REPO], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env=_clean_env())
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = glob.glob(str(wheels / "phalanx-*.whl"))
    env_dir = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)],
                   check=True, timeout=RUN_TIMEOUT_S, env=_clean_env())
    installed = subprocess.run(
        [str(env_dir / "bin" / "pip"), "install", "--no-build-isolation", "--no-deps", wheel],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_clean_env())
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return env_dir


def _cluster_pids(session_root):
    """The pids of the processes the cluster under session_root runs (by their pid files)."""
    pids = []
    for path in glob.glob(os.path.join(session_root, "session_*", "pids", "*.pid")):
        try:
            with open(path) as f:
                pids.append(int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def test_a_pip_installed_wheel_runs_a_cluster_and_a_program_on_its_own(venv, tmp_path):
    site = glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "phalanx"))
    assert len(site) == 1, site
    package = site[0]
    names = os.listdir(package)
    assert any(n.startswith("_native.") and n.endswith(".so") for n in names), names
    assert sorted(os.listdir(os.path.join(package, "_bin"))) == [
        "phalanx", "phalanx-gcs", "phalanx-job-runner", "phalanx-node"]

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    env = _clean_env(PHALANX_TMPDIR=str(sessions))
    command = str(venv / "bin" / "phalanx")
    port = _free_port()
    started = subprocess.run(
        [command, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
         "--num-cpus", "2"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        program = tmp_path / "prog.py"
        program.write_text(PROGRAM)
        # On the cluster the wheel's command started; then with none on the machine (another
        # session root), on the local cluster init() starts for the program.
        lonely = tmp_path / "no-cluster"
        lonely.mkdir()
        for args, run_env in ((["auto"], env), ([], _clean_env(PHALANX_TMPDIR=str(lonely)))):
            run = subprocess.run([str(venv / "bin" / "python"), str(program), *args],
                                 env=run_env, cwd=tmp_path, capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT_S)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            lines = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()
                     if line.split()}
            # The task ran in the environment's interpreter, with the wheel's package.
            assert lines["WHERE"][0].startswith(str(venv)), run.stdout
            assert lines["WHERE"][1] == os.path.join(package, "__init__.py"), run.stdout
            assert lines["COUNT"] == ["3"], run.stdout
            # Restarted after SIGKILL in a new process, with a fresh state (no checkpoint).
            assert lines["AFTER"] == ["1", "True"], run.stdout
    finally:
        pids = _cluster_pids(str(sessions))
        subprocess.run([command, "stop", "--grace", "3"], env=env, capture_output=True,
                       timeout=RUN_TIMEOUT_S)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
