"""Fast paths against the plain ones they replace: drawing all of DQN's minibatches at once, its
targets over the distinct transitions in chunks, the optimizer's flat gradient buffer, and glibc
keeping freed memory."""

import numpy as np

from rlgrad import optim
from rlgrad.nn import MLP
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


# ---- Adam: gradients written into the optimizer's flat buffer --------------------------------
def test_adam_flat_grad_buffer_gives_the_same_update_as_plain_grads():
    rng = np.random.default_rng(0)
    a, b = MLP([3, 16, 2]), MLP([3, 16, 2])
    b.load_state_dict(a.state_dict())
    oa, ob = optim.Adam(a.parameters(), lr=0.01), optim.Adam(b.parameters(), lr=0.01)
    from rlgrad.tensor import _const

    for _ in range(60):  # past the every-50-steps flush of tiny moments
        grads = [rng.normal(size=p.shape).astype(np.float32) for p in a.parameters()]
        for p, g in zip(a.parameters(), grads):
            p.grad = _const(g.copy())
        oa.step()
        flat, views = ob.flat_grad_buffer()
        for v, g in zip(views, grads):
            v[...] = g
        for p, v in zip(b.parameters(), views):
            p.grad = _const(v)
        ob.step()
        np.testing.assert_array_equal(flat, np.concatenate([g.ravel() for g in grads]))
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.data, q.data)
    sa, sb = oa.state_dict(), ob.state_dict()
    for k in sa["state"]:
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(sa["state"][k][key], sb["state"][k][key])
    # a loaded state replaces the buffer: ask again, the old views are simply copied
    ob.load_state_dict(sa)
    assert ob.flat_grad_buffer()[0] is not flat
    assert optim.Adam(MLP([3, 4]).parameters(), maximize=True).flat_grad_buffer() is None
    pa = list(a.parameters())
    two_groups = optim.Adam([{"params": pa[:1]}, {"params": pa[1:]}])
    assert two_groups.flat_grad_buffer() is None


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() is first


def test_dqn_stacked_targets_equal_td_target_bit_for_bit():
    from rlgrad.rl import make_from_preset

    m, _ = make_from_preset("dqn", "CartPole-v1", seed=1)
    m.learn(2500)
    for n_batches in (40, 128):  # a young buffer: many repeated rows; 2,560 and 8,192 rows
        b, idx = m.sample_many(n_batches, 64)
        assert len(np.unique(idx)) < len(idx)
        np.testing.assert_array_equal(m._stacked_targets(b, idx), m.td_target(b))
    small, idx = m.sample_many(4, 64)  # below two chunks: td_target itself
    np.testing.assert_array_equal(m._stacked_targets(small, idx), m.td_target(small))
