# Ray Core's DAG API (ray.dag) with only the imports changed: the documentation's task DAG,
# actor DAG, InputNode, MultiOutputNode and reused-actor programs, then a node two others use
# (run once per execute), input by index, key and attribute, one DAG executed on many inputs,
# nodes nested in arguments, a method of several values, and a node's exception at ray.get.
import phalanx as ray
from phalanx.dag import InputNode, MultiOutputNode

ray.init()


# The documentation's task DAG: a bound node is an argument of later nodes.
@ray.remote
def func(src, inc=1):
    return src + inc

a_ref = func.bind(1, inc=2)
assert ray.get(a_ref.execute()) == 3  # 1 + 2 = 3
b_ref = func.bind(a_ref, inc=3)
assert ray.get(b_ref.execute()) == 6  # (1 + 2) + 3 = 6
c_ref = func.bind(b_ref, inc=a_ref)
assert ray.get(c_ref.execute()) == 9  # ((1 + 2) + 3) + (1 + 2) = 9


# The documentation's actor DAG: the calls bound on a ClassNode run on its actor in the order
# they were bound.
@ray.remote
class Actor:
    def __init__(self, init_value):
        self.i = init_value

    def inc(self, x):
        self.i += x

    def get(self):
        return self.i

a1 = Actor.bind(10)  # Instantiate Actor with init_value 10.
val = a1.get.bind()  # ClassMethod that returns value from get() from the actor created.
assert ray.get(val.execute()) == 10


@ray.remote
def combine(x, y):
    return x + y

a2 = Actor.bind(10)  # Instantiate another Actor with init_value 10.
a1.inc.bind(2)  # Call inc() on the actor created with increment of 2.
a1.inc.bind(4)  # Call inc() on the actor created with increment of 4.
a2.inc.bind(6)  # Call inc() on the actor created with increment of 6.

# Combine outputs from a1.get() and a2.get()
dag = combine.bind(a1.get.bind(), a2.get.bind())

# (10 + 2 + 4) + (10 + 6) = 32
assert ray.get(dag.execute()) == 32
# Each execute creates the DAG's actors anew, as Ray's does: the same again.
assert ray.get(dag.execute()) == 32


# The documentation's InputNode: the value execute() is given.
@ray.remote
def a(user_input):
    return user_input * 2


@ray.remote
def b(user_input):
    return user_input + 1


@ray.remote
def c(x, y):
    return x + y

with InputNode() as dag_input:
    a_ref = a.bind(dag_input)
    b_ref = b.bind(dag_input)
    dag = c.bind(a_ref, b_ref)

#   a(2)  +   b(2)  = c
# (2 * 2) + (2 + 1)
assert ray.get(dag.execute(2)) == 7

#   a(3)  +   b(3)  = c
# (3 * 2) + (3 + 1)
assert ray.get(dag.execute(3)) == 10

# One DAG, many inputs: the executes' refs are all in flight before the first get.
refs = [dag.execute(i) for i in range(10)]
assert ray.get(refs) == [3 * i + 1 for i in range(10)]


# The documentation's MultiOutputNode: several results, a list of refs.
@ray.remote
def f(input):
    return input + 1

with InputNode() as input_data:
    dag = MultiOutputNode([f.bind(input_data["x"]), f.bind(input_data["y"])])

refs = dag.execute({"x": 1, "y": 2})
assert ray.get(refs) == [2, 3]


# The documentation's reused actor: one made with .remote(), its method bound; it keeps its
# state from one execute to the next.
@ray.remote
class Worker:
    def __init__(self):
        self.forwarded = 0

    def forward(self, input_data: int):
        self.forwarded += 1
        return input_data + 1

    def num_forwarded(self):
        return self.forwarded

# Create an actor via ``remote`` API not ``bind`` API to avoid
# killing actors when a DAG is finished.
worker = Worker.remote()

with InputNode() as input_data:
    dag = MultiOutputNode([worker.forward.bind(input_data)])

# Actors are reused. The DAG definition doesn't include
# actor creation.
assert ray.get(dag.execute(1)) == [2]
assert ray.get(dag.execute(2)) == [3]
assert ray.get(dag.execute(3)) == [4]

# You can still use other actor methods via `remote` API.
assert ray.get(worker.num_forwarded.remote()) == 3


# A node that two others use runs once per execute: a counter actor counts its runs.
@ray.remote
class Counter:
    def __init__(self):
        self.count = 0

    def increment(self):
        self.count += 1
        return self.count

    def value(self):
        return self.count


@ray.remote
def load(counter, x):
    ray.get(counter.increment.remote())
    return x * 10

counter = Counter.remote()
with InputNode() as inp:
    loaded = load.bind(counter, inp)
    dag = combine.bind(f.bind(loaded), a.bind(loaded))

assert ray.get(dag.execute(1)) == (10 + 1) + 10 * 2
assert ray.get(counter.value.remote()) == 1
assert ray.get(dag.execute(2)) == (20 + 1) + 20 * 2
assert ray.get(counter.value.remote()) == 2


# The input by index, key and attribute: positional arguments by index, keywords by name;
# a single argument is indexed (or its attribute read) itself.
@ray.remote
def add(x, y):
    return x + y

with InputNode() as dag_input:
    dag = add.bind(dag_input[0], dag_input.x)
assert ray.get(dag.execute(1, x=2)) == 3  # 1 and x=2

with InputNode() as dag_input:
    dag = add.bind(dag_input[0], dag_input[1])
assert ray.get(dag.execute(2, 3)) == 5
assert ray.get(dag.execute([2, 3])) == 5  # a single list: indexed


class UserDataObject:
    def __init__(self, m1, m2):
        self.m1, self.m2 = m1, m2

with InputNode() as dag_input:
    dag = MultiOutputNode([add.bind(dag_input.m1, 100), add.bind(dag_input.m2, 200)])
assert ray.get(dag.execute(m1=1, m2=2)) == [101, 202]  # keywords
assert ray.get(dag.execute(UserDataObject(m1=1, m2=2))) == [101, 202]  # attributes

with InputNode() as dag_input:
    dag = MultiOutputNode([add.bind(dag_input["m1"], 100), add.bind(dag_input["m2"], 200)])
assert ray.get(dag.execute(m1=1, m2=2)) == [101, 202]  # keywords
assert ray.get(dag.execute({"m1": 1, "m2": 2})) == [101, 202]  # a dict's keys


# Nodes inside lists and dicts: their refs are passed there (as any nested ref), values at
# the top level; an actor's handle for a ClassNode.
@ray.remote
def total(first, rest, weights):
    return first + sum(ray.get(rest)) * ray.get(weights["w"])


@ray.remote
def read(counter):
    return ray.get(counter.value.remote())

with InputNode() as inp:
    dag = total.bind(f.bind(inp), [f.bind(inp), a.bind(inp)], weights={"w": b.bind(inp)})
assert ray.get(dag.execute(1)) == 2 + (2 + 2) * 2
assert ray.get(read.bind(Counter.bind()).execute()) == 0


# A method of two values unpacks into two nodes.
@ray.remote
class Splitter:
    @ray.method(num_returns=2)
    def split(self, pair):
        return pair[0], pair[1]

splitter = Splitter.remote()
with InputNode() as inp:
    left, right = splitter.split.bind(inp)
    dag = MultiOutputNode([f.bind(left), a.bind(right)])
assert ray.get(dag.execute((1, 5))) == [2, 10]
with InputNode() as inp:
    dag = Splitter.bind().split.options(num_returns=2).bind(inp)
assert ray.get(dag.execute((3, 4))) == [3, 4]


# A node's exception raises at ray.get of its ref, and of the refs downstream of it.
@ray.remote
def fails(x):
    if x < 0:
        raise ValueError(f"negative input {x}")
    return x

with InputNode() as inp:
    dag = f.bind(fails.bind(inp))
assert ray.get(dag.execute(1)) == 2
ref = dag.execute(-1)
try:
    ray.get(ref)
    raise AssertionError("a DAG whose node raised gave a value")
except ValueError as error:
    assert "negative input -1" in str(error)
print("OK")
