"""The driver side's configuration and results, with Ray Train's names: ScalingConfig, FailureConfig, CheckpointConfig, RunConfig, Checkpoint, Result."""

import json
import os
import pickle
import shutil
import tempfile
from contextlib import contextmanager


from phalanx import _native

from ..exceptions import PhalanxError


class ScalingConfig:
    """Ray Train's: ``num_workers``: a fixed count or ``(min, max)`` (elastic);
    ``initial_workers``: how many to start with (default: max); ``resources_per_worker``: e.g.
    ``{"CPU": 1, "memory": 2 << 30}`` (memory is a limit; "memory" also takes "2Gi");
    ``use_gpu``: one GPU per worker unless ``resources_per_worker`` says otherwise;
    ``placement_strategy``: PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD."""

    def __init__(self, num_workers=1, initial_workers=None, resources_per_worker=None,
                 use_gpu=False, placement_strategy="PACK"):
        if isinstance(num_workers, int):
            lo = hi = num_workers
        else:
            lo, hi = num_workers
        if lo < 1 or hi < lo:
            raise ValueError(f"num_workers={num_workers!r}: give n >= 1 or (min, max) with "
                             f"1 <= min <= max")
        initial = hi if initial_workers is None else initial_workers
        if not lo <= initial <= hi:
            raise ValueError(f"initial_workers={initial} must be within num_workers "
                             f"({lo}..{hi})")
        if placement_strategy not in _PLACEMENT_STRATEGIES:
            raise ValueError(f"placement_strategy={placement_strategy!r}: give one of "
                             f"{', '.join(_PLACEMENT_STRATEGIES)}")
        self.min_workers, self.max_workers, self.initial_workers = lo, hi, initial
        self.num_workers = num_workers
        self.resources_per_worker = dict(resources_per_worker or {"CPU": 1})
        memory = self.resources_per_worker.get("memory")
        if isinstance(memory, float) and memory.is_integer():
            self.resources_per_worker["memory"] = int(memory)
        self.use_gpu = use_gpu
        if use_gpu:
            self.resources_per_worker.setdefault("GPU", 1)
        # Ray takes an amount of 0 as "none of it" (e.g. {"GPU": 0} with use_gpu=True).
        self.resources_per_worker = {k: v for k, v in self.resources_per_worker.items()
                                     if v != 0}
        self.placement_strategy = placement_strategy


_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

# A restart budget that never runs out: what max_failures=-1 means (Ray's "retry forever").
_UNLIMITED_FAILURES = 1 << 30


class FailureConfig:
    """Ray Train's: ``max_failures``: respawns allowed within ``window_s`` seconds (-1: no
    limit; 0: the first failure fails the job). Beyond Ray's: ``policies``, the job spec's
    faultTolerantPolicy (first match wins, then the defaults: OOM → respawnLarger with twice
    the memory, node died → reschedule, exited → restart), e.g.
    ``[{"event": "oom", "action": "respawnLarger", "memoryGrowth": 2}]``; how long the job may
    stay below its minimum for want of room (``below_min_timeout_s``; ranks placed and still
    setting up are bounded by the ``start`` phase instead), when a step without progress is a hang (``hang_timeout_s``), when a
    rank that does not answer while its host is up is frozen (``hang_silent_s``; 0: never), and
    the straggler check; ``phase_timeouts``: each phase's bound in seconds (the spec's
    ``phases``), e.g. ``{"start": 300}`` for a setup that downloads a dataset: ``place``
    (the ranks' reservation; default ``below_min_timeout_s``), ``start`` (a new rank's setup,
    120), ``form`` (an epoch's rendezvous and rollback, 120), ``sync`` (sending the state to
    newcomers, 120), ``checkpoint`` (a save or a load, 120). A rank that holds a phase up past
    its bound is restarted as hung. ``snapshots`` (default True): each rank's newest committed
    state (ZeRO shards included) is also kept in its node's shared memory and a peer node's,
    so a job that loses every rank at once goes on from there, not from disk (the spec's
    ``snapshot.enabled``); ``snapshot_peer_mbps``: the most the copy to the peer may send a
    second, in megabytes (200), or 0 for no peer copy."""

    _PHASES = {"place": "placeSeconds", "start": "startSeconds", "form": "formSeconds",
               "sync": "syncSeconds", "checkpoint": "checkpointSeconds"}

    def __init__(self, max_failures=10, window_s=3600, policies=None, below_min_timeout_s=60,
                 hang_timeout_s=300, straggler_check=False, straggler_factor=2.0,
                 hang_silent_s=1, phase_timeouts=None, snapshots=True, snapshot_peer_mbps=200):
        if not isinstance(max_failures, int) or max_failures < -1:
            raise ValueError(f"max_failures={max_failures!r}: give a whole number >= 0, or -1 "
                             f"for no limit")
        self.max_failures = max_failures
        self.window_s = window_s
        self.policies = list(policies or [])
        self.below_min_timeout_s = below_min_timeout_s
        self.hang_timeout_s = hang_timeout_s
        self.hang_silent_s = hang_silent_s
        self.straggler_check = straggler_check
        self.straggler_factor = straggler_factor
        self.phase_timeouts = dict(phase_timeouts or {})
        if not isinstance(snapshots, bool):
            raise ValueError(f"snapshots={snapshots!r}: give True (keep each rank's state in "
                             f"node memory too) or False")
        if isinstance(snapshot_peer_mbps, bool) or not isinstance(
                snapshot_peer_mbps, (int, float)) or snapshot_peer_mbps < 0:
            raise ValueError(f"snapshot_peer_mbps={snapshot_peer_mbps!r}: give megabytes a "
                             f"second > 0, or 0 for no copy on a peer node")
        self.snapshots = snapshots
        self.snapshot_peer_mbps = snapshot_peer_mbps
        for phase in self.phase_timeouts:
            if phase not in self._PHASES:
                raise ValueError(f"phase_timeouts: unknown phase {phase!r}: use "
                                 f"{', '.join(self._PHASES)} (stepping is bounded by "
                                 f"hang_timeout_s)")

    def phases(self):
        """The spec's ``phases`` map."""
        return {self._PHASES[k]: v for k, v in self.phase_timeouts.items()}

    @property
    def restart_limit(self):
        return _UNLIMITED_FAILURES if self.max_failures == -1 else self.max_failures


class CheckpointConfig:
    """Ray Train's: ``checkpoint_frequency``: write the committed state every this many steps
    (0: never) under ``RunConfig(storage_path=..., name=...)``; ``"auto"``: at an interval the
    job's controller computes from the measured save time and the job's fault rate (Young/Daly,
    sqrt(2 x save time x mean time between faults)). Rank 0 writes each one in the background:
    no step waits for the disk. A checkpoint is read back only when every rank is lost at once
    and no node holds the state in memory (the job's snapshots: each rank's newest state is
    also kept in its node's shared memory and a peer node's); any smaller loss heals from the
    survivors' memory. ``checkpoint_at_end=True``: also the final committed state, when the
    loop returns (Ray refuses it for function trainers; here the controller holds that state,
    so it writes it). ``num_to_keep``: how many of the newest checkpoints are kept, the
    controller's and those the loop reports (``train.report(metrics, checkpoint=...)``)
    alike (None: all)."""

    def __init__(self, num_to_keep=None, checkpoint_frequency=0, checkpoint_at_end=None):
        if num_to_keep is not None and (isinstance(num_to_keep, bool) or
                                        not isinstance(num_to_keep, int) or num_to_keep < 1):
            raise ValueError(f"num_to_keep={num_to_keep!r}: give a whole number >= 1 of the "
                             f"newest checkpoints to keep, or None to keep them all")
        if checkpoint_frequency != "auto" and (
                isinstance(checkpoint_frequency, bool) or
                not isinstance(checkpoint_frequency, int) or checkpoint_frequency < 0):
            raise ValueError(f"checkpoint_frequency={checkpoint_frequency!r}: give a whole "
                             f"number of steps >= 0 (0: no checkpoints), or \"auto\"")
        if checkpoint_at_end is not None and not isinstance(checkpoint_at_end, bool):
            raise ValueError(f"checkpoint_at_end={checkpoint_at_end!r}: give True (write the "
                             f"final committed state when the loop ends) or False")
        self.num_to_keep = num_to_keep
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = checkpoint_at_end


class RunConfig:
    """Ray Train's: the run's ``name`` (the job's name), ``storage_path`` (checkpoints go to
    ``storage_path/name``; default ``~/phalanx_results``; on several machines give a shared
    file system, as with Ray), ``failure_config`` and ``checkpoint_config``."""

    def __init__(self, name=None, storage_path=None, failure_config=None,
                 checkpoint_config=None, verbose=True):
        self.name = name
        self.storage_path = storage_path
        self.failure_config = failure_config
        self.checkpoint_config = checkpoint_config
        self.verbose = verbose

    def storage_dir(self, name):
        """Where the run's checkpoints go: ``storage_path/name``."""
        root = self.storage_path or os.path.join(os.path.expanduser("~"), "phalanx_results")
        return os.path.join(os.path.abspath(os.fspath(root)), name)

    def checkpoint_dir(self, name):
        c = self.checkpoint_config
        if c is None or (c.checkpoint_frequency == 0 and not c.checkpoint_at_end):
            return None
        root = self.storage_path or os.path.join(os.path.expanduser("~"), "phalanx_results")
        return os.path.join(os.path.abspath(os.fspath(root)), name)


class Checkpoint:
    """A checkpoint. Ray's: ``Checkpoint.from_directory(d)``, a directory of files the loop
    wrote (``report(metrics, checkpoint=...)``, ``get_checkpoint()``); ``path``,
    ``to_directory()``, ``as_directory()``. Or one the job's controller wrote: rank 0's
    committed state at ``step``, in one file at ``path`` (``"<step>\\n"`` then the pickled
    state), which ``load_state()`` gives as a dict: each ``State`` object's state_dict by name
    ("model", "optimizer", ...) and its plain values."""

    def __init__(self, path, step=None):
        self.path = path
        self.step = step

    @classmethod
    def from_directory(cls, path):
        return cls(os.path.abspath(os.fspath(path)))

    @property
    def is_directory(self):
        return os.path.isdir(self.path)

    def load_state(self):
        if self.is_directory:
            raise ValueError(f"{self!r} is a directory of your own files: read them with "
                             f"as_directory()")
        with open(self.path, "rb") as f:
            header, _, payload = f.read().partition(b"\n")
        saved = pickle.loads(payload)
        state = dict(saved.get("objects", {}))
        state.update(saved.get("values", {}))
        return state

    def to_directory(self, path=None):
        """Copies the checkpoint into ``path`` (a new temporary directory by default) and
        returns the directory."""
        path = path or tempfile.mkdtemp(prefix="phalanx-checkpoint-")
        os.makedirs(path, exist_ok=True)
        if self.is_directory:
            shutil.copytree(self.path, path, dirs_exist_ok=True)
        else:
            shutil.copy2(self.path, path)
        return path

    @contextmanager
    def as_directory(self):
        """A directory holding the checkpoint's files, for the ``with`` block."""
        yield self.path if self.is_directory else os.path.dirname(os.path.abspath(self.path))

    def __repr__(self):
        return f"Checkpoint(path={self.path!r}, step={self.step})"


class Result:
    """An elastic job's outcome, from its status as the C++ side reads it (_native.JobStatus,
    the same as ``phalanx job status``)."""

    def __init__(self, status):
        self.job_id = status.job_id
        self.state = status.state
        self.message = status.message
        self.world_size = status.world_size
        self.steps = status.step
        self.steps_per_call = status.steps_per_call  # of the last call (ElasticTrainer)
        self.restarts = status.restarts
        self.controller_actor_id = status.controller_actor_id
        results = status.results
        try:
            self.metrics = json.loads(results) if results else {}
        except ValueError:
            self.metrics = {"results": results}
        self.events = [{"time_ms": e.time_ms, "kind": e.kind, "message": e.message,
                        "world_size": e.world_size, "epoch": e.epoch} for e in status.events]
        self.conditions = [{"type": c.type, "reason": c.reason, "message": c.message,
                            "time_ms": c.time_ms} for c in status.conditions]
        self.ranks = [{"rank": m.rank, "actor_id": m.actor_id, "node_id": m.node_id,
                       "memory_bytes": m.memory_bytes} for m in status.ranks]
        # Each fault and how the job healed, as unix ms (0: not reached): fault → detected →
        # resumed (the survivors' next step) → full strength (the world size before it).
        self.recoveries = [{"kind": r.kind, "message": r.message, "fault_ms": r.fault_ms,
                            "detected_ms": r.detected_ms, "resumed_ms": r.resumed_ms,
                            "full_strength_ms": r.full_strength_ms,
                            "world_before": r.world_before, "world_during": r.world_during,
                            "restored_from": r.restored_from}
                           for r in status.recoveries]
        self.restarts_by_cause = dict(status.restarts_by_cause)
        self.fault_seconds = status.fault_seconds
        # Ray's: the error of a failed run (None otherwise), and the newest checkpoint.
        self.error = PhalanxError(self.message) if self.state == "FAILED" else None
        self.checkpoint = None
        pointer = _native.kv_get("elastic", f"{self.job_id}/checkpoint")
        if pointer:
            step, _, path = pointer.decode().partition(" ")
            if path and os.path.exists(path):
                self.checkpoint = Checkpoint(path, int(step))
        # The loop's own (report(checkpoint=...)) come first, as in Ray.
        reported = _native.kv_get("elastic", f"{self.job_id}/ray_checkpoint")
        if reported and os.path.isdir(reported.decode()):
            self.checkpoint = Checkpoint.from_directory(reported.decode())
        self.path = None  # where the checkpoints go (ElasticTrainer fills it in)

    def __repr__(self):
        return (f"Result(job_id={self.job_id!r}, state={self.state}, metrics={self.metrics}, "
                f"restarts={self.restarts}, world_size={self.world_size})")


class TrainingFailedError(PhalanxError):
    def __init__(self, result):
        super().__init__(f"elastic job {result.job_id} failed: {result.message}")
        self.result = result
