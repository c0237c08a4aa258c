"""Fast paths against the plain ones they replace: drawing all of DQN's minibatches at once, its
targets over the distinct transitions in chunks, and glibc keeping freed memory."""

import numpy as np
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
