"""Environments as functions of arrays, for loops that can be compiled whole (issue 31).

Gymnasium's classic-control tasks written with ``rlgrad.numpy`` in Gymnasium's ``FuncEnv``
interface (``initial``, ``transition``, ``observation``, ``reward``, ``terminal``), equal to
Gymnasium's own step for step, and registered with Gymnasium as ``rlgrad/<id>``::

    import gymnasium as gym
    import rlgrad.rl  # registers the ids
    env = gym.make("rlgrad/CartPole-v1")                          # one copy
    venv = gym.make_vec("rlgrad/CartPole-v1", num_envs=8,
                        vectorization_mode="vector_entry_point")  # one batch of 8 states

The vector env steps all copies with one call per function (no Python loop over copies), and an
algorithm takes it like any Gymnasium vector env.
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.experimental.functional import FuncEnv

from rlgrad.rl.functional.classic import (
    AcrobotFunctional,
    CartPoleFunctional,
    MountainCarContinuousFunctional,
    MountainCarFunctional,
    PendulumFunctional,
)
from rlgrad.rl.functional.vector import FunctionalEnv, FunctionalVectorEnv

__all__ = ["FUNCTIONAL_ENVS", "AcrobotFunctional", "CartPoleFunctional", "FunctionalEnv",
           "FunctionalVectorEnv", "MountainCarContinuousFunctional", "MountainCarFunctional",
           "PendulumFunctional", "register_functional_envs"]

#: Gymnasium's id -> (the functional class, Gymnasium's time limit for it)
FUNCTIONAL_ENVS: dict[str, tuple[type[FuncEnv], int]] = {
    "CartPole-v1": (CartPoleFunctional, 500),
    "Acrobot-v1": (AcrobotFunctional, 500),
    "MountainCar-v0": (MountainCarFunctional, 200),
    "MountainCarContinuous-v0": (MountainCarContinuousFunctional, 999),
    "Pendulum-v1": (PendulumFunctional, 200),
}


def make_env(func_env_cls: type[FuncEnv], render_mode: str | None = None) -> FunctionalEnv:
    """Gymnasium's entry point for one copy."""
    return FunctionalEnv(func_env_cls(), render_mode=render_mode)


def make_vector_env(func_env_cls: type[FuncEnv], num_envs: int = 1,
                    max_episode_steps: int | None = None) -> FunctionalVectorEnv:
    """Gymnasium's vector entry point."""
    return FunctionalVectorEnv(func_env_cls(), num_envs, max_episode_steps)


def register_functional_envs() -> None:
    """Registers ``rlgrad/<id>`` for each of ``FUNCTIONAL_ENVS`` (once)."""
    for env_id, (cls, limit) in FUNCTIONAL_ENVS.items():
        name = f"rlgrad/{env_id}"
        if name in gym.registry:
            continue
        gym.register(id=name, entry_point=make_env, vector_entry_point=make_vector_env,
                     max_episode_steps=limit, kwargs={"func_env_cls": cls})
