"""``stable_baselines3.common.vec_env.base_vec_env`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import CloudpickleWrapper, VecEnv, VecEnvWrapper, tile_images

__all__ = ["VecEnv", "VecEnvWrapper", "CloudpickleWrapper", "tile_images"]
