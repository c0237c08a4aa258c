"""Fixtures of the RL tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rlgrad.rl.common.env_util import make_vec_env


@pytest.fixture
def seeded_eval_env() -> Callable[[str], Any]:
    """An evaluation env with fixed starts: on an unseeded one the same trained model scores
    differently from run to run (TRPO's Pendulum return moved by 120 over 5 episodes)."""
    return lambda env_id: make_vec_env(env_id, n_envs=1, seed=100)
