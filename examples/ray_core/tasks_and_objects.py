# Ray Core's first steps, with only the import changed: remote functions, refs as
# arguments, put/get of a large array passed by reference, wait, a tree of tasks, a streaming
# generator task, and weights broadcast by reference each step.
import time

import numpy as np
import phalanx as ray

ray.init()


@ray.remote
def square(x):
    return x * x


futures = [square.remote(i) for i in range(4)]
assert ray.get(futures) == [0, 1, 4, 9]

# Pass large arguments by reference: put once, hand the ref to many tasks.
matrix = np.random.rand(1000, 1000)
matrix_ref = ray.put(matrix)


@ray.remote
def trace(m):
    return float(np.trace(m))


assert ray.get([trace.remote(matrix_ref) for _ in range(4)]) == [float(np.trace(matrix))] * 4


# Objects nested in a list are not resolved: the task gets the refs.
@ray.remote
def echo_and_get(x_list):
    return ray.get(x_list)


a, b = ray.put(1), ray.put(2)
assert ray.get(echo_and_get.remote([a, b])) == [1, 2]


# A tree of tasks: a task that starts tasks, 5 levels deep (more waiting tasks than CPUs: a
# task waiting in get lends its CPU to the tasks it waits for).
@ray.remote
def partial_sum(lo, hi):
    if hi - lo <= 4:
        return sum(range(lo, hi))
    mid = (lo + hi) // 2
    return sum(ray.get([partial_sum.remote(lo, mid), partial_sum.remote(mid, hi)]))


assert ray.get(partial_sum.remote(0, 64)) == sum(range(64))

# Process results as they finish with wait.
refs = [square.remote(i) for i in range(6)]
total = 0
while refs:
    done, refs = ray.wait(refs, num_returns=1)
    total += ray.get(done[0])
assert total == sum(i * i for i in range(6))


@ray.remote(num_returns=2)
def split(x):
    return x, -x


pos, neg = split.remote(3)
assert ray.get([pos, neg]) == [3, -3]


# Ray generators: a task that yields gives a ref per value, each as soon as it is yielded.
@ray.remote
def task():
    for i in range(5):
        time.sleep(0.5)
        yield i


start = time.time()
gen = task.remote()
ref = next(gen)
assert ray.get(ref) == 0
first_after = time.time() - start
assert [ray.get(ref) for ref in gen] == [1, 2, 3, 4]
assert first_after < time.time() - start - 1.0  # the first value came well before the last


# The broadcast pattern of Ray's docs: weights put once per step and sent inside a dict; a
# step's weights are freed once no trainer holds them (the trainers borrow them).
@ray.remote
class Trainer:
    def step(self, state):
        return float(ray.get(state["weights"]).sum())


trainers = [Trainer.remote() for _ in range(2)]
for step in range(3):
    weights = ray.put(np.full(1_000_000, float(step)))
    assert ray.get([t.step.remote({"weights": weights}) for t in trainers]) == [step * 1e6] * 2
print("OK")
