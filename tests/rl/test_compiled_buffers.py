"""Work the engine skips or reuses without changing a number: the gradient products of ``linear``
that leave out units dead for the whole batch, and ``rlgrad.jit``'s reused intermediate buffers."""

from __future__ import annotations

import numpy as np
import pytest
from fp_tolerance import assert_product_close

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import autograd
from rlgrad.gradcheck import check_grads
from rlgrad.nn import functional as F
from rlgrad.ops import _clip
from rlgrad.optim import algorithms


def _dead_unit_batch(rows: int = 32, units: int = 96, inputs: int = 80, dead: float = 0.7,
                     seed: int = 0, dtype: type = np.float64) -> tuple[np.ndarray, ...]:
    """A gradient with ReLU's pattern: ``dead`` of the unit columns all zero, the rest sparse."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((rows, units)).astype(dtype)
    g *= rng.random((rows, units)) < 0.4  # zeros inside the live columns too
    g[:, rng.permutation(units)[: int(dead * units)]] = 0.0
    g[0, np.flatnonzero(g.any(axis=0))[:1]] = 1.0  # at least one live unit
    x = rng.standard_normal((rows, inputs)).astype(dtype)
    w = rng.standard_normal((units, inputs)).astype(dtype)
    return g, x, w


# ---- linear's gradient products --------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_skipping_dead_units_gives_the_dense_products(dtype: type) -> None:
    g, x, w = _dead_unit_batch(dtype=dtype)
    live = F._live_units(g, x.shape[1])
    assert live is not None and len(live) < 0.35 * g.shape[1]  # the skipping path is taken
    np.testing.assert_array_equal(live, np.flatnonzero(g.any(axis=0)))
    gw = F._linear_grad_weight(g, x)
    gx = F._linear_grad_input(g, w)
    # fewer rows in the products than the dense ones: BLAS may block (and so round) them
    # differently, on some CPUs in float32's last bits
    assert_product_close(gw, g.T, x)
    assert_product_close(gx, g, w)
    dead = np.setdiff1d(np.arange(g.shape[1]), live)
    assert not gw[dead].any()  # rows of dead units: exact zeros
    assert gw.dtype == gx.dtype == dtype


def test_dense_gradients_and_narrow_layers_take_the_plain_product() -> None:
    rng = np.random.default_rng(1)
    assert F._live_units(rng.standard_normal((32, 96)), 80) is None  # tanh: no exact zeros
    g, x, _ = _dead_unit_batch(units=32)
    assert F._live_units(g, 80) is None  # fewer units than the check pays for
    g, x, _ = _dead_unit_batch()
    assert F._live_units(g, 4) is None  # a 4-feature input layer: the product is tiny


def test_batch_axes_and_preallocated_outputs() -> None:
    g, x, w = _dead_unit_batch(rows=24)
    g3, x3 = g.reshape(4, 6, -1), x.reshape(4, 6, -1)
    np.testing.assert_allclose(F._linear_grad_input(g3, w), g3 @ w, rtol=1e-13)
    np.testing.assert_allclose(F._linear_grad_weight(g3, x3), g.T @ x, rtol=1e-13)
    out = np.full((w.shape[0], x.shape[1]), np.nan)  # stale contents must be overwritten
    assert F._linear_grad_weight(g, x, out=out) is out
    np.testing.assert_allclose(out, g.T @ x, rtol=1e-13)
    out_in = np.full((4, 6, w.shape[1]), np.nan)
    r = F._linear_grad_input(g3, w, out=out_in)
    np.testing.assert_allclose(out_in, g3 @ w, rtol=1e-13)
    np.testing.assert_allclose(r, g3 @ w, rtol=1e-13)


def test_relu_network_gradients_to_second_order_with_dead_units() -> None:
    """Finite differences, float64, through a ReLU layer whose units are mostly dead for the
    batch (negative biases), so the skipping products are the ones differentiated."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 70))
    w1 = rng.standard_normal((80, 70)) * 0.2
    b1 = np.where(np.arange(80) < 20, 0.1, -50.0)  # 60 of 80 units dead for every row
    w2 = rng.standard_normal((3, 80)) * 0.2
    h = np.maximum(x @ w1.T + b1, 0)
    assert (h.any(axis=0)).sum() <= 20

    def loss(w1: object, x: object) -> object:
        hid = F.relu(F.linear(x, w1, b1))
        return rnp.sum(rnp.tanh(F.linear(hid, w2)) ** 2)

    check_grads(loss, order=2)(w1, x)
    # the backward pass took the skipping path on the hidden layer's gradient
    got = rlgrad.grad(loss, argnum=(0, 1))(w1, x)
    mask = (x @ w1.T + b1 > 0).astype(float)
    dh = (2 * np.tanh(h @ w2.T) * (1 - np.tanh(h @ w2.T) ** 2)) @ w2 * mask
    np.testing.assert_allclose(got[0], dh.T @ x, rtol=1e-10)
    np.testing.assert_allclose(got[1], dh @ w1, rtol=1e-10)


def test_the_gradient_products_are_differentiable_primitives() -> None:
    g, x, w = _dead_unit_batch(rows=6, units=70, inputs=66, seed=3)
    check_grads(lambda g, x: rnp.sum(F._linear_grad_weight_p(g, x) ** 2), order=2)(g, x)
    check_grads(lambda g, w: rnp.sum(F._linear_grad_input_p(g, w) ** 2), order=2)(g, w)
    v = np.random.default_rng(4).standard_normal(70)
    check_grads(lambda g, x: rnp.sum(F._linear_grad_weight_p(g, x) ** 2), order=1)(v, x[0])
    # the dense variants (gradients out of tanh's backward): the same products, unchecked
    check_grads(lambda g, x: rnp.sum(F._dense_grad_weight_p(g, x) ** 2), order=2)(g, x)
    check_grads(lambda g, w: rnp.sum(F._dense_grad_input_p(g, w) ** 2), order=2)(g, w)
    # (the products with the dead units left out sum the others in another blocking: the last bits
    # may differ)
    np.testing.assert_allclose(F._dense_grad_weight(g, x), F._linear_grad_weight(g, x), rtol=1e-12)
    np.testing.assert_allclose(F._dense_grad_input(g, w), F._linear_grad_input(g, w), rtol=1e-12)


# ---- jit: one buffer per intermediate value ----------------------------------------------------
def _mlp_step() -> tuple[object, list]:
    rng = np.random.default_rng(5)
    params = [rlgrad.tensor(rng.standard_normal(s) * 0.3, requires_grad=True)
              for s in ((64, 8), (64,), (2, 64), (2,))]

    def step(x: np.ndarray, y: np.ndarray) -> object:
        h = F.relu(F.linear(x, params[0], params[1]))
        out = F.linear(h, params[2], params[3])
        loss = F.huber_loss(out, y, delta=0.5)
        return loss, autograd.grad(loss, params), out.reshape(-1)

    return step, params


def test_jit_reuses_buffers_and_matches_eager_at_every_call() -> None:
    step, params = _mlp_step()
    jitted = rlgrad.jit(step)
    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((16, 8)), rng.standard_normal((16, 2))) for _ in range(4)]
    kept = []
    for x, y in batches:
        got = jitted(x, y)
        want = step(x, y)
        np.testing.assert_allclose(float(got[0]), float(want[0]._value), rtol=1e-12)
        for a, b in zip(got[1], want[1]):
            np.testing.assert_array_equal(a, b._value)
        np.testing.assert_array_equal(got[2], want[2]._value)
        kept.append((got, want))
    # what an earlier call returned was not overwritten by the later calls
    for got, want in kept:
        for a, b in zip(got[1], want[1]):
            np.testing.assert_array_equal(a, b._value)
        np.testing.assert_array_equal(got[2], want[2]._value)  # a view of an op's output


def test_jit_outputs_and_their_views_are_never_reused_buffers() -> None:
    step, _ = _mlp_step()
    jitted = rlgrad.jit(step)
    x, y = np.ones((4, 8)), np.zeros((4, 2))
    src = jitted.lower(x, y)
    assert "in place" in src  # intermediates write into buffers
    a, b = jitted(x, y), jitted(x, y)
    for ga, gb in zip(a[1], b[1]):
        assert not np.shares_memory(ga, gb)
    assert not np.shares_memory(a[2], b[2])  # out.reshape(-1): its base stays fresh


def test_clip_without_numpys_wrapper_is_numpys_clip() -> None:
    x = np.array([-2.0, -0.5, np.nan, 0.3, 5.0, -0.0], np.float32)
    for lo, hi in ((-1.0, 1.0), (None, 1.0), (-1.0, None), (2.0, 1.0)):
        np.testing.assert_array_equal(_clip(x, lo, hi), np.clip(x, lo, hi))
        assert _clip(x, lo, hi).dtype == np.float32
    ints = np.arange(-3, 4)
    np.testing.assert_array_equal(_clip(ints, -1, 1), np.clip(ints, -1, 1))
    out = np.empty_like(x)
    assert _clip(x, -1.0, 1.0, out=out) is out


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.0])
def test_huber_forward_has_the_bits_of_the_two_branch_formula(delta: float) -> None:
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        x = (rng.standard_normal(2000) * 3).astype(dtype)
        t = rng.standard_normal(2000).astype(dtype)
        x[:3] = t[:3] + np.array([delta, -delta, 0.0], dtype)  # the boundary and zero
        d = x - t
        a = np.abs(d)
        want = np.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))
        got = F._huber_fwd(x, t, delta, "none")
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_values_with_disjoint_lives_share_buffers_and_views_keep_theirs_alive() -> None:
    """A long chain of same-shape values: buffers are shared once a value and every view of it
    are dead; an early value read late through a view keeps its buffer until then."""
    rng = np.random.default_rng(8)
    w = rlgrad.tensor(rng.standard_normal((32, 32)) * 0.2, requires_grad=True)

    def step(x: np.ndarray) -> object:
        h0 = rnp.tanh(x @ w)
        early = h0.reshape(-1)  # a view of h0's buffer, read at the very end
        h = h0
        for _ in range(6):
            h = rnp.tanh(h @ w) * 0.9 + h * 0.1
        loss = rnp.sum(h * h) + rnp.sum(early[:5] * 3.0)
        return loss, autograd.grad(loss, [w])[0]

    jitted = rlgrad.jit(step)
    x1, x2 = rng.standard_normal((16, 32)), rng.standard_normal((16, 32))
    src = jitted.lower(x1)
    in_place = [line for line in src.splitlines() if "in place" in line]
    buffers = {line.split("out=")[1].split(")")[0] for line in in_place}
    assert len(buffers) < len(in_place) / 2  # shared, not one per value
    for x in (x1, x2, x1):
        got = jitted(x)
        want = step(x)
        np.testing.assert_allclose(float(got[0]), float(want[0]._value), rtol=1e-13)
        np.testing.assert_array_equal(got[1], want[1]._value)


def test_reused_buffers_start_on_a_cache_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlgrad.creation import _empty_aligned

    for shape, dtype in (((3, 5), np.float32), ((7,), np.float64), ((), np.float32), ((0,), np.int64)):
        a = _empty_aligned(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        if a.size:
            assert a.ctypes.data % 64 == 0
    step, params = _mlp_step()
    src_fn = rlgrad.jit(step)
    src_fn(np.ones((4, 8)), np.zeros((4, 2)))
    compiled = next(iter(src_fn._cache.values()))
    bufs = [v for k, v in compiled.fn.__globals__.items()
            if k.startswith("c") and isinstance(v, np.ndarray) and f"out={k})" in compiled.source]
    assert bufs and all(b.ctypes.data % 64 == 0 for b in bufs)
    opt = rlgrad.optim.Adam(params, lr=1e-3)
    for p in params:
        p.grad = rlgrad.tensor(np.ones_like(p._value))
    monkeypatch.setattr(algorithms, "_fused", None)  # the NumPy path, whose g and buf exist
    opt.step()
    flat = next(iter(opt._flat.values()))
    assert all(a.ctypes.data % 64 == 0 for a in (flat.g, flat.buf, *flat.arrays.values()))
    np.testing.assert_allclose(flat.arrays["exp_avg"], 0.1)  # from zeros: 0 + 0.1 (1 - 0)


def test_reused_buffers_keep_the_traced_memory_order() -> None:
    """conv2d's output is channels-last memory behind an NCHW view: the buffer a compiled step
    writes the ReLU of it into has that order too (the next conv reads it without a copy), and
    the step gives the eager numbers at every call."""
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal((2, 4, 2, 2))
    f = lambda x: rnp.sum(F.conv2d(F.relu(F.conv2d(x, w1, None, 2)), w2) ** 2)
    jitted = rlgrad.jit(f)
    for _ in range(3):
        x = rng.standard_normal((2, 3, 9, 9))
        np.testing.assert_allclose(float(jitted(x)), float(f(x)), rtol=1e-12)
    compiled = next(iter(jitted._cache.values()))
    bufs = [v for k, v in compiled.fn.__globals__.items()
            if k.startswith("c") and isinstance(v, np.ndarray) and f"out={k})" in compiled.source]
    relu_out = [b for b in bufs if b.shape == (2, 4, 4, 4)]
    assert relu_out and all(b.transpose(0, 2, 3, 1).flags.c_contiguous for b in relu_out)
    assert all(b.ctypes.data % 64 == 0 for b in bufs)
