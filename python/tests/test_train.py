"""phalanx.train end to end: the digits classifier (examples/python/elastic_digits.py) on 3
workers (min 1, max 4) heals from a SIGKILL and from an OOM kill (respawned with twice the
memory), with every sample used once per epoch and the final accuracy still >= 0.9."""

import os
import pickle
import signal
import sys
import threading
import time

import pytest

import phalanx
from phalanx import train

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import elastic_digits  # noqa: E402

GiB = 1 << 30


def run(config, memory=GiB, chaos=None, storage_path=None):
    checkpoints = train.CheckpointConfig(checkpoint_frequency=100) if storage_path else None
    trainer = train.ElasticTrainer(
        elastic_digits.train_loop,
        train_loop_config=dict({"lr": 0.01, "epochs": 12, "batch_size": 32}, **config),
        scaling_config=train.ScalingConfig(num_workers=(1, 4), initial_workers=3,
                                           resources_per_worker={"CPU": 0.5, "memory": memory}),
        run_config=train.RunConfig(name="digits", storage_path=storage_path,
                                   failure_config=train.FailureConfig(max_failures=5),
                                   checkpoint_config=checkpoints),
        verbose=False)
    job_id = trainer.submit()
    if chaos:
        threading.Thread(target=chaos, args=(job_id,), daemon=True).start()
    return wait_for_end(job_id, 240)


def wait_for_end(job_id, timeout_s):
    """The job's status once it ended, or once timeout_s passed."""
    deadline = time.time() + timeout_s
    while True:
        result = train.job_status(job_id)
        if result.state in ("SUCCEEDED", "FAILED", "STOPPED") or time.time() > deadline:
            return result
        time.sleep(0.2)


def sigkill_at_step(step, pick, seen):
    """Chaos: once the job reached `step` with 3 workers, SIGKILL the process of the actor
    that pick(status) names as (actor id, class); the status then is seen["status"]."""
    def chaos(job_id):
        while True:
            r = train.job_status(job_id)
            if r.steps >= step and len(r.ranks) >= 3:
                actor_id, cls = pick(r)
                if actor_id:
                    pid = phalanx.actor_info(phalanx.ActorHandle(actor_id, cls, "cpp"))["pid"]
                    seen["status"] = r
                    os.kill(pid, signal.SIGKILL)
                    return
            if r.state in ("SUCCEEDED", "FAILED"):
                return
            time.sleep(0.02)
    return chaos


def check_converged(result):
    assert result.state == "SUCCEEDED", (result.message, result.events)
    assert result.metrics["accuracy"] >= 0.9, result.metrics
    assert result.metrics["each_sample_once_per_epoch"] is True, result.metrics
    assert result.metrics["epochs"] == 12


def test_the_trainer_heals_from_a_sigkill(cluster, tmp_path):
    killed = {}
    chaos = sigkill_at_step(40, lambda r: (r.ranks[1]["actor_id"], "PythonTrainer"), killed)
    result = run({"step_sleep": 0.01}, chaos=chaos, storage_path=str(tmp_path))
    assert "status" in killed, "the job ended before the kill"
    check_converged(result)
    kinds = [e["kind"] for e in result.events]
    assert "rank_died" in kinds, result.events
    died = next(e for e in result.events if e["kind"] == "rank_died")
    assert "SIGNALED(9" in died["message"] and "action: restart" in died["message"]
    assert result.restarts == 1
    assert result.world_size >= 3
    # The survivors went on at once: a recovery epoch right after the death.
    assert any("(recovery)" in e["message"] for e in result.events), result.events
    # The recovery timeline, as the dashboard and /metrics show it.
    assert [r["kind"] for r in result.recoveries] == ["signal"], result.recoveries
    r = result.recoveries[0]
    assert 0 < r["fault_ms"] <= r["detected_ms"] <= r["resumed_ms"] <= r["full_strength_ms"], r
    assert result.restarts_by_cause == {"signal": 1}
    # Ray's result.checkpoint: the newest checkpoint, under storage_path/name.
    assert result.error is None
    checkpoint = result.checkpoint
    assert checkpoint is not None and checkpoint.step % 100 == 0 and checkpoint.step > 0
    assert checkpoint.path.startswith(str(tmp_path / "digits")), checkpoint.path
    state = checkpoint.load_state()
    assert "model" in state and "optimizer" in state, sorted(state)


def test_a_killed_controller_comes_back_and_adopts_the_live_workers(cluster):
    seen = {}
    chaos = sigkill_at_step(40, lambda r: (r.controller_actor_id, "ElasticController"), seen)
    result = run({"step_sleep": 0.01}, chaos=chaos)
    assert "status" in seen, "the job ended before the kill"
    seen["ranks"] = {m["actor_id"] for m in seen["status"].ranks}
    check_converged(result)
    adopted = [e for e in result.events if e["kind"] == "controller_restarted"]
    assert adopted and f"adopted its {len(seen['ranks'])} live ranks" in adopted[0]["message"], \
        result.events
    assert not any(e["kind"] == "restart_from_checkpoint" for e in result.events), result.events
    # Every live rank was adopted, none replaced (the job may also have grown toward its
    # maximum of 4 since: a resource event and the debounce, as any job does).
    assert seen["ranks"] <= {m["actor_id"] for m in result.ranks}, \
        [e["message"] for e in result.events]
    assert result.restarts == 0


def test_the_trainer_heals_from_an_oom_with_twice_the_memory(cluster, tmp_path):
    result = run({"oom_at_step": 30, "oom_marker": str(tmp_path / "oom-once"),
                  "oom_bytes": int(1.6 * GiB)}, memory=GiB)
    assert os.path.exists(tmp_path / "oom-once"), \
        f"the OOM was never triggered: {result.state} {result.message} {result.events}"
    check_converged(result)
    died = [e for e in result.events if e["kind"] == "rank_died"]
    assert died and "OOM_KILLED" in died[0]["message"], result.events
    assert "respawnLarger" in died[0]["message"], died[0]
    memories = sorted(r["memory_bytes"] for r in result.ranks)
    assert memories[-1] == 2 * GiB, memories
    assert result.restarts == 1


def test_a_loop_that_raises_on_one_rank_has_the_others_aborted_at_once(cluster, tmp_path):
    """Rank 1's loop raises before a step's allreduce (its process lives on): the others,
    waiting for it there, are aborted as soon as its step call fails, not at the group's
    timeout (60 s at the default hang timeout), and every rank goes on from the last commit."""
    marker = tmp_path / "raise-once"
    result = run({"step_sleep": 0.01, "raise_at_step": 30, "raise_marker": str(marker)})
    assert marker.exists(), f"the loop never raised: {result.state} {result.events}"
    check_converged(result)
    for e in result.events:  # shown when it fails
        print(e["time_ms"], e["kind"], e["message"][:150])
    failed = [e for e in result.events if e["kind"] == "step_failed"]
    assert len(failed) == 1 and "raise_at_step: rank 1 raises" in failed[0]["message"]
    assert result.restarts == 0
    waited = failed[0]["time_ms"] / 1000 - float(marker.read_text())
    print(f"the others' wait ended {waited:.2f} s after rank 1's loop raised")
    assert waited < 30, "they waited out the group's timeout"


def test_ray_train_names_make_the_job_and_unknown_ones_are_refused(tmp_path):
    import warnings
    new = train.TorchTrainer(
        lambda c: None, train_loop_config={"a": 1},
        scaling_config=train.ScalingConfig(num_workers=(1, 3), placement_strategy="SPREAD"),
        run_config=train.RunConfig(name="same", storage_path=str(tmp_path),
                                   failure_config=train.FailureConfig(max_failures=-1),
                                   checkpoint_config=train.CheckpointConfig(
                                       checkpoint_frequency=7)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the Ray names warn about nothing
        a = new._spec("k")
    assert (a.name, a.min_replicas, a.max_replicas) == ("same", 1, 3)
    assert a.checkpoint_dir == str(tmp_path / "same") and a.checkpoint_interval == 7
    assert a.restart_limit > 1_000_000 and a.placement_strategy == "SPREAD"
    # The keywords of the first release are gone: each is refused, naming it.
    for old in ("scaling", "failure", "checkpoint", "name"):
        with pytest.raises(TypeError, match=old):
            train.ElasticTrainer(lambda c: None, **{old: None})
    with pytest.raises(ValueError, match="num_to_keep"):
        train.CheckpointConfig(str(tmp_path), 7)  # the old (dir, interval_steps)
    with pytest.raises(TypeError, match="unexpected keyword"):
        train.ElasticTrainer(lambda c: None, scalingconfig=train.ScalingConfig())
    with pytest.raises(ValueError, match="num_to_keep"):
        train.CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="max_failures"):
        train.FailureConfig(max_failures=-2)
    with pytest.raises(ValueError, match="placement_strategy"):
        train.ScalingConfig(placement_strategy="CLOSE")


def test_a_call_covers_100_ms_of_a_python_loop_by_default_and_a_bad_size_is_refused():
    assert train.ElasticTrainer(lambda c: None, verbose=False)._spec("k").step_call_ms == 100
    assert train.ElasticTrainer(lambda c: None, step_call_ms=0,
                                verbose=False)._spec("k").step_call_ms == 0
    for bad in (-5, "100", True, float("nan")):
        with pytest.raises(ValueError, match="step_call_ms=.*milliseconds >= 0"):
            train.ElasticTrainer(lambda c: None, step_call_ms=bad)


def test_phase_timeouts_reach_the_spec_and_a_bad_phase_is_named():
    failure = train.FailureConfig(phase_timeouts={"start": 300, "checkpoint": 600})
    spec = train.ElasticTrainer(lambda c: None, verbose=False,
                                run_config=train.RunConfig(failure_config=failure))._spec("k")
    assert "startSeconds: 300" in spec.to_yaml() and "checkpointSeconds: 600" in spec.to_yaml()
    with pytest.raises(ValueError, match="unknown phase 'setup'.*place, start, form"):
        train.FailureConfig(phase_timeouts={"setup": 300})
    zero = train.FailureConfig(phase_timeouts={"form": 0})
    with pytest.raises(phalanx.InvalidArgumentError, match="phases.formSeconds"):
        train.ElasticTrainer(lambda c: None, verbose=False,
                             run_config=train.RunConfig(failure_config=zero))._spec("k")


def test_a_snapshot_keeps_the_state_of_its_commit_and_loads_back_as_tensors():
    """A commit's snapshot holds its tensors as copied numpy arrays (bfloat16, which numpy
    lacks, as a copied tensor); what later steps do does not reach it, and it unpickles into
    tensors that a model and an optimizer load."""
    import warnings

    import torch
    from phalanx.train._state import _copy_state

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 1))
        return model, torch.optim.Adam(model.parameters(), lr=0.1)

    def step(model, opt):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()

    model, opt = make()
    step(model, opt)
    state = {"objects": {"model": model.state_dict(), "optimizer": opt.state_dict()},
             "values": {"step": 1, "half": torch.ones(3, dtype=torch.bfloat16),
                        "scalar": torch.tensor(7), "strided": torch.arange(6.).view(2, 3).t()}}
    snapshot = _copy_state(state)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    step(model, opt)  # after the commit: the snapshot keeps the committed weights
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "the given NumPy array is not writable"
        saved = pickle.loads(pickle.dumps(snapshot, protocol=5))
        again, again_opt = make()
        again.load_state_dict(saved["objects"]["model"])
        again_opt.load_state_dict(saved["objects"]["optimizer"])
        for k, v in again.state_dict().items():
            assert torch.equal(v, expected[k]), k
        step(again, again_opt)  # the loaded tensors are live, writable ones
    values = saved["values"]
    assert values["step"] == 1 and values["half"].dtype == torch.bfloat16
    assert torch.equal(values["scalar"], torch.tensor(7))
    assert torch.equal(values["strided"], torch.arange(6.).view(2, 3).t())


def record_then_count(config):
    """Each loop start appends "<torch already imported> <process start, unix s>" to a file
    named after the process, then counts committed steps."""
    import sys
    torch_first = "torch" in sys.modules  # before this loop's own import
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    with open(os.path.join(config["dir"], str(os.getpid())), "a") as f:
        f.write(f"{int(torch_first)} {started:.2f}\n")
    import torch  # noqa: F401 - what the workers imported ahead
    state = train.State(step=0)
    state.restore()
    while state.step < config["steps"]:
        time.sleep(0.05)
        state.step += 1
        state.commit()


def test_a_replacement_rank_takes_a_prestarted_worker_with_torch_imported(cluster, tmp_path):
    """prestart_imports=["torch"]: once the job's ranks run, the node keeps prestarted workers
    that import torch while they wait; the rank that replaces a SIGKILLed one is such a
    worker, started before the kill, with torch already imported when its loop begins."""
    trainer = train.ElasticTrainer(
        record_then_count, train_loop_config={"dir": str(tmp_path), "steps": 120},
        scaling_config=train.ScalingConfig(num_workers=(1, 3),
                                           resources_per_worker={"CPU": 0.5}),
        run_config=train.RunConfig(name="warm",
                                   failure_config=train.FailureConfig(max_failures=3)),
        prestart_imports=["torch"], verbose=False)
    assert trainer._spec("k").preimports == ["torch"]
    job_id = trainer.submit()
    first = set()
    deadline = time.time() + 120
    while time.time() < deadline:
        r = train.job_status(job_id)
        if r.steps >= 60 and len(r.ranks) == 3:
            first = {int(p) for p in os.listdir(tmp_path)}
            pid = phalanx.actor_info(
                phalanx.ActorHandle(r.ranks[1]["actor_id"], "PythonTrainer", "cpp"))["pid"]
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            break
        assert r.state not in ("SUCCEEDED", "FAILED"), (r.state, r.message)
        time.sleep(0.05)
    assert first, "the job never ran 3 ranks"
    r = wait_for_end(job_id, max(0.0, deadline - time.time()))
    assert r.state == "SUCCEEDED", (r.state, r.message, r.events)
    new = {int(p) for p in os.listdir(tmp_path)} - first
    assert new, f"no replacement rank ran ({r.events})"
    for pid in new:
        with open(tmp_path / str(pid)) as f:
            torch_first, started = f.readline().split()
        assert torch_first == "1", f"rank process {pid} imported torch itself"
        assert float(started) < killed_at, \
            f"rank process {pid} started {float(started) - killed_at:.2f} s after the kill"


def dist_sums(config):
    """Each step all-reduces rank + 1 through train.torch_process_group() and counts the
    sums that are not those of the loop's world (1 + 2 + ... + world)."""
    import torch
    import torch.distributed as dist
    state = train.State(step=0, wrong=0, checked=0)
    state.restore()
    ctx = train.get_context()
    group = train.torch_process_group()
    assert group is train.torch_process_group()  # one group per epoch
    while state.step < config["steps"]:
        t = torch.tensor([float(ctx.get_world_rank() + 1)])
        dist.all_reduce(t)
        w = ctx.get_world_size()
        state.checked += 1
        state.wrong += int(t.item() != w * (w + 1) / 2)
        time.sleep(0.02)
        state.step += 1
        train.report({"wrong": state.wrong, "checked": state.checked, "world": w})
        state.commit()


def test_torch_distributed_calls_of_your_own_get_the_loops_group_after_a_sigkill(cluster):
    """train.torch_process_group(): a torch.distributed group of the running loop's epoch,
    formed again after a rank is SIGKILLed; every all_reduce sums over that epoch's ranks."""
    trainer = train.ElasticTrainer(
        dist_sums, train_loop_config={"steps": 150},
        scaling_config=train.ScalingConfig(num_workers=(1, 3),
                                           resources_per_worker={"CPU": 0.5}),
        run_config=train.RunConfig(name="dist",
                                   failure_config=train.FailureConfig(max_failures=3)),
        verbose=False)
    job_id = trainer.submit()
    seen = {}
    threading.Thread(target=sigkill_at_step(40, lambda r: (r.ranks[1]["actor_id"],
                                                           "PythonTrainer"), seen),
                     args=(job_id,), daemon=True).start()
    r = wait_for_end(job_id, 120)
    assert r.state == "SUCCEEDED", (r.state, r.message, r.events)
    assert "status" in seen, "the rank was never killed"
    assert r.metrics["wrong"] == 0 and r.metrics["checked"] == 150, r.metrics
    assert [e["kind"] for e in r.events].count("rank_died") == 1, r.events
    assert any("(recovery)" in e["message"] for e in r.events), r.events


def test_bad_configs_are_refused(cluster):
    with pytest.raises(ValueError, match="num_workers"):
        train.ScalingConfig(num_workers=(3, 1))
    with pytest.raises(ValueError, match="initial_workers"):
        train.ScalingConfig(num_workers=(1, 2), initial_workers=5)
    bad = train.ElasticTrainer(lambda c: None, run_config=train.RunConfig(
        failure_config=train.FailureConfig(policies=[{"event": "meteor", "action": "restart"}])),
        verbose=False)
    with pytest.raises(phalanx.PhalanxError, match="meteor"):
        bad.fit()
    with pytest.raises(TypeError, match="prestart_imports"):
        train.ElasticTrainer(lambda c: None, prestart_imports="torch")
    bad = train.ElasticTrainer(lambda c: None, prestart_imports=["torch nn"], verbose=False)
    with pytest.raises(phalanx.PhalanxError, match="preimports.*module names"):
        bad.fit()


import ddp_digits  # noqa: E402 - examples/python, on the path above


def run_ddp(config, chaos=None, timeout_s=240):
    trainer = ddp_digits.trainer(dict({"lr": 0.05, "epochs": 6, "batch_size": 32}, **config))
    trainer.verbose = False
    job_id = trainer.submit()
    seen = {}
    if chaos:
        threading.Thread(target=chaos(seen), args=(job_id,), daemon=True).start()
    return wait_for_end(job_id, timeout_s), seen


def check_ddp(result):
    assert result.state == "SUCCEEDED", (result.message, result.events)
    m = result.metrics
    assert m["backend"].lower() == "phalanx", m
    assert m["weights_equal"] is True, m
    assert m["accuracy"] >= 0.9, m
    # on_resize set the rate for the final world size after restore() loaded the old one.
    assert abs(m["lr"] - 0.05 * m["world_size"] / 3) < 1e-12, m


def test_a_ray_train_ddp_script_heals_in_place_from_a_sigkill(cluster):
    """examples/python/ddp_digits.py: DistributedDataParallel, a DataLoader and dist.* calls of
    its own, on the phalanx backend the job sets up; a SIGKILLed rank heals in place (a
    recovery epoch, then a replacement) and every rank ends with the same weights."""
    result, seen = run_ddp({}, chaos=lambda seen: sigkill_at_step(
        30, lambda r: (r.ranks[1]["actor_id"], "PythonTrainer"), seen))
    assert "status" in seen, "the job ended before the kill"
    check_ddp(result)
    died = [e for e in result.events if e["kind"] == "rank_died"]
    assert len(died) == 1 and "SIGNALED(9" in died[0]["message"], result.events
    assert any("(recovery)" in e["message"] for e in result.events), result.events
    # No committed step was lost: the survivors went on from the step the status had.
    assert result.metrics["steps"] >= seen["status"].steps


def test_a_loop_that_cannot_be_pickled_is_refused_naming_the_object(cluster):
    import threading as th
    lock = th.Lock()

    def loop(config):
        with lock:
            pass

    with pytest.raises(TypeError, match="train_loop refers to 'lock'.*create it inside"):
        train.ElasticTrainer(loop, verbose=False).submit()


def test_a_stopped_rank_under_ddp_is_restarted_and_the_others_go_on(cluster, tmp_path):
    """Rank 1 SIGSTOPs itself in the middle of training: its peers wait in DDP's allreduce
    for it until the liveness probe finds it silent (hang.silentSeconds, 1 s) and the
    controller aborts their group; they go on without waiting out any torch timeout."""
    marker = tmp_path / "stopped"
    result, _ = run_ddp({"stop_at_step": 30, "stop_marker": str(marker)})
    assert marker.exists(), f"rank 1 never stopped: {result.state} {result.events}"
    check_ddp(result)
    hung = [e for e in result.events if "does not answer" in e["message"]]
    assert hung, result.events
    stopped_at = float(marker.read_text())
    resumed = [r for r in result.recoveries if r["resumed_ms"] > 0]
    assert resumed, result.recoveries
    took = resumed[0]["resumed_ms"] / 1000 - stopped_at
    print(f"SIGSTOPped rank: the survivors' next step {took:.2f} s after the stop")
    # The bound is the job's: the probe's 1 s silence plus its checks, far below a torch
    # group's timeout (60 s to 30 min); loose, so that a busy machine cannot fail it.
    assert took < 30, took


def ray_checkpoint_loop(config):
    """Ray Train's checkpoint API as its users write it: resume from get_checkpoint(), save a
    directory per epoch and report it."""
    import tempfile as tf
    import torch
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = torch.load(os.path.join(d, "model.pt"))["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        d = tf.mkdtemp()
        torch.save({"epoch": epoch}, os.path.join(d, "model.pt"))
        train.report({"epoch": epoch, "start": start},
                     checkpoint=train.Checkpoint.from_directory(d))


def test_ray_checkpoints_are_reported_kept_and_resumed_from(cluster, tmp_path):
    def fit(name, epochs, **kw):
        return train.TorchTrainer(
            ray_checkpoint_loop, train_loop_config={"epochs": epochs},
            scaling_config=train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=train.RunConfig(name=name, storage_path=str(tmp_path),
                                       checkpoint_config=train.CheckpointConfig(num_to_keep=2)),
            verbose=False, **kw).fit(timeout=120)

    first = fit("ckpt", 4)
    assert first.metrics == {"epoch": 3, "start": 0}, first.metrics
    assert first.checkpoint.path == str(tmp_path / "ckpt" / "checkpoint_000003")
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["checkpoint_000002", "checkpoint_000003"]
    again = fit("ckpt-resumed", 6, resume_from_checkpoint=first.checkpoint)
    assert again.metrics == {"epoch": 5, "start": 4}, again.metrics


def printing_loop(config):
    ctx = train.get_context()
    print(f"hello from {ctx.get_world_rank()} of {ctx.get_world_size()}")
    print("a line on stderr", file=sys.stderr)


def test_the_ranks_output_reaches_the_driver_and_job_logs(cluster, capsys):
    """print() in train_loop reaches the driver's fit(), prefixed by rank (as Ray and torchrun
    show their workers' output), and `phalanx job logs` shows it for the job."""
    result = train.TorchTrainer(
        printing_loop,
        scaling_config=train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=train.RunConfig(name="printing")).fit(timeout=120)
    out = capsys.readouterr().out
    for r in (0, 1):
        assert f"(rank {r}) hello from {r} of 2" in out, out
        assert f"(rank {r}) a line on stderr" in out, out
    logs = cluster.cli("job", "logs", result.job_id)
    assert logs.returncode == 0, logs.stderr
    assert "(rank 1) hello from 1 of 2" in logs.stdout, logs.stdout


def env_loop(config):
    import torch.distributed as dist
    ctx = train.get_context()
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
    seen = {n: os.environ.get(n) for n in names}
    seen.update(ctx_local=(ctx.get_local_rank(), ctx.get_local_world_size(), ctx.get_node_rank()),
                device=str(train.get_device()), initialized=dist.is_initialized(),
                backend=dist.get_backend(), dist_rank=dist.get_rank())
    every = [None] * ctx.get_world_size()
    dist.all_gather_object(every, seen)
    train.report({"every": every})


def test_torchrun_variables_and_a_gpu_per_worker_are_set_before_the_loop(cluster):
    """As Ray Train's TorchConfig and torchrun set them: RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT, torch.distributed initialised on
    the phalanx backend, and with use_gpu each worker's CUDA_VISIBLE_DEVICES its local rank
    (this machine has no GPU: the resource request is left at 0 GPUs)."""
    result = train.TorchTrainer(
        env_loop,
        scaling_config=train.ScalingConfig(num_workers=3, use_gpu=True,
                                           resources_per_worker={"CPU": 0.5, "GPU": 0}),
        run_config=train.RunConfig(name="env"), verbose=False).fit(timeout=120)
    # torch.distributed was there on the first try (`import torch.distributed as dist` in the
    # loop counts as using torch).
    assert not any(e["kind"] == "step_failed" for e in result.events), result.events
    every = result.metrics["every"]
    assert len(every) == 3, every
    for r, seen in enumerate(every):
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["dist_rank"]) == (str(r), "3", r), seen
        # One node here: local rank = rank, node rank 0.
        assert (seen["LOCAL_RANK"], seen["LOCAL_WORLD_SIZE"], seen["NODE_RANK"]) == \
            (str(r), "3", "0"), seen
        assert seen["ctx_local"] == [r, 3, 0] or seen["ctx_local"] == (r, 3, 0), seen
        assert seen["CUDA_VISIBLE_DEVICES"] == str(r), seen
        assert seen["MASTER_ADDR"] == "127.0.0.1" and int(seen["MASTER_PORT"]) > 0, seen
        assert seen["initialized"] and seen["backend"] == "phalanx", seen
        assert seen["device"] == "cpu", seen
    assert len({s["MASTER_PORT"] for s in every}) == 1, every


import zero_digits  # noqa: E402 - examples/python, on the path above


def run_zero(tmp_path, name, chaos=None, timeout_s=180):
    """examples/python/zero_digits.py on 3 workers (min 1); its final weights, from rank 0."""
    weights = tmp_path / f"{name}.pt"
    t = zero_digits.trainer({"weights_out": str(weights), "step_sleep": 0.01}, name=name)
    t.verbose = False
    job_id = t.submit()
    seen = {}
    if chaos:
        threading.Thread(target=chaos(seen), args=(job_id,), daemon=True).start()
    result = wait_for_end(job_id, timeout_s)
    assert result.state == "SUCCEEDED", (result.message, result.events)
    import torch
    return result, torch.load(weights), seen


def test_zero_optimizer_state_survives_a_sigkill_and_ends_with_the_uninterrupted_weights(
        cluster, tmp_path):
    """ZeRO-1 (ZeroRedundancyOptimizer over Adam) in train.State: each rank's shard of Adam's
    state has a copy on the next rank of the ring, so when rank 1 is SIGKILLed the survivors
    reshard the whole state to world size 2 (and again to 3 when the replacement joins), with
    no checkpoint on disk. With a constant global batch the run ends with the weights of a
    run that lost nothing; had the lost shard started afresh, Adam would have diverged."""
    import torch
    reference, expected, _ = run_zero(tmp_path, "zero-whole")
    assert reference.metrics["state_complete"] is True, reference.metrics
    result, got, seen = run_zero(tmp_path, "zero-killed", chaos=lambda seen: sigkill_at_step(
        40, lambda r: (r.ranks[1]["actor_id"], "PythonTrainer"), seen))
    assert "status" in seen, "the job ended before the kill"
    assert [e["kind"] for e in result.events].count("rank_died") == 1, result.events
    assert any("(recovery)" in e["message"] for e in result.events), result.events
    assert result.metrics["steps"] == reference.metrics["steps"], (result.metrics,
                                                                   reference.metrics)
    assert result.metrics["state_complete"] is True, result.metrics
    diff = float((got - expected).abs().max())
    print(f"\n[zero] max |weight - uninterrupted weight| after a SIGKILL: {diff:.2e}")
    assert diff <= 1e-5, diff


def test_the_zero_replica_ring_puts_each_copy_on_another_host():
    """Rank order[i] sends its shard to order[i + 1]: with 2 hosts of 2 ranks each every copy
    is on the other host; one host alone pairs its own ranks."""
    from phalanx.train import _zero
    for nodes in (["a", "a", "b", "b"], ["a", "b", "a", "b"], ["a", "b", "c", "a", "b", "c"]):
        order = _zero.ring(nodes)
        assert sorted(order) == list(range(len(nodes)))
        assert all(nodes[order[i]] != nodes[order[(i + 1) % len(order)]]
                   for i in range(len(order))), (nodes, order)
    assert _zero.ring(["a", "a", "a"]) == [0, 1, 2]
    assert _zero.ring(["a", "a", "a", "b"]) == [0, 3, 1, 2]


def counting_loop(config):
    state = train.State(step=0)
    state.restore()
    while state.step < config["steps"]:
        state.step += 1
        state.commit()
    train.report({"step": state.step})


def test_checkpoint_at_end_writes_the_final_committed_state(cluster, tmp_path):
    """CheckpointConfig(checkpoint_at_end=True) with no frequency: one checkpoint, of the step
    the loop ended at (Ray refuses the option for function trainers; the controller holds the
    final state, so it writes it)."""
    result = train.ElasticTrainer(
        counting_loop, train_loop_config={"steps": 37},
        scaling_config=train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=train.RunConfig(name="at-end", storage_path=str(tmp_path),
                                   checkpoint_config=train.CheckpointConfig(
                                       checkpoint_at_end=True)),
        verbose=False).fit()
    assert result.error is None, result.error
    checkpoint = result.checkpoint
    assert checkpoint is not None and checkpoint.path.startswith(str(tmp_path / "at-end"))
    assert checkpoint.load_state()["step"] == 37, checkpoint.load_state()
    assert len(os.listdir(tmp_path / "at-end")) >= 1
    with pytest.raises(ValueError, match="checkpoint_at_end"):
        train.CheckpointConfig(checkpoint_at_end="yes")
