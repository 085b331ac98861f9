"""The driver side: ElasticTrainer (Ray Train's TorchTrainer) submits the job and follows it."""

import json
import math
import os
import secrets
import sys
import time
import warnings

import cloudpickle

from phalanx import _native

from .._api import _ensure_init
from .._serialization import dumps_function
from ..exceptions import PhalanxError
from ._config import (Checkpoint, FailureConfig, Result, RunConfig, ScalingConfig,
                      TrainingFailedError)
from ._loop import TorchConfig


def job_status(job_id):
    """The job's record (state, world size, events, ...) as a Result."""
    return Result(_native.job_status(job_id))


def _names_in(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_in(const)
    return names


def _prestart_imports(given, train_loop):
    """The modules the nodes' prestarted workers import ahead for this job (the spec's
    ``preimports``): ``given`` if not None, else torch when the driver has imported it or
    ``train_loop`` names it."""
    if given is not None:
        if isinstance(given, str) or not all(isinstance(m, str) for m in given):
            raise TypeError("prestart_imports must be a list of module names, e.g. ['torch']")
        return list(given)
    code = getattr(train_loop, "__code__", None)
    # `import torch.distributed as dist` names "torch.distributed", not "torch".
    if "torch" in sys.modules or (code is not None and any(
            n == "torch" or n.startswith("torch.") for n in _names_in(code))):
        return ["torch"]
    return []


# The default of ElasticTrainer(step_call_ms=...): see its docstring.
PYTHON_STEP_CALL_MS = 100


class ElasticTrainer:
    """Runs ``train_loop(config)`` on every worker of an elastic job, as Ray Train's
    ``TorchTrainer``: ``ElasticTrainer(train_loop, train_loop_config=..., scaling_config=
    ScalingConfig(...), run_config=RunConfig(name=..., failure_config=FailureConfig(...),
    checkpoint_config=CheckpointConfig(...))).fit()``.

    ``prestart_imports``: modules that each node's prestarted workers import ahead (default:
    ``["torch"]`` when the driver has imported torch or ``train_loop`` names it; ``[]``: none).
    A rank that replaces a dead one then takes such a worker and is ready without paying for
    ``import torch``; each node keeps two of them while the job's ranks run there.

    ``step_call_ms``: the training each of the controller's calls to a rank covers (the
    spec's ``stepCallMs``; 0: one step per call). 100 ms by default, where a C++ job's is
    50: each call costs a Python loop about 1 ms on a busy host (the state's copy at the
    call's end, and the GIL handed to the host's thread and back), so 100 ms keeps that near
    1% at any step time. A failure redoes at most about two calls of work."""

    def __init__(self, train_loop=None, train_loop_config=None, *, scaling_config=None,
                 run_config=None, train_loop_per_worker=None, verbose=True, env=None,
                 prestart_imports=None, step_call_ms=PYTHON_STEP_CALL_MS, torch_config=None,
                 resume_from_checkpoint=None):
        if train_loop_per_worker is not None:
            if train_loop is not None:
                raise TypeError("give the training function once: as the first argument or "
                                "as train_loop_per_worker=")
            train_loop = train_loop_per_worker
        if not callable(train_loop):
            raise TypeError("train_loop must be a function taking the config dict")
        run_config = run_config or RunConfig()
        self.train_loop = train_loop
        self.train_loop_config = train_loop_config
        self.scaling = scaling_config or ScalingConfig()
        self.run_config = run_config
        self.failure = run_config.failure_config or FailureConfig()
        self.name = run_config.name or "train"
        self.checkpoint_dir = run_config.checkpoint_dir(self.name)
        self.checkpoint_interval = (run_config.checkpoint_config.checkpoint_frequency
                                    if self.checkpoint_dir else 0)
        self.checkpoint_at_end = bool(self.checkpoint_dir and
                                      run_config.checkpoint_config.checkpoint_at_end)
        self.verbose = verbose and run_config.verbose
        self.env = dict(env or {})
        self.prestart_imports = _prestart_imports(prestart_imports, train_loop)
        if isinstance(step_call_ms, bool) or not isinstance(step_call_ms, (int, float)) or \
                not 0 <= step_call_ms < math.inf:
            raise ValueError(f"step_call_ms={step_call_ms!r}: give milliseconds >= 0 (0: one "
                             f"step per call)")
        self.step_call_ms = step_call_ms
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise TypeError("torch_config must be a phalanx.train.TorchConfig")
        self.explicit_torch_config = torch_config is not None
        self.torch_config = torch_config or TorchConfig()
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint,
                                                                 Checkpoint):
            raise TypeError("resume_from_checkpoint must be a train.Checkpoint (e.g. "
                            "Checkpoint.from_directory(d), or a Result's .checkpoint)")
        self.resume_from_checkpoint = resume_from_checkpoint
        self.job_id = None

    def _spec(self, fn_key):
        """The job spec (a _native.JobSpec): written in the spec's YAML form (JSON is YAML)
        and read by the C++ parser, the same as for ``phalanx job submit -f``; a bad value
        raises InvalidArgumentError naming the field and the fix."""
        s, f = self.scaling, self.failure
        spec = {
            "name": self.name,
            "trainer": "PythonTrainer",
            "language": "python",
            "replicas": s.initial_workers,
            "minReplicas": s.min_workers,
            "maxReplicas": s.max_workers,
            "resources": s.resources_per_worker,
            "placementStrategy": s.placement_strategy,
            "restartLimit": f.restart_limit,
            "restartTimeLimit": f.window_s,
            "failPolicy": {"belowMinTimeoutSeconds": f.below_min_timeout_s},
            "hang": {"timeoutSeconds": f.hang_timeout_s, "silentSeconds": f.hang_silent_s},
            "straggler": {"check": f.straggler_check, "factor": f.straggler_factor},
            "config": {"pyfn": fn_key},
            "stepCallMs": self.step_call_ms,
        }
        if self.prestart_imports:
            spec["preimports"] = self.prestart_imports
        if f.policies:
            spec["faultTolerantPolicy"] = f.policies
        if f.phase_timeouts:
            spec["phases"] = f.phases()
        spec["snapshot"] = {"enabled": f.snapshots, "peerCopy": f.snapshot_peer_mbps > 0,
                            "peerMBps": f.snapshot_peer_mbps or 200}
        if self.checkpoint_dir:
            spec["checkpoint"] = {"dir": self.checkpoint_dir,
                                  "intervalSteps": self.checkpoint_interval,
                                  "atEnd": self.checkpoint_at_end}
            keep = getattr(self.run_config.checkpoint_config, "num_to_keep", None)
            if keep:
                spec["checkpoint"]["numToKeep"] = keep
        spec.update(getattr(self, "_spec_extra", {}))  # phalanx run's (the nodes it may use)
        return _native.parse_job_spec(json.dumps(spec))

    def submit(self):
        """Starts the job and returns its id (``fit`` waits for it)."""
        _ensure_init()
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        if "" in sys.path:
            paths.insert(0, os.getcwd())
        options = {"backend": self.torch_config.backend, "use_gpu": self.scaling.use_gpu,
                   # The loop uses torch: it names torch, or the driver imported it, or a
                   # TorchConfig was given.
                   "torch": self.explicit_torch_config or
                            "torch" in _prestart_imports(None, self.train_loop),
                   "storage": self.run_config.storage_dir(self.name),
                   "num_to_keep": getattr(self.run_config.checkpoint_config, "num_to_keep", None),
                   "snapshots": self.failure.snapshots,
                   "resume_from_checkpoint": (self.resume_from_checkpoint.path
                                              if self.resume_from_checkpoint else None)}
        options.update(getattr(self, "_runtime_options", {}))  # phalanx run's
        inner = dumps_function(self.train_loop, self.train_loop_config, options,
                               what="train_loop")
        key = f"pyfn/{self.name}-{secrets.token_hex(6)}"
        _native.kv_put("elastic", key, cloudpickle.dumps((paths, inner), protocol=5), True)
        self.job_id = _native.submit_job(self._spec(key))
        return self.job_id

    def fit(self, timeout=None):
        """Runs the job to its end; returns its Result (raises TrainingFailedError if it
        failed). With ``verbose``, prints conditions and events as they come."""
        job_id = self.submit()
        if self.verbose:
            print(f"[phalanx.train] job {job_id} submitted", flush=True)
        deadline = None if timeout is None else time.time() + timeout
        shown_c = shown_e = 0
        started = time.time()
        warned = False
        log_offset = 0
        while True:
            status = _native.job_status(job_id)
            if self.verbose:
                # The ranks' output, "(rank N) ..." per line, as Ray and torchrun print it.
                text, log_offset = _native.job_log(job_id, log_offset)
                if text:
                    sys.stdout.write(text.decode(errors="replace"))
                    sys.stdout.flush()
            if not warned and status.step == 0 and any(
                    e.kind in ("rank_died", "hang", "step_failed", "scaling_out", "scaled_in")
                    or "(recovery)" in e.message for e in status.events):
                warned = True
                warnings.warn(_NO_COMMIT_WARNING.format(seconds=time.time() - started),
                              RuntimeWarning, stacklevel=2)
            if self.verbose:
                for c in status.conditions[shown_c:]:
                    print(f"[condition] {c.type:<10} {c.reason:<16} {c.message}", flush=True)
                for e in status.events[shown_e:]:
                    print(f"[event]     {e.kind:<14} {e.message}", flush=True)
                shown_c = len(status.conditions)
                shown_e = len(status.events)
            if status.done():
                result = Result(status)
                result.path = self.checkpoint_dir
                if result.state != "SUCCEEDED":
                    raise TrainingFailedError(result)
                return result
            if deadline is not None and time.time() > deadline:
                _native.stop_job(job_id)
                raise PhalanxError(f"elastic job {job_id} did not finish within {timeout} s; "
                                   f"it was asked to stop")
            time.sleep(0.2)


_NO_COMMIT_WARNING = (
    "train_loop has not committed a step yet ({seconds:.0f} s into the job) and the group just "
    "changed: without state.commit() the whole loop is one step, so a lost or added rank "
    "re-runs it from its start and everything it did is lost. Make a train.State(model=..., "
    "optimizer=...), call state.restore() at the top of train_loop and state.commit() after "
    "each optimizer step (cheap: a copy in memory); a resize then costs at most one step.")


# Ray Train's name for the same trainer.
TorchTrainer = ElasticTrainer
