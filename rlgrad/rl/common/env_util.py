"""``stable_baselines3.common.env_util`` -> ``rlgrad.rl.env_util``."""

from rlgrad.rl.env_util import make_vec_env

__all__ = ["make_vec_env"]
