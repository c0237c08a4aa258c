"""Environments for tests/rl/test_ray.py, imported by the Ray env runners as
``tests.ray_envs:DyingCartPole-v0`` (the runners' workers have the project root on their path).

``DyingCartPole``: CartPole whose process kills itself (SIGKILL) at the first step after the file
``die_file`` appears, removing the file first so that exactly one process dies: a runner killed
in the middle of a rollout, deterministically.
"""

from __future__ import annotations

import os
import signal

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class DyingCartPole(CartPoleEnv):
    def __init__(self, die_file: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.die_file = die_file

    def step(self, action: object) -> tuple:
        if self.die_file:
            try:
                os.remove(self.die_file)  # only the one process that removes it dies
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


gym.register("DyingCartPole-v0", entry_point=DyingCartPole, max_episode_steps=500)
