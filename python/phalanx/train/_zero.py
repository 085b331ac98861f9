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

A shard is lost only when both its rank and the rank holding its copy are lost at once; then
the parameters it covered start with fresh optimizer state, and every rank says so.
"""

import pickle
import sys

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
