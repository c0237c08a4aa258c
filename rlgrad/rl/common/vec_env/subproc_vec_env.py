"""``stable_baselines3.common.vec_env.subproc_vec_env`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import SubprocVecEnv

__all__ = ["SubprocVecEnv"]
