"""TQC (rlgrad.rl.tqc): the critic loss and its gradient against sb3-contrib's quantile Huber
loss (torch), the truncated target against NumPy, sb3-contrib's policy_kwargs, learning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad.rl import evaluate_policy
from rlgrad.rl.contrib import TQC
from rlgrad.rl.qrdqn import quantile_huber_loss, quantile_midpoints

torch = pytest.importorskip("torch")
sb3_utils = pytest.importorskip("sb3_contrib.common.utils")



def test_critic_loss_matches_sb3_contrib_with_gradient() -> None:
    rng = np.random.default_rng(0)
    B, C, Q, T = 7, 3, 5, 11
    cur = rng.standard_normal((B, C * Q)).astype(np.float32) * 2
    tgt = rng.standard_normal((B, T)).astype(np.float32) * 2
    x = rlgrad.tensor(cur, requires_grad=True)
    taus = np.tile(quantile_midpoints(Q), C)
    loss = quantile_huber_loss(x, tgt, taus) / (C * Q)
    loss.backward()
    t = torch.tensor(cur.reshape(B, C, Q), requires_grad=True)
    ref = sb3_utils.quantile_huber_loss(t, torch.tensor(tgt)[:, None, :],
                                        sum_over_quantiles=False)
    ref.backward()
    np.testing.assert_allclose(float(loss._value), float(ref.detach()), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy().reshape(B, C * Q), rtol=1e-4,
                               atol=1e-8)


def test_truncated_target_and_policy_kwargs() -> None:
    m = TQC("Pendulum-v1", seed=0, top_quantiles_to_drop_per_net=3, learning_starts=10,
            policy_kwargs={"n_quantiles": 7, "n_critics": 3, "net_arch": [16]})
    assert m.critic.n_critics == 3 and m.n_target_quantiles == (7 - 3) * 3
    m.learn(40)
    b = m.batch_dict(m.sample(8))
    noise = m._noise(8)
    b["next_noise"], b["ent_coef"] = noise, np.array(0.3, np.float32)
    y = m.regression_target(b)
    with rlgrad.no_grad():
        a, logp = m._rsample(b["next_obs"], noise)
        z = np.sort(np.asarray(m.critic_target(b["next_obs"], a)._value), axis=1)[:, :12]
        want = b["rewards"][:, None] + m.gamma * b["not_terminated"][:, None] * (
            z - 0.3 * np.asarray(logp._value)[:, None])
    assert y.shape == (8, 12)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="drops every one"):
        TQC("Pendulum-v1", top_quantiles_to_drop_per_net=7, policy_kwargs={"n_quantiles": 7})


def test_tqc_learns_pendulum(seeded_eval_env: Callable[[str], Any]) -> None:
    m = TQC("Pendulum-v1", seed=0, learning_starts=500)
    untrained, _ = evaluate_policy(m, seeded_eval_env("Pendulum-v1"), n_eval_episodes=3, warn=False)
    m.learn(4000)
    mean, _ = evaluate_policy(m, seeded_eval_env("Pendulum-v1"), n_eval_episodes=3, warn=False)
    assert mean > untrained + 300, (untrained, mean)


def test_save_and_load_keep_the_quantile_critics(tmp_path):
    """A saved TQC loads back (its critics' keys are not renamed as SAC's old ones are) with the
    same quantiles, actions and target critics."""
    m = TQC("MlpPolicy", "Pendulum-v1", buffer_size=10, seed=0,
            policy_kwargs=dict(net_arch=[8], n_quantiles=3))
    m.save(tmp_path / "tqc.zip")
    back = TQC.load(tmp_path / "tqc.zip")
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    act = np.random.default_rng(1).uniform(-1, 1, (4, 1)).astype(np.float32)
    for a, b in ((m.critic, back.critic), (m.critic_target, back.critic_target)):
        np.testing.assert_array_equal(a(obs, act)._value, b(obs, act)._value)
    np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0],
                                  back.predict(obs, deterministic=True)[0])
