"""``stable_baselines3.common.env_util`` -> ``rlgrad.rl.env_util``."""

from rlgrad.rl.env_util import is_wrapped, make_atari_env, make_vec_env, unwrap_wrapper

__all__ = ["is_wrapped", "make_atari_env", "make_vec_env", "unwrap_wrapper"]
