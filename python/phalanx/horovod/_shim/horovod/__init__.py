"""Horovod's name for phalanx.horovod (`phalanx run --horovod` puts this on the ranks' path)."""
