"""``sb3_contrib.common.maskable.policies``."""

from rlgrad.rl.maskable import MaskableActorCriticPolicy

__all__ = ["MaskableActorCriticPolicy"]
