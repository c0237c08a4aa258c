"""``stable_baselines3.common.vec_env.dummy_vec_env`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import DummyVecEnv

__all__ = ["DummyVecEnv"]
