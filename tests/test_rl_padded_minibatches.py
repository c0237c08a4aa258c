"""PPO's shuffled minibatches all have ``batch_size`` rows (the ragged last one padded with rows of
weight 0), so one compiled step serves them: the padded step equals the unpadded eager one."""

import numpy as np

from rlgrad.rl import PPO


def _collected(seed=0):
    m = PPO("CartPole-v1", n_envs=4, n_steps=32, batch_size=40, n_epochs=1, seed=seed)
    m._setup_learn(128, True)
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
