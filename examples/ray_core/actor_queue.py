# Ray's ray.util.queue.Queue with only the import changed (named actor_queue.py as Ray's
# doc_code/actor-queue.py is: a script named queue.py would shadow the standard library's
# queue module): the Queue docstring's example, the documentation's consumers blocked in
# get while the driver puts, a producer task and a consumer actor sharing one Queue, get
# with a timeout raising Empty, put on a full queue raising Full, the batch calls, get_async
# and put_async in a driver coroutine, and shutdown.
import asyncio
import time

import phalanx as ray
from phalanx.util.queue import Empty, Full, Queue

ray.init()

# The Queue docstring's example.
q = Queue()
items = list(range(10))
for item in items:
    q.put(item)
for item in items:
    assert item == q.get()
# Create Queue with the underlying actor reserving 1 CPU.
q = Queue(actor_options={"num_cpus": 1})
q.put("reserved")
assert q.get() == "reserved"
q.shutdown()

# doc_code/actor-queue.py: you can pass this object around to different tasks/actors.
queue = Queue(maxsize=100)


@ray.remote
def consumer(queue):
    next_item = queue.get(block=True)
    print(f"got work {next_item}")
    return next_item


consumers = [consumer.remote(queue) for _ in range(2)]

[queue.put(i) for i in range(10)]
taken = ray.get(consumers)
assert sorted(taken) == [0, 1], taken
assert queue.qsize() == 8 and len(queue) == 8
assert queue.get_nowait_batch(8) == list(range(2, 10))
assert queue.empty()


# A producer task and a consumer actor sharing one Queue; the consumer blocks in get
# before anything was put, and the producer's puts still reach the queue's actor.
@ray.remote
def producer(queue, n):
    for i in range(n):
        queue.put(i * i)
    return n


@ray.remote
class Consumer:
    def __init__(self, queue):
        self.queue = queue

    def consume(self, n):
        return [self.queue.get(timeout=30) for _ in range(n)]


c = Consumer.remote(queue)
consumed = c.consume.remote(20)
time.sleep(0.5)
assert ray.get(producer.remote(queue, 20)) == 20
assert ray.get(consumed) == [i * i for i in range(20)]

# get with a timeout raises Empty (a queue.Empty too); so does get(block=False).
start = time.time()
try:
    queue.get(timeout=0.5)
    raise AssertionError("get on an empty queue returned")
except Empty:
    assert time.time() - start >= 0.5
try:
    queue.get(block=False)
    raise AssertionError("get_nowait on an empty queue returned")
except Empty:
    pass
try:
    queue.get(timeout=-1)
    raise AssertionError("a negative timeout was taken")
except ValueError:
    pass

# put on a full queue: block=False raises Full at once, a timeout raises Full after it.
small = Queue(maxsize=2)
small.put("a")
small.put("b")
assert small.full() and small.size() == 2
try:
    small.put("c", block=False)
    raise AssertionError("put_nowait on a full queue returned")
except Full:
    pass
try:
    small.put("c", timeout=0.2)
    raise AssertionError("put on a full queue returned")
except Full:
    pass

# Batches: all or nothing.
try:
    small.put_nowait_batch(["c", "d"])
    raise AssertionError("a batch larger than the room was taken")
except Full:
    pass
assert small.get_nowait_batch(2) == ["a", "b"]
small.put_nowait_batch(["c", "d"])
try:
    small.get_nowait_batch(3)
    raise AssertionError("a batch larger than the queue was returned")
except Empty:
    pass
assert [small.get_nowait(), small.get_nowait()] == ["c", "d"]


# get_async and put_async in a driver coroutine: a get waits for a put made after it.
async def async_get_put():
    waiting = asyncio.ensure_future(small.get_async(timeout=10))
    await asyncio.sleep(0.2)
    await small.put_async("from a coroutine")
    got = await waiting
    try:
        await small.get_async(block=False)
        raise AssertionError("get_async(block=False) on an empty queue returned")
    except Empty:
        pass
    return got

assert asyncio.run(async_get_put()) == "from a coroutine"

small.shutdown()
queue.shutdown(force=True)
print("OK")
