"""``phalanx.util.multiprocessing``: Ray's ``ray.util.multiprocessing``, the standard
library's ``multiprocessing.Pool`` API on actors of the cluster (see ``.pool``).

    from phalanx.util.multiprocessing import Pool

    pool = Pool()
    for result in pool.map(f, range(100)):
        print(result)

``TimeoutError`` (what ``AsyncResult.get(timeout)`` and ``imap``'s ``next(timeout)`` raise)
and ``JoinableQueue`` are the standard library's, as Ray's module re-exports them.
"""

from multiprocessing import JoinableQueue, TimeoutError

from .pool import AsyncResult, IMapIterator, Pool

__all__ = ["Pool", "AsyncResult", "IMapIterator", "TimeoutError", "JoinableQueue"]
