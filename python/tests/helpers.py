"""Actor classes shared by the tests (importable by workers through the driver's sys.path)."""

import os
import time

import phalanx


@phalanx.remote
class Counter:
    def __init__(self, start=0):
        self.value = start
        self.seen = []

    def add(self, x):
        self.value += x
        return self.value

    def get(self):
        return self.value

    def record(self, i):
        self.seen.append(i)
        return len(self.seen) - 1

    def pid(self):
        return os.getpid()

    def fail(self, message):
        raise ValueError(message)

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def allocate(self, nbytes):
        import numpy as np
        ballast = np.ones(nbytes // 8)
        time.sleep(5)
        return int(ballast.sum())

    def call_other(self, handle, x):
        return phalanx.get(handle.add.remote(x))


class BrokenInit:
    def __init__(self):
        raise RuntimeError("the constructor failed on purpose")
