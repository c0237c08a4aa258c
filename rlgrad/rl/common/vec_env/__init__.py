"""``stable_baselines3.common.vec_env`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecCheckNan,
    VecEnv,
    VecEnvWrapper,
    VecNormalize,
    is_vecenv_wrapped,
    sync_envs_normalization,
    unwrap_vec_normalize,
)

__all__ = ["DummyVecEnv", "SubprocVecEnv", "VecCheckNan", "VecEnv", "VecEnvWrapper",
           "VecNormalize", "is_vecenv_wrapped", "sync_envs_normalization", "unwrap_vec_normalize"]
