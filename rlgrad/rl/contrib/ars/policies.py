"""``sb3_contrib.ars.policies``."""

from rlgrad.rl.ars import ARSLinearPolicy, ARSPolicy, LinearPolicy, MlpPolicy

__all__ = ["ARSLinearPolicy", "ARSPolicy", "LinearPolicy", "MlpPolicy"]
