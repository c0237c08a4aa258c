"""The CleanRL-style scripts next to this file (written for PyTorch, imports of rlgrad) run
unchanged and learn CartPole with fixed seeds: the untrained policies' returns are ~20, and the
scripts end well above 150 (the budgets are a fraction of CleanRL's); TD3 and SAC on Pendulum go
from about -1200 to their usual -150..-300."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cleanrl_scripts import lines_naming_rlgrad, load, only_imports

pytest.importorskip("gymnasium")


@pytest.mark.parametrize("name", ["cleanrl_style_ppo", "cleanrl_style_dqn",
                                  "cleanrl_style_td3", "cleanrl_style_sac"])
def test_only_the_import_lines_name_rlgrad(name: str) -> None:
    named = lines_naming_rlgrad(name)  # after the module docstring
    assert len(named) >= 4 and only_imports(named), named


def test_ppo_script_learns_cartpole() -> None:
    out = load("cleanrl_style_ppo").main(["--total-timesteps", "20480", "--seed", "1"])
    returns = out["episode_returns"]
    assert np.mean(returns[:10]) < 40  # the untrained policy
    assert np.mean(returns[-10:]) > 150, returns[-10:]


def test_dqn_script_learns_cartpole() -> None:
    out = load("cleanrl_style_dqn").main(["--total-timesteps", "15000", "--seed", "1"])
    returns = out["episode_returns"]
    assert np.mean(returns[:10]) < 40
    assert np.mean(returns[-10:]) > 150, returns[-10:]


@pytest.mark.parametrize(("name", "steps"), [("cleanrl_style_ppo", 4096), ("cleanrl_style_dqn", 2500)])
def test_compiled_update_is_the_eager_update(name: str, steps: int) -> None:
    """``--compile`` puts the script's update (PPO's minibatch step; DQN's TD step and its soft
    target update) under ``torch.compile``, as LeanRL does: the same episodes to the last return,
    seed for seed (rlgrad.compile replays the same NumPy calls)."""
    script = load(name)
    eager = script.main(["--total-timesteps", str(steps), "--seed", "1"])
    compiled = script.main(["--total-timesteps", str(steps), "--seed", "1", "--compile"])
    assert len(eager["episode_returns"]) > 20
    assert compiled["episode_returns"] == eager["episode_returns"]


def test_td3_script_learns_pendulum() -> None:
    out = load("cleanrl_style_td3").main(["--total-timesteps", "7000", "--seed", "1"])
    returns = out["episode_returns"]
    assert np.mean(returns[:5]) < -700  # random actions
    assert np.mean(returns[-5:]) > -400, returns[-5:]


def test_sac_script_learns_pendulum() -> None:
    out = load("cleanrl_style_sac").main(["--total-timesteps", "6000", "--seed", "1"])
    returns = out["episode_returns"]
    assert np.mean(returns[:5]) < -700  # random actions
    assert np.mean(returns[-5:]) > -400, returns[-5:]
