"""``stable_baselines3.common.vec_env.vec_check_nan`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import VecCheckNan

__all__ = ["VecCheckNan"]
