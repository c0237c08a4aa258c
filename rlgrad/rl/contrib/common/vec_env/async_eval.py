"""``sb3_contrib.common.vec_env.async_eval``: not implemented (see ``AsyncEval``)."""

from __future__ import annotations

from typing import Any


class AsyncEval:
    """sb3-contrib's evaluation of ARS candidates in worker processes. Not implemented in
    rlgrad: building one raises ``NotImplementedError`` in one line (rather than an ARS that
    would silently ignore it); ``ARS.learn()`` without ``async_eval`` evaluates the candidates
    one after another."""

    def __init__(self, envs_fn: Any = None, train_policy: Any = None, start_method: Any = None,
                 n_eval_episodes: int = 1) -> None:
        raise NotImplementedError("AsyncEval (ARS candidates evaluated in worker processes) is "
                                  "not implemented in rlgrad: call ARS.learn() without "
                                  "async_eval; it evaluates the candidates one after another")
