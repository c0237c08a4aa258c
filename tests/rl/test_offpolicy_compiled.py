"""The compiled off-policy updates (``OffPolicyAlgorithm.gradient_step``) and the fused Polyak
average: the same numbers as the eager losses and the NumPy formula."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.optim import target as target_mod
from rlgrad.rl import C51, DQN, QRDQN, SAC, TD3
from rlgrad.rl.steps import grad_step


def _filled(cls, **kw):
    m = cls("Pendulum-v1", seed=0, learning_starts=0, batch_size=32,
            policy_kwargs={"net_arch": [32, 32]}, **kw)
    m.learn(64)
    return m


@pytest.mark.parametrize("cls", [SAC, TD3])
def test_compiled_losses_match_eager(cls):
    """Critic and actor steps: the compiled program's loss and gradients are the eager run's
    (same ops in the same order: equal to float32 rounding)."""
    m = _filled(cls)
    b = m.batch_dict(m.sample(32))
    if cls is SAC:
        b["noise"], b["next_noise"] = m._noise(32), m._noise(32)
        b["ent_coef"] = np.array(0.2, dtype=np.float32)
        b["target_entropy"] = np.array(m.target_entropy, dtype=np.float32)
        actor_params = [*m.actor.parameters(), m.log_ent_coef]
    else:
        b = m._with_noise(b)
        actor_params = list(m.actor.parameters())
    for loss_fn, params in ((m.critic_loss, list(m.critic.parameters())),
                            (m.actor_loss, actor_params)):
        compiled = grad_step(loss_fn, params)
        for _ in range(2):  # the trace, then the replay
            lc, _, gc = compiled(b)
            le, _, ge = grad_step(loss_fn, params, compiled=False)(b)
            assert float(lc) == pytest.approx(float(le), rel=1e-6)
            for x, y in zip(gc, ge, strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
        assert any(np.abs(g).max() > 0 for g in gc)


def test_fused_polyak_is_the_numpy_formula(monkeypatch):
    """The C loop rounds as ``d *= 1 - tau; d += tau * s`` does: bitwise, float32 and float64."""
    if target_mod._fused_polyak is None:
        pytest.skip("the optional C module is not built")
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        src = [rng.standard_normal(s).astype(dtype) for s in ((7, 5), (5,), (300, 3))]
        dst = [rng.standard_normal(x.shape).astype(dtype) for x in src]
        fused, ref = [d.copy() for d in dst], [d.copy() for d in dst]
        optim.polyak_update(src, fused, 0.005)
        monkeypatch.setattr(target_mod, "_fused_polyak", None)
        optim.polyak_update(src, ref, 0.005)
        monkeypatch.undo()
        for f, r, d in zip(fused, ref, dst, strict=True):
            np.testing.assert_array_equal(f, r)
            assert not np.array_equal(f, d)
    # arrays that do not fit (mixed dtypes) take the NumPy path
    mixed_src = [np.ones(3, np.float32), np.ones(3, np.float64)]
    mixed_dst = [np.zeros(3, np.float32), np.zeros(3, np.float64)]
    optim.polyak_update(mixed_src, mixed_dst, 0.5)
    for d in mixed_dst:
        np.testing.assert_array_equal(d, 0.5)


@pytest.mark.parametrize(("cls", "kw"), [
    (DQN, {}), (DQN, {"double_q": True}),
    (QRDQN, {"policy_kwargs": {"net_arch": [32], "n_quantiles": 7}}),
    (QRDQN, {"double_q": True, "policy_kwargs": {"net_arch": [32], "n_quantiles": 7}}),
    (C51, {"policy_kwargs": {"net_arch": [32], "n_atoms": 9, "v_min": 0.0, "v_max": 20.0}}),
    (C51, {"double_q": True, "policy_kwargs": {"net_arch": [32], "n_atoms": 9}})])
def test_dqn_target_inside_the_compiled_step(cls, kw):
    """``td_loss`` (the target network's forward inside the compiled step) gives the loss and
    gradients of ``loss`` on ``td_target``'s NumPy targets, to float32 rounding."""
    m = cls("CartPole-v1", seed=0, learning_starts=0, batch_size=32, train_freq=1,
            gradient_steps=1, target_update_interval=50, learning_rate=1e-2,
            **{"policy_kwargs": {"net_arch": [32, 32]}, **kw})
    m.learn(200)  # the online and target networks differ (synced every 50 steps)
    b = m.sample(32)
    params = list(m.q_net.parameters())
    eager_target = {"obs": b.observations, "actions": b.actions, "target": m.td_target(b)}
    le, _, ge = grad_step(m.loss, params, compiled=False)(eager_target)
    compiled = grad_step(m.td_loss, params)
    for _ in range(2):  # the trace, then the replay
        lc, _, gc = compiled(m.batch_dict(b))
        assert float(lc) == pytest.approx(float(le), rel=1e-5)
        for x, y in zip(gc, ge, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
    assert any(np.abs(g).max() > 0 for g in gc)
