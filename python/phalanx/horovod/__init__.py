"""Horovod's API on Phalanx, for Horovod elastic programs: ``phalanx.horovod.torch``.

A program written for Horovod elastic runs with ``import horovod.torch as hvd`` changed to
``import phalanx.horovod.torch as hvd``, or unchanged under ``phalanx run --horovod``, which
puts a ``horovod`` package naming this one first on the ranks' path.
"""
