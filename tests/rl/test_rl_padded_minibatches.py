"""PPO's shuffled minibatches all have ``batch_size`` rows (the ragged last one padded with rows of
weight 0), so one compiled step serves them: the padded step equals the unpadded eager one."""

import numpy as np

from rlgrad.rl import PPO


def _collected(seed=0):
    m = PPO("CartPole-v1", n_envs=4, n_steps=32, batch_size=40, n_epochs=1, seed=seed)
    m._setup_learn(128, reset_num_timesteps=True)
    m.collect_rollouts(None)
    return m


def test_padded_minibatches_cover_the_valid_rows_once_in_get_order():
    m = _collected()
    buf = m.rollout_buffer
    n_valid = len(buf.valid_indices())
    assert n_valid % 40  # a ragged last minibatch (CartPole episodes end within 128 steps)
    state = m.rng.bit_generator.state
    plain = list(buf.get(40, m.rng))
    m.rng.bit_generator.state = state
    padded = list(buf.padded_minibatches(40, m.rng))
    assert [n for _, n in padded] == [len(b.advantages) for b in plain]
    for (pb, n), b in zip(padded, plain):
        assert all(len(x) == 40 for x in pb)
        for x, y in zip(pb, b):
            np.testing.assert_array_equal(x[:n], y)


def test_padded_compiled_step_equals_unpadded_eager_step():
    m = _collected()
    eager, compiled = m._loss_step(False), m._loss_step(True)
    *_, (b, sl) = list(m._minibatches())  # the ragged last minibatch, padded
    n = sl.stop
    assert n < 40 and (b["weights"][n:] == 0).all()
    b["clip"] = np.float32(0.2)
    real = {k: (v[:n] if isinstance(v, np.ndarray) and v.ndim and len(v) == 40 else v)
            for k, v in b.items()}
    real["weights"] = np.full(n, 1.0 / n, np.float32)
    loss_p, s_p, g_p = compiled(b, True)
    loss_e, s_e, g_e = eager(real, True)
    np.testing.assert_allclose(float(loss_p), float(loss_e), rtol=1e-5, atol=1e-7)
    for k in ("policy_loss", "value_loss", "entropy_loss"):
        np.testing.assert_allclose(float(s_p[k]), float(s_e[k]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(s_p["log_prob"][:n], s_e["log_prob"], rtol=1e-6, atol=1e-7)
    for gp, ge in zip(g_p, g_e):
        scale = float(np.abs(ge).max()) + 1e-12
        np.testing.assert_allclose(gp, ge, rtol=0, atol=1e-5 * scale)


def test_ratio_statistics_of_padded_minibatches_at_once_equal_one_by_one():
    from rlgrad.rl.ppo import _approx_kl, _approx_kl_padded

    rng = np.random.default_rng(0)
    lp, old = rng.normal(-0.7, 0.3, (5, 40)), rng.normal(-0.7, 0.3, (5, 40))
    n = np.array([40, 40, 40, 40, 17])
    kl, cf = _approx_kl_padded(lp, old, n, 0.2)
    for i in range(5):
        k, c = _approx_kl(lp[i], old[i], slice(None, n[i]), 0.2)
        assert kl[i] == np.float64(k) or abs(kl[i] - k) <= 1e-12 * max(abs(k), 1e-300)
        assert cf[i] == c


def test_minibatch_advantages_normalised_one_minibatch_at_a_time():
    """An epoch's full minibatches are normalised in one pass: bit for bit what normalising
    each minibatch alone gives (SB3's rule, unbiased std), the padding rows 0."""
    m = _collected(seed=1)
    buf = m.rollout_buffer
    state = m.rng.bit_generator.state
    raw = list(buf.padded_minibatches(40, m.rng))
    m.rng.bit_generator.state = state
    got = list(m._minibatches())
    assert len(got) == len(raw) and raw[-1][1] < 40
    for (b, sl), (mb, n) in zip(got, raw):
        assert sl.stop == n
        a = mb.advantages[:n]
        np.testing.assert_array_equal(b["advantages"][:n], (a - a.mean()) / (a.std(ddof=1) + 1e-8))
        assert (b["advantages"][n:] == 0).all()
        np.testing.assert_array_equal(b["weights"][:n], np.float32(1.0 / n))
        assert (b["weights"][n:] == 0).all()
        np.testing.assert_array_equal(b["obs"], mb.observations)


def test_grad_step_with_a_static_argument_compiles_one_program_per_value():
    """grad_step(..., static_argnums) keeps one compiled program per static value (each looked
    up by the batch's shapes alone) with the eager step's results, the static value choosing
    the program (here: whether the entropy term is in the loss)."""
    from rlgrad.rl.steps import grad_step

    m = _collected()
    m.ent_coef = 0.01
    b, _ = next(m._minibatches())
    b["clip"] = np.array(0.2, dtype=np.float32)
    step = grad_step(m.loss, m._params, compiled=True, static_argnums=(1,))
    eager = grad_step(m.loss, m._params, compiled=False)
    for use_entropy in (True, False, True):
        loss, s, g = step(b, use_entropy)
        loss_e, s_e, g_e = eager(b, use_entropy)
        np.testing.assert_allclose(float(loss), float(loss_e), rtol=1e-5, atol=1e-7)
        for x, y in zip(g, g_e):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6 * float(np.abs(y).max()))
    # the entropy term is in the loss only when asked
    ent = float(s["entropy_loss"]) * m.ent_coef
    loss_f = float(step(b, False)[0])
    np.testing.assert_allclose(float(loss) - loss_f, ent, rtol=1e-4, atol=1e-7)
