"""CleanRL's ``ddpg_continuous_action.py`` and ``ppo_continuous_action.py`` as CleanRL-style
scripts next to this file (imports of rlgrad, nothing else changed): DDPG learns Pendulum with a
fixed seed (random actions score about -1200, the run ends near -250); PPO runs its updates on
Pendulum (it needs ~10^5 steps to improve, so only that it runs is asserted there). Each
script's update, loaded once more with its import lines pointed at torch, gives torch's losses
and parameters on the same weights and batch."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cleanrl_scripts import copy_weights, lines_naming_rlgrad, load, only_imports

gym = pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["cleanrl_style_ddpg", "cleanrl_style_ppo_continuous"])
def test_only_the_import_lines_name_rlgrad(name: str) -> None:
    named = lines_naming_rlgrad(name)
    assert len(named) >= 4 and only_imports(named), named


def test_ddpg_script_learns_pendulum() -> None:
    out = load("cleanrl_style_ddpg").main(["--total-timesteps", "7000", "--seed", "1"])
    returns = out["episode_returns"]
    assert len(returns) == 35
    assert np.mean(returns[:5]) < -700  # random actions
    assert np.mean(returns[-5:]) > -400, returns[-5:]


def _pendulum_vec() -> object:
    return gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])


def _params(net: object) -> dict[str, np.ndarray]:
    return {n: p.detach().numpy().copy() for n, p in net.named_parameters()}


def test_ddpg_train_step_matches_torch() -> None:
    """One critic step and one actor step (global_step even) with the soft target updates."""
    from types import SimpleNamespace

    envs = _pendulum_vec()
    rng = np.random.default_rng(0)
    batch = {"observations": rng.normal(size=(16, 3)), "next_observations": rng.normal(size=(16, 3)),
             "actions": rng.uniform(-2, 2, size=(16, 1)), "rewards": rng.normal(size=(16, 1)),
             "dones": (rng.random((16, 1)) < 0.2)}
    mods = [load("cleanrl_style_ddpg", lib) for lib in ("rlgrad", "torch")]
    nets = [(m.Actor(envs, 32), m.QNetwork(envs, 32), m.Actor(envs, 32), m.QNetwork(envs, 32)) for m in mods]
    for a, b in zip(*nets):
        copy_weights(a, b)
    got = []
    for mod, net in zip(mods, nets):
        args = mod.parse_args(["--hidden", "32"])
        opts = (mod.optim.Adam(list(net[1].parameters()), lr=1e-3),
                mod.optim.Adam(list(net[0].parameters()), lr=1e-3))
        data = SimpleNamespace(**{k: mod.torch.tensor(v.astype(np.float32)) for k, v in batch.items()})
        losses = [mod.train_step(args, data, net, opts, step) for step in (0, 2)]
        got.append((losses, [_params(n) for n in net]))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-4)
    for rl_p, th_p in zip(got[0][1], got[1][1]):
        for name in th_p:
            np.testing.assert_allclose(rl_p[name], th_p[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_ppo_continuous_script_runs_on_pendulum() -> None:
    out = load("cleanrl_style_ppo_continuous").main(
        ["--total-timesteps", "2048", "--num-steps", "256", "--update-epochs", "2"])
    assert len(out["losses"]) == 4 * 2 * 32 and np.all(np.isfinite(out["losses"]))
    returns = out["episode_returns"]
    assert len(returns) == 2048 // 200 and all(-2000 < r < 0 for r in returns)
    assert len(out["explained_variance"]) == 4


def test_ppo_continuous_update_matches_torch() -> None:
    """Two epochs of four minibatches (clipped value loss, gradient clipping, Adam) from the same
    weights and rollout: torch's losses, clip fractions and parameters."""
    envs = _pendulum_vec()
    rng = np.random.default_rng(1)
    n = 64
    rollout = [rng.normal(size=(n, 3)), -rng.random(n) * 3, rng.normal(size=(n, 1)),
               rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)]
    mods = [load("cleanrl_style_ppo_continuous", lib) for lib in ("rlgrad", "torch")]
    agents = [m.Agent(envs) for m in mods]
    copy_weights(*agents)
    got = []
    for mod, agent in zip(mods, agents):
        args = mod.parse_args(["--num-envs", "1", "--num-steps", str(n), "--num-minibatches", "4",
                               "--update-epochs", "2", "--target-kl", "1000"])
        agent.actor_logstd.data.fill_(-0.5)
        opt = mod.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
        b = tuple(mod.torch.tensor(x.astype(np.float32)) for x in rollout)
        np.random.seed(3)
        losses, approx_kl, clipfracs = mod.update(agent, opt, b, args)
        got.append((losses, float(approx_kl), clipfracs, _params(agent)))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=2e-3, atol=1e-7)
    assert got[0][2] == got[1][2] and max(got[0][2]) > 0  # some ratios were clipped
    for name, p in got[1][3].items():
        np.testing.assert_allclose(got[0][3][name], p, rtol=2e-4, atol=1e-6, err_msg=name)
