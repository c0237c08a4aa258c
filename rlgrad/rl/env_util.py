"""``make_vec_env`` and ``make_atari_env`` as Stable-Baselines3's ``env_util`` has them: copies of
an environment, each in a ``Monitor``, behind SB3's VecEnv interface (``rlgrad.rl.vec_env``);
``is_wrapped`` / ``unwrap_wrapper`` look through a Gymnasium wrapper chain.

(``rlgrad.rl.make_vec_env`` is rlgrad's own: a Gymnasium vector env, what the algorithms step.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlgrad.rl.monitor import Monitor
from rlgrad.rl.vec_env import DummyVecEnv, VecEnv, is_wrapped


def unwrap_wrapper(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> gym.Wrapper | None:
    """The first ``wrapper_class`` in the wrapper chain of ``env``, if any."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return env
        env = env.env
    return None


def _make_one(env_id: str | Callable[..., gym.Env], env_kwargs: dict[str, Any]) -> gym.Env:
    """An id made with ``render_mode="rgb_array"`` unless given (as SB3 does, so that video
    recorders work), falling back to no render mode for envs that take none."""
    if not isinstance(env_id, str):
        return env_id(**env_kwargs)
    try:
        return gym.make(env_id, **{"render_mode": "rgb_array", **env_kwargs})
    except TypeError:
        return gym.make(env_id, **env_kwargs)


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
    with ``seed``, copy i starts from seed + i (its action space seeded with seed + rank)."""
    env_kwargs, monitor_kwargs = dict(env_kwargs or {}), dict(monitor_kwargs or {})
    wrapper_kwargs = dict(wrapper_kwargs or {})
    if monitor_dir is not None:
        os.makedirs(monitor_dir, exist_ok=True)

    def make_env(rank: int) -> Callable[[], gym.Env]:
        def _init() -> gym.Env:
            env = _make_one(env_id, env_kwargs)
            if seed is not None:
                env.action_space.seed(seed + rank)
            path = None if monitor_dir is None else os.path.join(monitor_dir, str(rank))
            env = Monitor(env, filename=path, **monitor_kwargs)
            return wrapper_class(env, **wrapper_kwargs) if wrapper_class is not None else env
        return _init

    cls = vec_env_cls or DummyVecEnv
    vec_env = cls([make_env(i + start_index) for i in range(n_envs)], **(vec_env_kwargs or {}))
    vec_env.seed(seed)  # the first reset's seeds (random ones for None, as SB3)
    return vec_env


def make_atari_env(env_id: str | Callable[..., gym.Env], n_envs: int = 1,
                   seed: int | None = None, start_index: int = 0,
                   monitor_dir: str | None = None, wrapper_kwargs: dict[str, Any] | None = None,
                   env_kwargs: dict[str, Any] | None = None,
                   vec_env_cls: type[VecEnv] | None = None,
                   vec_env_kwargs: dict[str, Any] | None = None,
                   monitor_kwargs: dict[str, Any] | None = None) -> VecEnv:
    """``make_vec_env`` with SB3's ``AtariWrapper`` around each copy (84x84x1 uint8)."""
    from rlgrad.rl.common.atari_wrappers import AtariWrapper

    return make_vec_env(env_id, n_envs=n_envs, seed=seed, start_index=start_index,
                        monitor_dir=monitor_dir, wrapper_class=AtariWrapper,
                        env_kwargs=env_kwargs, vec_env_cls=vec_env_cls,
                        vec_env_kwargs=vec_env_kwargs, monitor_kwargs=monitor_kwargs,
                        wrapper_kwargs=wrapper_kwargs)


__all__ = ["is_wrapped", "make_atari_env", "make_vec_env", "unwrap_wrapper"]
