"""``stable_baselines3.common.base_class`` -> ``rlgrad.rl.base``."""

from rlgrad.rl.base import BaseAlgorithm

__all__ = ["BaseAlgorithm"]
