"""Ray Train's module paths: ``phalanx.train.torch`` is ``ray.train.torch`` and
``phalanx.train`` is ``ray.train``, so Ray Train's fashion-MNIST example
(examples/ray_train/torch_fashion_mnist.py, ``ray`` renamed to ``phalanx``, the dataset made
synthetic) runs as a script against a cluster; with the names Ray's modules export, the
helpers' Ray semantics (a prepared loader's own epochs, TorchConfig's defaults, the
accelerator's order) checked without one, and a Ray-style loop of the torch helpers and
per-epoch checkpoints on one."""

import os
import shutil
import subprocess
import sys

import pytest

import phalanx.train
from phalanx.train._runtime import RUNTIME

from conftest import connected_cluster

torch = pytest.importorskip("torch")

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "ray_train", "torch_fashion_mnist.py")
EXAMPLE_TIMEOUT_S = 300

# ray.train.torch's __all__ (Train V1, with get_devices of Ray 2.10+), and those of its names
# phalanx does not have: batch inference over Ray Data.
RAY_TRAIN_TORCH = ["TorchTrainer", "TorchConfig", "TorchCheckpoint", "accelerate", "get_device",
                   "get_devices", "prepare_model", "prepare_optimizer", "prepare_data_loader",
                   "backward", "enable_reproducibility"]
RAY_TRAIN_TORCH_NOT_HERE = ["TorchPredictor", "TorchDetectionPredictor"]
# What Ray's torch examples take from ray.train.
RAY_TRAIN = ["ScalingConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "Checkpoint",
             "Result", "TrainContext", "TrainingFailedError", "get_context", "get_checkpoint",
             "report"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx"), num_cpus=4) as c:
        yield c


@pytest.fixture
def loop_runtime():
    """This process's RUNTIME as a loop's run sees it, put back afterwards."""
    saved = {k: getattr(RUNTIME, k) for k in ("progress", "loaders", "accelerator", "world",
                                               "rank")}
    RUNTIME.progress, RUNTIME.loaders, RUNTIME.accelerator = {}, 0, None
    yield RUNTIME
    for k, v in saved.items():
        setattr(RUNTIME, k, v)


# ---- the names ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", RAY_TRAIN_TORCH)
def test_each_name_of_ray_train_torch_imports_from_phalanx_train_torch(name):
    import phalanx.train.torch as pt
    assert name in pt.__all__
    exec(f"from phalanx.train.torch import {name}", {})


def test_ray_train_torch_names_phalanx_lacks_are_the_listed_ones():
    import phalanx.train.torch as pt
    assert sorted(pt.__all__) == sorted(RAY_TRAIN_TORCH)
    for name in RAY_TRAIN_TORCH_NOT_HERE:
        assert not hasattr(pt, name)


@pytest.mark.parametrize("name", RAY_TRAIN)
def test_each_name_ray_torch_examples_take_from_ray_train_is_in_phalanx_train(name):
    exec(f"from phalanx.train import {name}", {})


def test_train_torch_is_train_s_own_objects_and_leaves_torch_pytorch():
    import phalanx.train.torch as pt
    for name in ("TorchTrainer", "TorchConfig", "get_device", "prepare_model",
                 "prepare_data_loader"):
        assert getattr(pt, name) is getattr(phalanx.train, name), name
    assert phalanx.train.torch is pt  # the attribute, as `ray.train.torch.prepare_model`


def test_phalanx_train_alone_does_not_import_torch_and_the_submodule_does_not_hide_it():
    """In a fresh interpreter: `import phalanx.train` leaves torch out; the attribute
    `phalanx.train.torch` (as a worker's train_loop reaches it) loads the submodule, and
    `import torch` there, or in phalanx.train's modules, is PyTorch."""
    code = ("import sys, phalanx.train\n"
            "assert 'torch' not in sys.modules, 'phalanx.train imported torch'\n"
            "sub = phalanx.train.torch\n"
            "import torch\n"
            "assert sub.__name__ == 'phalanx.train.torch' and torch is not sub\n"
            "assert hasattr(torch, 'nn') and 'phalanx' not in torch.__file__, torch.__file__\n"
            "from phalanx.train import _loop, _data, _state, _trainer, _torch_utils\n"
            "assert _torch_utils.torch is torch and sub.torch is torch\n"
            "print('fine')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "fine", out.stderr


# ---- Ray's semantics, without a cluster ----------------------------------------------------

def test_torch_config_takes_ray_s_arguments():
    pt = phalanx.train.torch
    assert pt.TorchConfig().backend == "phalanx"
    assert pt.TorchConfig(backend=None, init_method="tcp", timeout_s=60).timeout_s == 60
    assert pt.TorchConfig("gloo", "env", 30).backend == "gloo"
    with pytest.raises(ValueError, match="init_method"):
        pt.TorchConfig(init_method="file")


def test_a_test_loader_does_not_use_up_the_train_loader_s_epochs(loop_runtime):
    """Ray's example prepares a train and a test loader and runs through both each epoch:
    each has its own epochs, and every epoch of each is whole."""
    from torch.utils.data import DataLoader, TensorDataset
    pt = phalanx.train.torch
    loop_runtime.world, loop_runtime.rank = 1, 0
    train_data = TensorDataset(torch.arange(10))
    test_data = TensorDataset(torch.arange(100, 104))
    train_loader = pt.prepare_data_loader(DataLoader(train_data, batch_size=3, shuffle=True))
    test_loader = pt.prepare_data_loader(DataLoader(test_data, batch_size=3))
    orders = []
    for _ in range(3):
        seen = [int(x) for (batch,) in train_loader for x in batch]
        assert sorted(seen) == list(range(10)), seen
        orders.append(seen)
        tested = [int(x) for (batch,) in test_loader for x in batch]
        assert tested == [100, 101, 102, 103], tested  # a SequentialSampler: in order
        assert len(train_loader) == 4 and len(test_loader) == 2
    assert orders[0] != orders[1], "each data epoch is shuffled anew"


def test_a_last_chunk_smaller_than_the_world_gives_no_rank_an_empty_batch(loop_runtime):
    from torch.utils.data import DataLoader, TensorDataset
    pt = phalanx.train.torch
    loop_runtime.world = 3
    for rank in range(3):
        loop_runtime.rank, loop_runtime.progress, loop_runtime.loaders = rank, {}, 0
        loader = pt.prepare_data_loader(DataLoader(TensorDataset(torch.arange(4)),
                                                   batch_size=1))
        sizes = [len(batch) for (batch,) in loader]
        assert sizes == [1, 1], (rank, sizes)


def test_a_loader_with_its_own_distributed_sampler_is_left_as_it_is(loop_runtime):
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    data = TensorDataset(torch.arange(8))
    sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=False)
    loader = phalanx.train.torch.prepare_data_loader(DataLoader(data, batch_size=2,
                                                                sampler=sampler))
    assert loader.sampler is sampler
    assert [int(x) for (b,) in loader for x in b] == [1, 3, 5, 7]


def test_accelerate_comes_before_the_other_helpers(loop_runtime):
    pt = phalanx.train.torch
    pt.accelerate(amp=False)
    with pytest.raises(RuntimeError, match="accelerate"):
        pt.accelerate()
    loop_runtime.accelerator = None
    pt.prepare_model(torch.nn.Linear(2, 1), parallel_strategy=None)
    with pytest.raises(RuntimeError, match="comes first"):
        pt.accelerate(amp=True)


def test_without_mixed_precision_the_optimizer_and_backward_are_torch_s_own(loop_runtime):
    pt = phalanx.train.torch
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt.accelerate(amp=True)  # on the CPU, as Ray's CUDA autocast: full precision
    assert pt.prepare_optimizer(opt) is opt
    pt.backward(model(torch.ones(1, 2)).sum())
    assert model.weight.grad is not None


def test_a_scaled_optimizer_is_still_the_optimizer_for_schedulers_and_state():
    from phalanx.train._torch_utils import _ScaledOptimizer
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    scaled = _ScaledOptimizer(opt, torch.cuda.amp.GradScaler(enabled=False))
    assert isinstance(scaled, torch.optim.SGD) and scaled.param_groups is opt.param_groups
    scheduler = torch.optim.lr_scheduler.StepLR(scaled, step_size=1, gamma=0.5)
    before = model.weight.detach().clone()
    model(torch.ones(1, 2)).sum().backward()
    scaled.step()
    scheduler.step()
    assert not torch.equal(before, model.weight) and opt.param_groups[0]["lr"] == 0.5
    scaled.zero_grad()
    assert scaled.state_dict() == opt.state_dict()


def test_a_torch_checkpoint_gives_back_the_model_without_ddp_s_prefix():
    pt = phalanx.train.torch
    model = torch.nn.Linear(3, 2)
    prefixed = {f"module.{k}": v for k, v in model.state_dict().items()}
    checkpoint = pt.TorchCheckpoint.from_state_dict(prefixed)
    assert os.listdir(checkpoint.path) == ["model.pt"]
    again = checkpoint.get_model(torch.nn.Linear(3, 2))
    assert torch.equal(again.weight, model.weight)
    with pytest.raises(ValueError, match="get_model\\(model\\)"):
        checkpoint.get_model()
    whole = pt.TorchCheckpoint.from_model(model)
    assert torch.equal(whole.get_model().bias, model.bias)
    for c in (checkpoint, whole):
        shutil.rmtree(c.path)


# ---- on a cluster ---------------------------------------------------------------------------

def ray_style_loop(config):
    """Ray Train's torch helpers and per-epoch checkpoints, as a Ray script writes them (with
    ``ray`` renamed)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import phalanx.train
    import phalanx.train.torch

    phalanx.train.torch.accelerate(amp=False)
    phalanx.train.torch.enable_reproducibility(seed=7)
    ctx = phalanx.train.get_context()
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, x.sum(1, keepdim=True))
    loader = phalanx.train.torch.prepare_data_loader(DataLoader(data, batch_size=8,
                                                                shuffle=True))
    model = phalanx.train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = phalanx.train.torch.prepare_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.05))
    start = 0
    checkpoint = phalanx.train.get_checkpoint()
    if checkpoint:
        start = int(open(os.path.join(checkpoint.path, "epoch")).read()) + 1
    for epoch in range(start, config["epochs"]):
        samples = 0
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            phalanx.train.torch.backward(loss)
            optimizer.step()
            samples += len(xb)
        saved = phalanx.train.torch.TorchCheckpoint.from_state_dict(model.state_dict())
        with open(os.path.join(saved.path, "epoch"), "w") as f:
            f.write(str(epoch))
        phalanx.train.report(
            {"loss": loss.item(), "epoch": epoch, "samples": samples,
             "rank": ctx.get_world_rank(), "world": ctx.get_world_size(),
             "local_rank": ctx.get_local_rank(),
             "devices": [str(d) for d in phalanx.train.torch.get_devices()]},
            checkpoint=saved)
        shutil.rmtree(saved.path)  # report() kept its copy


def test_a_ray_style_loop_of_the_torch_helpers_reports_a_checkpoint_each_epoch(cluster,
                                                                                 tmp_path):
    from phalanx.train import RunConfig, ScalingConfig
    from phalanx.train.torch import TorchCheckpoint, TorchConfig, TorchTrainer
    result = TorchTrainer(
        ray_style_loop, train_loop_config={"epochs": 3},
        torch_config=TorchConfig(backend=None),
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                     resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="torch-paths", storage_path=str(tmp_path)),
        verbose=False).fit(timeout=180)
    m = result.metrics
    assert (m["epoch"], m["rank"], m["world"], m["local_rank"]) == (2, 0, 2, 0), m
    assert m["samples"] == 32 and m["devices"] == ["cpu"], m  # half of each epoch's 64
    assert result.checkpoint.path == str(tmp_path / "torch-paths" / "checkpoint_000002")
    model = TorchCheckpoint(result.checkpoint.path).get_model(torch.nn.Linear(4, 1))
    assert model.weight.shape == (1, 4)


def test_ray_s_fashion_mnist_example_runs_with_ray_renamed_to_phalanx(cluster):
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("PHALANX_TLS_DIR", None)  # found from the machine's session, as `ray.init()` does
    out = subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True,
                         timeout=EXAMPLE_TIMEOUT_S, cwd=os.path.dirname(EXAMPLE))
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), \
        f"exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-4000:]}"
    assert "Training result: Result(" in out.stdout, out.stdout[-3000:]
