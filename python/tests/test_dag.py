"""phalanx.dag beyond what examples/ray_core/dag.py shows: the errors a misbuilt DAG gets
(each naming the node and the fix, raised before anything runs), and the actors of a
ClassNode ending once an execute's calls on them are done."""

import pickle

import pytest

import phalanx
from phalanx.dag import ClassNode, InputNode, MultiOutputNode

from conftest import wait_for


@phalanx.remote
def inc(x):
    return x + 1


@phalanx.remote
class Counter:
    def __init__(self):
        self.count = 0

    def increment(self):
        self.count += 1
        return self.count


def test_a_dag_with_an_input_node_refuses_to_run_without_input():
    with InputNode() as inp:
        dag = inc.bind(inp)
    with pytest.raises(TypeError, match=r"FunctionNode\(inc\).*needs its input"):
        dag.execute()


def test_a_dag_without_an_input_node_refuses_inputs():
    with pytest.raises(TypeError, match="has no InputNode"):
        inc.bind(1).execute(5)


def test_a_dag_has_one_input_node():
    with InputNode() as first, InputNode() as second:
        dag = MultiOutputNode([inc.bind(first), inc.bind(second[0])])
    with pytest.raises(ValueError, match="2 InputNodes"):
        dag.execute(1)


def test_remote_and_bind_on_a_node_say_to_execute():
    node = inc.bind(1)
    with pytest.raises(AttributeError, match=r"\.remote\(\) cannot be used on "
                                             r"FunctionNode\(inc\).*\.execute\(\)"):
        node.remote()
    with pytest.raises(AttributeError, match=r"\.bind\(\) cannot be used again"):
        node.bind()
    actor = Counter.bind()
    with pytest.raises(AttributeError, match=r"ClassNode\(Counter\).*\.execute\(\)"):
        actor.remote()
    with pytest.raises(AttributeError, match="use .bind"):
        actor.increment.remote()
    with pytest.raises(AttributeError, match="Counter has no method 'decrement'"):
        actor.decrement.bind()
    with pytest.raises(TypeError, match=r"with \.bind"):
        actor.increment()


def test_a_node_passed_to_remote_is_refused_as_a_plan_not_a_value(cluster):
    node = inc.bind(1)
    with pytest.raises(TypeError, match="cannot be pickled or sent to a task"):
        pickle.dumps(node)
    with pytest.raises(TypeError, match="cannot be pickled or sent to a task"):
        inc.remote(node)


def test_misbuilt_nodes_are_refused_at_bind():
    with pytest.raises(ValueError, match="takes no arguments"):
        InputNode(1)
    with pytest.raises(ValueError, match="list of DAG nodes"):
        MultiOutputNode(inc.bind(1))
    with pytest.raises(ValueError, match="output 1 is a int.*bind it first"):
        MultiOutputNode([inc.bind(1), 2])
    with InputNode() as inp:
        with pytest.raises(ValueError, match="cannot be an argument of an actor's constructor"):
            Counter.bind(inp)
    with pytest.raises(TypeError, match="takes an actor class"):
        ClassNode(inc, (), {})
    with pytest.raises(ValueError, match="unknown method option"):
        Counter.bind().increment.options(colour="red")
    with pytest.raises(TypeError, match="index it with an int"):
        InputNode()[1.5]
    with pytest.raises(TypeError, match=r"gives one value \(num_returns=1\)"):
        first, second = Counter.bind().increment.bind()


def test_missing_input_parts_name_what_execute_got(cluster):
    with InputNode() as inp:
        dag = MultiOutputNode([inc.bind(inp[0]), inc.bind(inp.x)])
    with pytest.raises(KeyError, match=r"no keyword argument 'x' \(it got \['y'\]\)"):
        dag.execute(1, y=2)
    with pytest.raises(IndexError, match="got 0 positional argument"):
        dag.execute(x=1)
    with pytest.raises(TypeError, match=r"got one argument, 5 \(int\).*item 0"):
        dag.execute(5)


def test_a_class_nodes_actor_ends_when_its_calls_are_done_unless_given_away(cluster):
    node = Counter.bind()
    call = node.increment.bind()
    ref = call.execute()
    assert phalanx.get(ref) == 1
    # Created anew by each execute (Ray's), so the count starts over.
    assert phalanx.get(call.execute()) == 1
    # No handle of it is left here: ask the GCS by the id its call carries.
    actor = phalanx.ActorHandle(ref._ref.actor_id, "Counter")
    assert wait_for(lambda: phalanx.actor_info(actor)["state"] == "DEAD", 15)
    assert phalanx.get(ref) == 1  # its value outlives it
    # The ClassNode's own execute gives the handle away: that actor stays.
    kept = node.execute()
    assert phalanx.get(kept.increment.remote()) == 1
    phalanx.kill(kept)
