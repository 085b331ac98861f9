"""The worker side of phalanx.train: how a trainer-driven Python loop runs as a rank of an
elastic job.

The job's elastic controller (C++) drives every rank step by step, as for C++ trainers: it
calls ``step`` on all ranks, commits a step once every rank finished it, and on a membership
change forms a new epoch, rolls survivors back to the last commit (``load_state``) and sends
that state to newcomers. Here a "step" is the stretch of the user's ``train_loop`` between two
``state.commit()`` calls: the loop runs on a thread of its own, and ``commit()`` hands the
step's snapshot back and goes on with one more step before it waits for the controller's
next ``step`` (one step of credit: the hand-off between the controller's call and the loop
is then off the loop's path; the snapshot of each commit is kept by its number, so ``step``
answers with its own step's snapshot). One call of the controller may cover several short
steps (the spec's ``stepCallMs``): ``step`` then lets the loop make that many commits before
it answers, and only the state at the call's end is kept, so the commits before it in the call
take no snapshot. When the group changes,
the loop is stopped at its next ``commit()`` (or has already failed on the dead peer) and
``train_loop`` runs again from the start on every rank (Horovod's way); ``state.restore()``
at its top brings back the committed state, so nothing committed is lost or repeated.

The native PythonTrainer (python/src/py_trainer.cc) calls the module functions at the bottom.
"""

import json
import math
import os
import pickle
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta

from phalanx import _native


# The controller's question "which of these hosts does yours reach?" (trainer_protocol.h,
# trainer_query::kReachPrefix): a '1' per address whose host completes a TCP handshake or
# refuses it within REACH_TIMEOUT_S, else '0', all at once.
REACH_PREFIX = "reach:"
REACH_TIMEOUT_S = 0.5


def _reach(addresses):
    answers = ["0"] * len(addresses)

    def knock(i, address):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S):
                answers[i] = "1"
        except ConnectionRefusedError:
            answers[i] = "1"  # the host answered: nothing listens there
        except (OSError, ValueError):
            pass

    threads = [threading.Thread(target=knock, args=(i, a), daemon=True)
               for i, a in enumerate(addresses)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(REACH_TIMEOUT_S + 0.5)
    return "".join(answers)


# How long a new loop waits for the previous one to unwind before it starts without it.
UNWIND_S = 10.0


class _Reset(BaseException):
    """Stops a loop at its commit(): the group changed (BaseException, so that a user's
    ``except Exception`` does not catch it)."""


class _RankOutput:
    """sys.stdout or sys.stderr of a rank's process: what is written still goes to the
    worker's own log, and whole lines also go, prefixed "(rank N) ", to the job's log in the
    GCS, which the driver's fit() prints and `phalanx job logs` shows (Ray and torchrun show
    their workers' output the same way). Sent in batches by one thread, every FLUSH_S or at
    BATCH_BYTES; output that cannot be sent is dropped (the worker's own log keeps it)."""

    FLUSH_S = 0.1
    BATCH_BYTES = 64 << 10
    _lock = threading.Lock()
    _send_lock = threading.Lock()
    _pending = []
    _size = 0
    _thread = None
    _job_id = ""

    def __init__(self, stream, runtime):
        self._stream = stream
        self._runtime = runtime
        self._partial = ""

    def write(self, text):
        n = self._stream.write(text)
        if not isinstance(text, str) or not text:
            return n
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:
            prefix = f"(rank {self._runtime.rank}) "
            self._queue("".join(f"{prefix}{line}\n" for line in lines))
        return n

    def flush(self):
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)

    @classmethod
    def _queue(cls, text):
        with cls._lock:
            cls._pending.append(text)
            cls._size += len(text)
            if cls._thread is None:
                cls._thread = threading.Thread(target=cls._flusher, name="rank-output",
                                               daemon=True)
                cls._thread.start()

    @classmethod
    def send(cls):
        # One sender at a time: the loop's last send() (before its step answers) must not
        # return while the flusher's batch, taken just before, is still on its way: the job
        # could end, and its log be read, without those lines.
        with cls._send_lock:
            with cls._lock:
                batch, cls._pending, cls._size = "".join(cls._pending), [], 0
            if batch and cls._job_id:
                try:
                    _native.append_job_log(cls._job_id, batch.encode(errors="replace"))
                except Exception:  # noqa: BLE001 - the worker's own log has it
                    pass

    @classmethod
    def _flusher(cls):
        while True:
            deadline = time.time() + cls.FLUSH_S
            while time.time() < deadline and cls._size < cls.BATCH_BYTES:
                time.sleep(0.01)
            cls.send()

    @classmethod
    def install(cls, runtime, job_id):
        cls._job_id = job_id
        if not isinstance(sys.stdout, cls):
            sys.stdout = cls(sys.stdout, runtime)
        if not isinstance(sys.stderr, cls):
            sys.stderr = cls(sys.stderr, runtime)


class Runtime:
    # The ZeRO shards kept, in commits that ended a controller's call: the one agreed on at a
    # membership change is one of the last two.
    ZERO_COMMITS_KEPT = 3

    def __init__(self):
        self.cond = threading.Condition()
        self.job_id = ""
        self.fn = None
        self.fn_config = None
        # How the loop's torch.distributed is set up (ElasticTrainer's torch_config and
        # scaling_config): {"backend": "phalanx"|"gloo"|"nccl"|None, "use_gpu": bool,
        # "torch": whether the loop uses torch at all; `phalanx run`'s: "init_group": False
        # when the program forms its own default group, "cuda_visible": False to leave
        # CUDA_VISIBLE_DEVICES as torchrun does, "agent_store": rank 0 serves a TCPStore at
        # MASTER_PORT, "unwind_s": the wait for a previous loop to end (UNWIND_S)}.
        self.options = {}
        # Where this rank is (set per loop start, as torchrun sets its variables).
        self.local_rank = 0
        self.local_world = 1
        self.node_rank = 0
        # The group, as of the controller's last step() call.
        self.rank = 0
        self.world = 1
        self.epoch = 0
        # The loop thread and its handshake with step().
        self.thread = None
        self.generation = 0       # bumped per loop start; an older loop resets at commit()
        self.loop_epoch = None
        self.loop_group = (0, 1)  # (rank, world) of the loop's epoch
        self.allowed = 0          # commits the loop may make (the controller's steps)
        self.reached = 0          # commits it made
        self.finished = False
        self.error = None
        self.aborted = False
        self.abort_reason = ""
        self.need_restart = True
        # State.
        self.snapshot = b""       # the snapshot of the commit the last step() answered with
        self.snapshots = {}       # commit number (this loop's) -> its snapshot, not yet taken
        self.restore_from = b""   # what restore() loads
        self.progress = {}        # ElasticSampler: data epoch -> samples consumed (all ranks)
        self.loaders = 0          # prepare_data_loader calls of this loop: each its own progress
        self.accelerator = None   # train.torch.accelerate()/enable_reproducibility(): this loop's
        self.reset_callbacks = []  # on_resize(): run after State.restore(), this loop's
        self.last_report = {}
        # torch.distributed, formed per epoch on first use (torch_process_group(), or
        # prepare_model(backend="nccl")).
        self.pg_lock = threading.Lock()
        self.pg_epoch = None
        self.store = None
        # phalanx's own collective group of this epoch (prepare_model's gradients go through
        # it: a dead peer fails it at once, and the controller can abort it).
        self.group = None
        self.local = threading.local()
        # ZeRO optimizers in State (train/_zero.py): the node of each rank of the loop's
        # epoch (the replica ring alternates hosts), the replica group, and per commit
        # (epoch, commit, world) the shards this rank holds, {old rank: pickled shard}: its
        # own and the previous ring rank's. Kept across epochs, for restore().
        self.rank_nodes = []
        self.zero_group = None
        self.zero_store = {}
        # `phalanx run`: rank 0's TCPStore of this epoch, at MASTER_PORT (torchrun's agent's).
        self.agent_store = None
        # ZeRO shards into the node's memory (_zero.ShardFiles): False until first asked.
        self.shard_files = False

    # ---- called by the native trainer -------------------------------------------------

    def setup(self, job_id, config):
        self.job_id = job_id
        _RankOutput.install(self, job_id)
        key = config.get("pyfn", "")
        payload = _native.kv_get("elastic", key) if key else None
        if payload is None:
            raise RuntimeError(f"the training function of job {job_id} is not in the GCS "
                               f"(KV elastic/{key}); submit it with phalanx.train.ElasticTrainer")
        paths, inner = pickle.loads(payload)
        for p in paths:
            if p not in sys.path:
                sys.path.append(p)
        loaded = pickle.loads(inner)
        self.fn, self.fn_config = loaded[0], loaded[1]
        self.options = dict(loaded[2]) if len(loaded) > 2 else {}

    def step(self, step, rank, world, epoch, call_end=0):
        with self.cond:
            self.rank, self.world, self.epoch = rank, world, epoch
            self.aborted = False
            if (self.finished and not self.need_restart and self.error is None
                    and self.loop_epoch == epoch):
                # The loop already returned in this epoch: a step the controller sent ahead of
                # the answer that said so has nothing to run.
                return self._report(done=True)
            restart = (self.need_restart or self.thread is None or self.finished or
                       self.error is not None or self.loop_epoch != epoch)
        if restart:
            self._restart(epoch)
        # The rest of the controller's call runs at once: the loop makes that many commits
        # before this answers (the host's thread and the loop's meet once per call).
        count = max(call_end - step, 1)
        with self.cond:
            first = self.allowed  # this call's commits: first + 1 .. first + count
            self.allowed += count
            self.cond.notify_all()
            while not (self.reached >= self.allowed or self.finished or self.error is not None
                       or self.aborted):
                self.cond.wait(0.5)
            # The call's last commit: the one at its end, or the loop's last if it returned
            # before that.
            end = self.allowed
            if self.finished and self.error is None and self.reached < self.allowed:
                end = self.reached
            if self.snapshots.get(end) is not None:
                self.snapshot = self.snapshots[end]
                for k in [k for k in self.snapshots if k <= end]:
                    del self.snapshots[k]
            if self.error is not None:
                self.need_restart = True
                raise RuntimeError(self.error)
            if self.aborted and not self.finished and self.reached < self.allowed:
                self.need_restart = True
                raise RuntimeError("the step was aborted by the job's controller: " +
                                   (self.abort_reason or "no reason given"))
            done = self.finished and self.reached < self.allowed
            # A loop that returned ran its commits, then the step that found it done.
            ran = min(self.reached - first + 1, count) if done else count
            report = self._report(done=done, steps=ran)
            snapshot = self.snapshot
        if isinstance(snapshot, dict) and "zero" in snapshot:
            # Before the call answers (the controller may then agree on its commit), the
            # ZeRO shard of the call's last commit gets its copy on the ring's next rank.
            self._replicate_zero(snapshot.pop("zero"), snapshot["zero_key"])
        return report

    def _report(self, done, steps=1):
        out = {"done": 1.0 if done else 0.0, "steps": float(steps)}
        for k, v in self.last_report.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[str(k)] = float(v)
        out.setdefault("loss", 0.0)
        return out

    def _replicate_zero(self, shards, key):
        """Keeps this rank's ZeRO shard of commit ``key`` and the copy of the previous ring
        rank's, sent and received over the loop epoch's replica group (a group of its own:
        the loop's group carries the next step meanwhile)."""
        from . import _zero
        own = pickle.dumps(shards, protocol=5)
        held = {self.loop_group[0]: own}
        if self.loop_group[1] > 1:
            group = self.replica_group()
            nodes = self.rank_nodes if len(self.rank_nodes) == group.world_size else \
                list(range(group.world_size))
            src, copy = _zero.exchange(group, _zero.ring(nodes), own)
            held[src] = copy
        with self.cond:
            self.zero_store[tuple(key)] = held
            while len(self.zero_store) > self.ZERO_COMMITS_KEPT:
                del self.zero_store[next(iter(self.zero_store))]
            files = self._shard_files()
        if files is not None:
            files.offer(key, held)  # into the node's memory too, on a thread of its own

    def replica_group(self):
        """The collective group that carries ZeRO shards' copies, of the loop's epoch."""
        return self._epoch_group("zero_group", "replica")

    def zero_restore(self, key, objects):
        """State.restore() of ZeRO optimizers: the shards of commit ``key``, from every rank
        that holds one, on the loop's group."""
        from . import _zero
        with self.cond:
            held = dict(self.zero_store.get(tuple(key), {}))
            files = self._shard_files()
        if files is not None:
            # Shards this process no longer holds (it is new: every rank was lost), from the
            # node's memory.
            for r, data in files.held(key).items():
                held.setdefault(r, data)
        return _zero.restore(self.collective_group(), held, key, objects)

    def _shard_files(self):
        """The writer of this rank's ZeRO shards into its node's store (None outside a node, or
        with the spec's snapshot.enabled false). self.cond held."""
        if self.shard_files is False:
            from . import _zero
            self.shard_files = (_zero.ShardFiles.for_job(self.job_id)
                                if self.options.get("snapshots", True) else None)
        return self.shard_files

    def save_state(self):
        if not isinstance(self.snapshot, (bytes, bytearray)):
            # A commit's copy (State._snapshot): pickled here, on the host's thread, while the
            # loop goes on with its next step.
            self.snapshot = pickle.dumps(self.snapshot, protocol=5)
        return self.snapshot

    def load_state(self, state):
        data = state if isinstance(state, bytes) else bytes(state)  # one copy, shared
        with self.cond:
            self.restore_from = data
            self.snapshot = data
            self.need_restart = True

    def abort(self, reason=""):
        with self.cond:
            self.aborted = True
            self.cond.notify_all()
        for group in (self.group, self.zero_group):
            if group is not None:
                # Every op in flight or queued on it fails, torch.distributed's included (the
                # default group runs on the first), with an error that gives the reason.
                group.abort(reason or "the job's controller aborted the step")
        self.abort_reason = reason

    def query(self, key):
        if key == "results":
            return json.dumps(self.last_report, default=str)
        if key.startswith(REACH_PREFIX):
            return _reach([a for a in key[len(REACH_PREFIX):].split(",") if a])
        return ""

    # ---- the loop --------------------------------------------------------------------

    def _restart(self, epoch):
        with self.cond:
            self.generation += 1
            old = self.thread
            self.cond.notify_all()  # an old loop waiting in commit() resets
        if old is not None and old.is_alive():
            # One stuck in a collective of a dead group is left behind: phalanx's own groups
            # fail at once when aborted, torch's Gloo and NCCL groups only at their timeout.
            old.join(timeout=self.options.get("unwind_s", UNWIND_S))
        with self.cond:
            self.progress = {}
            self.loaders = 0
            self.accelerator = None
            self.reset_callbacks = []
            self.allowed = 0
            self.reached = 0
            self.snapshots = {}
            self.finished = False
            self.error = None
            self.need_restart = False
            self.loop_epoch = epoch
            self.loop_group = (self.rank, self.world)
            generation = self.generation
            self.thread = threading.Thread(target=self._run, args=(generation,),
                                           name=f"train-loop-{generation}", daemon=True)
        self.thread.start()

    def _run(self, generation):
        self.local.generation = generation
        try:
            self._init_distributed()
            cfg = self.fn_config
            if cfg is None and _takes_no_args(self.fn):
                self.fn()
            else:
                self.fn(cfg if cfg is not None else {})
            # The loop's last commit may have skipped its snapshot (it was not the call's
            # end when made): its state is the final one, kept now.
            take = getattr(self.local, "take", None)
            with self.cond:
                last = self.reached if self.generation == generation else None
            if take is not None and last and getattr(self.local, "taken", None) != last:
                snapshot = take()
                with self.cond:
                    if self.generation == generation and self.reached == last:
                        self._name_zero(snapshot, last)
                        self.snapshots[last] = snapshot
            # The loop's last lines go before the step can answer (the notify below lets
            # it): the job may end, and its log be read, once it has.
            _RankOutput.send()
            with self.cond:
                if self.generation == generation:
                    self.finished = True
                    self.cond.notify_all()
        except _Reset:
            _RankOutput.send()
        except BaseException as e:  # noqa: BLE001 - the step reports it
            traceback.print_exc()  # to the worker's log and, as the rank's output, the driver
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            _RankOutput.send()  # the traceback too, before the step answers
            with self.cond:
                if self.generation == generation:
                    self.error = error
                    self.cond.notify_all()

    def commit(self, take_snapshot):
        """The loop's step boundary: keep the snapshot (``take_snapshot()``, unless the commit
        is known to come before the end of the controller's call), then wait for the next
        step."""
        generation = getattr(self.local, "generation", None)
        with self.cond:
            if generation != self.generation:
                raise _Reset()
            # Only the commit that ends the controller's call needs its snapshot (only the
            # state at a call's end is kept); one made on credit past it may end the next call.
            needed = self.reached + 1 >= self.allowed
        snapshot = take_snapshot() if needed else None
        self.local.take = take_snapshot
        if needed:
            self.local.taken = self.reached + 1
        with self.cond:
            if generation != self.generation:
                raise _Reset()
            self._name_zero(snapshot, self.reached + 1)
            self.reached += 1
            self.snapshots[self.reached] = snapshot
            if self.reached >= self.allowed:
                # The call's last commit: step() answers. Waking it for the others would
                # only take the GIL from this loop for nothing.
                self.cond.notify_all()
            # One commit of credit: the next step runs while its step() call is on its way.
            while self.reached > self.allowed and generation == self.generation:
                self.cond.wait(0.5)
            if generation != self.generation:
                raise _Reset()

    def _name_zero(self, snapshot, commit):
        """A snapshot with ZeRO shards gets the name of its commit, the same on every rank:
        the shards' copies go by it (self.cond held)."""
        if isinstance(snapshot, dict) and "zero" in snapshot:
            snapshot["zero_key"] = (self.loop_epoch, commit, self.loop_group[1])

    # ---- collectives ------------------------------------------------------------------

    def loop_membership(self):
        """(epoch, rank, world) of the running (or last) loop, as they were when it started:
        the Runtime's own may already be the next epoch's. Before any loop, the latest the
        controller sent. A loop of an earlier generation (still finishing its step while the
        next one waits to start) is stopped here (_Reset): what it would do next belongs to
        the next epoch."""
        generation = getattr(self.local, "generation", None)
        with self.cond:
            if generation is not None and generation != self.generation:
                raise _Reset()
            if self.loop_epoch is None:
                return self.epoch, self.rank, self.world
            return (self.loop_epoch,) + tuple(self.loop_group)

    def collective_group(self):
        """phalanx's collective group of the running loop's epoch (formed on its first use).

        A loop of an earlier generation (still finishing its step while the next one waits
        to start) is stopped here: it must never form, or take part in, the next epoch's
        collectives, where it would be paired with the new loops' collectives."""
        return self._epoch_group("group", "")

    def _epoch_group(self, attr, suffix):
        """The collective group in self.<attr> (made on first use, named after the job and
        `suffix`), formed for the running loop's epoch."""
        from ..collective import CollectiveGroup
        with self.pg_lock:
            epoch, rank, world = self.loop_membership()
            group = getattr(self, attr)
            if group is None:
                name = f"{self.job_id}-train" + (f"-{suffix}" if suffix else "")
                group = CollectiveGroup(name, timeout=60)
                setattr(self, attr, group)
            if group.epoch != epoch:
                group.reconfigure(epoch, rank, world)
            return group

    # ---- torch.distributed ------------------------------------------------------------

    def _init_distributed(self):
        """Before the loop runs, as Ray Train's TorchConfig and torchrun do: the torchrun
        variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
        MASTER_PORT), a GPU per worker with ``use_gpu`` (CUDA_VISIBLE_DEVICES = its local
        rank), and torch.distributed's default group of this epoch: the ``phalanx`` backend
        over phalanx's collective group (torch_config backend "gloo"/"nccl": torch's own,
        through a TCPStore). A loop that does not use torch gets none of it (its collective
        group forms on first use, as before).

        Whether the loop uses torch comes from the driver (the same on every rank: the
        allgather below is a collective, and a rank that skipped it would leave the others
        waiting in it), never from what this process happens to have imported."""
        epoch, rank, world = self.loop_membership()
        backend = self.options.get("backend", "phalanx")
        if not self.options.get("torch", False):
            return
        group = self.collective_group()
        import numpy as np
        host = _node_host()
        node = os.environ.get("PHALANX_NODE_ID") or os.environ.get("PHALANX_NODE_ADDRESS", host)
        if rank == 0 and self.options.get("agent_store"):
            # torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE): served here before any
            # rank learns its port, so no rank's env:// init is refused and waits to retry.
            import torch.distributed as dist
            self.agent_store = None  # the previous epoch's first
            self.agent_store = dist.TCPStore(host, 0, world, True, timedelta(seconds=60),
                                             wait_for_workers=False)
            port = self.agent_store.port
        else:
            port = _free_port(host) if rank == 0 else 0
        mine = np.array([_ipv4(host), _hash64(node), port], dtype=np.int64)
        every = np.empty(3 * world, dtype=np.int64)
        group.allgather(mine, every)
        every = every.reshape(world, 3)
        self.rank_nodes = [int(n) for n in every[:, 1]]
        nodes = list(dict.fromkeys(int(n) for n in every[:, 1]))  # in order of first rank
        me = int(every[rank, 1])
        self.local_rank = sum(1 for r in range(rank) if int(every[r, 1]) == me)
        self.local_world = sum(1 for r in range(world) if int(every[r, 1]) == me)
        self.node_rank = nodes.index(me)
        env = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": self.local_rank,
               "LOCAL_WORLD_SIZE": self.local_world, "NODE_RANK": self.node_rank,
               "GROUP_RANK": self.node_rank, "ROLE_RANK": rank, "ROLE_WORLD_SIZE": world,
               "MASTER_ADDR": _ipv4_str(int(every[0, 0])), "MASTER_PORT": int(every[0, 2])}
        os.environ.update({k: str(v) for k, v in env.items()})
        if (self.options.get("use_gpu") and self.options.get("cuda_visible", True) and
                "PHALANX_CUDA_VISIBLE_DEVICES_SET" not in os.environ):
            # Set before torch first touches CUDA in this process (a worker serves one rank).
            os.environ["CUDA_VISIBLE_DEVICES"] = str(self.local_rank)
            os.environ["PHALANX_CUDA_VISIBLE_DEVICES_SET"] = "1"
        if not self.options.get("init_group", True):
            return  # the program forms its own (`phalanx run` without --backend phalanx)
        if backend == "phalanx":
            from .. import distributed
            with self.pg_lock:
                if self.pg_epoch != epoch:
                    distributed.set_default_group(distributed.process_group(group))
                    self.pg_epoch = epoch
        else:
            self.torch_process_group(backend)


    def torch_process_group(self, backend=None):
        """Forms (once per epoch) the torch.distributed process group of the running loop's
        epoch: Gloo on CPU, NCCL when asked and CUDA is there. Its store lives in rank 0's
        process; its address goes through the GCS KV. A loop of an earlier generation is
        stopped here, as in collective_group()."""
        import torch.distributed as dist
        with self.pg_lock:
            epoch, rank, world = self.loop_membership()
            if self.pg_epoch == epoch and dist.is_initialized():
                return dist.group.WORLD
            if backend in (None, "phalanx") and self.options.get("backend", "phalanx") == \
                    "phalanx":
                from .. import distributed
                distributed.set_default_group(distributed.process_group(self.collective_group()))
                self.pg_epoch = epoch
                return dist.group.WORLD
            if dist.is_initialized():
                try:
                    dist.destroy_process_group()
                except Exception:  # noqa: BLE001 - a broken group may not destroy cleanly
                    pass
            host = _node_host()
            # Gloo binds to the interface of the hostname's address by default, which on a
            # machine whose hostname resolves to loopback is unreachable from the others: the
            # interface that carries the node's address instead.
            iface = "lo" if host in ("127.0.0.1", "localhost") else _interface_of(host)
            if iface:
                os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
            key = f"{self.job_id}/torch/{epoch}/{world}"
            timeout = timedelta(seconds=60)
            if rank == 0:
                port = _free_port(host)
                store = dist.TCPStore(host, port, world, True, timeout, wait_for_workers=False)
                _native.kv_put("elastic", key, f"{host}:{port}".encode(), True)
            else:
                deadline = time.time() + 60
                while True:
                    value = _native.kv_get("elastic", key)
                    if value is not None:
                        break
                    if time.time() > deadline:
                        raise RuntimeError(f"rank 0 of epoch {epoch} did not publish its "
                                           f"torch.distributed store within 60 s")
                    time.sleep(0.01)
                h, p = value.decode().rsplit(":", 1)
                store = dist.TCPStore(h, int(p), world, False, timeout)
            if backend is None:
                backend = "gloo"
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=60))
            self.store = store
            self.pg_epoch = epoch
            return dist.group.WORLD


def _takes_no_args(fn):
    import inspect
    try:
        return len(inspect.signature(fn).parameters) == 0
    except (TypeError, ValueError):
        return False


def _node_host():
    node = os.environ.get("PHALANX_NODE_ADDRESS", "")
    return node.rsplit(":", 1)[0] if node else "127.0.0.1"


def _interface_of(ip):
    """The name of the network interface that has address `ip`, or None."""
    import fcntl
    import struct
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), siocgifaddr,
                                  struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    return None


def _ipv4(host):
    try:
        return int.from_bytes(socket.inet_aton(socket.gethostbyname(host)), "big")
    except OSError:
        return int.from_bytes(socket.inet_aton("127.0.0.1"), "big")


def _ipv4_str(value):
    return socket.inet_ntoa(int(value).to_bytes(4, "big"))


def _hash64(text):
    import hashlib
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big",
                          signed=True)


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


RUNTIME = Runtime()


# The native PythonTrainer's entry points.
def setup(job_id, config):
    RUNTIME.setup(job_id, dict(config))


def step(step_index, rank, world, epoch, call_end=0):
    return RUNTIME.step(step_index, rank, world, epoch, call_end)


def save_state():
    return RUNTIME.save_state()


def load_state(state):
    RUNTIME.load_state(state)


def abort(reason=""):
    RUNTIME.abort(reason)


def query(key):
    return RUNTIME.query(key)
