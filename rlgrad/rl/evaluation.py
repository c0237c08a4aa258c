"""Evaluation: mean and standard deviation of the return over complete episodes.

``evaluate`` is rlgrad's (env ids, episodes side by side in a vector env, seeded);
``evaluate_policy`` is Stable-Baselines3's, with its arguments and results.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.rl.envs import EnvLike, StepAdapter, make_vec_env
from rlgrad.rl.finite import nonfinite_actions
from rlgrad.rl.monitor import Monitor
from rlgrad.rl.vec_env import VecMonitor, as_vec_env, is_vecenv_wrapped


def _check_actions(actions: Any, step: int) -> None:
    """NonFiniteError for a model whose actions hold NaN / inf (its returns would be NaN)."""
    bad = nonfinite_actions(np.asarray(actions), step, by="the model's predict")
    if bad is not None:
        raise bad


def evaluate(agent: Any, env: EnvLike | None = None, n_episodes: int = 20,
             deterministic: bool = True, seed: int = 10_000, max_envs: int = 20
             ) -> tuple[float, float]:
    """Run ``n_episodes`` episodes of ``agent.predict`` and return (mean, std) of their returns.

    Episodes run side by side in a vector env of up to ``max_envs`` copies (seeded seed, seed+1,
    ...); each copy contributes its episodes in order, so the result does not depend on timing.
    ``env`` defaults to the id the agent was trained on. Atari ids are evaluated on whole games
    with their raw scores (no life-loss episodes, no reward clipping).
    """
    if env is None:
        env = agent.env_id
        if env is None:
            raise ValueError("the agent was trained on an environment instance: pass env=")
    n = min(n_episodes, max_envs) if isinstance(env, str) else 1
    # returns are counted here; Atari in its evaluation form (whole games, raw scores)
    venv = make_vec_env(env, n_envs=n, record_statistics=False, training=False)
    adapter = StepAdapter(venv)
    obs = adapter.reset(seed=seed)
    quota = np.full(n, n_episodes // n) + (np.arange(n) < n_episodes % n)
    ret = np.zeros(n)
    returns: list[float] = []
    while len(returns) < n_episodes:
        actions, _ = agent.predict(obs, deterministic=deterministic)
        _check_actions(actions, adapter.steps + 1)
        obs, r, term, trunc, valid, _ = adapter.step(actions)
        ret += np.where(valid, r, 0.0)
        for i in np.flatnonzero(term | trunc):
            if quota[i] > 0:
                returns.append(float(ret[i]))
                quota[i] -= 1
            ret[i] = 0.0
    venv.close()
    return float(np.mean(returns)), float(np.std(returns))


def evaluate_policy(model: Any, env: Any, n_eval_episodes: int = 10, deterministic: bool = True,
                    render: bool = False, callback: Callable[[dict, dict], None] | None = None,
                    reward_threshold: float | None = None, return_episode_rewards: bool = False,
                    warn: bool = True) -> tuple[float, float] | tuple[list[float], list[int]]:
    """Stable-Baselines3's ``evaluate_policy``: ``n_eval_episodes`` episodes of
    ``model.predict`` on ``env`` (a VecEnv with SB3's interface, a Gymnasium env, or an id), the
    episodes shared out over the copies as SB3 does (copy i runs ``(n + i) // n_envs``).

    Returns ``(mean, std)`` of the episode returns, or with ``return_episode_rewards`` the lists
    of returns and lengths. Returns come from ``Monitor``'s ``info["episode"]`` when the copies
    are wrapped in one (the whole episode even if a wrapper ended it early), else from summing
    the rewards ``env.step`` returns. ``callback(locals, globals)`` runs after every step of every
    copy still counting; ``reward_threshold`` raises if the mean is not above it.
    """
    env = as_vec_env(env)
    try:
        monitored = is_vecenv_wrapped(env, VecMonitor) or bool(env.env_is_wrapped(Monitor)[0])
    except AttributeError:  # copies outside this process
        monitored = False
    if not monitored and warn:
        warnings.warn("evaluate_policy: the env is not wrapped in a Monitor, so the returns are "
                      "the rewards as the env's wrappers changed them; wrap it in "
                      "rlgrad.rl.monitor.Monitor to count whole episodes", UserWarning, stacklevel=2)
    n = env.num_envs
    targets = np.array([(n_eval_episodes + i) // n for i in range(n)], dtype=int)
    counts = np.zeros(n, dtype=int)
    current_rewards, current_lengths = np.zeros(n), np.zeros(n, dtype=int)
    episode_rewards: list[float] = []
    episode_lengths: list[int] = []
    observations = env.reset()
    states, episode_starts = None, np.ones(n, dtype=bool)
    while (counts < targets).any():
        actions, states = model.predict(observations, state=states, episode_start=episode_starts,
                                        deterministic=deterministic)
        _check_actions(actions, int(current_lengths.max()) + 1)
        new_observations, rewards, dones, infos = env.step(actions)
        current_rewards += rewards
        current_lengths += 1
        for i in range(n):
            if counts[i] >= targets[i]:
                continue
            # (reward, done, info: locals a callback reads, as SB3's)
            reward, done, info = rewards[i], dones[i], infos[i]  # noqa: F841
            episode_starts[i] = done
            if callback is not None:
                callback(locals(), globals())
            if not dones[i]:
                continue
            if not monitored:
                episode_rewards.append(float(current_rewards[i]))
                episode_lengths.append(int(current_lengths[i]))
                counts[i] += 1
            elif "episode" in infos[i]:  # a life lost (Atari) ends no Monitor episode
                episode_rewards.append(float(infos[i]["episode"]["r"]))
                episode_lengths.append(int(infos[i]["episode"]["l"]))
                counts[i] += 1
            current_rewards[i], current_lengths[i] = 0.0, 0
        observations = new_observations
        if render:
            env.render()
    mean_reward, std_reward = float(np.mean(episode_rewards)), float(np.std(episode_rewards))
    if reward_threshold is not None and not mean_reward > reward_threshold:
        raise AssertionError(f"evaluate_policy: mean reward {mean_reward:.2f} is not above "
                             f"reward_threshold {reward_threshold:.2f}")
    if return_episode_rewards:
        return episode_rewards, episode_lengths
    return mean_reward, std_reward
