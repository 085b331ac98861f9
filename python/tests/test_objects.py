"""The object store, in the shapes of Ray Core's documentation: put once and pass the ref
(the "pass large arguments by reference" pattern), refs inside lists and dicts, refs as actor
call arguments and as returned values, numpy and torch shared without a copy, values freed by
reference counting and lost with their owner, with an error that names it."""

import gc
import os
import signal
import time

import numpy as np
import pytest

from phalanx import _native
import phalanx
from phalanx import _object_pool, _objects

from conftest import wait_for


@phalanx.remote
def total(x):
    return float(np.asarray(x).sum())


@phalanx.remote
def total_of_refs(refs):  # Ray's "refs inside a list are not resolved" shape
    return sum(float(phalanx.get(r).sum()) for r in refs)


@phalanx.remote
def make(n):
    return np.ones(n)


@phalanx.remote
def fail():
    raise ValueError("no good")


@phalanx.remote
class Trainer:
    """Holds weights broadcast to it by ref."""

    def __init__(self):
        self.weights = None

    def load(self, weights):        # a top-level ref: the value arrives
        self.weights = weights
        return float(weights.sum())

    def keep(self, box):            # a ref inside a dict: stays a ref
        self.box = box
        return type(box["w"]).__name__

    def loaded(self):
        return float(self.weights.sum())

    def keep_later(self, box, after_s):
        time.sleep(after_s)
        self.box = box

    def read_kept(self):
        return float(phalanx.get(self.box["w"]).sum())

    def owned(self, n):             # a value this actor puts, handed out by ref
        return [phalanx.put(np.full(n, 2.0))]

    def lend(self, other, n):       # a value this actor owns, kept by another actor
        ref = phalanx.put(np.full(n, 1.0))
        phalanx.get(other.keep.remote({"w": ref}))
        return f"{ref._obj.node}:{ref._obj.owner}/"

    def pid(self):
        return os.getpid()


@phalanx.remote
class Reader:
    """Keeps the array it read, not the ref (as in Ray, the array keeps the value it views)."""

    def take(self, box):
        self.array = phalanx.get(box["w"])
        return float(self.array.sum())

    def total(self):
        return float(self.array.sum())

    def drop(self):
        self.array = None
        gc.collect()


def _my_objects():
    """The values this process has in the store (not the files it keeps for its next puts)."""
    d = _objects._here.dir
    names = os.listdir(d) if d and os.path.isdir(d) else []
    return sorted(n for n in names if not n.startswith(_object_pool.POOL_PREFIX))


def test_put_get_and_refs_anywhere(cluster):
    small = phalanx.put({"lr": 0.1, "steps": [1, 2]})
    assert phalanx.get(small) == {"lr": 0.1, "steps": [1, 2]}
    assert small._obj.inline is not None  # small values travel inside their ref
    weights = np.arange(4_000_000, dtype=np.float32)  # 16 MB: the node's store
    ref = phalanx.put(weights)
    assert ref._obj.inline is None and ref.done()
    back = phalanx.get(ref)
    assert np.array_equal(back, weights) and not back.flags.writeable  # as Ray's: read-only
    # A top-level ref argument of a task or an actor call arrives as its value.
    assert phalanx.get(total.remote(ref), timeout=60) == float(weights.sum())
    trainers = [Trainer.remote() for _ in range(2)]
    assert phalanx.get([t.load.remote(ref) for t in trainers], timeout=60) == \
        [float(weights.sum())] * 2
    # Refs inside lists and dicts stay refs; the callee gets them when it wants.
    assert phalanx.get(total_of_refs.remote([ref, ref]), timeout=60) == 2 * float(weights.sum())
    assert phalanx.get(trainers[0].keep.remote({"w": ref}), timeout=30) == "ObjectRef"
    assert phalanx.get(trainers[0].read_kept.remote(), timeout=30) == float(weights.sum())
    # A call's result travels by ref too, nested or as an argument, before it is done.
    assert phalanx.get(total_of_refs.remote([make.remote(1000)]), timeout=60) == 1000.0
    assert phalanx.get(trainers[1].load.remote(make.remote(10)), timeout=60) == 10.0
    ready, rest = phalanx.wait([ref, small, make.remote(3)], num_returns=3, timeout=60)
    assert len(ready) == 3 and not rest
    for t in trainers:
        phalanx.kill(t)


def test_numpy_and_torch_are_shared_not_copied(cluster):
    torch = pytest.importorskip("torch")
    array = np.random.rand(2_000_000)
    ref = phalanx.put(array)
    a1, a2 = phalanx.get(ref), phalanx.get(ref)
    # Two gets map the same pages: a view of the store, not a copy, read-only as Ray's.
    assert a1.ctypes.data != array.ctypes.data and np.array_equal(a1, array)
    assert not a1.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a1[0] = -1.0
    tensor = torch.arange(1_000_000, dtype=torch.float32)
    tensor_ref = phalanx.put(tensor)
    back = phalanx.get(tensor_ref)
    assert isinstance(back, torch.Tensor) and torch.equal(back, tensor)
    # A tensor stays writable, as Ray's: the pages are copy-on-write, so a write stays the
    # writer's own.
    back[0] = -1.0
    assert phalanx.get(tensor_ref)[0] == 0.0 and tensor[0] == 0.0
    grads = torch.ones(3, requires_grad=True)  # not shareable: pickled as torch does
    assert torch.equal(phalanx.get(phalanx.put(grads)).detach(), grads.detach())


def test_a_value_is_freed_when_no_ref_holds_it(cluster):
    gc.collect()
    before = set(_my_objects())
    ref = phalanx.put(np.ones(1_000_000))
    [new] = set(_my_objects()) - before
    result = total.remote(ref)  # the call pins its argument until its result is dropped
    assert phalanx.get(result, timeout=60) == 1e6
    del ref
    gc.collect()
    assert new in _my_objects()
    del result
    gc.collect()
    assert new not in _my_objects()
    # A ref sent inside an argument is pinned while the call runs, and borrowed by the callee
    # while it holds it: once the call is over and nobody holds it, it is freed.
    kept = phalanx.put(np.ones(1_000_000))
    assert phalanx.get(total_of_refs.remote([kept]), timeout=60) == 1e6
    kept_id = kept._obj.id
    del kept
    gc.collect()
    assert wait_for(lambda: kept_id not in _my_objects(), timeout=30)


def _inode(ref):
    return os.stat(os.path.join(_objects._here.dir, ref._obj.id)).st_ino


def _kept_files():
    return [n for n in os.listdir(_objects._here.dir)
            if n.startswith(_object_pool.POOL_PREFIX)]


def test_a_freed_values_file_takes_the_next_put_once_no_reader_maps_it(cluster, monkeypatch):
    """Ray's plasma reuses its memory: so does a process's store directory. A freed value's
    file is written again by a put of its size, but never while a reader (here, or in an
    actor) still has an array that views it."""
    n = 1 << 18  # 2 MiB of float64
    reader = Reader.remote()
    first = phalanx.put(np.full(n, 1.0))
    first_id, inode = first._obj.id, _inode(first)
    assert phalanx.get(reader.take.remote({"w": first}), timeout=60) == n
    mine = phalanx.get(first)
    del first
    gc.collect()
    assert wait_for(lambda: first_id not in _my_objects(), timeout=30)  # freed, file kept
    assert _object_pool.POOL_PREFIX + first_id in _kept_files()

    second = phalanx.put(np.full(n, 2.0))  # two readers map the freed file: a new one
    assert _inode(second) != inode
    del mine
    gc.collect()
    third = phalanx.put(np.full(n, 3.0))  # the actor still maps it
    assert _inode(third) != inode
    assert phalanx.get(reader.total.remote(), timeout=60) == n  # its array is untouched
    phalanx.get(reader.drop.remote(), timeout=60)
    fourth = phalanx.put(np.full(n, 4.0))  # nobody maps it now: written again
    assert _inode(fourth) == inode
    assert phalanx.get(fourth).sum() == 4.0 * n
    assert phalanx.get(total.remote(fourth), timeout=60) == 4.0 * n
    assert phalanx.get(second).sum() == 2.0 * n and phalanx.get(third).sum() == 3.0 * n

    # Small values' files are not kept, and kept files go once unused for POOL_IDLE_S.
    small = phalanx.put(np.ones(20_000))  # 160 KB: in the store, under POOL_MIN_BYTES
    small_id = small._obj.id
    del small
    gc.collect()
    assert _object_pool.POOL_PREFIX + small_id not in _kept_files()
    monkeypatch.setattr(_object_pool, "POOL_IDLE_S", 0.2)
    del second, third, fourth
    gc.collect()
    assert wait_for(lambda: not _kept_files(), timeout=30), _kept_files()


def test_borrowers_keep_a_value_until_the_last_one_drops_it(cluster):
    """Ray's broadcast shape: weights put once and sent inside a dict to trainers, step after
    step. Each step's weights are freed once no trainer holds them; a trainer that keeps
    them keeps them alive after the driver dropped its own ref, and so does a value that
    contains the ref."""
    gc.collect()
    trainer = Trainer.remote()
    before = set(_my_objects())
    for step in range(5):  # a new value each step, dropped by the driver after the call
        weights = phalanx.put(np.full(1_000_000, float(step)))
        phalanx.get(trainer.keep.remote({"w": weights}), timeout=60)
        del weights
    gc.collect()
    # Four steps' weights are no longer held by anyone; the trainer keeps the last one.
    assert wait_for(lambda: len(set(_my_objects()) - before) == 1, timeout=30), \
        set(_my_objects()) - before
    assert phalanx.get(trainer.read_kept.remote(), timeout=60) == 4e6
    time.sleep(3 * _objects.SWEEP_S)
    assert len(set(_my_objects()) - before) == 1  # still borrowed: still there
    phalanx.get(trainer.keep.remote({"w": None}), timeout=60)  # the trainer lets it go
    assert wait_for(lambda: set(_my_objects()) == before, timeout=30)

    # A call whose result the caller never kept still has its arguments while it runs.
    weights = phalanx.put(np.full(1_000_000, 7.0))
    trainer.keep_later.remote({"w": weights}, 1.0)
    del weights
    gc.collect()
    assert wait_for(lambda: phalanx.get(trainer.read_kept.remote(), timeout=60) == 7e6,
                    timeout=30)
    # So does a top-level ref argument of a call queued behind another.
    trainer.keep_later.remote({"w": None}, 1.0)
    weights = phalanx.put(np.full(1_000_000, 6.0))
    trainer.load.remote(weights)
    del weights
    gc.collect()
    assert phalanx.get(trainer.loaded.remote(), timeout=60) == 6e6

    # A ref inside a put value lives while that value does.
    inner = phalanx.put(np.full(1_000_000, 3.0))
    inner_id = inner._obj.id
    outer = phalanx.put({"inner": inner, "pad": np.zeros(200_000)})
    del inner
    gc.collect()
    assert float(phalanx.get(phalanx.get(outer)["inner"]).sum()) == 3e6
    gc.collect()
    assert inner_id in _my_objects()
    del outer
    gc.collect()
    assert wait_for(lambda: inner_id not in _my_objects(), timeout=30)

    # A borrower that is SIGKILLed while it holds a ref borrows it no more.
    weights = phalanx.put(np.full(1_000_000, 5.0))
    weights_id = weights._obj.id
    phalanx.get(trainer.keep.remote({"w": weights}), timeout=60)
    del weights
    gc.collect()
    time.sleep(3 * _objects.SWEEP_S)
    assert weights_id in _my_objects()
    os.kill(phalanx.get(trainer.pid.remote(), timeout=60), signal.SIGKILL)
    assert wait_for(lambda: weights_id not in _my_objects(), timeout=30)


def test_a_value_dies_with_its_owner_and_the_error_names_it(cluster):
    owner = Trainer.remote()
    owner_pid = phalanx.get(owner.pid.remote(), timeout=60)
    [ref] = phalanx.get(owner.owned.remote(1_000_000), timeout=60)
    assert float(phalanx.get(ref).sum()) == 2e6
    os.kill(owner_pid, signal.SIGKILL)
    with pytest.raises(phalanx.OwnerDiedError) as e:
        wait_for(lambda: phalanx.get(ref) is None, timeout=30)
    assert f"pid {owner_pid}" in str(e.value) and "died" in str(e.value)
    assert isinstance(e.value, phalanx.ObjectLostError) and e.value.object_id == ref._obj.id
    # The node removes what the dead owner left in its store.
    store = _objects._store_root(ref._obj.node)
    assert wait_for(lambda: not os.path.exists(os.path.join(store, ref._obj.owner)), timeout=30)


def test_a_dead_owners_borrow_keys_go_though_its_borrower_died_too(cluster):
    """An owner SIGKILLed, then its borrower: no process is left to delete the borrower's
    key; the owner's node deletes the keys of the values of an owner whose store it sweeps."""
    owner, borrower = Trainer.remote(), Trainer.remote()
    prefix = phalanx.get(owner.lend.remote(borrower, 1_000_000), timeout=60)
    assert _native.kv_list(_objects.BORROW_NS, prefix)  # the borrower's key
    for actor in (owner, borrower):
        os.kill(phalanx.get(actor.pid.remote(), timeout=60), signal.SIGKILL)
    assert wait_for(lambda: not _native.kv_list(_objects.BORROW_NS, prefix), timeout=30), \
        _native.kv_list(_objects.BORROW_NS, prefix)


def test_a_failed_calls_error_reaches_every_reader_of_its_ref(cluster):
    with pytest.raises(ValueError, match="no good"):
        phalanx.get(total_of_refs.remote([fail.remote()]), timeout=60)


def test_bad_use_is_refused_clearly(cluster):
    ref = phalanx.put(1)
    with pytest.raises(TypeError, match="takes a value, not an ObjectRef"):
        phalanx.put(ref)
    with pytest.raises(ValueError, match="phalanx.get takes an ObjectRef"):
        phalanx.get(1)
    slow = make.remote(10)
    nested = phalanx.put([slow])  # a ref inside a put value
    assert float(phalanx.get(phalanx.get(nested)[0]).sum()) == 10.0
    started = time.monotonic()
    with pytest.raises(phalanx.GetTimeoutError):
        phalanx.get(Trainer.remote().pid.remote(), timeout=0.0)
    assert time.monotonic() - started < 30
