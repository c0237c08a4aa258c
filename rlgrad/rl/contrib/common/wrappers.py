"""``sb3_contrib.common.wrappers``: ``ActionMasker``, which gives an env the ``action_masks()``
method MaskablePPO reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["ActionMasker"]


class ActionMasker(gym.Wrapper):
    """``action_masks()`` returns ``action_mask_fn(env)`` (True: allowed), or the wrapped env's
    method of that name when ``action_mask_fn`` is a string."""

    def __init__(self, env: gym.Env, action_mask_fn: str | Callable[[gym.Env], Any]) -> None:
        super().__init__(env)
        if isinstance(action_mask_fn, str):
            method = getattr(self.env, action_mask_fn, None)
            if not callable(method):
                raise ValueError(f"ActionMasker: the env has no method {action_mask_fn!r}; pass "
                                 "the name of one of its methods or a function mask_fn(env)")
            self._mask_fn: Callable[[], Any] = method
        elif callable(action_mask_fn):
            self._mask_fn = lambda: action_mask_fn(self.env)
        else:
            raise ValueError(f"ActionMasker: action_mask_fn must be a function mask_fn(env) or "
                             f"a method name, got {action_mask_fn!r}")

    def action_masks(self) -> np.ndarray:
        return np.asarray(self._mask_fn(), dtype=bool)
