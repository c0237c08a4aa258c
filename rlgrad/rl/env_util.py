"""``make_vec_env`` as Stable-Baselines3's ``env_util`` has it: copies of an environment, each in a
``Monitor``, behind SB3's VecEnv interface (``rlgrad.rl.vec_env``).

(``rlgrad.rl.make_vec_env`` is rlgrad's own: a Gymnasium vector env, what the algorithms step.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlgrad.rl.monitor import Monitor
from rlgrad.rl.vec_env import DummyVecEnv, VecEnv


def make_vec_env(env_id: str | Callable[..., gym.Env], n_envs: int = 1, seed: int | None = None,
                 start_index: int = 0, monitor_dir: str | None = None,
                 wrapper_class: Callable[..., gym.Env] | None = None,
                 env_kwargs: dict[str, Any] | None = None,
                 vec_env_cls: type[VecEnv] | None = None,
                 vec_env_kwargs: dict[str, Any] | None = None,
                 monitor_kwargs: dict[str, Any] | None = None,
                 wrapper_kwargs: dict[str, Any] | None = None) -> VecEnv:
    """``n_envs`` copies of ``env_id`` (an id or a function making the env), each wrapped in
    ``Monitor`` (writing ``<monitor_dir>/<rank>.monitor.csv`` if given) then ``wrapper_class``;
    with ``seed``, copy i starts from seed + i."""
    env_kwargs, monitor_kwargs = dict(env_kwargs or {}), dict(monitor_kwargs or {})
    wrapper_kwargs = dict(wrapper_kwargs or {})
    if monitor_dir is not None:
        os.makedirs(monitor_dir, exist_ok=True)

    def make_env(rank: int) -> Callable[[], gym.Env]:
        def _init() -> gym.Env:
            env = gym.make(env_id, **env_kwargs) if isinstance(env_id, str) else env_id(**env_kwargs)
            path = None if monitor_dir is None else os.path.join(monitor_dir, str(rank))
            env = Monitor(env, filename=path, **monitor_kwargs)
            if seed is not None:
                env.action_space.seed(seed + rank)
            return wrapper_class(env, **wrapper_kwargs) if wrapper_class is not None else env
        return _init

    cls = vec_env_cls or DummyVecEnv
    vec_env = cls([make_env(i + start_index) for i in range(n_envs)], **(vec_env_kwargs or {}))
    vec_env.seed(None if seed is None else seed + start_index)
    return vec_env
