"""horovod.torch.elastic: phalanx.horovod.torch.elastic under Horovod's name."""
from phalanx.horovod.torch.elastic import *  # noqa: F401,F403
