"""``sb3_contrib`` under rlgrad: scripts written for sb3-contrib run with ``sb3_contrib`` changed
to ``rlgrad.rl.contrib`` in their imports. The algorithms are rlgrad's (``rlgrad.rl``), each a
subclass over the shared on-/off-policy bases; this package gives them sb3-contrib's module
names (``ppo_recurrent``, ``ppo_mask``, ``qrdqn``, ``common.wrappers``, ...)."""

from rlgrad.rl.ars import ARS
from rlgrad.rl.contrib.common import envs as _envs  # noqa: F401  (registers CartPoleNoVel-v1)
from rlgrad.rl.crossq import CrossQ
from rlgrad.rl.maskable import MaskablePPO
from rlgrad.rl.qrdqn import QRDQN
from rlgrad.rl.recurrent_ppo import RecurrentPPO
from rlgrad.rl.tqc import TQC
from rlgrad.rl.trpo import TRPO

__all__ = ["ARS", "CrossQ", "MaskablePPO", "QRDQN", "RecurrentPPO", "TQC", "TRPO"]
