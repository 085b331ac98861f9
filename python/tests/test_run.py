"""`phalanx run`: a torchrun program (examples/python/torchrun_ddp.py, pytorch/examples' DDP
tutorial in shape) run unchanged on a real cluster, under real torchrun in the same test, and
through SIGKILL and SIGSTOP of a worker; bad command lines; `job submit --torchrun`."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from phalanx import _native

from conftest import PHALANX, _processes_with, connected_cluster, wait_for

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "..", "..", "examples", "python", "torchrun_ddp.py")
# Every run is bounded; a run that passes this is killed and fails its test.
RUN_TIMEOUT_S = 240
EPOCHS = 8
STEP_S = 0.1
STEP_LINE = re.compile(r"\(rank 0\) step (\d+)\.(\d+) t=([\d.]+)")


@pytest.fixture(scope="module")
def run_cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx-run")) as c:
        yield c


@pytest.fixture
def workdir(tmp_path):
    """A directory holding only the program, as a user's would."""
    d = tmp_path / "job"
    d.mkdir()
    shutil.copy(PROGRAM, d / "torchrun_ddp.py")
    return d


class Launch:
    """`phalanx run ...` in a process of its own, its output collected line by line."""

    def __init__(self, cluster, args, cwd):
        self.lines = []
        self.proc = subprocess.Popen([PHALANX, "run", *args], cwd=cwd, env=cluster.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def wait(self, timeout=RUN_TIMEOUT_S):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("phalanx run did not end in time:\n" + self.text())
        self.reader.join(10)
        return rc

    def text(self):
        return "\n".join(line for _, line in self.lines)

    def job_id(self):
        for _, line in self.lines:
            m = re.match(r"\[phalanx run\] job (\S+):", line)
            if m:
                return m.group(1)
        return None

    def steps(self):
        """(epoch, batch, the time rank 0 printed it) of every step line."""
        return [(int(m.group(1)), int(m.group(2)), float(m.group(3)))
                for _, line in self.lines for m in [STEP_LINE.search(line)] if m]

    def weights(self):
        found = re.findall(r"weights_sum=([-\d.]+)", self.text())
        return float(found[-1]) if found else None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _program_args(snapshot):
    return ["torchrun_ddp.py", str(EPOCHS), "1", "--snapshot_path", str(snapshot),
            "--step_s", str(STEP_S)]


def _rank_pid(job_id, rank):
    status = _native.job_status(job_id)
    for m in status.ranks:
        if m.rank == rank and m.actor_id:
            return _native.actor_info(m.actor_id)["pid"]
    return None


@pytest.fixture(scope="module")
def reference(run_cluster, tmp_path_factory):
    """The program's weights under real torchrun (2 workers, no fault)."""
    d = tmp_path_factory.mktemp("torchrun")
    shutil.copy(PROGRAM, d / "torchrun_ddp.py")
    # torch 1.13 on Python 3.11 crashes on torchrun's default --redirects/--tee (see
    # bench/peers/torchrun_recovery.sh): 2 keeps stdout on the console.
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--redirects=2", "--tee=2",
         "--nproc_per_node", "2", *_program_args(d / "snapshot.pt")], cwd=d,
        env=dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.findall(r"weights_sum=([-\d.]+)", out.stdout)
    assert found, out.stdout + out.stderr
    return float(found[-1])


def test_a_torchrun_program_runs_unchanged_as_under_torchrun(run_cluster, workdir, tmp_path,
                                                             reference):
    run = Launch(run_cluster, ["--nproc_per_node", "2", *_program_args(tmp_path / "s.pt")],
                 workdir)
    assert run.wait() == 0, run.text()
    assert run.weights() == pytest.approx(reference, abs=1e-6), run.text()
    assert len(run.steps()) == EPOCHS * 4, run.text()
    # Every rank printed, prefixed by its rank; the job left no snapshot in the user's dir.
    assert "(rank 1) [rank1] Epoch 0" in run.text()
    assert sorted(os.listdir(workdir)) == ["torchrun_ddp.py"]


def _kill_and_heal(cluster, workdir, tmp_path, reference, sig, backend, extra=()):
    args = ["--nproc-per-node", "2", "--max-restarts", "3", "--backend", backend, *extra,
            *_program_args(tmp_path / "s.pt")]
    run = Launch(cluster, args, workdir)
    try:
        assert wait_for(lambda: any(e >= 3 for e, _, _ in run.steps()), timeout=120), run.text()
        pid = _rank_pid(run.job_id(), 1)
        assert pid, run.text()
        fault = time.time()
        os.kill(pid, sig)
        assert run.wait() == 0, run.text()
    finally:
        run.kill()
    # Rank 0's first step of the restarted group: after it resumed from the snapshot.
    resumed = next(i for i, (t, line) in enumerate(run.lines)
                   if t > fault and "(rank 0) Resuming training from snapshot" in line)
    first = next(float(m.group(3)) for _, line in run.lines[resumed:]
                 for m in [STEP_LINE.search(line)] if m)
    rec = min((r for r in _native.job_status(run.job_id()).recoveries if r.resumed_ms),
              key=lambda r: abs(r.fault_ms - fault * 1000), default=None)
    phases = (f" (the controller: fault {rec.fault_ms / 1000 - fault:+.2f} s, detected "
              f"{(rec.detected_ms - rec.fault_ms) / 1000:.2f} s, resumed "
              f"{(rec.resumed_ms - rec.fault_ms) / 1000:.2f} s)" if rec else "")
    print(f"\n{signal.Signals(sig).name} of rank 1, backend {backend}: rank 0's first step "
          f"of the restarted group {first - fault:.2f} s after the fault" + phases)
    assert run.weights() == pytest.approx(reference, abs=1e-6), run.text()
    # One fault, one restart: a survivor whose old loop learns of the loss only after the
    # group restarted must not end its process (that was a second restart, 2 runs in 3).
    assert run.text().count("action: restart") == 1, run.text()
    run.fault = fault
    return first - fault, run


def test_a_sigkilled_worker_restarts_the_group_from_its_snapshot(run_cluster, workdir, tmp_path,
                                                                 reference):
    _kill_and_heal(run_cluster, workdir, tmp_path, reference, signal.SIGKILL, "script")


def test_a_sigstopped_worker_on_the_phalanx_backend_heals(run_cluster, workdir, tmp_path,
                                                          reference):
    _kill_and_heal(run_cluster, workdir, tmp_path, reference, signal.SIGSTOP, "phalanx")


def test_memory_saves_restart_the_group_from_the_snapshot_in_node_memory(
        run_cluster, workdir, tmp_path, reference):
    """--memory-saves: the program's torch.save returns once its snapshot is in the node's
    memory, and after the SIGKILL the restarted group's torch.load reads it from there (no disk
    read), with the same final weights; the file is on disk too."""
    _, run = _kill_and_heal(run_cluster, workdir, tmp_path, reference, signal.SIGKILL, "script",
                            extra=("--memory-saves",))
    after = [line for t, line in run.lines if t > run.fault]
    assert any("from the node's memory (no disk read)" in line and "s.pt" in line
               for line in after), run.text()
    assert (tmp_path / "s.pt").exists()


@pytest.mark.parametrize("args, says", [
    (["--nproc-per-node", "2", "--bogus", "torchrun_ddp.py"], "--bogus"),
    (["--nnodes", "3:2", "torchrun_ddp.py"], "--nnodes 3:2"),
    (["--nproc-per-node", "two", "torchrun_ddp.py"], "--nproc-per-node two"),
    (["--redirects", "7", "torchrun_ddp.py"], "--redirects 7"),
    (["no_such_script.py"], "no_such_script.py: no such file"),
    (["--no-python", "torchrun_ddp.py"], "--no-python"),
    (["--nproc-per-node", "9", "torchrun_ddp.py"], "--cpus-per-worker"),
    (["--horovod", "-np", "1", "--host-discovery-script", "discover_nowhere.sh", "python",
      "torchrun_ddp.py"], "--host-discovery-script names no live node"),
])
def test_a_bad_command_line_is_refused_naming_the_option(run_cluster, workdir, args, says):
    nowhere = workdir / "discover_nowhere.sh"  # a discovery script naming no node of the cluster
    nowhere.write_text("#!/bin/sh\necho no-such-host.invalid:2\n")
    nowhere.chmod(0o755)
    before = {p for p, _ in _processes_with("phalanx", "worker")}
    out = subprocess.run([PHALANX, "run", *args], cwd=workdir, env=run_cluster.env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr, out.stderr
    assert out.stderr.startswith("phalanx run: "), out.stderr
    assert {p for p, _ in _processes_with("phalanx", "worker")} <= before


def test_log_dir_tee_and_the_torchelastic_environment(run_cluster, tmp_path):
    d = tmp_path / "env"
    d.mkdir()
    (d / "show_env.py").write_text(
        "import os, sys\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "names = ['RANK', 'LOCAL_RANK', 'GROUP_RANK', 'ROLE_RANK', 'WORLD_SIZE',\n"
        "         'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_RUN_ID',\n"
        "         'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS']\n"
        "print(' '.join(f'{n}={os.environ[n]}' for n in names), 'args=' + ','.join(sys.argv[1:]))\n"
        "print('to stderr', file=sys.stderr)\n"
        "t = __import__('torch').ones(1); dist.all_reduce(t); print('sum', int(t.item()))\n"
        "dist.destroy_process_group()\n")
    logs = tmp_path / "logs"
    run = Launch(run_cluster, ["--nproc_per_node=2", "--rdzv_id", "myrun", "--max_restarts=2",
                               "--log_dir", str(logs), "--redirects", "2", "--tee", "1",
                               "show_env.py", "a", "b"], d)
    assert run.wait() == 0, run.text()
    text = run.text()
    for rank in (0, 1):
        assert (f"(rank {rank}) RANK={rank} LOCAL_RANK={rank} GROUP_RANK=0 ROLE_RANK={rank} "
                f"WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1") in text, text
        assert f"(rank {rank}) sum 2" in text, text
    assert "TORCHELASTIC_RUN_ID=myrun TORCHELASTIC_RESTART_COUNT=0 " \
           "TORCHELASTIC_MAX_RESTARTS=2 args=a,b" in text, text
    # stderr only in the files (--redirects 2), stdout in both (--tee 1): torchrun's layout.
    assert "to stderr" not in text, text
    for rank in (0, 1):
        base = logs / "myrun" / "attempt_0" / str(rank)
        assert (base / "stderr.log").read_text() == "to stderr\n"
        assert f"RANK={rank} " in (base / "stdout.log").read_text()


def test_job_submit_torchrun_is_a_job_with_status_and_logs(run_cluster, workdir, tmp_path):
    out = subprocess.run([PHALANX, "job", "submit", "--torchrun", "--nproc-per-node", "2", "--",
                          *_program_args(tmp_path / "s.pt")], cwd=workdir, env=run_cluster.env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = re.search(r"submitted job (\S+)", out.stdout).group(1)
    done = wait_for(lambda: _native.job_status(job_id).done(), timeout=RUN_TIMEOUT_S,
                    interval=0.5)
    assert done and _native.job_status(job_id).state == "SUCCEEDED", \
        _native.job_status(job_id).message
    logs = run_cluster.cli("job", "logs", job_id)
    assert "(rank 0) weights_sum=" in logs.stdout, logs.stdout + logs.stderr
    status = run_cluster.cli("job", "status", job_id)
    assert "SUCCEEDED" in status.stdout, status.stdout


HOROVOD_PROGRAM = os.path.join(HERE, "..", "..", "examples", "python", "horovod_elastic.py")
HVD_LINE = re.compile(r"\(rank 0\) step (\d+)\.(\d+) size=(\d+) lr=([\d.]+) t=([\d.]+)")
BASE_LR = 0.01


def _hvd_steps(run):
    """(size, lr, time) of every step rank 0 printed."""
    return [(int(m.group(3)), float(m.group(4)), float(m.group(5)))
            for _, line in run.lines for m in [HVD_LINE.search(line)] if m]


def test_a_horovod_elastic_program_scales_through_discovery_and_heals(run_cluster, tmp_path):
    """Horovod's synthetic benchmark in shape, unchanged (`import horovod.torch as hvd`):
    2 workers, then 3 when the discovery script lists 3 slots, a SIGKILLed worker replaced,
    then 1 worker; the learning rate after each resize is the reset callback's (lr x size)."""
    d = tmp_path / "hvd"
    d.mkdir()
    shutil.copy(HOROVOD_PROGRAM, d / "horovod_elastic.py")
    hosts = d / "hosts.txt"
    hosts.write_text("localhost:2\n")
    discover = d / "discover_hosts.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    run = Launch(run_cluster, ["--horovod", "-np", "2", "--min-np", "1", "--max-np", "3",
                               "--host-discovery-script", str(discover), "--cpus-per-worker",
                               "0.5", "python", "horovod_elastic.py", "--epochs", "6",
                               "--num-batches-per-epoch", "40", "--step-s", "0.05"], d)
    try:
        def seen(size, count):
            return wait_for(lambda: sum(1 for s, _, _ in _hvd_steps(run) if s == size) >= count,
                            timeout=120)
        assert seen(2, 10), run.text()
        hosts.write_text("localhost:3\n")
        assert seen(3, 10), run.text()
        pid = _rank_pid(run.job_id(), 1)
        fault = time.time()
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: any(t > fault + 0.5 and s == 3 for s, _, t in _hvd_steps(run)),
                        timeout=60), run.text()
        hosts.write_text("localhost:1\n")
        assert seen(1, 5), run.text()
        assert run.wait() == 0, run.text()
    finally:
        run.kill()
    steps = _hvd_steps(run)
    wrong = [(s, lr) for s, lr, _ in steps if abs(lr - BASE_LR * s) > 1e-9]
    assert not wrong, f"learning rates not lr x size: {wrong[:5]}\n" + run.text()
    sizes = [s for s, _, _ in steps]
    assert sizes[0] == 2 and 3 in sizes and sizes[-1] == 1, sizes
    # The recovery of the kill: the one whose fault is nearest to it.
    healed = sorted((r for r in _native.job_status(run.job_id()).recoveries if r.resumed_ms),
                    key=lambda r: abs(r.fault_ms - fault * 1000))
    assert healed and abs(healed[0].fault_ms - fault * 1000) < 1000, run.text()
    print(f"\nhorovod: sizes {sorted(set(sizes))}; SIGKILL at size 3 ({healed[0].kind}): "
          f"survivors' next step {(healed[0].resumed_ms - healed[0].fault_ms) / 1000:.2f} s, "
          f"full strength {(healed[0].full_strength_ms - healed[0].fault_ms) / 1000:.2f} s "
          f"after it")
    assert "(rank 0) done" in run.text()


def test_a_horovod_program_with_its_import_changed_runs_alone_and_under_phalanx_run(
        run_cluster, tmp_path):
    d = tmp_path / "hvd1"
    d.mkdir()
    text = open(HOROVOD_PROGRAM).read()
    assert "import horovod.torch as hvd\n" in text
    (d / "prog.py").write_text(text.replace("import horovod.torch as hvd\n",
                                            "import phalanx.horovod.torch as hvd\n"))
    alone = subprocess.run([sys.executable, "prog.py", "--epochs", "1",
                            "--num-batches-per-epoch", "3"], cwd=d, capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 0 and "size=1 lr=0.010000" in alone.stdout, \
        alone.stdout + alone.stderr
    run = Launch(run_cluster, ["--horovod", "-np", "2", "--cpus-per-worker", "0.5", "python",
                               "prog.py", "--epochs", "1", "--num-batches-per-epoch", "5",
                               "--fp16-allreduce"], d)
    assert run.wait() == 0, run.text()
    assert [s for s, _, _ in _hvd_steps(run)] == [2] * 5, run.text()


def test_a_module_runs_with_dash_m_from_the_shipped_directory(run_cluster, tmp_path):
    d = tmp_path / "mod"
    (d / "pkg").mkdir(parents=True)
    (d / "pkg" / "__init__.py").write_text("")
    (d / "pkg" / "helper.py").write_text("GREETING = 'hello from pkg.helper'\n")
    (d / "pkg" / "main.py").write_text(
        "import os, sys\n"
        "from pkg.helper import GREETING\n"
        "print(GREETING, __name__, os.environ['RANK'], sys.argv[1:])\n")
    run = Launch(run_cluster, ["--nproc-per-node", "2", "-m", "pkg.main", "--flag", "x"], d)
    assert run.wait() == 0, run.text()
    for rank in (0, 1):
        assert f"(rank {rank}) hello from pkg.helper __main__ {rank} ['--flag', 'x']" in \
            run.text(), run.text()


def test_a_failing_script_exits_1_after_its_restarts(run_cluster, tmp_path):
    d = tmp_path / "fail"
    d.mkdir()
    (d / "fail.py").write_text(
        "import os, sys\n"
        "print('attempt', os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise ValueError('rank 1 fails on purpose')\n")
    run = Launch(run_cluster, ["--nproc-per-node", "2", "--max-restarts", "1", "fail.py"], d)
    assert run.wait() == 1, run.text()
    assert "ValueError: rank 1 fails on purpose" in run.text(), run.text()
    assert "FAILED" in run.text(), run.text()


HVD_OPS = r'''
import torch
import horovod.torch as hvd

hvd.init()
n, r = hvd.size(), hvd.rank()
assert n == 2 and hvd.local_size() == 2 and hvd.local_rank() == r, (n, r)
assert hvd.cross_size() == 1 and hvd.cross_rank() == 0

t = torch.tensor([float(r + 1), 10.0])
assert torch.equal(hvd.allreduce(t), torch.tensor([1.5, 10.0]))           # Average
assert torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.tensor([3.0, 20.0]))
assert torch.equal(hvd.allreduce(t, average=False), torch.tensor([3.0, 20.0]))
half = hvd.allreduce(t, compression=hvd.Compression.fp16)
assert half.dtype == torch.float32 and torch.equal(half, torch.tensor([1.5, 10.0]))
u = t.clone(); hvd.allreduce_(u, op=hvd.Max); assert torch.equal(u, torch.tensor([2.0, 10.0]))
h = hvd.allreduce_async(t, op=hvd.Sum); assert torch.equal(hvd.synchronize(h), t * 0 + torch.tensor([3.0, 20.0]))
g = hvd.grouped_allreduce([t, t * 2], op=hvd.Sum)
assert torch.equal(g[1], torch.tensor([6.0, 40.0]))
i = hvd.allreduce(torch.tensor([r + 1]), op=hvd.Sum); assert i.item() == 3

rows = torch.full((r + 1, 2), float(r))                                    # uneven
assert torch.equal(hvd.allgather(rows), torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
assert hvd.allgather_object({"r": r}) == [{"r": 0}, {"r": 1}]

b = torch.tensor([float(r)] * 3)
assert torch.equal(hvd.broadcast(b, root_rank=1), torch.ones(3)) and b[0] == r
hvd.broadcast_(b, root_rank=0); assert torch.equal(b, torch.zeros(3))
assert hvd.broadcast_object({"from": r}, root_rank=1) == {"from": 1}

sent = torch.arange(3.0) + 10 * r           # rank 0 sends [0] to 0 and [1, 2] to 1
got = hvd.alltoall(sent, splits=[1, 2])
assert torch.equal(got, torch.tensor([0.0, 10.0]) if r == 0 else torch.tensor([1.0, 2.0, 11.0, 12.0])), got
hvd.barrier()

# DistributedOptimizer: each rank's own batch; the step applies the ranks' mean gradient,
# the same on both ranks as plain SGD on the two batches' mean gradient.
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ref = torch.nn.Linear(4, 1); ref.load_state_dict(model.state_dict())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(),
                               backward_passes_per_step=2)
assert isinstance(opt, torch.optim.SGD)
hvd.broadcast_optimizer_state(opt, root_rank=0)
data = [torch.randn(8, 4, generator=torch.Generator().manual_seed(k)) for k in range(4)]
for k in (2 * r, 2 * r + 1):                 # two backward passes, then one step
    model(data[k]).pow(2).mean().backward()
opt.step()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for k in range(4):
    ref(data[k]).pow(2).mean().backward()
for p in ref.parameters():
    p.grad /= 2                               # the mean over ranks of each rank's sum of 2
ref_opt.step()
for p, q in zip(model.parameters(), ref.parameters()):
    assert torch.allclose(p, q, atol=1e-6), (p, q)
mine = torch.cat([p.detach().flatten() for p in model.parameters()])
both = hvd.allgather(mine.unsqueeze(0))
assert torch.equal(both[0], both[1])
print("HVD_OK", r, flush=True)
'''


def test_every_horovod_op_gives_horovods_result(run_cluster, tmp_path):
    d = tmp_path / "ops"
    d.mkdir()
    (d / "ops.py").write_text(HVD_OPS)
    run = Launch(run_cluster, ["--horovod", "-np", "2", "--cpus-per-worker", "0.5", "python",
                               "ops.py"], d)
    assert run.wait() == 0, run.text()
    assert "(rank 0) HVD_OK 0" in run.text() and "(rank 1) HVD_OK 1" in run.text(), run.text()
