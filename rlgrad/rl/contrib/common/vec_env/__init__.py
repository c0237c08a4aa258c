"""``sb3_contrib.common.vec_env``: ``AsyncEval``, which rlgrad does not implement (ARS evaluates
its candidates one after another on the training env)."""

from rlgrad.rl.contrib.common.vec_env.async_eval import AsyncEval

__all__ = ["AsyncEval"]
