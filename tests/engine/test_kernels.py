"""rlgrad/_kernels.c (bias gradients' column sums, tanh's backward, ReLU forward and backward, a
linear layer's bias add, GAE, dead-unit skipping: one C pass each): what each refuses, and the
primitives built on them (``ops.tanh_grad``, ``ops.relu_grad``) differentiated to the second
order in both modes. That each kernel, and each op with the kernels, gives the bits of the NumPy
lines it replaces is in tests/engine/test_reference_paths.py."""

import os
import shutil

import numpy as np
import pytest
from helpers.kernel_inputs import relu_inputs, rollout

import rlgrad
from rlgrad import ops
from rlgrad.nn import functional as F

K = ops._kernels
needs_kernels = pytest.mark.skipif(K is None, reason="rlgrad._kernels not built (or turned off)")


def test_the_module_is_built_where_there_is_a_c_compiler():
    if os.environ.get("RLGRAD_KERNELS") == "0":
        pytest.skip("RLGRAD_KERNELS=0 turns the kernels off")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the NumPy path is the only one")
    assert K is not None, "rlgrad._kernels was not built: reinstall with `pip install -e .`"


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@needs_kernels
def test_sum_rows_refuses_what_it_does_not_do():
    out = np.empty(4, np.float32)
    assert not K.sum_rows(np.ones((3, 1), np.float32), np.empty(1, np.float32))  # pairwise in NumPy
    assert not K.sum_rows(np.ones((3, 8), np.float32)[:, ::2], out)  # not contiguous
    assert not K.sum_rows(np.ones((3, 4), np.int64), np.empty(4, np.int64))
    assert not K.sum_rows(np.ones((3, 4), np.float64), out)  # dtypes differ
    assert not K.sum_rows(np.ones((3, 4), np.float32), np.empty(3, np.float32))
    assert not K.sum_rows(np.ones((0, 4), np.float32), out)
    x = np.ones((3, 4), np.float32)
    assert not K.sum_rows(x, x[0])  # the output overlaps the input
    assert out.dtype == np.float32 and ops._sum(np.ones((3, 1), np.float32), axis=0)[0] == 3


@needs_kernels
def test_tanh_grad_refuses_partial_overlap_and_mixed_dtypes():
    g = np.ones(8, np.float32)
    assert not K.tanh_grad(g[:4], g[2:6], g[4:])
    assert not K.tanh_grad(np.ones(4, np.float32), np.ones(4, np.float64), np.empty(4, np.float32))
    # ops falls back to NumPy (and its promotion) where the kernel does not apply
    y = np.full(4, 0.5, np.float64)
    assert ops._tanh_grad(np.ones(4, np.float32), y).dtype == np.float64
    np.testing.assert_array_equal(ops._tanh_grad(np.ones((2, 3)), np.full(3, 0.5)),
                                  np.full((2, 3), 0.75))


def test_tanh_gradients_to_the_second_order():
    x = np.random.default_rng(0).standard_normal((3, 4))
    rlgrad.check_grads(lambda t: ops.tanh(t).sum(), modes=("fwd", "rev"), order=2)(x)
    rlgrad.check_grads(lambda g, y: ops.tanh_grad(g, y), modes=("fwd", "rev"), order=2)(
        x, np.tanh(x[::-1].copy()))
    # closed forms: tanh' = 1 - tanh^2, tanh'' = -2 tanh (1 - tanh^2)
    t = np.tanh(x)
    d1 = rlgrad.grad(lambda v: ops.tanh(v).sum())(x)
    d2 = rlgrad.grad(lambda v: rlgrad.grad(lambda u: ops.tanh(u).sum())(v).sum())(x)
    np.testing.assert_allclose(d1, 1 - t * t, rtol=1e-12)
    np.testing.assert_allclose(d2, -2 * t * (1 - t * t), rtol=1e-12, atol=1e-15)


def test_a_linear_layers_bias_gradient_is_the_column_sum():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    w = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    gb = rlgrad.grad(lambda b_: (rlgrad.nn.functional.linear(x, w, b_) ** 2).sum())(b)
    y = x @ w.T + b
    np.testing.assert_array_equal(gb, np.add.reduce(2 * y, axis=0))


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_tanh_fed_linear_gradients_skip_the_dead_unit_check(act):
    """A compiled step of a tanh MLP records the dense products for the gradients that come out
    of tanh's backward (no dead units to look for), a ReLU MLP the checking ones; both give the
    bits of the eager backward on plain arrays (which always checks)."""
    net = rlgrad.nn.MLP([4, 64, 64, 2], activation=rlgrad.nn.Tanh if act == "tanh" else rlgrad.nn.ReLU)
    params = list(net.parameters())
    x = np.random.default_rng(0).standard_normal((128, 4)).astype(np.float32)

    def loss(xb):
        return (net(xb) ** 2).sum()

    step = rlgrad.jit(lambda xb: rlgrad.autograd.grad(loss(xb), params))
    src = step.lower(x)
    assert ("linear_grad_weight_dense" in src) == (act == "tanh")
    assert ("linear_grad_input_dense" in src) == (act == "tanh")
    got = step(x)
    want = rlgrad.autograd.grad(loss(rlgrad.tensor(x)), params)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(_bits(a), _bits(np.asarray(b._value if hasattr(b, "_value") else b)))


_INF_TIMES_ZERO = pytest.mark.filterwarnings("ignore:invalid value encountered")  # the inf reward


@needs_kernels
def test_gae_kernel_refuses_what_does_not_fit():
    b = rollout(np.random.default_rng(0), 5, 4)
    last = np.zeros(4, np.float32)
    args = [b.rewards, b.values, last, b.bootstrap, b.terminated, b.dones]
    outs = [b.advantages, b.returns]
    assert K.gae(*args, *outs, 0.99, 0.95)
    assert not K.gae(*args[:2], np.zeros(3, np.float32), *args[3:], *outs, 0.99, 0.95)  # n differs
    assert not K.gae(*args[:4], b.terminated.astype(np.float32), b.dones, *outs, 0.99, 0.95)
    assert not K.gae(b.rewards.astype(np.float64), *args[1:], *outs, 0.99, 0.95)  # dtypes differ
    assert not K.gae(*args, b.advantages, b.advantages, 0.99, 0.95)  # the outputs overlap
    assert not K.gae(*args, b.rewards, b.returns, 0.99, 0.95)  # an output is an input


@needs_kernels
def test_the_relu_kernels_refuse_what_they_do_not_do():
    x = np.ones(8, np.float32)
    assert not K.relu(x[:6], x[2:])  # partial overlap
    assert not K.relu(np.ones(4, np.float32), np.empty(4, np.float64))
    assert not K.relu(np.ones(4, np.int64), np.empty(4, np.int64))
    assert not K.relu_grad(x[:4], x[2:6], x[4:])
    assert not K.relu_grad(np.ones(4, np.float32), np.ones(4, np.float64), np.empty(4, np.float32))
    assert not K.add_rows(np.ones((2, 4), np.float32), np.ones(2, np.float32))  # b's length
    assert not K.add_rows(np.ones((2, 4), np.float32), np.ones((1, 4), np.float32))  # b not 1-D
    assert not K.add_rows(np.ones((4, 4), np.float32)[:, ::2], np.ones(2, np.float32))
    assert not K.add_rows(np.ones((2, 4), np.float32), np.ones(4, np.float64))
    y = np.ones((2, 4), np.float32)
    assert not K.add_rows(y, y[0])  # b inside out
    # ops falls back to NumPy (and its promotion and broadcasting) where a kernel does not apply
    assert ops._relu_grad(np.ones(4, np.float32), np.ones(4, np.float64)).dtype == np.float32
    np.testing.assert_array_equal(ops._relu_grad(np.ones((2, 3)), np.array([1.0, -1.0, 2.0])),
                                  [[1, 0, 1], [1, 0, 1]])
    np.testing.assert_array_equal(ops._relu(np.array([-1, 2])), [0, 2])


def test_relu_gradients_to_the_second_order():
    """ReLU's backward is the primitive ``relu_grad(g, x) = g * (x > 0)``: linear in ``g``,
    no gradient into ``x``; checked against finite differences (away from the kink) and the
    closed forms, in both modes."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    x[np.abs(x) < 0.1] = 0.5  # finite differences stay on one side of the kink
    rlgrad.check_grads(lambda t: (ops.relu(t) ** 2).sum(), modes=("fwd", "rev"), order=2)(x)
    rlgrad.check_grads(lambda g: ops.relu_grad(g, x), modes=("fwd", "rev"), order=2)(x[::-1].copy())
    d1 = rlgrad.grad(lambda v: (ops.relu(v) ** 2).sum())(x)
    d2 = rlgrad.grad(lambda v: rlgrad.grad(lambda u: (ops.relu(u) ** 2).sum())(v).sum())(x)
    np.testing.assert_array_equal(d1, 2 * np.maximum(x, 0))
    np.testing.assert_array_equal(d2, 2.0 * (x > 0))
    # the mask takes no gradient: d/dx of sum(relu_grad(g, x)) is 0
    gx = rlgrad.grad(lambda v: ops.relu_grad(np.ones((3, 4)), v).sum() + 0 * v.sum())(x)
    np.testing.assert_array_equal(gx, np.zeros((3, 4)))


@needs_kernels
def test_live_columns_refuses_what_it_does_not_do():
    g = np.ones((4, 6), np.float32)
    assert K.live_columns(g, np.empty(5, np.intp)) == -1  # idx too short
    assert K.live_columns(g, np.empty(6, np.int32)) == -1  # not intp
    assert K.live_columns(g[:, ::2], np.empty(3, np.intp)) == -1  # not contiguous
    assert K.live_columns(np.ones(6, np.float32), np.empty(6, np.intp)) == -1  # not 2-D
    assert K.live_columns(np.ones((4, 6), np.int64), np.empty(6, np.intp)) == -1


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_take_columns_refuses_what_it_does_not_do(dtype):
    g = relu_inputs(np.random.default_rng(9), (33, 40), dtype)
    out = np.empty((33, 1), dtype)
    assert not K.take_columns(g, np.array([40], np.intp), out)  # out of range
    assert not K.take_columns(g, np.array([-1], np.intp), out)
    assert not K.take_columns(g, np.array([1], np.int32), out)
    assert not K.take_columns(g, np.array([1, 2], np.intp), out)  # out's shape
    assert not K.take_columns(g[:, ::2], np.array([1], np.intp), out)


@pytest.mark.parametrize("bias", [True, False])
def test_a_compiled_linear_relu_is_one_call_with_the_eager_bits(monkeypatch, bias):
    """A compiled step runs a linear layer whose output only its ReLU reads as one call
    (``nn.functional._linear_relu``); the values and gradients are the eager ones, bit for bit,
    with and without the C kernels; a pre-activation that something else reads is not fused."""
    F = rlgrad.nn.functional
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    w1, w2 = (rlgrad.nn.Parameter(rng.standard_normal(s).astype(np.float32)) for s in ((16, 8), (1, 16)))
    b1 = rlgrad.nn.Parameter(rng.standard_normal(16).astype(np.float32)) if bias else None
    params = [p for p in (w1, b1, w2) if p is not None]

    def loss(xb, leak):
        pre = F.linear(xb, w1, b1)
        h = ops.relu(pre)
        out = F.linear(h, w2).sum()
        return out + (pre.sum() * 0.5 if leak else 0)

    for leak in (False, True):
        for kernels in (ops._kernels, None):
            monkeypatch.setattr(ops, "_kernels", kernels)
            step = rlgrad.jit(lambda xb, _leak=leak: rlgrad.autograd.grad(loss(xb, _leak), params))
            assert ("linear+relu" in step.lower(x)) == (not leak)
            got = step(x)
            want = rlgrad.autograd.grad(loss(rlgrad.tensor(x), leak), params)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(_bits(a), _bits(b._value if hasattr(b, "_value") else b))


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_put_rows_refuses_what_it_does_not_do(dtype):
    out = np.empty((10, 7), dtype)
    part = np.ones((2, 7), dtype)
    assert not K.put_rows(part, np.array([3, 3], np.intp), out)  # not increasing
    assert not K.put_rows(part, np.array([3, 10], np.intp), out)  # out of range
    assert not K.put_rows(part, np.array([1, 2], np.int32), out)
    assert not K.put_rows(np.ones((2, 6), dtype), np.array([1, 2], np.intp), out)
    assert not K.put_rows(part, np.array([1], np.intp), out)  # part's rows


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_outer_refuses_what_it_does_not_do(dtype):
    shape = (4, 3, 1)
    a, b = np.ones(shape, dtype), np.ones((1, 300), dtype)
    out = np.empty(shape[:-1] + (300,), dtype)
    assert not K.outer(a, b, np.empty(shape[:-1] + (299,), dtype))
    assert not K.outer(a, b.astype(np.float64 if dtype == np.float32 else np.float32), out)
    assert not K.outer(np.ones(shape[:-1] + (2,), dtype), b, out)  # a's last axis is not 1


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_outers_refuses_what_it_does_not_do(dtype):
    a, b, out = np.ones((4, 3), dtype), np.ones((4, 5), dtype), np.empty((4, 3, 5), dtype)
    other = np.float64 if dtype == np.float32 else np.float32
    assert not K.outers(a, b, np.empty((4, 3, 4), dtype))  # out's shape
    assert not K.outers(a, np.ones((3, 5), dtype), out)  # stacks of different lengths
    assert not K.outers(a, b.astype(other), out)
    assert not K.outers(a, b, out.astype(other))
    assert not K.outers(np.ones((4, 6), dtype)[:, ::2], b, out)  # not contiguous
    assert not K.outers(a[:, :, None], b, out)  # a is (V, m)
    big = np.ones((4, 3, 5), dtype)
    assert not K.outers(big.reshape(-1)[:12].reshape(4, 3), b, big)  # out over an operand
    assert K.outers(a * 2, b * 3, out) and np.all(out == 6)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(64, 32, 4, 4), (17, 3, 2, 5), (1, 1, 1, 1), (40, 1, 8, 8)])
def test_weight_cols_is_numpys_transposing_copy(dtype, shape):
    w = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    want = np.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(-1, shape[0])
    out = np.full(want.shape, np.nan, dtype)
    assert K.weight_cols(w, out) and np.array_equal(out, want)
    assert np.array_equal(F._weight_cols(w), want)


@needs_kernels
def test_weight_cols_refuses_what_it_does_not_do():
    w = np.ones((4, 3, 2, 2), np.float32)
    assert not K.weight_cols(w, np.empty((12, 3), np.float32))  # out's shape
    assert not K.weight_cols(w, np.empty((12, 4)))  # dtypes differ
    assert not K.weight_cols(w[:, :, :, :1], np.empty((6, 4), np.float32))  # not contiguous
    assert not K.weight_cols(w.reshape(4, 12), np.empty((12, 4), np.float32))  # not 4-d
    assert not K.weight_cols(w, w.reshape(12, 4))  # out over w


def test_relu_of_a_channels_last_view_keeps_numpys_layout():
    """A conv's output is an NCHW view of channels-last memory: ReLU and its backward leave it
    to NumPy, which keeps that layout (the next conv reads it without a transposing copy)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32).transpose(0, 3, 1, 2)  # NCHW view
    g = rng.standard_normal((2, 5, 6, 3)).astype(np.float32).transpose(0, 3, 1, 2)
    y = ops._relu(x)
    want = np.maximum(x, 0)
    assert y.strides == want.strides and not y.flags.c_contiguous
    np.testing.assert_array_equal(_bits(y), _bits(want))
    d = ops._relu_grad(g, y)
    np.testing.assert_array_equal(_bits(d), _bits(np.where(y <= 0, np.float32(0), g)))
    assert d.strides == g.strides  # (torch's select: +0 where the unit is off, not g * 0)


@pytest.mark.parametrize("with_kernels", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_selects_as_torchs(monkeypatch, with_kernels, dtype):
    """ReLU's backward is torch's threshold_backward, a select: where the unit is off the
    gradient is +0 even for a NaN, infinite or negative upstream gradient, and a NaN input
    passes its gradient; the C pass and NumPy's reference give torch's bits."""
    torch = pytest.importorskip("torch")
    if not with_kernels:
        monkeypatch.setattr(ops, "_kernels", None)
    x = np.array([-1.0, 0.0, -0.0, 2.0, np.nan, 3.0, -2.0, 0.5], dtype)
    g = np.array([np.nan, np.inf, -1.0, -2.0, 4.0, np.nan, -0.0, -np.inf], dtype)
    t = torch.tensor(x, requires_grad=True)
    torch.relu(t).backward(torch.tensor(g))
    want = t.grad.numpy()
    np.testing.assert_array_equal(_bits(ops._relu_grad(g, x)), _bits(want))
    got = rlgrad.vjp(ops.relu, x)[1](g)
    np.testing.assert_array_equal(_bits(np.asarray(got[0] if isinstance(got, tuple) else got)),
                                  _bits(want))
