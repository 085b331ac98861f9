"""Ray's ``ray.util.actor_pool``: ``ActorPool`` spreads calls over a fixed set of actors.

    pool = ActorPool([Worker.remote() for _ in range(4)])
    results = list(pool.map(lambda a, v: a.double.remote(v), range(100)))
"""

import collections

from .._api import get, wait

__all__ = ["ActorPool"]


class ActorPool:
    """Calls ``fn(actor, value)`` on whichever actor is free; results come back in order
    (``map``, ``get_next``) or as they finish (``map_unordered``, ``get_next_unordered``)."""

    def __init__(self, actors):
        self._idle = list(actors)
        self._future_to_actor = {}   # ref -> (index, actor)
        self._index_to_future = {}   # submission index -> ref
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending = collections.deque()  # (fn, value) waiting for an actor

    def map(self, fn, values):
        """Results of ``fn(actor, v)`` for each value, in the values' order."""
        return self._map(fn, values, self.get_next)

    def map_unordered(self, fn, values):
        """The same results, as they finish."""
        return self._map(fn, values, self.get_next_unordered)

    def _map(self, fn, values, take):
        self._drain()  # what an earlier submit left is dropped, as Ray's map does
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield take()

    def submit(self, fn, value):
        """Schedules ``fn(actor, value)`` on a free actor, or once one is free."""
        if self._idle:
            actor = self._idle.pop()
            ref = fn(actor, value)
            self._future_to_actor[ref] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = ref
            self._next_task_index += 1
        else:
            self._pending.append((fn, value))

    def has_next(self):
        """Whether a result is still to be fetched."""
        return bool(self._future_to_actor) or bool(self._pending)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order; TimeoutError after ``timeout`` seconds."""
        if not self.has_next():
            raise StopIteration("no more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("it is not allowed to call get_next() after "
                             "get_next_unordered()")
        ref = self._index_to_future[self._next_return_index]
        if timeout is not None:
            ready, _ = wait([ref], timeout=timeout)
            if not ready:
                if ignore_if_timedout:
                    del self._index_to_future[self._next_return_index]
                    self._next_return_index += 1
                    self._return_actor(self._future_to_actor.pop(ref)[1])
                raise TimeoutError("timed out waiting for the next result")
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(ref)
        self._return_actor(actor)
        return get(ref)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Whichever result is ready first; TimeoutError after ``timeout`` seconds."""
        if not self.has_next():
            raise StopIteration("no more results to get")
        ready, _ = wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError("timed out waiting for a result")
        ref = ready[0]
        index, actor = self._future_to_actor.pop(ref)
        self._index_to_future.pop(index, None)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)
        return get(ref)

    def has_free(self):
        """Whether an actor is idle (and nothing waits for one)."""
        return bool(self._idle) and not self._pending

    def pop_idle(self):
        """Takes an idle actor out of the pool (None if none is idle)."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor):
        """Adds an actor to the pool (it must not be in it already)."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle or actor in busy:
            raise ValueError("the actor is already in the pool")
        self._return_actor(actor)

    def _return_actor(self, actor):
        self._idle.append(actor)
        if self._pending:
            self.submit(*self._pending.popleft())

    def _drain(self):
        while self.has_next():
            try:
                self.get_next_unordered()
            except StopIteration:
                break
