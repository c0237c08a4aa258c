"""``stable_baselines3.common.monitor`` -> ``rlgrad.rl.monitor``."""

from rlgrad.rl.monitor import Monitor

__all__ = ["Monitor"]
