"""conv2d's fast paths against their references: the column copies in C (``_C_COLUMNS``:
rlgrad._kernels' conv_cols / conv_col2im against NumPy's strided copy and adds, bit for bit),
the conv+ReLU pair (``_conv2d_relu``: one pass for the bias add and the ReLU, in compiled steps
and in acting, against the two calls, bit for bit), the CNN trunks' plain acting path
(rlgrad.rl.cnn.PLAIN_ACTING against the recorded path, bit for bit), the kept shape-only work
(CONV_PLANS against the work done at every call), and the gradients of the
Nature CNN at SB3's ``SimpleMultiObsEnv`` image size against PyTorch's (float64 and float32).
The Winograd path is off here (these are the im2col paths' tests): tests/nn/test_winograd.py."""

import numpy as np
import pytest
from helpers.rl_runs import dict_image_ppo

import rlgrad
from rlgrad import ops
from rlgrad.nn import functional as F
from rlgrad.nn import winograd
from rlgrad.rl import cnn
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN
from rlgrad.tracer import FUSED_PAIRS

K = ops._kernels


@pytest.fixture(autouse=True)
def _im2col_paths(monkeypatch):
    monkeypatch.setattr(winograd, "WINOGRAD", False)

needs_kernels = pytest.mark.skipif(K is None, reason="rlgrad._kernels not built (or turned off)")

# (input N, C, H, W), (out, kernel), stride, padding
_CASES = [
    ((3, 1, 64, 64), (32, (8, 8)), (4, 4), (0, 0)),  # SimpleMultiObsEnv's conv1 (8-number runs)
    ((5, 32, 15, 15), (64, (4, 4)), (2, 2), (0, 0)),  # its conv2 (col2im input gradient)
    ((2, 64, 6, 6), (64, (3, 3)), (1, 1), (0, 0)),  # its conv3
    ((2, 3, 9, 7), (5, (3, 2)), (2, 1), (1, 0)),  # odd sizes, unequal strides, padding
    ((2, 4, 84, 84), (32, (8, 8)), (4, 4), (0, 0)),  # Atari's conv1: the row-folded path
]


def _rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _conv_all(x, w, b, s, p):
    """Forward, the col2im input gradient, the default input gradient, the weight gradient."""
    y = F._conv2d_fwd(x, w, b, s, p)
    g = _rand(np.random.default_rng(7), y.shape, x.dtype)
    (ph, pw), (n, _, h, wd) = p, x.shape
    g_last = np.ascontiguousarray(g.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    col2im = F._col2im_input_grad(g_last, w, s, n, (h + 2 * ph, wd + 2 * pw))
    return (y, col2im, F._conv2d_input_grad_fwd(g, w, s, p, x.shape),
            F._conv2d_weight_grad_fwd(x, g, s, p, w.shape))


@needs_kernels
@pytest.mark.parametrize("block", [1, 1 << 18])  # one sample per block .. all in one
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ok,s,p", _CASES)
def test_c_columns_give_numpys_bits(monkeypatch, block, dtype, xs, ok, s, p):
    monkeypatch.setattr(F, "_BLOCK_ELEMS", block)
    monkeypatch.setattr(F, "_INPUT_GRAD_PATHS", False)  # col2im both times (C, then NumPy)
    rng = np.random.default_rng(0)
    (o, k), c = ok, xs[1]
    x, w, b = _rand(rng, xs, dtype), _rand(rng, (o, c, *k), dtype), _rand(rng, (o,), dtype)
    taken = _Taken()
    monkeypatch.setattr(F.ops, "_kernels", _Counting(K, taken))
    fast = _conv_all(x, w, b, s, p)
    assert {"conv_cols", "conv_col2im"} <= set(taken) and all(r for _, r in taken.calls)
    monkeypatch.setattr(F, "_C_COLUMNS", False)
    taken.clear()
    ref = _conv_all(x, w, b, s, p)
    assert "conv_cols" not in taken and "conv_col2im" not in taken
    for a, r in zip(fast, ref):
        np.testing.assert_array_equal(a, r)


class _Counting:
    """rlgrad._kernels with its conv calls recorded (name, and in ``.calls`` what it answered)."""

    def __init__(self, kernels, taken):
        self._k, self._taken = kernels, taken
        taken.calls = []

    def __getattr__(self, name):
        fn = getattr(self._k, name)
        if not name.startswith("conv_"):
            return fn

        def call(*a):
            r = fn(*a)
            self._taken.append(name)
            self._taken.calls.append((name, r))
            return r
        return call


class _Taken(list):
    calls: list


@needs_kernels
def test_input_gradient_takes_col2im_where_it_runs_in_c(monkeypatch):
    """col2im in C beats the sub-pixel and per-offset paths, which are kept for NumPy's col2im;
    the two give the same gradient to rounding."""
    taken = []
    for name in ("_offsets_input_grad", "_subpixel_input_grad", "_col2im_input_grad"):
        fn = getattr(F, name)
        monkeypatch.setattr(F, name, lambda *a, _f=fn, _n=name: taken.append(_n) or _f(*a))
    rng = np.random.default_rng(10)
    for xs, o, k, s in (((3, 32, 20, 20), 64, 4, 2), ((3, 64, 9, 9), 64, 3, 1)):
        w = _rand(rng, (o, xs[1], k, k), np.float64)
        oh = (xs[2] - k) // s + 1
        g = _rand(rng, (xs[0], o, oh, oh), np.float64)
        fast = F._conv2d_input_grad_fwd(g, w, s, 0, xs)
        monkeypatch.setattr(F, "_C_COLUMNS", False)
        other = F._conv2d_input_grad_fwd(g, w, s, 0, xs)
        monkeypatch.setattr(F, "_C_COLUMNS", True)
        np.testing.assert_allclose(fast, other, rtol=1e-12, atol=1e-12)
    assert taken == ["_col2im_input_grad", "_subpixel_input_grad", "_col2im_input_grad",
                     "_offsets_input_grad"]


@needs_kernels
def test_conv_kernels_refuse_what_does_not_fit():
    x = np.zeros((2, 9, 9, 3), np.float32)
    cols = np.full((2 * 4 * 4, 3 * 3 * 3), 7.0, np.float32)
    assert K.conv_cols(x, cols, 3, 3, 2, 2, 4, 4)
    assert not K.conv_cols(x, cols.astype(np.float64), 3, 3, 2, 2, 4, 4)  # dtypes differ
    assert not K.conv_cols(x, cols[:-1], 3, 3, 2, 2, 4, 4)  # rows
    assert not K.conv_cols(x, cols, 3, 3, 2, 2, 5, 4)  # windows past the input
    assert not K.conv_cols(x, cols, 3, 3, 0, 2, 4, 4)  # stride 0
    assert not K.conv_cols(x[..., :2], cols, 3, 3, 2, 2, 4, 4)  # not contiguous
    assert not K.conv_cols(x.astype(np.int32), cols.astype(np.int32), 3, 3, 2, 2, 4, 4)
    alias = np.zeros(2 * 9 * 9 * 3 + 32 * 27, np.float32)
    assert not K.conv_cols(alias[:486].reshape(2, 9, 9, 3), alias[100:100 + 864].reshape(32, 27),
                           3, 3, 2, 2, 4, 4)  # overlapping
    gx = np.zeros_like(x)
    cols[:] = 7.0
    assert not K.conv_col2im(gx, cols[:-1], 3, 3, 2, 2, 4, 4)
    assert not gx.any()  # nothing written
    with pytest.raises(TypeError, match="takes 8"):
        K.conv_cols(x, cols)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ok,s,p", _CASES)
def test_conv_relu_pair_gives_the_two_calls_bits(dtype, xs, ok, s, p):
    rng = np.random.default_rng(1)
    (o, k), c = ok, xs[1]
    x, w = _rand(rng, xs, dtype), _rand(rng, (o, c, *k), dtype)
    for b in (None, _rand(rng, (o,), dtype)):
        want = ops._relu(F._conv2d_fwd(x, w, b, s, p))
        got = F._conv2d_relu(x, w, b, s, p)
        np.testing.assert_array_equal(got, want)
        assert got.transpose(0, 2, 3, 1).flags.c_contiguous  # channels-last memory, as conv2d's
        for out in (np.empty_like(want), np.empty(want.shape, dtype)):  # NHWC memory, NCHW
            res = F._conv2d_relu(x, w, b, s, p, out=out)
            assert res is out
            np.testing.assert_array_equal(out, want)


def test_conv_relu_pair_on_a_stack_of_kernels():
    rng = np.random.default_rng(2)
    x, w, b = _rand(rng, (2, 3, 9, 9), np.float64), _rand(rng, (4, 5, 3, 3, 3), np.float64), None
    want = np.maximum(F._conv2d_fwd(x, w, b, 2), 0)
    np.testing.assert_array_equal(F._conv2d_relu(x, w, b, 2), want)


def test_compiled_step_runs_conv_and_relu_as_the_pair(monkeypatch):
    """A compiled gradient step calls the pair for each conv whose output only its ReLU reads,
    and gives the eager step's bits."""
    calls = []
    pair = FUSED_PAIRS[("conv2d", "relu")]
    monkeypatch.setitem(FUSED_PAIRS, ("conv2d", "relu"),
                        lambda *a, **k: calls.append(1) or pair(*a, **k))
    rng = np.random.default_rng(3)
    x = _rand(rng, (4, 2, 20, 20), np.float32)
    w1, b1 = _rand(rng, (8, 2, 4, 4), np.float32) * 0.3, _rand(rng, (8,), np.float32)
    w2, b2 = _rand(rng, (6, 8, 3, 3), np.float32) * 0.3, _rand(rng, (6,), np.float32)

    def loss(w1, b1, w2, b2, x):
        h = F.relu(F.conv2d(x, w1, b1, 2))
        return rlgrad.numpy.sum(F.relu(F.conv2d(h, w2, b2, 1)) ** 2)

    args = [rlgrad.tensor(a) for a in (w1, b1, w2, b2)] + [x]
    eager = rlgrad.value_and_grad(loss, argnums=(0, 1, 2, 3))(*args)
    step = rlgrad.jit(rlgrad.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    step(*args)  # traced
    calls.clear()
    compiled = step(*args)
    assert len(calls) == 2
    leaves = [rlgrad.tree_util.tree_flatten(t)[0] for t in (compiled, eager)]
    assert len(leaves[0]) == 5
    for a, b in zip(*leaves):
        np.testing.assert_array_equal(_array(a), _array(b))


def _array(a):
    return np.asarray(a._value if hasattr(a, "_value") else a)


@pytest.mark.parametrize("c_columns", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ok,s,p", _CASES)
def test_input_grad_relu_pair_gives_the_two_calls_bits(monkeypatch, c_columns, dtype, xs, ok, s,
                                                       p):
    """``_conv2d_input_grad_relu`` (the select applied by col2im's blocks, or to the whole where
    another path runs) against ``relu_grad(conv2d_input_grad(...), mask)``, bit for bit, for
    masks and outputs laid out channels-last (a conv's) and NCHW."""
    monkeypatch.setattr(F, "_C_COLUMNS", c_columns)
    rng = np.random.default_rng(11)
    w = _rand(rng, (ok[0], xs[1], *ok[1]), dtype)
    y = F._conv2d_fwd(_rand(rng, xs, dtype), w, None, s, p)
    g = ops._relu(_rand(rng, y.shape, dtype)).transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)
    mask_last = _rand(rng, (xs[0], xs[2], xs[3], xs[1]), dtype).transpose(0, 3, 1, 2)
    for mask in (mask_last, np.ascontiguousarray(mask_last)):
        want = ops._relu_grad(F._conv2d_input_grad_fwd(g, w, s, p, xs), mask)
        np.testing.assert_array_equal(F._conv2d_input_grad_relu(g, w, s, p, xs, (mask,)), want)
        after = F._ReluGradAfter(mask, None)
        F._conv2d_input_grad_fwd(g, w, s, p, xs, after)
        # blockwise where col2im runs (in C, or the reference's NumPy for strides > 1) on an
        # unpadded input and the mask is a conv's output
        col2im = c_columns or (s != (1, 1) and not F._subpixel_pays(
            *ok[1], s, y.shape[2:], (xs[2] + 2 * p[0], xs[3] + 2 * p[1])))
        assert after.done == (col2im and p == (0, 0) and mask is mask_last)
        for out in (np.empty_like(mask_last), np.empty(xs, dtype)):
            assert F._conv2d_input_grad_relu(g, w, s, p, xs, (mask,), out=out) is out
            np.testing.assert_array_equal(out, want)


def test_compiled_step_runs_input_grad_and_relu_grad_as_the_pair(monkeypatch):
    """A compiled gradient step of a 3-conv trunk runs each inner layer's input gradient and the
    ReLU's backward below it as the pair (one call, second operand ``then``), and its
    convolutions' values in reused buffers; the eager step's bits, and the reference's (the pair
    removed), at every call."""
    rng = np.random.default_rng(12)
    ws = [_rand(rng, s, np.float32) * 0.3 for s in ((8, 2, 4, 4), (6, 8, 3, 3), (5, 6, 2, 2))]
    bs = [_rand(rng, (s,), np.float32) for s in (8, 6, 5)]

    def loss(w1, b1, w2, b2, w3, b3, x):
        h = F.relu(F.conv2d(x, w1, b1, 2))
        h = F.relu(F.conv2d(h, w2, b2, 1))
        return rlgrad.numpy.sum(F.relu(F.conv2d(h, w3, b3, 1)) ** 2)

    params = [rlgrad.tensor(a) for pair in zip(ws, bs) for a in pair]
    step = rlgrad.jit(rlgrad.value_and_grad(loss, argnums=tuple(range(6))))
    pair = FUSED_PAIRS.pop(("conv2d_input_grad", "relu_grad"))
    try:
        reference = rlgrad.jit(rlgrad.value_and_grad(loss, argnums=tuple(range(6))))
        ref_src = reference.lower(*params, _rand(rng, (4, 2, 20, 20), np.float32))
    finally:
        FUSED_PAIRS[("conv2d_input_grad", "relu_grad")] = pair
    src = step.lower(*params, _rand(rng, (4, 2, 20, 20), np.float32))
    assert src.count("conv2d_input_grad+relu_grad, in place") == 2
    assert "conv2d_input_grad+relu_grad" not in ref_src
    assert src.count("conv2d+relu, in place") == 3  # (weight gradients read them: not outputs)
    for _ in range(3):
        x = _rand(rng, (4, 2, 20, 20), np.float32)
        got, ref = step(*params, x), reference(*params, x)
        eager = rlgrad.value_and_grad(loss, argnums=tuple(range(6)))(*params, x)
        leaves = [rlgrad.tree_util.tree_flatten(t)[0] for t in (got, ref, eager)]
        for a, b, c in zip(*leaves):
            np.testing.assert_array_equal(_array(a), _array(c))
            np.testing.assert_array_equal(_array(b), _array(c))


@pytest.mark.parametrize("c", [1, 4, 20])
def test_images_to_float_into_a_buffer_gives_the_fresh_bits(c):
    """rlgrad.rl.cnn's input step written into a compiled step's buffer (channels-last, as the
    traced value is) or any other array, against the fresh result: the same numbers."""
    rng = np.random.default_rng(13)
    for x in (rng.integers(0, 256, (3, c, 7, 5)).astype(np.uint8),
              rng.integers(0, 256, (3, c, 7, 5)).astype(np.float32)):
        for dtype, scale in ((np.dtype(np.float32), 255.0), (np.dtype(np.float64), None)):
            want = F._images(x, dtype, scale)
            assert want.transpose(0, 2, 3, 1).flags.c_contiguous and want.dtype == dtype
            np.testing.assert_array_equal(want, x.astype(dtype) / (scale or 1))
            for out in (np.empty_like(want), np.empty(x.shape, dtype)):
                assert F._images(x, dtype, scale, out=out) is out
                np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plain_acting_gives_the_recorded_paths_bits(monkeypatch, dtype):
    rng = np.random.default_rng(4)
    rlgrad.random.seed(0)
    nets = [(NatureCNN((1, 64, 64), 256, dtype=dtype), rng.integers(0, 256, (3, 1, 64, 64))),
            (NatureCNN((4, 84, 84), dtype=dtype), rng.integers(0, 256, (1, 4, 84, 84))),
            (MinAtarCNN((4, 10, 10), dtype=dtype), rng.integers(0, 2, (2, 4, 10, 10)))]
    plain = []
    trunk = cnn._plain_trunk
    monkeypatch.setattr(cnn, "_plain_trunk", lambda *a: plain.append(1) or trunk(*a))
    for net, x in nets:
        x = x.astype(np.uint8)
        with rlgrad.no_grad():
            plain.clear()
            fast = net(x)
            assert plain == [1]  # the plain path was taken
            monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
            ref = net(x)
            monkeypatch.setattr(cnn, "PLAIN_ACTING", True)
        assert isinstance(fast, rlgrad.Tensor) and not fast.requires_grad
        assert fast._value.dtype == dtype and (fast._value > 0).any()
        np.testing.assert_array_equal(fast._value, ref._value)
        assert net(x).requires_grad  # gradients on: the recorded path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simple_multi_obs_cnn_gradients_match_pytorch(dtype):
    """The 1x64x64 image of SB3's SimpleMultiObsEnv through the Nature CNN (256 features), with
    the fast paths on: outputs and every weight's gradient against torch's."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    rlgrad.random.seed(1)
    ours = NatureCNN((1, 64, 64), 256, dtype=dtype)
    theirs = nn.Sequential(nn.Conv2d(1, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                           nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(1024, 256),
                           nn.ReLU()).to(torch.float64 if dtype == np.float64 else torch.float32)
    # (ours: SB3's cnn.i / linear.0 names; this Sequential's: i / 7)
    theirs.load_state_dict({k.replace("cnn.", "").replace("linear.0.", "7."): torch.from_numpy(
        v.numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(5).integers(0, 256, (16, 1, 64, 64), dtype=np.uint8)
    g = np.random.default_rng(6).standard_normal((16, 256)).astype(dtype)
    step = rlgrad.jit(lambda x: rlgrad.grad(lambda *p: rlgrad.numpy.sum(
        cnn.nature_cnn(x, p) * g), argnums=tuple(range(8)))(*ours.parameters()))
    grads = [step(x) for _ in range(2)][-1]  # compiled: the conv+ReLU pairs
    want = theirs(torch.from_numpy(x).to(theirs[0].weight.dtype) / 255.0)
    (want * torch.from_numpy(g)).sum().backward()
    with rlgrad.no_grad():
        np.testing.assert_allclose(ours(x)._value, want.detach().numpy(),
                                   **(dict(rtol=1e-4, atol=1e-5) if dtype == np.float32
                                      else dict(rtol=1e-11, atol=1e-12)))
    for ga, (name, tp) in zip(grads, theirs.named_parameters()):
        ga = _array(ga)
        if dtype == np.float64:
            np.testing.assert_allclose(ga, tp.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
        else:  # a float32 ReLU input within rounding of 0 may switch in one library only
            err = np.linalg.norm(ga - tp.grad.numpy()) / np.linalg.norm(tp.grad.numpy())
            assert err < 1e-4, (name, err)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_grad_on_channels_last_views_gives_numpys_bits(dtype):
    """ReLU's backward on a conv's output and gradient (NCHW views of NHWC memory) takes the C
    pass on the memory as it is; mixed layouts take NumPy's; both give the select's bits."""
    rng = np.random.default_rng(8)
    last = [np.ascontiguousarray(_rand(rng, (3, 5, 4, 6), dtype)).transpose(0, 3, 1, 2)
            for _ in range(2)]
    first = _rand(rng, (3, 6, 5, 4), dtype)
    for g, x in ((last[0], last[1]), (first, last[1]), (last[0], first)):
        want = np.where(x <= 0, dtype(0), g)  # torch's threshold_backward
        got = ops._relu_grad(g, x)
        np.testing.assert_array_equal(got, want)
        out = np.empty_like(last[0])
        assert ops._relu_grad(g, x, out=out) is out
        np.testing.assert_array_equal(out, want)
    assert ops._relu_grad(last[0], last[1]).transpose(0, 2, 3, 1).flags.c_contiguous
    # a flattened conv output's gradient (NCHW) against the conv's output (channels-last): the
    # result is laid out as the output is (what the next conv's gradients read without a copy)
    assert ops._relu_grad(first, last[1]).transpose(0, 2, 3, 1).flags.c_contiguous
    g = first.copy()
    assert ops._relu_grad(g, last[1], out=g) is g  # in place on g: NumPy's path, same select
    np.testing.assert_array_equal(g, np.where(last[1] <= 0, dtype(0), first))
    # a column slice (the features' part of a concatenation's gradient) against a C-order x
    wide, x2 = _rand(rng, (7, 9), dtype), _rand(rng, (7, 5), dtype)
    for out in (None, np.empty((7, 5), dtype)):
        got = ops._relu_grad(wide[:, 2:7], x2, out=out)
        np.testing.assert_array_equal(got, np.where(x2 <= 0, dtype(0), wide[:, 2:7]))
        assert got.flags.c_contiguous and (out is None or got is out)


@needs_kernels
def test_relu_on_a_channels_last_view_gives_numpys_bits():
    rng = np.random.default_rng(9)
    x = np.ascontiguousarray(_rand(rng, (2, 5, 4, 3), np.float32)).transpose(0, 3, 1, 2)
    got = ops._relu(x)
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    assert got.transpose(0, 2, 3, 1).flags.c_contiguous
    out = np.empty(x.shape, np.float32)  # NCHW memory: NumPy's path
    np.testing.assert_array_equal(ops._relu(x, out=out), np.maximum(x, 0))


def test_plain_acting_leaves_vmapped_parameters_to_the_recorded_path():
    """Under vmap (an ensemble's stacked parameters, a shared NumPy batch, gradients off) the
    trunk runs member by member as the recorded path does, not on the stacked arrays."""
    rlgrad.random.seed(3)
    nets = [MinAtarCNN((2, 10, 10), 8, dtype=np.float64) for _ in range(3)]
    x = np.random.default_rng(11).integers(0, 2, (4, 2, 10, 10)).astype(np.uint8)
    params, bufs = rlgrad.func.stack_module_state(nets)
    with rlgrad.no_grad():
        got = rlgrad.func.vmap(lambda p, b: rlgrad.func.functional_call(nets[0], (p, b), (x,)),
                               in_dims=(0, 0))(params, bufs)
        want = [net(x)._value for net in nets]
    np.testing.assert_allclose(_array(got), np.stack(want), rtol=1e-12, atol=1e-12)


def test_kept_weight_columns_give_the_copies_bits(monkeypatch):
    """Inside ``weights_fixed()`` a weight's columns are made at its first call and reused
    (the same array); the convolutions give the bits of the columns made at every call
    (KEEP_WEIGHT_COLS off, the reference) and of calls outside; a cleared dict (after a
    callback) makes them again from the weights as they are then."""
    rng = np.random.default_rng(5)
    for xs, (o, k), s, p in _CASES:
        x, b = _rand(rng, xs, np.float32), _rand(rng, o, np.float32)
        w = _rand(rng, (o, xs[1], *k), np.float32)
        want = F._conv2d_relu(x, w, b, s, p)
        with F.weights_fixed() as kept:
            assert F._weight_cols(w) is F._weight_cols(w) and kept[id(w)][0] is w
            np.testing.assert_array_equal(F._conv2d_relu(x, w, b, s, p), want)
            np.testing.assert_array_equal(F._conv2d_relu(x, w, b, s, p), want)
            w *= 2  # a callback writes the weight: cleared, the columns follow it
            kept.clear()
            np.testing.assert_array_equal(F._conv2d_relu(x, w, b, s, p),
                                          F._conv2d_relu(x, w.copy(), b, s, p))
        assert F._KEPT_COLS is None and F._weight_cols(w) is not F._weight_cols(w)
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    with F.weights_fixed() as kept:
        assert F._weight_cols(w) is not F._weight_cols(w) and not kept


def test_kept_weight_columns_hold_a_bounded_number_of_arrays():
    """A weight cast at every call is a new array each time: the dict is emptied when full."""
    w = np.ones((4, 2, 3, 3), np.float64)
    with F.weights_fixed() as kept:
        for _ in range(3 * F._KEPT_MAX):
            F._weight_cols(w.astype(np.float32))
            assert len(kept) <= F._KEPT_MAX


@pytest.mark.parametrize("with_callback", [False, True])
def test_a_rollout_with_kept_columns_gives_the_references_bits(monkeypatch, with_callback):
    """PPO on SB3's SimpleMultiObsEnv (a Dict of a 64x64 image and a vector, so
    CombinedExtractor with a Nature CNN): the rollout buffer and the trained parameters with
    the columns kept while acting are the reference's, bit for bit."""
    def run():
        return dict_image_ppo(32, 16, 64, with_callback)

    copies = []
    copy = F._weight_cols_copy
    monkeypatch.setattr(F, "_weight_cols_copy", lambda w: copies.append(1) or copy(w))
    fast, n_fast = run(), len(copies)
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    copies.clear()
    for a, b in zip(fast, run(), strict=True):
        np.testing.assert_array_equal(a, b)
    # 64 steps of 3 convolutions each: kept, once per rollout (a callback: again every step)
    assert n_fast <= len(copies) if with_callback else n_fast < len(copies) - 3 * 60


def test_an_update_makes_each_weights_columns_once_per_step(monkeypatch):
    """PPO's minibatch steps run inside ``weights_fixed()``: each conv weight's columns are made
    once per step, for its forward and its input gradient (SimpleMultiObsEnv's Nature CNN: three
    forwards, two input gradients: conv1's input is the observation), made at each of the five
    calls with KEEP_WEIGHT_COLS off; the parameters trained both ways are the same bits."""
    from rlgrad.rl import PPO
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    copies = []
    copy = F._weight_cols_copy
    monkeypatch.setattr(F, "_weight_cols_copy", lambda w: copies.append(1) or copy(w))
    trained = []
    for keep in (True, False):
        monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", keep)
        np.random.seed(3)
        model = PPO("MultiInputPolicy", SimpleMultiObsEnv(random_start=False), n_steps=32,
                    batch_size=16, n_epochs=2, seed=3)
        model.learn(32)  # one rollout, 2 x 2 minibatch steps (the first one traced)
        copies.clear()
        model.train()
        assert len(copies) == 4 * (3 if keep else 5)
        trained.append([p._value.copy() for p in model.policy.parameters()])
    for a, b in zip(*trained, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_plans_give_the_per_call_answers(monkeypatch, dtype):
    """A convolution's shape-only work kept per (shapes, dtypes, stride, padding) (CONV_PLANS):
    the bits of the work done at every call (the reference), one plan per key, a list stride
    not kept, and bad input refused in one line at every call."""
    rng = np.random.default_rng(6)
    monkeypatch.setattr(F, "_PLANS", {})
    for xs, (o, k), s, p in _CASES:
        x, b = _rand(rng, xs, dtype), _rand(rng, o, dtype)
        w = _rand(rng, (o, xs[1], *k), np.float32)  # (a float32 weight: the result's dtype)
        monkeypatch.setattr(F, "CONV_PLANS", False)
        want = [F._conv2d_relu(x, w, b, s, p), F._conv2d_fwd(x, w, b, s, p)]
        monkeypatch.setattr(F, "CONV_PLANS", True)
        for _ in range(2):
            got = [F._conv2d_relu(x, w, b, s, p), F._conv2d_fwd(x, w, b, s, p)]
            for a, c in zip(got, want, strict=True):
                assert a.dtype == c.dtype == np.result_type(dtype, np.float32)
                np.testing.assert_array_equal(a, c)
    assert len(F._PLANS) == len(_CASES)
    x, w = _rand(rng, (1, 2, 6, 6), np.float32), _rand(rng, (3, 2, 3, 3), np.float32)
    F._conv2d_fwd(x, w, None, [1, 2], 0)
    assert len(F._PLANS) == len(_CASES)  # (unhashable: worked out, not kept)
    for _ in range(2):
        with pytest.raises(ValueError, match="input has 2 channels"):
            F._conv2d_fwd(x, _rand(rng, (3, 4, 3, 3), np.float32), None, 1, 0)
        with pytest.raises(ValueError, match="smaller than the kernel"):
            F._conv2d_fwd(x, _rand(rng, (3, 2, 7, 7), np.float32), None, 1, 0)
    monkeypatch.setattr(F, "_PLANS_MAX", 2)
    for n in range(1, 6):  # a bounded number kept
        F._conv2d_fwd(_rand(rng, (n, 2, 6, 6), np.float32), w, None, 1, 0)
        assert len(F._PLANS) <= 2



@pytest.mark.parametrize("n", [1, 3, 40])
def test_one_block_spans_are_the_generators(n):
    """``_Blocks.spans``: one block (a rollout's batch of 1) as a tuple, many through the
    generator; the same (first sample, samples, row range, column block) either way."""
    b = F._Blocks((n, 30, 30, 32), 4, 4, (2, 2), np.float32)
    one, gen = list(b.spans()), list(b._spans())
    assert (len(one) == 1) == (b.per >= n)
    assert [s[:4] for s in one] == [s[:4] for s in gen]
    assert sum(s[1] for s in gen) == n
    for (*_, c1), (*_, c2) in zip(one, gen, strict=True):
        assert c1.shape == c2.shape and np.shares_memory(c1, b.buf) and np.shares_memory(c2, b.buf)
