"""Nested tasks on a cluster smaller than the tree, as Ray's documentation writes them ("Pattern:
using nested tasks to achieve nested parallelism"): a task that waits in ``get`` for the tasks
it started lends its CPU to them, as Ray's raylet takes a blocked worker's CPU, so a tree of
tasks deeper than the cluster's CPUs finishes instead of deadlocking."""

import threading
import time

import pytest

import phalanx

from conftest import connected_cluster

# Every wait here is for an outcome, bounded far above what it takes (a loaded machine cannot
# fail it); a deadlock shows as GetTimeoutError after this long.
TREE_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx"), num_cpus=2) as c:
        yield c


@phalanx.remote
def partial_sum(lo, hi):
    # A binary tree of tasks, leaves of 4 numbers: 64 numbers are 5 levels, 31 tasks, on
    # 2 CPUs. Without lending, the first two levels hold both CPUs and wait forever.
    if hi - lo <= 4:
        return sum(range(lo, hi))
    mid = (lo + hi) // 2
    return sum(phalanx.get([partial_sum.remote(lo, mid), partial_sum.remote(mid, hi)]))


@phalanx.remote
def quick_sort_distributed(collection):
    # Ray's own example of nested parallelism, with a small threshold so that it nests.
    if len(collection) <= 8:
        return sorted(collection)
    pivot = collection[0]
    lesser = [x for x in collection[1:] if x < pivot]
    greater = [x for x in collection[1:] if x >= pivot]
    lesser, greater = phalanx.get([quick_sort_distributed.remote(lesser),
                                   quick_sort_distributed.remote(greater)])
    return lesser + [pivot] + greater


@phalanx.remote(max_concurrency=2)
class Gate:
    def __init__(self):
        self._open = threading.Event()
        self.entered = False

    def passed(self):
        self.entered = True
        return self._open.wait(TREE_TIMEOUT_S)

    def is_entered(self):
        return self.entered

    def open(self):
        self._open.set()


@phalanx.remote
def wait_at(gate):
    return phalanx.get(gate.passed.remote())


@phalanx.remote
def wait_for_any(gate):
    ready, _ = phalanx.wait([gate.passed.remote()], num_returns=1)
    return phalanx.get(ready[0])


def test_a_tree_of_tasks_deeper_than_the_cpus_finishes(cluster):
    assert phalanx.get(partial_sum.remote(0, 64), timeout=TREE_TIMEOUT_S) == sum(range(64))
    import random
    data = [random.randint(0, 1000) for _ in range(200)]
    assert phalanx.get(quick_sort_distributed.remote(data), timeout=TREE_TIMEOUT_S) == sorted(data)
    # Nothing holds a CPU once the trees are done: idle workers lend theirs, and the workers
    # a nested task's pool leased die with that pool's process when it is returned.
    _until("every CPU is free again", lambda: _available_cpus() == 2.0)


def _available_cpus():
    return phalanx.available_resources().get("CPU", 0.0)


def _until(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not seen within {timeout} s: {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("task", [wait_at, wait_for_any], ids=["get", "wait"])
def test_a_task_waiting_in_get_lends_its_cpu_and_takes_it_back(cluster, task):
    gate = Gate.remote()
    ref = task.remote(gate)
    _until("the task waits at the gate", lambda: phalanx.get(gate.is_entered.remote()))
    # Running, but waiting: its CPU is the cluster's (2 of 2 free), and another task runs.
    _until("the waiting task's CPU is free", lambda: _available_cpus() == 2.0)
    assert phalanx.get(partial_sum.remote(0, 4), timeout=TREE_TIMEOUT_S) == 6
    gate.open.remote()
    assert phalanx.get(ref, timeout=TREE_TIMEOUT_S) is True
    phalanx.kill(gate)



NESTED_REFS_PROGRAM = """
import phalanx as ray
ray.init(num_cpus=2)

@ray.remote
def f():
    return 1

@ray.remote
def pass_via_nested_ref(refs):
    return sum(ray.get(refs))

print(ray.get(pass_via_nested_ref.remote([f.remote() for _ in range(3)]), timeout=30))
"""


def test_a_task_given_refs_to_fresh_tasks_does_not_wait_behind_them(tmp_path):
    """Ray's nested-get page, as a program of its own (a fresh private cluster each run):
    refs to fresh tasks, passed nested in a list to a task that reads them. Short tasks are
    pipelined to busy workers, and one queued behind the task that waits for it never ran
    (half the runs hung): such a task, with a call's result inside its arguments, now gets a
    worker of its own and nothing queues behind it."""
    import os
    import subprocess
    import sys
    program = tmp_path / "nested_refs.py"
    program.write_text(NESTED_REFS_PROGRAM)
    for run in range(6):
        out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                             timeout=90, env=dict(os.environ))
        assert out.returncode == 0 and out.stdout.strip().endswith("3"), \
            f"run {run}: {out.stdout[-2000:]}{out.stderr[-2000:]}"
