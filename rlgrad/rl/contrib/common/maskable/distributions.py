"""``sb3_contrib.common.maskable.distributions``."""

from rlgrad.rl.maskable import HUGE_NEG, MaskableCategorical

__all__ = ["HUGE_NEG", "MaskableCategorical"]
