"""A node's object store is bounded: `phalanx start --object-store-memory` sets what it may
hold in /dev/shm, a value past it goes to disk (and is read the same way), the oldest values
move to disk once the store is past 80% of it, and `phalanx status` says what each store
holds and what it spilled."""

import gc
import time

import numpy as np
import pytest

import phalanx
from conftest import connected_cluster, wait_for

CAPACITY = 24 << 20  # bytes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx"), num_cpus=2,
                           extra_args=("--object-store-memory", str(CAPACITY))) as c:
        yield c


@phalanx.remote
def total(x):
    return float(x.sum())


def _store_line(cluster):
    out = cluster.cli("status").stdout
    return out.split("Object stores")[1].splitlines()[1]


def test_values_past_the_capacity_go_to_disk_and_read_the_same(cluster):
    refs = [phalanx.put(np.full(2 << 20, float(i))) for i in range(3)]  # 16 MiB each
    assert [r._obj.spilled for r in refs] == [False, True, True]
    assert [float(phalanx.get(r)[0]) for r in refs] == [0.0, 1.0, 2.0]
    assert phalanx.get([total.remote(r) for r in refs], timeout=60) == \
        [0.0, float(2 << 20), float(4 << 20)]
    # The node measures its store now and then: a measure taken while the last value was
    # being written counts part of it, so wait for one that has both values whole.
    line = wait_for(lambda: "32.0 MiB spilled" in _store_line(cluster) and _store_line(cluster),
                    30)
    assert line and "16.0 MiB/24.0 MiB" in line and "3 object(s)" in line, _store_line(cluster)
    # Freed values leave the disk too, and the store has room again.
    del refs
    gc.collect()
    assert wait_for(lambda: "0 object(s)" in _store_line(cluster), 30), _store_line(cluster)
    again = phalanx.put(np.ones(2 << 20))
    assert not again._obj.spilled


def test_past_the_spill_threshold_the_oldest_values_move_to_disk(cluster):
    # 4 x 5 MiB = 20 MiB fit the 24 MiB store, past its 80% (19.2 MiB): the node moves the
    # oldest value to disk, so a new 8 MiB value finds room in memory, as Ray's spilling does.
    refs = []
    for i in range(4):
        refs.append(phalanx.put(np.full(5 << 17, float(i))))  # 5 MiB
        time.sleep(1.1)  # each its own second: the oldest is the first
    assert not any(r._obj.spilled for r in refs)
    line = wait_for(lambda: "5.0 MiB spilled" in _store_line(cluster) and _store_line(cluster),
                    30)
    assert line and "15.0 MiB/24.0 MiB" in line and "4 object(s)" in line, _store_line(cluster)
    # Every value reads the same, the moved one included, here and in a task.
    assert [float(phalanx.get(r)[0]) for r in refs] == [0.0, 1.0, 2.0, 3.0]
    assert phalanx.get([total.remote(r) for r in refs], timeout=60) == \
        [float(i * (5 << 17)) for i in range(4)]
    fresh = phalanx.put(np.ones(1 << 20))  # 8 MiB: 15 + 8 <= 24
    assert not fresh._obj.spilled
    del refs, fresh
    gc.collect()
    assert wait_for(lambda: "0 object(s)" in _store_line(cluster), 30), _store_line(cluster)


def test_a_bad_capacity_is_refused_naming_the_flag(cluster):
    out = cluster.cli("start", "--head", "--object-store-memory", "-5")
    assert out.returncode != 0 and "--object-store-memory" in out.stdout + out.stderr
