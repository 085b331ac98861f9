"""Elastic training in Python, modelled on Ray Train and Horovod Elastic.

    from phalanx import train

    def train_loop(config):
        model = train.prepare_model(Net())          # data parallel over this epoch's ranks
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        state = train.State(model=model, optimizer=opt, epoch=0)
        state.restore()                             # the newest committed state, if any
        for epoch in range(state.epoch, config["epochs"]):
            for batch in train.ElasticSampler(len(data), 32, epoch):
                ...                                 # forward, backward, opt.step()
                state.commit()                      # a step boundary: cheap, every step
                train.report({"loss": loss.item()})
            state.epoch = epoch + 1
            state.commit()

    result = train.ElasticTrainer(
        train_loop, train_loop_config={"lr": 0.1, "epochs": 5},
        scaling_config=train.ScalingConfig(num_workers=(1, 4), initial_workers=3,
                                           resources_per_worker={"CPU": 1, "memory": 2 << 30}),
        run_config=train.RunConfig(name="digits", storage_path="/shared/runs",
                                   failure_config=train.FailureConfig(max_failures=5),
                                   checkpoint_config=train.CheckpointConfig(
                                       checkpoint_frequency=50))).fit()
    print(result.metrics, result.checkpoint, result.error)

The names are Ray Train's (``TorchTrainer`` is another name for ``ElasticTrainer``), and so are
the paths: ``phalanx.train.torch`` is ``ray.train.torch`` (loaded on first use, it imports
torch), so a Ray Train script moves over by renaming ``ray`` to ``phalanx``.

Each worker is an actor of the job; the job's elastic controller (the same one as for C++
jobs and `phalanx job submit -f`) places them, reacts to deaths, OOM kills (respawned with
more memory), node changes and scale requests, and re-forms the group. After a membership
change ``train_loop`` runs again on every rank and ``state.restore()`` brings back the last
committed step: survivors their own, newcomers a survivor's by broadcast, and only when every
rank was lost the last checkpoint on disk.
"""

from ._config import (Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig,
                      ScalingConfig, TrainingFailedError)
from ._data import ElasticSampler, prepare_data_loader
from ._loop import (TorchConfig, TrainContext, allreduce, collective_group, get_checkpoint,
                    get_context, get_device, on_resize, prepare_model, report,
                    torch_process_group)
from ._state import State
from ._trainer import ElasticTrainer, TorchTrainer, job_status

__all__ = ["ElasticTrainer", "TorchTrainer", "TorchConfig", "ScalingConfig", "RunConfig",
           "FailureConfig", "CheckpointConfig", "Checkpoint", "Result", "TrainingFailedError",
           "State", "ElasticSampler", "TrainContext", "get_context", "get_device", "get_checkpoint", "on_resize",
           "report", "prepare_model", "prepare_data_loader", "torch_process_group",
           "collective_group", "allreduce", "job_status"]


def __getattr__(name):
    # DataParallel's module and phalanx.train.torch import torch: loaded on first use, not
    # with phalanx.train. `phalanx.train.torch.prepare_model` in a train_loop sent to a worker
    # finds the submodule here (the worker has not imported it).
    if name == "DataParallel":
        from ._data_parallel import DataParallel
        return DataParallel
    if name == "torch":
        import importlib
        return importlib.import_module(f"{__name__}.torch")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
