"""``sb3_contrib.common.maskable.evaluation``: ``evaluate_policy`` with the env's action masks
passed to ``model.predict`` at every step (``use_masking=False``: none)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.rl.evaluation import evaluate_policy as _evaluate_policy
from rlgrad.rl.maskable import get_action_masks, is_masking_supported, masking_error
from rlgrad.rl.vec_env import as_vec_env

__all__ = ["evaluate_policy"]


class _MaskedPredict:
    """``model`` whose ``predict`` passes the env's current masks."""

    def __init__(self, model: Any, env: Any) -> None:
        self.model, self.env = model, env

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        return self.model.predict(observation, state, episode_start, deterministic,
                                  action_masks=get_action_masks(self.env))


def evaluate_policy(model: Any, env: Any, n_eval_episodes: int = 10, deterministic: bool = True,
                    render: bool = False, callback: Any = None,
                    reward_threshold: float | None = None, return_episode_rewards: bool = False,
                    warn: bool = True, use_masking: bool = True) -> Any:
    """``rlgrad.rl.evaluate_policy`` with action masks (sb3-contrib's signature)."""
    env = as_vec_env(env)
    if use_masking:
        if not is_masking_supported(env):
            raise masking_error("evaluate_policy")
        model = _MaskedPredict(model, env)
    return _evaluate_policy(model, env, n_eval_episodes, deterministic, render, callback,
                            reward_threshold, return_episode_rewards, warn)
