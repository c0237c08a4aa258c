"""Winograd convolutions (rlgrad/nn/winograd.py): conv2d's forward, input gradient and weight
gradient on the Winograd path against the im2col paths (``WINOGRAD`` off) and PyTorch; the C
tile transforms against their NumPy reference (``C_TRANSFORMS`` off); derivatives of every order
by finite differences, forward mode, and compiled steps; where the plan takes the path.

Tolerances (the arithmetic differs from im2col's: sums and differences of tiles, the 1/2 of G):
float64 1e-12, float32 2e-5, each relative to the largest magnitude of the reference."""

import numpy as np
import pytest

import rlgrad
from rlgrad import ops
from rlgrad.nn import functional as F
from rlgrad.nn import winograd as W

K = ops._kernels
needs_kernels = pytest.mark.skipif(K is None, reason="rlgrad._kernels not built (or turned off)")
F32 = np.dtype(np.float32)
TOL = {np.float32: 2e-5, np.float64: 1e-12}

# (input N, C, H, W), (out, kh, kw), stride, padding
_CASES = [
    ((64, 32, 15, 15), (64, 4, 4), 2, 0),  # SimpleMultiObsEnv's conv2: 2x2 over 128 channels
    ((64, 64, 6, 6), (64, 3, 3), 1, 0),  # its conv3: F(2x2, 3x3)
    ((3, 5, 11, 12), (4, 3, 3), 1, 1),  # padding; 11x12 output: the last tiles cut
    ((2, 3, 17, 17), (6, 8, 8), 4, 0),  # stride 4: 2x2 over 48 channels, 3x3 output
    ((5, 2, 9, 10), (3, 2, 2), 1, 0),  # F(3x3, 2x2) at stride 1, 8x9 output
    ((1, 3, 10, 13), (5, 4, 6), (2, 3), 1),  # unequal strides (2x2 after space-to-depth)
    ((4, 4, 14, 14), (8, 6, 6), 3, 2),  # stride 3 with padding, 5x5 output
]


@pytest.fixture
def forced(monkeypatch):
    """Winograd for every shape it applies to (the plan's size thresholds off), its calls
    counted."""
    monkeypatch.setattr(W, "MIN_TILES", 0)
    monkeypatch.setattr(W, "MIN_CHANNELS", 0)
    monkeypatch.setattr(W, "_PLANS", {})
    calls = []
    for name in ("forward", "input_grad", "weight_grad"):
        fn = getattr(W, name)
        monkeypatch.setattr(W, name, lambda *a, _f=fn, _n=name: calls.append(_n) or _f(*a))
    return calls


def _data(case, dtype, seed=0):
    xs, (o, kh, kw), s, p = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(dtype)
    w = (rng.standard_normal((o, xs[1], kh, kw)) / np.sqrt(xs[1] * kh * kw)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    (sh, sw), (ph, pw) = F._pair(s, "stride"), F._pair(p, "padding")
    oh, ow = (xs[2] + 2 * ph - kh) // sh + 1, (xs[3] + 2 * pw - kw) // sw + 1
    g = rng.standard_normal((xs[0], o, oh, ow)).astype(dtype)
    return x, w, b, g, s, p


def _passes(x, w, b, g, s, p):
    """conv2d (with ReLU), its input gradient and its weight gradient."""
    return (F._conv2d_run(x, w, b, s, p, True, None), F._conv2d_input_grad_fwd(g, w, s, p, x.shape),
            F._conv2d_weight_grad_fwd(x, g, s, p, w.shape))


def _close(a, ref, dtype):
    np.testing.assert_allclose(a, ref, rtol=0, atol=TOL[dtype] * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("block", [W.BLOCK_BYTES, 40_000])  # small: one sample per block and up
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _CASES)
def test_the_three_passes_match_the_im2col_paths(forced, monkeypatch, case, dtype, block):
    monkeypatch.setattr(W, "BLOCK_BYTES", block)
    args = _data(case, dtype)
    wino = _passes(*args)
    assert forced == ["forward", "input_grad", "weight_grad"]
    monkeypatch.setattr(W, "WINOGRAD", False)
    forced.clear()
    for a, ref in zip(wino, _passes(*args)):
        assert a.dtype == ref.dtype and a.shape == ref.shape
        _close(a, ref, dtype)
    assert forced == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _CASES[::2])
def test_the_three_passes_match_pytorch(forced, case, dtype):
    torch = pytest.importorskip("torch")
    x, w, b, g, s, p = _data(case, dtype, seed=1)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, stride=s, padding=p)
    ty.backward(torch.tensor(g))
    y = F._conv2d_fwd(x, w, b, s, p)
    _close(y, ty.detach().numpy(), dtype)
    _close(F._conv2d_input_grad_fwd(g, w, s, p, x.shape), tx.grad.numpy(), dtype)
    _close(F._conv2d_weight_grad_fwd(x, g, s, p, w.shape), tw.grad.numpy(), dtype)
    assert forced == ["forward", "input_grad", "weight_grad"]


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _CASES)
def test_c_transforms_match_the_numpy_reference(forced, monkeypatch, case, dtype):
    """Each transform (its adjoint too), then the three passes, C against NumPy's einsums."""
    x, w, b, g, s, p = _data(case, dtype, seed=2)
    st = (s, s) if isinstance(s, int) else s
    xp = F._nhwc(x, (p, p), dtype)
    plan = W.plan(xp.shape, w.shape, st, xp.dtype)
    gy = np.ascontiguousarray(g.transpose(0, 2, 3, 1))
    mm = W._planes(gy.shape[0] * plan.th * plan.tw, w.shape[0], dtype)
    mm[1][...] = np.random.default_rng(3).standard_normal(mm[1].shape)

    def transforms():
        zeros = np.full(gy.shape[0] * plan.th * plan.tw, 7, np.uint16)
        v = W.input_transform(xp, plan, zeros)
        y = np.full(gy.shape, np.nan, dtype)
        W.output_transform(mm, plan, y, zeros)
        gx = np.zeros_like(xp)
        W.input_transform_adjoint(v, plan, gx)
        dm = W.output_transform_adjoint(gy, plan)[1].copy()  # (scratch planes: kept)
        return zeros, v[1].copy(), y, dm, gx, *_passes(x, w, b, g, s, p)

    xp[:, :8] = 0  # some all-zero pixels for the flags (two at stride 4)
    fast = transforms()
    monkeypatch.setattr(W, "C_TRANSFORMS", False)
    ref = transforms()
    np.testing.assert_array_equal(fast[0], ref[0])
    assert ref[0].any()
    for a, r in zip(fast[1:], ref[1:]):
        _close(a, r, dtype)


@pytest.mark.parametrize("case", [_CASES[2], _CASES[3], _CASES[5]])
def test_derivatives_of_every_order_through_winograd(forced, case):
    """conv2d with its gradients on the Winograd path: first and second order, reverse and
    forward mode, against finite differences (float64)."""
    x, w, b, _, s, p = _data(case, np.float64, seed=4)
    x, w = x[:2], w * 0.5

    def loss(x, w, b):
        return rlgrad.numpy.sum(rlgrad.numpy.tanh(F.conv2d(x, w, b, stride=s, padding=p)) ** 2)

    rlgrad.check_grads(loss, modes=("fwd", "rev"), order=2)(x, w, b)
    assert {"forward", "input_grad", "weight_grad"} <= set(forced)


def test_jvp_and_a_compiled_step_agree_with_the_im2col_paths(forced, monkeypatch):
    x, w, b, _, s, p = _data(_CASES[0], np.float32, seed=5)
    w2 = (np.random.default_rng(6).standard_normal((8, 64, 3, 3)) * 0.05).astype(np.float32)

    def loss(w, b, w2, x):
        h = F.relu(F.conv2d(x, w, b, stride=s, padding=p))
        return rlgrad.numpy.sum(F.relu(F.conv2d(h, w2)) ** 2)

    def run():
        args = [rlgrad.tensor(a) for a in (w, b, w2)] + [x]
        step = rlgrad.jit(rlgrad.value_and_grad(loss, argnums=(0, 1, 2)))
        step(*args)  # traced
        compiled, eager = step(*args), rlgrad.value_and_grad(loss, argnums=(0, 1, 2))(*args)
        tang = rlgrad.jvp(lambda w: loss(w, b, w2, x), (w,), (np.ones_like(w),))[1]
        return [np.asarray(getattr(a, "_value", a)) for t in (compiled, eager, (tang,))
                for a in rlgrad.tree_util.tree_flatten(t)[0]]

    wino = run()
    assert {"forward", "input_grad", "weight_grad"} <= set(forced)
    half = len(wino[:-1]) // 2
    for a, e in zip(wino[:half], wino[half:-1]):  # compiled and eager: the same path, the same bits
        np.testing.assert_array_equal(a, e)
    monkeypatch.setattr(W, "WINOGRAD", False)
    for a, ref in zip(wino, run()):
        _close(a, ref, np.float32)


def test_the_plan_takes_winograd_where_it_pays():
    """SimpleMultiObsEnv's CNN: conv2 and conv3 in a batch-64 update; not at batch 1 (a rollout
    step), not conv1 (16 channels after space-to-depth), nor kernels that are not 2 or 3 strides
    wide, nor float16, nor with the switch off."""
    assert W.plan((64, 15, 15, 32), (64, 32, 4, 4), (2, 2), F32) == W.Plan(2, 3, 2, 2, 6, 6, 2, 2, 128)
    assert W.plan((64, 6, 6, 64), (64, 64, 3, 3), (1, 1), F32) == W.Plan(3, 2, 1, 1, 4, 4, 2, 2, 64)
    assert W.plan((1, 15, 15, 32), (64, 32, 4, 4), (2, 2), F32) is None
    assert W.plan((64, 64, 64, 1), (32, 1, 8, 8), (4, 4), F32) is None  # 16 channels
    assert W.plan((64, 20, 20, 64), (64, 64, 5, 5), (1, 1), F32) is None
    assert W.plan((64, 20, 20, 64), (64, 64, 3, 3), (2, 2), F32) is None
    assert W.plan((64, 20, 20, 64), (64, 64, 4, 2), (2, 2), F32) is None
    assert W.plan((64, 6, 6, 64), (64, 64, 3, 3), (1, 1), np.dtype(np.float16)) is None


def test_switch_off_takes_none(monkeypatch):
    monkeypatch.setattr(W, "WINOGRAD", False)
    assert W.plan((64, 6, 6, 64), (64, 64, 3, 3), (1, 1), F32) is None


@pytest.mark.parametrize("r", [2, 3])
def test_the_matrices_are_minimal_filtering(r):
    """A^T [(G g) * (B^T d)] is the correlation of d (4 numbers) with g (r numbers): exactly,
    on integers."""
    rng = np.random.default_rng(r)
    m = W.ALPHA - r + 1
    for _ in range(20):
        d, g = rng.integers(-9, 10, W.ALPHA).astype(float), rng.integers(-9, 10, r).astype(float)
        want = np.array([d[i:i + r] @ g for i in range(m)])
        np.testing.assert_array_equal(W._AT[r] @ ((W._G[r] @ g) * (W._BT @ d)), want)


@needs_kernels
def test_the_kernels_refuse_what_does_not_fit():
    x = np.zeros((2, 9, 9, 3), np.float32)
    v = np.full((16, 2 * 2 * 2 * 3 + 5), 7.0, np.float32)
    z = np.zeros(8, np.uint16)
    assert K.wino_in(x, v, 1, 1, 3, 2, 2, False, None)
    assert K.wino_in(x, v, 1, 1, 3, 2, 2, False, z) and (z == 0xFFFF).all()  # all zeros
    assert not K.wino_in(x, v.astype(np.float64), 1, 1, 3, 2, 2, False, None)  # dtypes differ
    assert not K.wino_in(x, v[:, :20].copy(), 1, 1, 3, 2, 2, False, None)  # planes too short
    assert not K.wino_in(x, v[:15], 1, 1, 3, 2, 2, False, None)  # not 16 planes
    assert not K.wino_in(x, v, 1, 1, 4, 2, 2, False, None)  # m not 2 or 3
    assert not K.wino_in(x, v, 0, 1, 3, 2, 2, False, None)  # stride 0
    assert not K.wino_in(x[..., :2], v, 1, 1, 3, 2, 2, False, None)  # not contiguous
    assert not K.wino_in(x, v, 1, 1, 3, 2, 2, False, z[:7])  # flags too few
    assert not K.wino_in(x, v, 1, 1, 3, 2, 2, False, z.astype(np.int32))  # flags not uint16
    gx = np.zeros_like(x)
    assert not K.wino_in(gx, v[:15], 1, 1, 3, 2, 2, True, None)
    assert not K.wino_in(gx, v, 1, 1, 3, 2, 2, True, z)  # flags: forward only
    assert not gx.any()  # nothing written
    y = np.zeros((2, 5, 6, 4), np.float32)
    mm = np.zeros((16, 2 * 2 * 3 * 4), np.float32)
    assert not K.wino_out(mm, y, 3, 2, 3, False, None)  # 3 tile columns of 3 for 6 columns
    assert K.wino_out(mm, y, 3, 2, 2, False, None)
    assert not K.wino_out(mm, y, 2, 2, 2, False, None)  # 2x2 tiles of 2 do not cover 5x6
    assert not K.wino_out(mm[:, :31].copy(), y, 3, 2, 2, False, None)  # planes too short
    assert not K.wino_out(mm, y, 3, 2, 2, True, z)  # flags: forward only
    alias = np.zeros(16 * 48 + 240, np.float32)
    assert not K.wino_out(alias[:768].reshape(16, 48), alias[100:340].reshape(2, 5, 6, 4), 3, 2,
                          2, False, None)  # overlapping
    with pytest.raises(TypeError, match="takes 9"):
        K.wino_in(x, v)
    with pytest.raises(TypeError, match="takes 7"):
        K.wino_out(mm, y)


@pytest.mark.parametrize("case", [_CASES[0], _CASES[3], _CASES[4]])
def test_outputs_over_zeros_are_zero_as_im2cols(forced, monkeypatch, case):
    """Where an output's receptive field is all zeros (an Atari frame's black border, a ReLU's
    dead region), im2col's output is exactly 0: so is Winograd's, whose tile sums cancel there
    only to rounding. Else a ReLU at zero bias passes the gradient there and the bias gradient
    is far from PyTorch's (tests/rl/test_pixels.py)."""
    x, w, _, g, s, p = _data(case, np.float32, seed=8)
    x[:, :, : x.shape[2] // 2] = 0  # the top half black
    x[:, :, :, -3:] = 0
    x[::2, :, :, 1:4] = 0
    b = np.zeros(w.shape[0], np.float32)
    fast = F._conv2d_run(x, w, b, s, p, False, None)
    for ref_path in ({"WINOGRAD": False}, {"C_TRANSFORMS": False}):
        with monkeypatch.context() as mp:
            for k, v in ref_path.items():
                mp.setattr(W, k, v)
            ref = F._conv2d_run(x, w, b, s, p, False, None)
        np.testing.assert_array_equal(fast == 0, ref == 0)
        assert (ref == 0).mean() > 0.2
    _close(fast, ref, np.float32)
