"""ZeRO-1 optimizer state that survives a lost rank, without a disk checkpoint.

torch's ``ZeroRedundancyOptimizer`` keeps each parameter's optimizer state (Adam's moments) on
one rank only: lose that rank and its part of the state is gone. Under ``train.State`` each
rank's part (its *shard*) is kept twice, in memory, at every commit the controller can agree
on:

- The loop's commit copies the rank's own shard to host memory (``local_shard``), keyed by the
  global parameter index, so a shard does not depend on how the ranks split the parameters.
- When the controller's call ends (``Runtime.step``), the rank sends that shard to the next
  rank of a ring that alternates hosts (``ring``), over a collective group of its own (the
  loop's group carries the next step meanwhile), and keeps the shard it receives. Each shard
  then lives on two hosts whenever the job spans two.
- After a membership change, ``State.restore()`` gathers the shards of the agreed commit from
  whichever ranks hold them (each shard sent once, by its lowest holder: ``gather``), and
  loads them with ZeRO's own ``load_state_dict``, which keeps each rank's part of the new
  partition. A job that grew reshards the same way.

Both copies are also written into their host's shared-memory store, beside the job's
snapshots (node/snapshot_store.h: ``<store>/.snapshots/<job>/zero-...shard``, by ``ShardFiles``
on a thread of its own), so that they outlive the ranks' processes: a job that loses every
rank at once restores the shards of the snapshot's commit from there. A shard is lost only when
its rank's host and the host holding its copy are lost at once (or their node managers end);
then the parameters it covered start with fresh optimizer state, and every rank says so.
"""

import os
import pickle
import re
import sys
import threading

import numpy as np


def is_zero(obj):
    return type(obj).__name__ == "ZeroRedundancyOptimizer"


def local_shard(opt):
    """This rank's part of ``opt``'s state: ``{"state": {global param index: state},
    "param_groups": [...]}`` (the form of ZeRO's consolidated ``state_dict()``), with live
    tensors (the caller copies them)."""
    local = opt.optim.state_dict()
    index = opt._param_to_index
    state = {}
    for local_group, group in zip(local["param_groups"], opt._partition_parameters()[opt.rank]):
        for i, p in zip(local_group["params"], group["params"]):
            if i in local["state"]:
                state[index[p]] = local["state"][i]
    groups = [dict({k: v for k, v in g.items() if k != "params"},
                   params=[index[p] for p in g["params"]]) for g in opt.param_groups]
    return {"state": state, "param_groups": groups}


def load(opt, shards):
    """Loads the shards' union into ``opt`` (ZeRO keeps the part of this rank's partition)."""
    state = {}
    for shard in shards:
        state.update(shard["state"])
    groups = [dict(g) for g in shards[0]["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


def ring(nodes):
    """The ranks in the order of the replica ring: rank ``order[i]`` sends its shard to
    ``order[i + 1]``. ``nodes[r]`` names rank r's host; the order takes the first rank of
    every host, then the second, ..., so neighbours sit on different hosts wherever the hosts
    have ranks to pair."""
    seen = {}
    local = []
    for n in nodes:
        local.append(seen.get(n, 0))
        seen[n] = local[-1] + 1
    first = {}
    for r, n in enumerate(nodes):
        first.setdefault(n, r)
    return sorted(range(len(nodes)), key=lambda r: (local[r], first[nodes[r]]))


def _words(data):
    buf = np.zeros((len(data) + 7) // 8, dtype=np.int64)
    buf.view(np.uint8)[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf


def exchange(group, order, payload):
    """Sends ``payload`` (bytes) to the next rank of ``order`` and returns (the previous rank,
    the bytes it sent). Blocking sends in phases that never wait on each other: ring edge i
    (order[i] -> order[i+1]) runs in phase 0 when i is even, 1 when odd, and 2 for the edge that
    closes a ring of odd length; each rank runs its two edges in phase order."""
    n = len(order)
    pos = order.index(group.rank)
    nxt, prev = order[(pos + 1) % n], order[(pos - 1) % n]

    def phase(i):
        if n % 2 == 1 and i == n - 1:
            return 2
        return i % 2

    def send():
        group.send(np.array([len(payload)], dtype=np.int64), nxt)
        group.send(_words(payload), nxt)

    received = {}

    def recv():
        size = np.zeros(1, dtype=np.int64)
        group.recv(size, prev)
        buf = np.zeros((int(size[0]) + 7) // 8, dtype=np.int64)
        group.recv(buf, prev)
        received["bytes"] = buf.view(np.uint8)[:int(size[0])].tobytes()

    steps = sorted([(phase(pos), send), (phase((pos - 1) % n), recv)], key=lambda s: s[0])
    for _, run in steps:
        run()
    return prev, received["bytes"]


def gather(group, held, old_world):
    """Every shard of a commit, on every rank: ``held`` maps the old ranks whose shards this
    rank holds to their bytes. Each shard travels once (from its lowest holder); returns
    {old rank: bytes} of all the shards any rank held."""
    world, rank = group.world_size, group.rank
    table = np.zeros(old_world, dtype=np.int64)
    for r in held:
        if 0 <= r < old_world:
            table[r] = 1
    tables = np.zeros(world * old_world, dtype=np.int64)
    group.allgather(table, tables)
    tables = tables.reshape(world, old_world)
    mine = {}
    for r in held:
        holders = np.nonzero(tables[:, r])[0]
        if len(holders) and int(holders[0]) == rank:
            mine[r] = held[r]
    payload = pickle.dumps(mine, protocol=5)
    sizes = np.zeros(world, dtype=np.int64)
    group.allgather(np.array([len(payload)], dtype=np.int64), sizes)
    width = (int(sizes.max()) + 7) // 8
    words = np.zeros(width, dtype=np.int64)
    words.view(np.uint8)[:len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    every = np.zeros(world * width, dtype=np.int64)
    if width:
        group.allgather(words, every)
    every = every.reshape(world, width)
    shards = {}
    for r in range(world):
        if sizes[r]:
            shards.update(pickle.loads(every[r].view(np.uint8)[:int(sizes[r])].tobytes()))
    return shards


def restore(group, held, key, objects):
    """Loads the ZeRO optimizers of ``objects`` ({name: optimizer}) from the shards of commit
    ``key`` (epoch, commit, world) held anywhere in ``group``. Returns the old ranks whose
    shards no rank held (their parameters start with fresh state)."""
    old_world = int(key[2])
    shards = gather(group, held, old_world)
    missing = sorted(set(range(old_world)) - set(shards))
    parts = [pickle.loads(shards[r]) for r in sorted(shards)]
    for name, opt in objects.items():
        mine = [p[name] for p in parts if name in p]
        if mine:
            load(opt, mine)
    if missing:
        msg = (f"phalanx.train: the ZeRO optimizer state of old rank(s) {missing} of "
               f"{old_world} was lost (each rank and the rank holding its copy were lost "
               f"together): the parameters it covered start with fresh optimizer state")
        print(msg, file=sys.stderr)
    return missing


class ShardFiles:
    """This rank's ZeRO shards of each commit, written into its node's store (one thread;
    a commit that comes while one is written replaces the one waiting). ``held(key)`` reads back
    the shards of commit ``key`` that this node holds: those of every rank of the node that wrote
    them, dead or alive."""

    KEEP = 3  # commits of shards kept per node (Runtime.ZERO_COMMITS_KEPT)
    _NAME = re.compile(r"^zero-e(\d+)-c(\d+)-w(\d+)-r(\d+)\.shard$")

    def __init__(self, directory):
        self.dir = directory
        self._cond = threading.Condition()
        self._next = None
        self._thread = None
        self._warned = False

    @classmethod
    def for_job(cls, job_id):
        node = os.environ.get("PHALANX_NODE_ID", "")
        store = f"/dev/shm/phalanx-objects-{node}"
        if not node or not job_id or not os.path.isdir(store):
            return None
        return cls(os.path.join(store, ".snapshots", job_id))

    @staticmethod
    def _name(key, rank):
        epoch, commit, world = (int(k) for k in key)
        return f"zero-e{epoch}-c{commit}-w{world}-r{int(rank)}.shard"

    def offer(self, key, held):
        with self._cond:
            self._next = (tuple(key), dict(held))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zero-shard-files",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout=10.0):
        with self._cond:
            return self._cond.wait_for(lambda: self._next is None, timeout)

    def _run(self):
        while True:
            with self._cond:
                while self._next is None:
                    self._cond.wait()
                key, held = self._next
            try:
                self._write(key, held)
            except OSError as e:
                if not self._warned:
                    self._warned = True
                    print(f"phalanx.train: the ZeRO shards of commit {key} were not kept in this "
                          f"node's memory ({e}): give the node's object store more room "
                          f"(phalanx start --object-store-memory); training goes on",
                          file=sys.stderr)
            with self._cond:
                if self._next is not None and self._next[0] == key:
                    self._next = None
                self._cond.notify_all()

    def _write(self, key, held):
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        for rank, data in held.items():
            final = os.path.join(self.dir, self._name(key, rank))
            tmp = os.path.join(self.dir, f".tmp-{os.getpid()}-{threading.get_ident()}")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
        # The newest KEEP commits stay.
        keys = sorted({m.groups()[:3] for m in map(self._NAME.match, os.listdir(self.dir)) if m},
                      key=lambda k: (int(k[0]), int(k[1])))
        old = set(keys[:-self.KEEP])
        for name in os.listdir(self.dir):
            m = self._NAME.match(name)
            if m and m.groups()[:3] in old:
                try:
                    os.unlink(os.path.join(self.dir, name))
                except FileNotFoundError:
                    pass

    def held(self, key):
        """{old rank: shard bytes} of commit ``key`` in this node's store."""
        out = {}
        prefix = self._name(key, 0).rsplit("-r", 1)[0] + "-r"
        try:
            names = os.listdir(self.dir)
        except OSError:
            return out
        for name in names:
            m = self._NAME.match(name)
            if m and name.startswith(prefix):
                try:
                    with open(os.path.join(self.dir, name), "rb") as f:
                        out[int(m.group(4))] = f.read()
                except OSError:
                    continue
        return out
