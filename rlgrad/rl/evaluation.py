"""Evaluation: mean and standard deviation of the return over complete episodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.rl.envs import EnvLike, StepAdapter, make_vec_env


def evaluate(agent: Any, env: EnvLike | None = None, n_episodes: int = 20,
             deterministic: bool = True, seed: int = 10_000, max_envs: int = 20
             ) -> tuple[float, float]:
    """Run ``n_episodes`` episodes of ``agent.predict`` and return (mean, std) of their returns.

    Episodes run side by side in a vector env of up to ``max_envs`` copies (seeded seed, seed+1,
    ...); each copy contributes its episodes in order, so the result does not depend on timing.
    ``env`` defaults to the id the agent was trained on.
    """
    if env is None:
        env = agent.env_id
        if env is None:
            raise ValueError("the agent was trained on an environment instance: pass env=")
    n = min(n_episodes, max_envs) if isinstance(env, str) else 1
    venv = make_vec_env(env, n_envs=n, record_statistics=False)  # returns are counted here
    adapter = StepAdapter(venv)
    obs = adapter.reset(seed=seed)
    quota = np.full(n, n_episodes // n) + (np.arange(n) < n_episodes % n)
    ret = np.zeros(n)
    returns: list[float] = []
    while len(returns) < n_episodes:
        actions, _ = agent.predict(obs, deterministic=deterministic)
        obs, r, term, trunc, valid, _ = adapter.step(actions)
        ret += np.where(valid, r, 0.0)
        for i in np.flatnonzero(term | trunc):
            if quota[i] > 0:
                returns.append(float(ret[i]))
                quota[i] -= 1
            ret[i] = 0.0
    venv.close()
    return float(np.mean(returns)), float(np.std(returns))
