"""``phalanx.util.queue``: Ray's ``ray.util.queue``, a first-in, first-out queue that tasks,
actors and the driver share.

    from phalanx.util.queue import Queue, Empty, Full

    q = Queue(maxsize=100)            # an actor holds the items
    producer.remote(q)                # the Queue travels to tasks and actors as a handle
    item = q.get(timeout=5)           # Empty if nothing came within 5 s

The items live in one async actor. A ``get`` that waits (or a ``put`` on a full queue) is a
coroutine parked on that actor's event loop, not a thread, so other calls go on meanwhile:
a consumer blocked in ``get`` never holds up the producer's ``put``. Every operation is one
actor call; ``put_nowait_batch`` and ``get_nowait_batch`` move many items in one.

A Queue object is safe to use from several threads and processes at once (the actor orders
the calls). Order among several producers of a full queue, or several consumers of an empty
one, is the order their calls reach the actor.
"""

import asyncio
import collections
import queue as _stdlib_queue
from collections.abc import Iterable

from .._api import get as _get
from .._api import kill as _kill
from .._api import wait as _wait
from .._task import remote as _remote

__all__ = ["Queue", "Empty", "Full"]


class Empty(_stdlib_queue.Empty):
    """Raised by ``get`` (and ``get_nowait_batch``) when no item is there in time; also a
    ``queue.Empty``, so code written for the standard library's queues catches it."""


class Full(_stdlib_queue.Full):
    """Raised by ``put`` (and ``put_nowait_batch``) when there is no room in time; also a
    ``queue.Full``."""


class Queue:
    """A FIFO queue held by an actor (Ray's ``ray.util.queue.Queue``).

    ``maxsize``: how many items it holds at most; 0 (the default) or less is unbounded.
    ``actor_options``: given to the actor's ``.options(...)`` (e.g. ``{"num_cpus": 1}``,
    ``{"name": "jobs", "lifetime": "detached"}``).

    Each method returns once the actor answered; ``Empty``/``Full`` say that the queue had
    no item/room within the timeout; ``ActorDiedError`` that the actor is gone (``shutdown``,
    or its node died: the items went with it).
    """

    def __init__(self, maxsize=0, actor_options=None):
        if not isinstance(maxsize, int) or isinstance(maxsize, bool):
            raise TypeError(f"maxsize={maxsize!r}: give a whole number (0: unbounded)")
        self.maxsize = maxsize
        self.actor = _remote(_QueueActor).options(**(actor_options or {})).remote(maxsize)

    def __reduce__(self):
        # Travels as its actor's handle: every copy reaches the same items.
        return _queue_of_actor, (self.maxsize, self.actor)

    def __len__(self):
        return self.size()

    def size(self):
        """How many items the queue holds now."""
        return _get(self._actor().qsize.remote())

    qsize = size

    def empty(self):
        """Whether the queue holds no item now."""
        return _get(self._actor().empty.remote())

    def full(self):
        """Whether the queue holds ``maxsize`` items now (never, when unbounded)."""
        return _get(self._actor().full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds ``item`` at the end. On a full queue: with ``block``, waits for room (at most
        ``timeout`` seconds; None: as long as it takes), else raises ``Full`` at once."""
        if not block:
            return self.put_nowait(item)
        _check_timeout(timeout)
        if not _get(self._actor().put.remote(item, timeout)):
            raise Full(f"the queue stayed full (maxsize {self.maxsize}) for {timeout} s")

    async def put_async(self, item, block=True, timeout=None):
        """``put`` for a coroutine: awaits the actor's answer without blocking the loop."""
        if not block:
            if not await self._actor().put_nowait.remote(item):
                raise Full(f"the queue is full (maxsize {self.maxsize})")
            return
        _check_timeout(timeout)
        if not await self._actor().put.remote(item, timeout):
            raise Full(f"the queue stayed full (maxsize {self.maxsize}) for {timeout} s")

    def get(self, block=True, timeout=None):
        """Removes and returns the first item. On an empty queue: with ``block``, waits for
        one (at most ``timeout`` seconds; None: as long as it takes), else raises ``Empty``
        at once."""
        if not block:
            return self.get_nowait()
        _check_timeout(timeout)
        found, item = _get(self._actor().get.remote(timeout))
        if not found:
            raise Empty(f"no item came within {timeout} s")
        return item

    async def get_async(self, block=True, timeout=None):
        """``get`` for a coroutine: awaits the actor's answer without blocking the loop."""
        if not block:
            found, item = await self._actor().get_nowait.remote()
            if not found:
                raise Empty("the queue is empty")
            return item
        _check_timeout(timeout)
        found, item = await self._actor().get.remote(timeout)
        if not found:
            raise Empty(f"no item came within {timeout} s")
        return item

    def put_nowait(self, item):
        """``put(item, block=False)``: ``Full`` at once when there is no room."""
        if not _get(self._actor().put_nowait.remote(item)):
            raise Full(f"the queue is full (maxsize {self.maxsize})")

    def put_nowait_batch(self, items):
        """Adds all of ``items``, in order, in one call; if they do not all fit, adds none
        and raises ``Full``."""
        if not isinstance(items, Iterable):
            raise TypeError(f"put_nowait_batch takes an iterable of items, not "
                            f"{type(items).__name__}")
        items = list(items)
        refused = _get(self._actor().put_nowait_batch.remote(items))
        if refused:
            raise Full(refused)

    def get_nowait(self):
        """``get(block=False)``: ``Empty`` at once when there is no item."""
        found, item = _get(self._actor().get_nowait.remote())
        if not found:
            raise Empty("the queue is empty")
        return item

    def get_nowait_batch(self, num_items):
        """Removes and returns the first ``num_items`` items, in order, in one call; if the
        queue holds fewer, removes none and raises ``Empty``."""
        if not isinstance(num_items, int) or isinstance(num_items, bool):
            raise TypeError(f"num_items={num_items!r}: give a whole number")
        if num_items < 0:
            raise ValueError(f"num_items={num_items}: give a number >= 0")
        found, items = _get(self._actor().get_nowait_batch.remote(num_items))
        if not found:
            raise Empty(items)
        return items

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor (its items are dropped, and calls waiting on it fail with
        ActorDiedError). ``force`` kills it at once; otherwise it is asked to exit after
        the calls that reached it before this one, and killed if it has not after
        ``grace_period_s`` seconds. The Queue (and every copy of it) is unusable after."""
        if self.actor is None:
            return
        actor, self.actor = self.actor, None
        if not force:
            ready, _ = _wait([actor.exit.remote()], timeout=grace_period_s)
            if ready:
                return
        _kill(actor, no_restart=True)

    def _actor(self):
        if self.actor is None:
            raise RuntimeError("this Queue was shut down (Queue.shutdown()); make a new one")
        return self.actor


def _queue_of_actor(maxsize, actor):
    q = Queue.__new__(Queue)
    q.maxsize = maxsize
    q.actor = actor
    return q


def _check_timeout(timeout):
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout={timeout!r}: give a number of seconds >= 0, or None to "
                         f"wait as long as it takes")


class _QueueActor:
    """The actor behind a Queue. Every method is a coroutine, so all of them run on the
    actor's one event loop thread and none needs a lock (a plain method of an async actor
    would run on a thread of its own, beside the loop).

    A waiting ``get`` parks a future in ``_getters``; ``put`` hands its item straight to the
    first one. A ``put`` that waits for room parks its item and a future in ``_putters``;
    ``get`` moves the first one's item in as it makes room. Whatever settles a future first
    (the item or room arriving, the timeout, a cancel) wins, so no item is lost to a timeout.
    The answers say Empty/Full as values ((found, item), True/False, a message), not as
    exceptions, so a miss costs no traceback.
    """

    def __init__(self, maxsize):
        self._maxsize = maxsize
        self._items = collections.deque()
        self._getters = collections.deque()  # futures of gets waiting for an item
        self._putters = collections.deque()  # _Put of puts waiting for room

    async def qsize(self):
        return len(self._items)

    async def empty(self):
        return not self._items

    async def full(self):
        return 0 < self._maxsize <= len(self._items)

    async def put_nowait(self, item):
        if self._has_no_room():
            return False
        self._add(item)
        return True

    async def put(self, item, timeout=None):
        if not self._has_no_room():
            self._add(item)
            return True
        waiting = _Put(item, asyncio.get_running_loop().create_future())
        self._putters.append(waiting)
        return await _settled(waiting.future, timeout, False, self._putters, waiting)

    async def put_nowait_batch(self, items):
        if self._maxsize > 0 and len(items) + len(self._items) > self._maxsize:
            return (f"{len(items)} items do not fit in the queue: it holds "
                    f"{len(self._items)} of maxsize {self._maxsize}")
        for item in items:
            self._add(item)
        return None

    async def get_nowait(self):
        if not self._items:
            return False, None
        return True, self._take()

    async def get(self, timeout=None):
        if self._items:
            return True, self._take()
        future = asyncio.get_running_loop().create_future()
        self._getters.append(future)
        try:
            return await _settled(future, timeout, (False, None), self._getters, future)
        except asyncio.CancelledError:
            # Cancelled (phalanx.cancel) just after an item was handed over: it goes back
            # to the front.
            if future.done() and not future.cancelled():
                self._add(future.result()[1], front=True)
            raise

    async def get_nowait_batch(self, num_items):
        if num_items > len(self._items):
            return False, (f"cannot take {num_items} items: the queue holds "
                           f"{len(self._items)}")
        return True, [self._take() for _ in range(num_items)]

    async def exit(self):
        from ..actor import exit_actor
        exit_actor()

    def _has_no_room(self):
        return self._maxsize > 0 and (len(self._items) >= self._maxsize or
                                      bool(self._putters))

    def _add(self, item, front=False):
        """Hands `item` to the first waiting get, else adds it at the end (the front, for
        one given back); the caller checked for room."""
        while self._getters:
            future = self._getters.popleft()
            if not future.done():
                future.set_result((True, item))
                return
        if front:
            self._items.appendleft(item)
        else:
            self._items.append(item)

    def _take(self):
        item = self._items.popleft()
        while self._putters and len(self._items) < self._maxsize:
            waiting = self._putters.popleft()
            if not waiting.future.done():
                self._add(waiting.item)
                waiting.future.set_result(True)
        return item


class _Put:
    """A put waiting for room. Compared by identity: items need not support ==."""

    __slots__ = ("item", "future")

    def __init__(self, item, future):
        self.item = item
        self.future = future


async def _settled(future, timeout, miss, line, entry):
    """The future's result; after `timeout` seconds without one, `miss`. A wait that ends
    without a result (timed out or cancelled) takes `entry` out of its waiting `line`."""
    try:
        if timeout is None:
            return await future
        done, _ = await asyncio.wait([future], timeout=timeout)
    except asyncio.CancelledError:
        if future.cancelled() or not future.done():
            future.cancel()
            _discard(line, entry)
        raise
    if done:
        return future.result()
    future.cancel()
    _discard(line, entry)
    return miss


def _discard(line, entry):
    try:
        line.remove(entry)
    except ValueError:
        pass  # already taken off by a put or get that found it settled
