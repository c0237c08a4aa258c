"""``stable_baselines3.common.vec_env.vec_normalize`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import VecNormalize

__all__ = ["VecNormalize"]
