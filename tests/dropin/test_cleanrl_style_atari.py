"""The CleanRL-style Atari scripts next to this file run with a tiny budget on the ALE env the
Atari tests use, and their networks, loaded once with rlgrad and once with the import lines
pointed at torch (nothing else changed), give torch's values and gradients on the same weights."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers.cleanrl_scripts import copy_weights, lines_naming_rlgrad, load, only_imports

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py", reason="the atari extra (pip install 'rlgrad[atari]') is not installed")
torch = pytest.importorskip("torch")


SCRIPTS = ["cleanrl_style_ppo_atari_lstm", "cleanrl_style_c51_atari"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_import_lines_name_rlgrad(name: str) -> None:
    named = lines_naming_rlgrad(name)
    assert len(named) >= 4 and only_imports(named), named
    assert importlib.util.find_spec("torch") is not None


def test_ppo_lstm_script_runs_on_atari() -> None:
    out = load("cleanrl_style_ppo_atari_lstm").main(
        ["--total-timesteps", "64", "--num-steps", "16", "--num-envs", "2", "--seed", "1"])
    assert out["steps"] == 64
    assert len(out["losses"]) == 2 * 2 * 2  # iterations x epochs x minibatches
    assert np.all(np.isfinite(out["losses"]))


def test_lstm_agent_matches_torch_with_done_masking() -> None:
    rl_mod, th_mod = load("cleanrl_style_ppo_atari_lstm"), load("cleanrl_style_ppo_atari_lstm", "torch")
    rl_agent, th_agent = rl_mod.Agent(4), th_mod.Agent(4)
    copy_weights(rl_agent, th_agent)
    rng = np.random.default_rng(0)
    steps, envs = 3, 2
    obs = rng.integers(0, 255, size=(steps * envs, 1, 84, 84)).astype(np.float32)
    done = np.array([0, 0, 1, 0, 0, 1], dtype=np.float32)  # an episode ends mid-sequence
    state = rng.normal(size=(2, 1, envs, 128)).astype(np.float32)
    actions = np.array([0, 1, 2, 3, 1, 0])
    got = []
    for lib, agent in ((rl_mod.torch, rl_agent), (torch, th_agent)):
        h0, c0 = lib.tensor(state[0]), lib.tensor(state[1])
        _, logp, ent, value, (h, c) = agent.get_action_and_value(
            lib.tensor(obs), (h0, c0), lib.tensor(done), lib.tensor(actions))
        (logp.sum() + 0.1 * ent.sum() + (value ** 2).mean()).backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in agent.named_parameters()}
        got.append(([t.detach().numpy() for t in (logp, ent, value, h, c)], grads))
    for a, b in zip(got[0][0], got[1][0]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    for name, g in got[1][1].items():
        np.testing.assert_allclose(got[0][1][name], g, rtol=2e-3, atol=2e-5, err_msg=name)

