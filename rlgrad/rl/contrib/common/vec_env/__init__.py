"""``sb3_contrib.common.vec_env``: ``AsyncEval`` (in this process, see the class)."""

from rlgrad.rl.contrib.common.vec_env.async_eval import AsyncEval

__all__ = ["AsyncEval"]
