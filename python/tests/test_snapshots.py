"""Every rank of a phalanx.train job SIGKILLed at once (a bad batch that crashes every rank, an
OOM storm on the job's only node): the job goes on from the newest committed step that the
node holds in memory (node/snapshot_store.h), with no checkpoint on disk, and ends with the
weights of a run that lost nothing. A ZeRO-1 job keeps its optimizer state the same way."""

import os
import signal
import threading
import time

import phalanx
from phalanx import train
from phalanx.train import RunConfig, ScalingConfig, TorchTrainer, FailureConfig

from test_train import run_zero, wait_for_end


def mlp_loop(config):
    """A DDP MLP with Adam, as a Ray Train user writes it: state.commit() every step, a fixed
    global batch split among the ranks of the moment (so the maths does not depend on the
    world size), the final weights written by rank 0."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = train.prepare_model(torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = train.State(model=model, optimizer=optimizer, step=0)
    state.restore()
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(16, 1, generator=g)
    while state.step < config["steps"]:
        batch = torch.Generator().manual_seed(1000 + state.step)
        x = torch.randn(config["global_batch"], 16, generator=batch)
        y = x @ w_true
        mine = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine], reduction="sum") / len(x)
        optimizer.zero_grad()
        loss.backward()
        # DDP averages over the ranks; the loss above is already this rank's share of the sum.
        for p in model.parameters():
            p.grad.mul_(world)
        optimizer.step()
        state.step += 1
        state.commit()
        if config.get("step_sleep"):
            time.sleep(config["step_sleep"])
    if rank == 0:
        weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        torch.save(weights, config["weights_out"])
    train.report({"steps": state.step, "world_size": world})


def kill_every_rank_at(step, seen, also_controller=False, ranks=2):
    """Chaos: once the job reached `step` with `ranks` workers, SIGKILL every rank at once (and
    its controller)."""
    def chaos(job_id):
        while True:
            r = train.job_status(job_id)
            if r.steps >= step and len(r.ranks) >= ranks:
                actors = [(m["actor_id"], "PythonTrainer") for m in r.ranks]
                if also_controller:
                    actors.append((r.controller_actor_id, "ElasticController"))
                pids = [phalanx.actor_info(phalanx.ActorHandle(a, c, "cpp"))["pid"]
                        for a, c in actors]
                seen["status"] = r
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return
            if r.state in ("SUCCEEDED", "FAILED"):
                return
            time.sleep(0.02)
    return chaos


def run_mlp(tmp_path, name, chaos=None):
    weights = tmp_path / f"{name}.pt"
    t = TorchTrainer(
        mlp_loop, train_loop_config={"steps": 300, "global_batch": 32, "step_sleep": 0.01,
                                     "weights_out": str(weights)},
        scaling_config=ScalingConfig(num_workers=(1, 2), resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "storage"),
                             failure_config=FailureConfig(max_failures=3)))
    t.verbose = False
    job_id = t.submit()
    seen = {}
    if chaos:
        threading.Thread(target=chaos(seen), args=(job_id,), daemon=True).start()
    result = wait_for_end(job_id, 240)
    assert result.state == "SUCCEEDED", (result.message, result.events)
    import torch
    return result, torch.load(weights), seen


def restored(result):
    """The restore_from_snapshot event's message, or None."""
    return next((e["message"] for e in result.events if e["kind"] == "restore_from_snapshot"),
                None)


def restored_step(message):
    return int(message.split("restored step ", 1)[1].split(" ", 1)[0])


def test_every_rank_sigkilled_at_once_resumes_from_node_memory(cluster, tmp_path):
    import torch
    reference, expected, _ = run_mlp(tmp_path, "mlp-whole")
    result, got, seen = run_mlp(tmp_path, "mlp-killed",
                                chaos=lambda seen: kill_every_rank_at(150, seen))
    assert "status" in seen, "the job ended before the kill"
    killed_at = seen["status"].steps
    message = restored(result)
    print(f"\n[snapshot] {message}")
    assert message and "from node memory on" in message, result.events
    # No committed step lost (the step the job's status showed at the kill), no disk read
    # (no checkpoint was configured; storage_path is set, as in the report).
    assert restored_step(message) >= killed_at, (message, killed_at)
    assert not any(e["kind"] == "restart_from_checkpoint" for e in result.events), result.events
    # The fault's recovery record names the source too.
    assert any("from node memory on" in r["restored_from"] for r in result.recoveries), \
        result.recoveries
    assert result.metrics["steps"] == reference.metrics["steps"] == 300
    diff = float((got - expected).abs().max())
    print(f"[snapshot] max |weight - uninterrupted weight| after every rank was killed: {diff:.2e}")
    assert diff <= 1e-5, diff


def test_every_rank_and_the_controller_killed_resume_from_node_memory(cluster, tmp_path):
    import torch
    reference, expected, _ = run_mlp(tmp_path, "mlp-whole2")
    result, got, seen = run_mlp(tmp_path, "mlp-all-killed",
                                chaos=lambda seen: kill_every_rank_at(150, seen, True))
    assert "status" in seen, "the job ended before the kill"
    message = restored(result)
    print(f"\n[snapshot] {message}")
    assert message and "from node memory on" in message, result.events
    assert restored_step(message) >= seen["status"].steps, message
    diff = float((got - expected).abs().max())
    assert diff <= 1e-5, diff


def test_a_zero_job_that_loses_every_rank_keeps_its_optimizer_state(cluster, tmp_path):
    """ZeRO-1: each rank's shard of Adam's state is in its node's memory too (beside the
    snapshot), so when every rank is SIGKILLed the new ranks reshard the whole state; had it
    started afresh, Adam would have diverged from the uninterrupted run."""
    reference, expected, _ = run_zero(tmp_path, "zero-whole")

    result, got, seen = run_zero(tmp_path, "zero-all-killed",
                                 chaos=lambda seen: kill_every_rank_at(40, seen, ranks=3))
    assert "status" in seen, "the job ended before the kill"
    message = restored(result)
    print(f"\n[snapshot] {message}")
    assert message and "from node memory on" in message, result.events
    assert result.metrics["state_complete"] is True, result.metrics
    assert result.metrics["steps"] == reference.metrics["steps"], (result.metrics,
                                                                   reference.metrics)
    diff = float((got - expected).abs().max())
    print(f"[snapshot] ZeRO: max |weight - uninterrupted weight| after every rank was killed: "
          f"{diff:.2e}")
    assert diff <= 1e-5, diff


def test_snapshots_off_in_failure_config_means_a_start_over(cluster, tmp_path):
    """FailureConfig(snapshots=False) is the spec's snapshot.enabled: false: the state lives
    only in the ranks' processes, and a job that loses every rank starts over (no checkpoint
    configured). Bad values are refused naming the field."""
    import pytest
    with pytest.raises(ValueError, match="snapshots='yes'"):
        FailureConfig(snapshots="yes")
    with pytest.raises(ValueError, match="snapshot_peer_mbps=-1"):
        FailureConfig(snapshot_peer_mbps=-1)
    weights = tmp_path / "off.pt"
    t = TorchTrainer(
        mlp_loop, train_loop_config={"steps": 200, "global_batch": 32, "step_sleep": 0.01,
                                     "weights_out": str(weights)},
        scaling_config=ScalingConfig(num_workers=(1, 2), resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="mlp-off", failure_config=FailureConfig(
            max_failures=3, snapshots=False)))
    t.verbose = False
    job_id = t.submit()
    seen = {}
    threading.Thread(target=kill_every_rank_at(100, seen), args=(job_id,), daemon=True).start()
    result = wait_for_end(job_id, 240)
    assert result.state == "SUCCEEDED", (result.message, result.events)
    assert "status" in seen, "the job ended before the kill"
    assert restored(result) is None, result.events
    assert any(e["kind"] == "restart_from_checkpoint" and "starting from step 0" in e["message"]
               for e in result.events), result.events
