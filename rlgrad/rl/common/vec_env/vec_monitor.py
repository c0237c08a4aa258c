"""``stable_baselines3.common.vec_env.vec_monitor`` -> ``rlgrad.rl.vec_env``."""

from rlgrad.rl.vec_env import VecMonitor

__all__ = ["VecMonitor"]
