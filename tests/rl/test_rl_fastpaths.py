"""Fast paths against the plain ones they replace: drawing all of DQN's minibatches at once, its
targets over the distinct transitions in chunks or inside the compiled step against the plain
per-minibatch NumPy targets, and glibc keeping freed memory."""

import numpy as np
import pytest
from fp_tolerance import assert_close_ulps

from rlgrad.rl.base import keep_freed_memory
from rlgrad.rl.buffers import ReplayBuffer


# ---- replay sampling -------------------------------------------------------------------------
def test_sample_many_draws_what_repeated_sample_calls_draw():
    rb = ReplayBuffer(1000, 3, (), np.int64)
    rng = np.random.default_rng(0)
    for _ in range(7):
        k = 50
        rb.add(rng.normal(size=(k, 3)).astype(np.float32), rng.normal(size=(k, 3)).astype(np.float32),
               rng.integers(0, 4, k), rng.normal(size=k).astype(np.float32), rng.random(k) < 0.1,
               rng.random(k) < 0.1)
    one, many = np.random.default_rng(5), np.random.default_rng(5)
    batches = [rb.sample(32, one) for _ in range(9)]
    idx = rb.sample_indices(9 * 32, many)
    stacked = rb.take(idx)
    for field, parts in zip(stacked, zip(*batches)):
        if field is None:  # (discounts: n-step replay only)
            assert all(p is None for p in parts)
            continue
        np.testing.assert_array_equal(field, np.concatenate(parts))
    assert one.random() == many.random()  # the generators continue in step


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() is first


def test_dqn_stacked_targets_equal_td_target():
    from rlgrad.rl import make_from_preset

    m, _ = make_from_preset("dqn", "CartPole-v1", seed=1)
    m.learn(2500)
    for n_batches in (40, 128):  # a young buffer: many repeated rows; 2,560 and 8,192 rows
        b, idx = m.sample_many(n_batches, 64)
        assert len(np.unique(idx)) < len(idx)
        # the distinct rows in 1,024-row chunks: other matrix shapes than td_target's, which BLAS
        # may round differently in float32's last bits
        assert_close_ulps(m._stacked_targets(b, idx), m.td_target(b))
    small, idx = m.sample_many(4, 64)  # below two chunks: td_target itself
    np.testing.assert_array_equal(m._stacked_targets(small, idx), m.td_target(small))


def test_stacked_targets_take_several_values_per_row():
    """A DQN variant whose target is a row per transition (quantiles, atoms) gets the same
    stacked targets as td_target, also when the batch size equals the row length."""
    from rlgrad import ops
    from rlgrad.rl import DQN
    from rlgrad.rl.dqn import bootstrap

    class RowDQN(DQN):
        def bootstrap_target(self, b, target_out, online_out):
            v = ops.max(target_out, axis=1)
            return bootstrap(b, ops.stack([v * k for k in (1.0, 0.5, 2.0, -1.0)], axis=1))

    m = RowDQN("CartPole-v1", learning_starts=10_000, seed=0)  # collect only (no loss here)
    assert m.train_target_path(600) == "stacked"
    m.learn(2500)
    b, idx = m.sample_many(600, 4)  # 2,400 rows: two chunks and a deduplicated stack
    y = m.td_target(b)
    assert y.shape == (2400, 4)
    np.testing.assert_allclose(y[:, 1], 0.5 * y[:, 0] + 0.5 * b.rewards, rtol=1e-5, atol=1e-5)
    assert_close_ulps(m._stacked_targets(b, idx), y)


VARIANTS = [("DQN", {}), ("QRDQN", {"n_quantiles": 5}), ("C51", {"n_atoms": 11, "v_min": 0.0, "v_max": 50.0})]


@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize(("name", "net"), VARIANTS)
def test_every_target_path_trains_alike(name, net, double_q):
    """One ``train`` call from the same state along each ``target_path`` ("stacked" turns into
    "step" with Double DQN): the parameters it reaches agree with the plain "batch" path's to
    float32 rounding (the paths differ in matrix shapes and in traced vs NumPy forwards)."""
    import rlgrad.rl

    def trained(path):
        m = getattr(rlgrad.rl, name)("CartPole-v1", seed=0, learning_starts=3000, batch_size=32,
                                     double_q=double_q, learning_rate=1e-3,
                                     policy_kwargs={"net_arch": [32], **net})
        m.learn(3000)  # collect only
        for p in m.q_net_target.parameters():  # a target network unlike the online one
            p._value *= np.float32(0.9)
        m.target_path = path
        start = m.q_net[0].weight._value.copy()
        m.train(gradient_steps=70, batch_size=32)  # 2,240 rows: the chunked stacked targets
        return m, [p._value.copy() for p in m.q_net.parameters()], start

    _, plain, start = trained("batch")
    assert np.abs(plain[0] - start).max() > 1e-2  # the call trained
    for path in ("stacked", "step"):
        m, params, _ = trained(path)
        assert m.train_target_path(70) == ("step" if double_q else path)
        for a, b in zip(params, plain, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_an_unknown_target_path_is_refused_in_one_line():
    from rlgrad.rl import DQN

    m = DQN("CartPole-v1", seed=0)
    m.target_path = "fast"
    with pytest.raises(ValueError, match="DQN.target_path is 'fast'; set one of stacked, step"):
        m.train_target_path(4)
