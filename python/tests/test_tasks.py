"""Remote functions (tasks) from Python on a real cluster: pooled workers, ObjectRefs as
arguments, retries on a real SIGKILL of the worker, exceptions and their retries."""

import os
import signal

import pytest

from phalanx import _native
import phalanx


@phalanx.remote
def square(x):
    return x * x


@phalanx.remote(num_cpus=0.5)
def add(a, b=0):
    return a + b


@phalanx.remote
def pid():
    return os.getpid()


@phalanx.remote
def die_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


@phalanx.remote
def flaky(marker, exc):
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise exc("transient")
    return "ok"


@phalanx.remote
async def later(x):
    return x + 1


@phalanx.remote
class Box:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


# A task blocked in get keeps its CPU (Ray lends it out meanwhile): the nested tasks here ask
# for little, so that a tree of them fits the 4-CPU test cluster.
@phalanx.remote(num_cpus=0.1)
def fib(n):  # Ray's nested-task shape: a task that starts itself
    if n < 2:
        return n
    return sum(phalanx.get([fib.remote(n - 1), fib.remote(n - 2)]))


@phalanx.remote(num_cpus=0.5)
def outer(x):  # starts another remote function of this module
    return phalanx.get(square.remote(x)) + 1


@phalanx.remote(num_cpus=0.5)
class Starter:  # an actor whose method starts tasks
    def run(self, n):
        return phalanx.get([square.remote(i) for i in range(n)])


class Overdrawn(Exception):
    """A user's exception whose constructor takes two arguments."""

    def __init__(self, account, amount):
        super().__init__(account, amount)
        self.account = account
        self.amount = amount


@phalanx.remote(num_cpus=0.25)
def withdraw(account, amount):
    raise Overdrawn(account, amount)


@phalanx.remote(num_cpus=0.25)
def calls_withdraw():
    return phalanx.get(withdraw.remote("acct-1", 5))


@phalanx.remote(num_cpus=0.25)
class Teller:
    def withdraw(self, amount):
        raise Overdrawn("acct-2", amount)


def task_stats():
    return {s["worker_class"]: s for s in _native.task_pool_stats()}


def test_results_and_refs_as_arguments(cluster):
    refs = [square.remote(i) for i in range(50)]
    assert phalanx.get(refs, timeout=60) == [i * i for i in range(50)]
    four = square.remote(2)
    assert phalanx.get(square.remote(four), timeout=30) == 16
    assert phalanx.get(add.remote(four, b=square.remote(3)), timeout=30) == 13
    # An actor call's ref is an argument too, and so is an async function's result.
    box = Box.remote(5)
    assert phalanx.get(add.remote(box.get.remote(), 1), timeout=30) == 6
    assert phalanx.get(later.remote(later.remote(1)), timeout=30) == 3
    ready, not_ready = phalanx.wait([square.remote(3)], num_returns=1, timeout=30)
    assert len(ready) == 1 and not not_ready
    assert "task" in repr(four)


def test_tasks_run_on_pooled_workers(cluster):
    pids = {phalanx.get(pid.remote(), timeout=30) for _ in range(30)}
    assert len(pids) == 1 and os.getpid() not in pids
    stats = task_stats()["phalanx._task.TaskWorker"]
    assert stats["workers"] >= 1 and stats["tasks_done"] >= 30
    leased = stats["workers_leased"]
    # A burst fans out over a few workers (1 CPU each), not one process per call.
    many = phalanx.get([pid.remote() for _ in range(60)], timeout=60)
    assert 1 <= len(set(many)) <= 4
    assert task_stats()["phalanx._task.TaskWorker"]["workers_leased"] - leased <= 3


def test_a_killed_worker_is_retried_and_named_in_the_error(cluster, tmp_path):
    assert phalanx.get(die_once.remote(str(tmp_path / "a")), timeout=60) > 0
    with pytest.raises(phalanx.ActorDiedError, match=r"SIGNALED\(9") as e:
        phalanx.get(die_once.options(max_retries=0).remote(str(tmp_path / "b")), timeout=60)
    assert "die_once" in str(e.value)


def test_exceptions_and_retry_exceptions(cluster, tmp_path):
    with pytest.raises(phalanx.TaskError, match="transient") as e:
        phalanx.get(flaky.remote(str(tmp_path / "x"), KeyError), timeout=30)
    assert e.value.cause_type == "KeyError"
    # A failed ref fails the task that takes it.
    with pytest.raises(phalanx.TaskError, match="transient"):
        phalanx.get(square.remote(flaky.remote(str(tmp_path / "y"), ValueError)), timeout=30)
    ok = flaky.options(retry_exceptions=[IOError]).remote(str(tmp_path / "z"), IOError)
    assert phalanx.get(ok, timeout=30) == "ok"
    # Only the listed classes are retried.
    with pytest.raises(phalanx.TaskError):
        phalanx.get(flaky.options(retry_exceptions=[IOError]).remote(str(tmp_path / "w"),
                                                                      KeyError), timeout=30)


def test_nested_and_recursive_tasks_and_an_actor_that_starts_tasks(cluster):
    """Issue 51's bug: a remote function in another's globals did not pickle (its lock)."""
    assert phalanx.get(outer.remote(4), timeout=60) == 17
    assert phalanx.get(fib.remote(5), timeout=120) == 5
    starter = Starter.remote()
    assert phalanx.get(starter.run.remote(5), timeout=60) == [0, 1, 4, 9, 16]
    phalanx.kill(starter)
    # A remote function as an argument, used by the task.
    assert phalanx.get(add.remote(3, 4), timeout=30) == 7


def test_a_remote_exception_is_caught_as_its_own_class(cluster, tmp_path):
    """As Ray's: ``except ValueError`` around get catches a task's ValueError; the error is
    a TaskError too, with the exception itself as ``cause``."""
    with pytest.raises(ValueError) as e:
        phalanx.get(flaky.remote(str(tmp_path / "v"), ValueError), timeout=30)
    assert isinstance(e.value, phalanx.TaskError) and isinstance(e.value.cause, ValueError)
    assert e.value.args == ("transient",) and e.value.cause_type == "ValueError"
    assert "flaky" in str(e.value)  # the message holds the remote traceback
    # The user's own class, with its attributes, from a task, from a task's task, from a
    # method.
    teller = Teller.remote()
    for ref in (withdraw.remote("acct-1", 5), calls_withdraw.remote(),
                teller.withdraw.remote(7)):
        with pytest.raises(Overdrawn) as e:
            phalanx.get(ref, timeout=60)
        assert isinstance(e.value, phalanx.TaskError) and e.value.account.startswith("acct-")
    phalanx.kill(teller)


def test_bad_use_is_refused_clearly(cluster):
    with pytest.raises(TypeError, match=r"\.remote\(\)"):
        square(3)
    with pytest.raises(ValueError, match="unknown task option"):
        square.options(max_restarts=3)
    with pytest.raises(ValueError, match="max_retries"):
        square.options(max_retries=-5)
    with pytest.raises(ValueError, match="retry_exceptions"):
        square.options(retry_exceptions=["KeyError"])
    with pytest.raises(TypeError, match="takes a value, not an ObjectRef"):
        phalanx.put(square.remote(1))
    with pytest.raises(ValueError, match="an ObjectRef or a list of ObjectRefs, not int"):
        phalanx.get(1)
    with pytest.raises(TypeError, match=r"ObjectRefs \(or ObjectRefGenerators\), not int"):
        phalanx.wait([1])



MAIN_SCRIPT = """
import phalanx

class P:                      # of __main__: no worker can import it, so it travels by value
    def __init__(self, x):
        self.x = x

@phalanx.remote
def bump(p, f):
    return P(f(p.x))

phalanx.init()
print("result", phalanx.get(bump.remote(P(1), lambda v: v + 41), timeout=60).x)
"""


def test_classes_and_lambdas_of_a_scripts_main_travel_by_value(cluster, tmp_path):
    import subprocess
    import sys
    script = tmp_path / "main_script.py"
    script.write_text(MAIN_SCRIPT)
    env = dict(os.environ, PHALANX_ADDRESS=cluster.address, PHALANX_TOKEN=cluster.token,
               PHALANX_TLS_DIR=cluster.tls_dir)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "result 42" in out.stdout
