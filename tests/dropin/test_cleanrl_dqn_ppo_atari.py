"""CleanRL's ``dqn_atari.py`` and ``ppo_atari.py`` as CleanRL-style scripts next to this file
(imports of rlgrad, nothing else changed): each runs with a tiny budget on the ALE env the Atari
tests use, and its update, loaded once more with the import lines pointed at torch, gives
torch's losses and parameters from the same weights and batch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from helpers.cleanrl_scripts import copy_weights, lines_naming_rlgrad, load, only_imports

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py", reason="the atari extra (pip install 'rlgrad[atari]') is not installed")
torch = pytest.importorskip("torch")


def _params(net: object) -> dict[str, np.ndarray]:
    return {n: p.detach().numpy().copy() for n, p in net.named_parameters()}


def _assert_params_close(got: dict, want: dict, atol: float = 2e-6) -> None:
    for name, p in want.items():
        np.testing.assert_allclose(got[name], p, rtol=2e-3, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", ["cleanrl_style_dqn_atari", "cleanrl_style_ppo_atari"])
def test_only_the_import_lines_name_rlgrad(name: str) -> None:
    named = lines_naming_rlgrad(name)
    assert len(named) >= 4 and only_imports(named), named


def test_dqn_atari_script_runs() -> None:
    out = load("cleanrl_style_dqn_atari").main(["--total-timesteps", "80", "--seed", "1"])
    assert len(out["losses"]) == 9  # steps 44, 48 ... 76: past learning_starts=40, every 4th
    assert np.all(np.isfinite(out["losses"])) and np.all(np.isfinite(out["q_means"]))


def test_dqn_atari_td_step_matches_torch() -> None:
    """``max(dim=1)`` of the target, ``gather(1, a).squeeze()``, MSE and an Adam step on uint8 frames."""
    mods = [load("cleanrl_style_dqn_atari", lib) for lib in ("rlgrad", "torch")]
    nets = [(m.QNetwork(4), m.QNetwork(4)) for m in mods]
    for a, b in zip(*nets):
        copy_weights(a, b)
    rng = np.random.default_rng(0)
    batch = {"observations": rng.integers(0, 255, (5, 4, 84, 84), dtype=np.uint8),
             "next_observations": rng.integers(0, 255, (5, 4, 84, 84), dtype=np.uint8),
             "actions": rng.integers(0, 4, (5, 1)), "rewards": np.float32([[1], [0], [-1], [0], [1]]),
             "dones": np.float32([[0], [1], [0], [0], [1]])}
    got = []
    for mod, (q, target) in zip(mods, nets):
        opt = mod.optim.Adam(q.parameters(), lr=1e-3)
        data = SimpleNamespace(**{k: mod.torch.as_tensor(v) for k, v in batch.items()})
        loss, old_val = mod.td_loss(mod.parse_args([]), q, target, data)
        opt.zero_grad()
        loss.backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in q.named_parameters()}
        opt.step()
        assert old_val.dtype == mod.torch.float32 and tuple(old_val.shape) == (5,)
        got.append((loss.item(), old_val.detach().numpy(), grads, _params(q)))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-4)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-4, atol=1e-6)
    _assert_params_close(got[0][2], got[1][2], atol=1e-6)
    # Adam's first step is lr * g / (|g| + eps): near-zero gradients make it sensitive to rounding
    _assert_params_close(got[0][3], got[1][3], atol=1e-4)


def test_ppo_atari_script_runs() -> None:
    out = load("cleanrl_style_ppo_atari").main(
        ["--total-timesteps", "64", "--num-steps", "16", "--num-envs", "2", "--seed", "1"])
    assert out["steps"] == 64
    assert len(out["losses"]) == 2 * 2 * 2  # iterations x epochs x minibatches
    assert np.all(np.isfinite(out["losses"]))


def test_ppo_atari_update_matches_torch() -> None:
    mods = [load("cleanrl_style_ppo_atari", lib) for lib in ("rlgrad", "torch")]
    agents = [m.Agent(4) for m in mods]
    copy_weights(*agents)
    rng = np.random.default_rng(2)
    n = 8
    rollout = [rng.integers(0, 255, (n, 4, 84, 84)).astype(np.float32), -rng.random(n) - 1.0,
               rng.integers(0, 4, n).astype(np.float32), rng.normal(size=n), rng.normal(size=n)]
    got = []
    for mod, agent in zip(mods, agents):
        args = mod.parse_args(["--num-envs", "1", "--num-steps", str(n)])
        opt = mod.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
        b = tuple(mod.torch.tensor(x.astype(np.float32)) for x in rollout)
        np.random.seed(3)
        got.append((mod.update(agent, opt, b, args), _params(agent)))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-3, atol=1e-6)
    _assert_params_close(got[0][1], got[1][1])
