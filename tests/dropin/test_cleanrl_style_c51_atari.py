"""CleanRL's c51_atari.py idioms (``linspace(steps=)``, ``index_add_`` into rows of a zeros
tensor, ``pmfs[arange(n), action]``) in the CleanRL-style script next to this file: it runs on
ALE Breakout with a tiny budget, and its network and projection, loaded once with the imports
pointed at torch, give torch's values and gradients on the same weights."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cleanrl_scripts import copy_weights, load

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py", reason="the atari extra (pip install 'rlgrad[atari]') is not installed")
torch = pytest.importorskip("torch")


def test_c51_script_runs_on_atari() -> None:
    out = load("cleanrl_style_c51_atari").main(["--total-timesteps", "80", "--seed", "1"])
    assert len(out["losses"]) == 9  # steps 44, 48 ... 76: past learning_starts=40, every 4th
    assert np.all(np.isfinite(out["losses"])) and out["losses"][0] > 0


def test_c51_network_and_projection_match_torch() -> None:
    rl_mod, th_mod = load("cleanrl_style_c51_atari"), load("cleanrl_style_c51_atari", "torch")
    rl_net, th_net = rl_mod.QNetwork(4, 11, -5, 5), th_mod.QNetwork(4, 11, -5, 5)
    copy_weights(rl_net, th_net)
    args = rl_mod.parse_args(["--n-atoms", "11", "--v-min", "-5", "--v-max", "5"])
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 255, size=(3, 4, 84, 84)).astype(np.float32)
    acts = np.array([1, 3, 0])
    rew = np.array([[1.0], [-0.5], [0.0]], dtype=np.float32)
    done = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    got = []
    for lib, net, mod in ((rl_mod.torch, rl_net, rl_mod), (torch, th_net, th_mod)):
        action, pmf = net.get_action(lib.tensor(obs))
        with lib.no_grad():
            target = mod.project(args, net, lib.tensor(rew), lib.tensor(done), pmf)
        _, old = net.get_action(lib.tensor(obs), lib.tensor(acts))
        loss = (-(target * old.clamp(min=1e-5, max=1 - 1e-5).log()).sum(-1)).mean()
        loss.backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in net.named_parameters()}
        got.append(([t.detach().numpy() for t in (action, pmf, target, old, loss)], grads))
    for a, b in zip(got[0][0], got[1][0]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(got[0][0][2].sum(-1), 1.0, rtol=1e-5)  # a distribution per row
    for name, g in got[1][1].items():
        np.testing.assert_allclose(got[0][1][name], g, rtol=2e-3, atol=1e-6, err_msg=name)
