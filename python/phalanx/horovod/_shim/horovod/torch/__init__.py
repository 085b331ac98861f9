"""horovod.torch: phalanx.horovod.torch under Horovod's name (`phalanx run --horovod`)."""
from phalanx.horovod.torch import *  # noqa: F401,F403
from phalanx.horovod.torch import elastic  # noqa: F401
