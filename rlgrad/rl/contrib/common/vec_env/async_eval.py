"""``sb3_contrib.common.vec_env.async_eval``: ``AsyncEval`` with sb3-contrib's interface,
evaluating in this process (see the class)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.rl.evaluation import evaluate_policy
from rlgrad.rl.vec_env import VecEnvError, unwrap_vec_normalize


class AsyncEval:
    """sb3-contrib's ``AsyncEval(envs_fn, train_policy, n_eval_episodes=1)`` for ARS
    (``ARS.learn(async_eval=...)``): candidate ``i`` is evaluated on environment
    ``i % len(envs_fn)``, each environment's ``VecNormalize`` statistics gathered and synced
    by ARS as sb3-contrib does. Not asynchronous: the environments are built and the candidates
    evaluated in this process, one after another (no worker processes); the results are the
    same as sb3-contrib's workers would give for the same environments and seeds."""

    def __init__(self, envs_fn: Sequence[Callable[[], Any]], train_policy: Any,
                 start_method: str | None = None, n_eval_episodes: int = 1) -> None:
        self.envs = [fn() for fn in envs_fn]
        self.remotes = list(range(len(self.envs)))  # (sb3-contrib's: one per worker)
        self.policy = copy.deepcopy(train_policy)
        self.n_eval_episodes = int(n_eval_episodes)
        self._jobs: list[tuple[int, np.ndarray]] = []
        self.closed = False

    def send_jobs(self, candidate_weights: Any, pop_size: int) -> None:
        """Queue the first ``pop_size`` rows of ``candidate_weights`` for evaluation."""
        self._jobs = [(i, np.asarray(candidate_weights[i])) for i in range(pop_size)]

    def get_results(self) -> list[tuple[int, tuple[list[float], list[int]]]]:
        """``[(candidate index, (episode returns, episode lengths)), ...]`` of the queued jobs."""
        results = []
        for idx, weights in self._jobs:
            self.policy.load_from_vector(weights)
            rewards, lengths = evaluate_policy(self.policy, self.envs[idx % len(self.envs)],
                                               n_eval_episodes=self.n_eval_episodes,
                                               return_episode_rewards=True, warn=False)
            results.append((idx, (rewards, lengths)))
        self._jobs = []
        return results

    def seed(self, seed: int | None = None) -> list[Any]:
        """Environment ``i`` gets ``seed + i`` at its next reset."""
        if seed is None:
            return []
        return [env.seed(seed + i) for i, env in enumerate(self.envs)]

    def set_options(self, options: list[dict] | dict | None = None) -> list[Any]:
        return [env.set_options(options) for env in self.envs]

    def get_obs_rms(self) -> list[Any]:
        """Each environment's ``VecNormalize`` observation statistics (None without one)."""
        out = []
        for env in self.envs:
            vn = unwrap_vec_normalize(env)
            out.append(None if vn is None else vn.obs_rms)
        return out

    def sync_obs_rms(self, obs_rms: Any) -> None:
        """Give every environment a copy of ``obs_rms``."""
        for env in self.envs:
            vn = unwrap_vec_normalize(env)
            if vn is None:
                raise VecEnvError("AsyncEval.sync_obs_rms: an environment has no VecNormalize")
            vn.obs_rms = copy.deepcopy(obs_rms)

    def close(self) -> None:
        if not self.closed:
            for env in self.envs:
                env.close()
            self.closed = True
