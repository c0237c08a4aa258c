"""CleanRL's ``c51.py`` and ``rpo_continuous_action.py`` failed under rlgrad on
``torch.linspace(..., steps=n)``, ``Tensor.index_add_`` and ``torch.FloatTensor(shape).uniform_``
(issue 29). The CleanRL-style scripts next to this file use those idioms: C51 learns CartPole
with a fixed seed (the untrained policy's returns are ~20); RPO runs its updates on Pendulum
(a short budget: Pendulum needs ~10^5 steps to improve, so only that it runs is asserted)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cleanrl_scripts import lines_naming_rlgrad, load, only_imports

pytest.importorskip("gymnasium")


@pytest.mark.parametrize("name", ["cleanrl_style_c51", "cleanrl_style_rpo"])
def test_only_the_import_lines_name_rlgrad(name: str) -> None:
    named = lines_naming_rlgrad(name)  # after the module docstring
    assert len(named) >= 3 and only_imports(named), named


def test_c51_script_learns_cartpole() -> None:
    out = load("cleanrl_style_c51").main(["--total-timesteps", "15000", "--seed", "1"])
    returns = out["episode_returns"]
    assert np.mean(returns[:10]) < 40  # the untrained policy
    assert np.mean(returns[-10:]) > 120, returns[-10:]
    assert np.all(np.isfinite(out["losses"])) and out["losses"][-1] < out["losses"][0]


def test_rpo_script_runs_its_updates_on_pendulum() -> None:
    out = load("cleanrl_style_rpo").main(["--total-timesteps", "4096", "--num-steps", "1024",
                                          "--update-epochs", "2"])
    assert len(out["losses"]) == 4 * 2 * 32 and np.all(np.isfinite(out["losses"]))
    returns = out["episode_returns"]
    assert len(returns) == 4096 // 200 and all(-2000 < r < 0 for r in returns)


def test_c51_projection_through_row_views_matches_a_dense_one() -> None:
    """``target_pmfs[i].index_add_(0, l[i], d_m_l[i])`` writes into ``target_pmfs`` (a row view)
    as torch does: the projected distributions are those of one scatter-add over all rows."""
    import rlgrad

    mod = load("cleanrl_style_c51")
    args = mod.parse_args(["--n-atoms", "11", "--v-min", "-5", "--v-max", "5"])
    net = mod.QNetwork(4, 2, args.n_atoms, args.v_min, args.v_max)
    rng = np.random.default_rng(0)
    pmfs = rng.dirichlet(np.ones(11), size=6).astype(np.float32)
    rew = rng.normal(size=(6, 1)).astype(np.float32)
    done = (rng.random((6, 1)) < 0.3).astype(np.float32)
    with rlgrad.no_grad():
        got = mod.project(net, rlgrad.tensor(pmfs), rlgrad.tensor(rew), rlgrad.tensor(done), args)
    atoms = np.linspace(-5, 5, 11)
    b = (np.clip(rew + 0.99 * atoms * (1 - done), -5, 5) + 5) / 1.0
    lo, up = np.floor(b), np.ceil(b)
    want = np.zeros((6, 11))
    for i in range(6):
        np.add.at(want[i], lo[i].astype(int), (up[i] + (lo[i] == up[i]) - b[i]) * pmfs[i])
        np.add.at(want[i], up[i].astype(int), (b[i] - lo[i]) * pmfs[i])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.numpy().sum(1), 1.0, rtol=1e-5)
