"""``rlgrad.nn.functional``: PyTorch's ``torch.nn.functional`` names on rlgrad Tensors.

Layers that sit on the hot path of every RL update are single fused primitives (``linear``,
``conv2d``, ``elu``, ``huber``): one recorded node instead of several, each with VJP rules written
with differentiable operations so every order of derivative still works. Everything else is a
composition of the engine's primitives, so its gradient follows.

On plain NumPy arrays these functions return plain arrays (as ``rlgrad.numpy`` does).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rlgrad import numpy as _rnp
from rlgrad import ops
from rlgrad import special as _special
from rlgrad.batching import BatchedTensor, every_slice
from rlgrad.indexing import one_hot as _one_hot
from rlgrad.nn import winograd as _wino
from rlgrad.random import draw as _draw
from rlgrad.tensor import Tensor, TraceError, _const, _shape, _size, _Trace

if TYPE_CHECKING:
    from rlgrad.tracer import PrimitiveFunction
    from rlgrad.typing import DTypeLike, PadMode, ShapeLike
from rlgrad.tracer import FUSED_PAIRS, defbatch, defjvp, defjvp_elementwise, defvjp, nobatch, primitive

__all__ = [
    "linear", "conv2d", "dropout", "relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu", "silu",
    "gelu", "mish", "embedding", "batch_norm",
    "softmax", "log_softmax", "logsumexp", "one_hot", "layer_norm", "flatten",
    "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy_with_logits", "binary_cross_entropy", "kl_div", "normalize", "pad",
    "conv1d", "conv_transpose2d",
]


# ---------------------------------------------------------------------------------------------
# linear: y = x @ W.T + b, PyTorch's weight layout (out_features, in_features)
# ---------------------------------------------------------------------------------------------
def _product(x: Any, weight: Any, out: Any = None) -> Any:
    """``x @ weight.T``: BLAS reads the transposed (Fortran-ordered) view without a copy. An
    input with leading dimensions is one (rows, in) product (the same bits): NumPy's stacked
    matmul over a transposed weight is ~2.4x slower (a (32, 16, 64) sequence's projection)."""
    if type(x) is np.ndarray and x.ndim > 2 and (out is None or out.flags.c_contiguous):
        rows = x.reshape(-1, x.shape[-1])
        if out is None:
            return (rows @ weight.T).reshape(x.shape[:-1] + weight.shape[:1])
        np.matmul(rows, weight.T, out=out.reshape(rows.shape[0], -1))
        return out
    return x @ weight.T if out is None else np.matmul(x, weight.T, out=out)


def _linear(x: Any, weight: Any, bias: Any = None, out: Any = None) -> Any:
    return _add_bias(_product(x, weight, out), bias)


def _linear_relu(x: Any, weight: Any, bias: Any = None, out: Any = None) -> Any:
    """``relu(linear(x, weight, bias))`` with the bias add and the ReLU in one pass (the same bits
    as the two calls): what ``rlgrad.jit`` runs for a linear layer whose output only its ReLU
    reads."""
    return _add_bias(_product(x, weight, out), bias, relu=True)


def _add_bias(out: Any, bias: Any, relu: bool = False) -> Any:
    """``out += bias``, then ``relu(out)`` if asked, in place (the fresh output is ours): one C
    pass where it fits (the same adds as NumPy's broadcast, ~2x faster), else NumPy's."""
    k = ops._kernels
    if (bias is not None and k is not None and type(out) is np.ndarray
            and k.add_rows(out, bias, relu)):
        return out
    if bias is not None:
        out += bias
    return ops._relu(out, out=out) if relu else out


def _rows(a: Any) -> Any:
    """Collapse all leading (batch) axes: (..., n) -> (-1, n)."""
    return a if a.ndim == 2 else a.reshape((-1, a.shape[-1]))


# The two products of linear's backward pass are primitives of their own, closed under
# differentiation with ``linear`` (each one's VJPs are the other two), so that they can skip work
# that ReLU makes exactly zero: a unit dead for the whole batch has an all-zero gradient column,
# and its row of the weight gradient and its term of the input gradient are exact zeros. A DQN's
# second 256-unit layer has ~70% of its units dead on a 64-row batch: its two 64x256x256 products
# then cost ~35% less. Per output element, the terms left out are exact zeros and the rest are
# summed in the same order, so the numbers are the same (bitwise, with NumPy's OpenBLAS); only
# where the skipped factor holds inf or NaN does the dense product give NaN and this one 0.
_SKIP_MIN_UNITS = 64  # narrower products are too small for the check to pay
_SKIP_MAX_LIVE = 0.75  # skip only when at most this fraction of the units is alive


def _live_units(g2: np.ndarray, other: int) -> np.ndarray | None:
    """Indices of the units (columns of a (rows, units) gradient) with a non-zero entry in some
    row, if few enough are alive for skipping the others to pay (``other``: the product's third
    dimension); else None (use the dense product). Units alive in the batch are alive in its
    first row or later, so one row decides cheaply that a tanh layer (no exact zeros) is dense."""
    rows, units = g2.shape
    if units < _SKIP_MIN_UNITS or other < _SKIP_MIN_UNITS or rows < 2:
        return None
    limit = _SKIP_MAX_LIVE * units
    if np.count_nonzero(g2[0]) > limit:
        return None
    if ops._kernels is not None:  # one C pass (~3x NumPy's bool reduction and flatnonzero)
        idx = np.empty(units, np.intp)
        n = ops._kernels.live_columns(g2, idx)
        if n >= 0:
            return idx[:n] if n <= limit else None
    live = np.flatnonzero(g2.any(axis=0))
    return live if len(live) <= limit else None


def _live_columns(g2: np.ndarray, live: np.ndarray) -> np.ndarray:
    """``g2[:, live]`` (one C pass where it fits: ~2x NumPy's take)."""
    if ops._kernels is not None:
        res = np.empty((g2.shape[0], len(live)), g2.dtype)
        if ops._kernels.take_columns(g2, live, res):
            return res
    return g2.take(live, axis=1)


def _linear_grad_input(g: Any, weight: Any, out: Any = None, skip: bool = True) -> Any:
    """``g @ weight``: the input gradient of ``linear`` (without the units whose gradient is zero
    in every row, unless ``skip`` is False)."""
    if weight.shape[0] == 1 and g.ndim >= 2:  # one output (a value head): an outer product,
        k = ops._kernels  # the same numbers as g @ weight, 3-5x faster; in C ~5x faster again
        if k is not None and type(g) is np.ndarray and g.dtype == weight.dtype:
            res = np.empty(g.shape[:-1] + weight.shape[1:], g.dtype) if out is None else out
            if k.outer(g, weight, res):
                return res
        return np.multiply(g, weight, out=out)
    if g.ndim >= 2 and skip:
        g2 = _rows(g)
        live = _live_units(g2, weight.shape[1])
        if live is not None:
            if out is not None and g.ndim > 2:
                out = out.reshape(g2.shape[0], -1)  # a view: out is contiguous
            r = np.matmul(_live_columns(g2, live), weight.take(live, axis=0), out=out)
            return r if g.ndim == 2 else r.reshape(g.shape[:-1] + r.shape[-1:])
    return np.matmul(g, weight, out=out)


def _linear_grad_weight(g: Any, x: Any, out: Any = None, skip: bool = True) -> Any:
    """``rows(g).T @ rows(x)``: the weight gradient of ``linear`` (the rows of units whose
    gradient is zero in every row are zeros, not computed, unless ``skip`` is False)."""
    if x.ndim == 1:
        return np.multiply(g[..., None], x, out=out)
    g2, x2 = _rows(g), _rows(x)
    live = _live_units(g2, x2.shape[1]) if skip else None
    if live is None:
        return np.matmul(g2.T, x2, out=out)
    part = _live_columns(g2, live).T @ x2
    if out is None:
        out = np.empty((g2.shape[1], x2.shape[1]), part.dtype)
    if ops._kernels is None or not ops._kernels.put_rows(part, live, out):
        out.fill(0)
        out[live] = part
    return out


def _dense_grad_input(g: Any, weight: Any, out: Any = None) -> Any:
    return _linear_grad_input(g, weight, out, skip=False)


def _dense_grad_weight(g: Any, x: Any, out: Any = None) -> Any:
    return _linear_grad_weight(g, x, out, skip=False)


_linear_grad_input_p = primitive(_linear_grad_input, "linear_grad_input", arity=2,
                                 writes_out=True)
defbatch(_linear_grad_input_p, "linear_grad_input")
_linear_grad_weight_p = primitive(_linear_grad_weight, "linear_grad_weight", arity=2,
                                  writes_out=True)
defbatch(_linear_grad_weight_p, "linear_grad_weight")
# The same products without looking for dead units, for gradients that come out of tanh's
# backward (``ops.tanh_grad``): tanh has no dead units, its gradient is zero only where it
# saturates to exactly +-1, so the check (~1 us, several per step of a tanh MLP) cannot pay.
_dense_grad_input_p = primitive(_dense_grad_input, "linear_grad_input_dense", arity=2,
                                writes_out=True)
defbatch(_dense_grad_input_p, "linear_grad_input")
_dense_grad_weight_p = primitive(_dense_grad_weight, "linear_grad_weight_dense", arity=2,
                                 writes_out=True)
defbatch(_dense_grad_weight_p, "linear_grad_weight")
# g @ W: d/dg is c @ W.T = linear(c, W), d/dW is g.T @ c; g.T @ x: d/dg is x @ c.T, d/dx is g @ c.
_linear_p: PrimitiveFunction  # (made below; these rules call it only when they run)
for _gi, _gw in ((_linear_grad_input_p, _linear_grad_weight_p),
                 (_dense_grad_input_p, _dense_grad_weight_p)):
    defvjp(_gi, lambda c, ans, g, w: _linear_p(c, w),
           lambda c, ans, g, w: _linear_grad_weight_p(g, c))
    defvjp(_gw, lambda c, ans, g, x: _linear_p(x, c),
           lambda c, ans, g, x: _linear_grad_input_p(g, c))
    # both are bilinear: the tangent is the same product with one factor replaced by its tangent
    defjvp(_gi, lambda t, ans, g, w: _linear_grad_input_p(t, w),
           lambda t, ans, g, w: _linear_grad_input_p(g, t))
    defjvp(_gw, lambda t, ans, g, x: _linear_grad_weight_p(t, x),
           lambda t, ans, g, x: _linear_grad_weight_p(g, t))
_TANH_GRAD = ops.tanh_grad.primitive


def _grad_input(g: Any, weight: Any) -> Any:
    """linear's input gradient, recorded (traced or create_graph) as the dense product when
    ``g`` comes from tanh's backward; plain arrays take the checking kernel."""
    if type(g) is Tensor and g._op is _TANH_GRAD:
        return _dense_grad_input_p(g, weight)
    return _linear_grad_input_p(g, weight)


def _grad_weight(g: Any, x: Any) -> Any:
    if type(g) is Tensor and g._op is _TANH_GRAD:
        return _dense_grad_weight_p(g, x)
    return _linear_grad_weight_p(g, x)


def _linear_vjp_b(g: Any, ans: Any, x: Any, weight: Any, bias: Any = None) -> Any:
    if g.ndim == 1:
        return g
    r = _rows(g)
    return ops._sum(r, axis=0) if type(r) is np.ndarray else r.sum(axis=0)  # (ops: one C loop)


_linear_p = primitive(_linear, "linear", writes_out=True)
defbatch(_linear_p, "linear")
defvjp(_linear_p, lambda g, ans, x, weight, bias=None: _grad_input(g, weight),
       lambda g, ans, x, weight, bias=None: _grad_weight(g, x), _linear_vjp_b)
defjvp(_linear_p, lambda t, ans, x, weight, bias=None: _linear_p(t, weight),
       lambda t, ans, x, weight, bias=None: _linear_p(x, t), lambda t, ans, x, weight, bias=None: t)


FUSED_PAIRS[("linear", "relu")] = _linear_relu


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002 - torch's name
    """``input @ weight.T + bias`` as one recorded node (``weight`` is (out_features, in_features))."""
    return _linear_p(input, weight, bias)


# ---------------------------------------------------------------------------------------------
# conv2d (NCHW, weight (out, in, kh, kw)): im2col + GEMM. Three primitives closed under
# differentiation: the input gradient of conv2d is a transposed convolution, the weight gradient
# a correlation of input and output gradient, and each one's VJPs are the other two.
#
# Inside, the three run channels-last (NHWC): a receptive field is then kh runs of kw*C contiguous
# numbers, so im2col is a fast block copy, and the GEMM's (positions, out channels) output *is*
# NHWC memory, returned as an NCHW view (ufuncs such as ReLU keep that layout, so the next conv
# reads it without a transpose). The columns are built and consumed a few samples at a time, in a
# block that stays in the L2 cache: one (12800 x 256) GEMM over a 13 MB column matrix runs at a
# quarter of the speed of eight (1600 x 256) ones on cache-resident blocks. The backward pass
# rebuilds each block's columns instead of keeping them from the forward pass (cheaper than
# reading them back from memory, and no 13 MB per layer held by the graph).
# ---------------------------------------------------------------------------------------------
_BLOCK_ELEMS = 1 << 18  # numbers per column block (1 MB of float32): fits L2 with the GEMM's panels


def _pair(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, int | np.integer):
        return int(v), int(v)
    t = tuple(int(a) for a in v)
    if len(t) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    return t


def _nhwc(x: np.ndarray, padding: tuple[int, int], dtype: Any = None) -> np.ndarray:
    """(N, C, H, W) -> contiguous (N, H+2ph, W+2pw, C): a view when the memory already is NHWC
    (a conv's output), else one copy (with the zero border, and the cast to ``dtype``)."""
    ph, pw = padding
    v = x.transpose(0, 2, 3, 1)
    if not (ph or pw) and v.flags.c_contiguous and (dtype is None or v.dtype == dtype):
        return v
    n, h, w, c = v.shape
    out = np.empty((n, h + 2 * ph, w + 2 * pw, c), dtype=dtype or x.dtype)
    if ph or pw:
        out[:, :ph], out[:, ph + h:], out[:, :, :pw], out[:, :, pw + w:] = 0, 0, 0, 0
    out[:, ph:ph + h, pw:pw + w] = v
    return out


def _rows_of(g: np.ndarray) -> np.ndarray:
    """An (N, O, OH, OW) output gradient as (N*OH*OW, O) rows (a view when it is NHWC memory)."""
    v = g.transpose(0, 2, 3, 1)
    return v.reshape(-1, v.shape[3]) if v.flags.c_contiguous else np.ascontiguousarray(v).reshape(
        -1, v.shape[3])


# A conv weight's columns (``_weight_cols``) kept while the weights are known to stay as they
# are: inside ``weights_fixed()`` (an on-policy rollout: the policy acts, nothing trains; an
# on-policy gradient step: the forward and the input gradient read the same weights, and the
# optimizer writes them after) each weight array is copied once and its copy reused, a third of
# a batch-1 convolution's time;
# anywhere else, or with KEEP_WEIGHT_COLS off (the reference: tests/nn/test_conv_kernels.py
# compares the two), at every call.
KEEP_WEIGHT_COLS = True
_KEPT_COLS: dict[Any, tuple[Any, Any]] | None = None
_KEPT_MAX = 64  # arrays kept at most (a weight cast at every call is a new array each time)


@contextlib.contextmanager
def weights_fixed() -> Iterator[dict[Any, tuple[Any, Any]]]:
    """Within it, nothing writes the conv weights it runs: their columns are made once (see
    KEEP_WEIGHT_COLS). The dict it yields is what is kept: ``.clear()`` it after code that may
    write the weights (a user's callback)."""
    global _KEPT_COLS
    saved, _KEPT_COLS = _KEPT_COLS, ({} if KEEP_WEIGHT_COLS else None)
    try:
        yield {} if _KEPT_COLS is None else _KEPT_COLS
    finally:
        _KEPT_COLS = saved


def kept_while_fixed() -> dict[Any, tuple[Any, Any]] | None:
    """What ``weights_fixed()`` keeps (None outside it, or with KEEP_WEIGHT_COLS off): entries
    ``key naming id(obj): (obj, made from obj's weights)``, which code acting on fixed weights
    may add to (rlgrad.rl.policies' MLP layers as arrays); at most _KEPT_MAX, then emptied."""
    return _KEPT_COLS


_MISSING = object()  # what ``_kept_get`` answers for nothing kept


def _kept_get(key: Any, owner: Any) -> Any:
    """What ``weights_fixed()`` keeps under ``key`` (naming ``id(owner)``) for ``owner``, or
    _MISSING (outside it, or nothing kept for that object)."""
    kept = _KEPT_COLS
    hit = None if kept is None else kept.get(key)
    if hit is not None and hit[0] is owner:  # (held with its value: its id is not reused)
        return hit[1]
    return _MISSING


def _keep(key: Any, owner: Any, value: Any) -> Any:
    """``value`` kept under ``key`` for ``owner`` while inside ``weights_fixed()`` (emptied
    first at _KEPT_MAX entries); returns ``value``."""
    kept = _KEPT_COLS
    if kept is not None:
        if len(kept) >= _KEPT_MAX:
            kept.clear()
        kept[key] = (owner, value)
    return value


def _weight_cols(weight: np.ndarray) -> np.ndarray:
    """(O, C, kh, kw) -> (kh*kw*C, O), the row order of the NHWC columns (a copy in one C loop
    where rlgrad._kernels is built: NumPy's transposing copy is most of a batch-1 conv); inside
    ``weights_fixed()``, the copy made at the weight's first call (read-only for the callers)."""
    cols = _kept_get(id(weight), weight)
    if cols is _MISSING:
        cols = _keep(id(weight), weight, _weight_cols_copy(weight))
    return cols


def _weight_cols_copy(weight: np.ndarray) -> np.ndarray:
    o = weight.shape[0]
    k = ops._kernels
    if k is not None:
        out = np.empty((weight.size // max(o, 1), o), weight.dtype)
        if k.weight_cols(weight, out):
            return out
    return np.ascontiguousarray(weight.transpose(2, 3, 1, 0)).reshape(-1, o)


class _Blocks:
    """The geometry of one convolution and its column blocks: ``per`` samples per block."""

    __slots__ = ("n", "c", "kh", "kw", "st", "oh", "ow", "rows", "k", "per", "buf")

    def __init__(self, xp_shape: tuple[int, ...], kh: int, kw: int, st: tuple[int, int],
                 dtype: Any) -> None:
        self.n, hp, wp, self.c = xp_shape
        self.kh, self.kw, self.st = kh, kw, st
        self.oh, self.ow = (hp - kh) // st[0] + 1, (wp - kw) // st[1] + 1
        self.rows = self.oh * self.ow  # output positions per sample
        self.k = kh * kw * self.c
        self.per = max(1, min(self.n, _BLOCK_ELEMS // (self.rows * self.k)))
        self.buf = np.empty((self.per * self.rows, self.k), dtype=dtype)

    def spans(self) -> Any:
        """(first sample, samples, first row, last row, column block) for every block (one
        block, a rollout's batch of 1: as a tuple, without a generator's setup)."""
        if self.per >= self.n:
            return ((0, self.n, 0, self.n * self.rows, self.buf),)
        return self._spans()

    def _spans(self) -> Any:
        for n0 in range(0, self.n, self.per):
            m = min(self.per, self.n - n0)
            yield n0, m, n0 * self.rows, (n0 + m) * self.rows, self.buf[:m * self.rows]

    def im2col(self, xp: np.ndarray, n0: int, m: int, cols: np.ndarray) -> np.ndarray:
        """Write samples n0..n0+m of the padded NHWC input's receptive fields into ``cols``."""
        return _im2col(xp[n0:n0 + m], cols, (self.kh, self.kw), self.st, (self.oh, self.ow))


# The column copies in one C loop each (rlgrad._kernels' conv_cols / conv_col2im: NumPy's
# strided copy and adds make one inner-loop call per run of kw*C or C numbers); off: NumPy's
# (the reference: tests/nn/test_conv_kernels.py compares them bit for bit).
_C_COLUMNS = True


def _im2col(xp: np.ndarray, cols: np.ndarray, k: tuple[int, int], st: tuple[int, int],
            ohw: tuple[int, int]) -> np.ndarray:
    """``cols`` (m*oh*ow, kh*kw*C) = the (kh, kw) windows at strides ``st`` of the padded NHWC
    ``xp`` (m, Hp, Wp, C), ``ohw`` of them per sample."""
    kern = ops._kernels
    if _C_COLUMNS and kern is not None and kern.conv_cols(xp, cols, *k, *st, *ohw):
        return cols
    s0, s1, s2, s3 = xp.strides
    win = as_strided(xp, (xp.shape[0], *ohw, *k, xp.shape[3]),
                     (s0, s1 * st[0], s2 * st[1], s1, s2, s3), writeable=False)
    np.copyto(cols.reshape(win.shape), win)
    return cols


def _col2im(gx: np.ndarray, cols: np.ndarray, k: tuple[int, int], st: tuple[int, int],
            ohw: tuple[int, int]) -> None:
    """``gx`` (m, Hp, Wp, C) += the columns (m*oh*ow, kh*kw*C) at their windows (``_im2col``'s
    adjoint), one strided add per kernel offset."""
    kern = ops._kernels
    if _C_COLUMNS and kern is not None and kern.conv_col2im(gx, cols, *k, *st, *ohw):
        return
    (kh, kw), (sh, sw), (oh, ow) = k, st, ohw
    d = cols.reshape(gx.shape[0], oh, ow, kh, kw, gx.shape[3])
    for i in range(kh):
        for j in range(kw):
            gx[:, i:i + sh * oh:sh, j:j + sw * ow:sw] += d[:, :, :, i, j]


def _check_conv(x: np.ndarray, weight: np.ndarray, st: tuple[int, int],
                pd: tuple[int, int]) -> tuple[int, int]:
    if x.ndim != 4:
        raise ValueError(f"conv2d expects input of shape (N, C, H, W), got {x.shape}")
    o, c, kh, kw = weight.shape
    if x.shape[1] != c:
        raise ValueError(
            f"conv2d: input has {x.shape[1]} channels (shape {x.shape}) but the weight expects "
            f"{c} (weight shape {weight.shape})"
        )
    oh = (x.shape[2] + 2 * pd[0] - kh) // st[0] + 1
    ow = (x.shape[3] + 2 * pd[1] - kw) // st[1] + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(
            f"conv2d: input of spatial size {x.shape[2:]} with padding {pd} is smaller than the "
            f"kernel {(kh, kw)}"
        )
    return oh, ow


def _conv2d_fwd(x: np.ndarray, weight: np.ndarray, bias: Any = None, stride: Any = 1,
                padding: Any = 0) -> np.ndarray:
    return _conv2d_run(x, weight, bias, stride, padding, False, None)


def _conv2d_relu(x: np.ndarray, weight: np.ndarray, bias: Any = None, stride: Any = 1,
                 padding: Any = 0, out: np.ndarray | None = None) -> np.ndarray:
    """``relu(conv2d(x, weight, bias))`` with the bias add and the ReLU in one pass over each
    block of the output while it is in cache (the same bits as the two calls): what
    ``rlgrad.jit`` runs for a convolution whose output only its ReLU reads, and the CNN trunks'
    acting (rlgrad.rl.cnn)."""
    return _conv2d_run(x, weight, bias, stride, padding, True, out)


def _nhwc_rows(out: np.ndarray | None, shape: tuple[int, ...], dt: Any) -> np.ndarray | None:
    """``out`` (N, O, OH, OW) as the (N*OH*OW, O) rows of its NHWC memory (a view), if it is laid
    out so and fits ``shape`` (NHWC) and ``dt``; else None."""
    if out is None or out.dtype != dt or out.shape != (shape[0], shape[3], shape[1], shape[2]):
        return None
    v = out.transpose(0, 2, 3, 1)
    return v.reshape(-1, shape[3]) if v.flags.c_contiguous else None


# A forward convolution's shape-only work (stride and padding read, the shapes checked, the
# result dtype, the folded path or not) done once per (input shape and dtype, weight shape and
# dtype, stride, padding) and kept: a batch-1 rollout runs the same few convolutions at every
# step (~3 us of each). Off: done at every call (the reference; the same answers, which depend
# on the shapes only: tests/nn/test_conv_kernels.py compares the two).
CONV_PLANS = True
_PLANS: dict[Any, tuple[tuple[int, int], tuple[int, int], np.dtype, bool]] = {}
_PLANS_MAX = 256


def _conv_plan(x: np.ndarray, weight: np.ndarray, stride: Any, padding: Any
               ) -> tuple[tuple[int, int], tuple[int, int], np.dtype, bool]:
    """(stride pair, padding pair, result dtype, folded path) of ``conv2d(x, weight)``."""
    key = None
    if CONV_PLANS:
        # (the fold switches too: a plan kept before they change must not outlive them)
        key = (x.shape, x.dtype, weight.shape, weight.dtype, stride, padding, _FOLD_ROWS,
               _FOLD_MIN_ROWS)
        try:
            hit = _PLANS.get(key)
        except TypeError:  # (a list stride or padding: not kept)
            hit, key = None, None
        if hit is not None:
            return hit
    st, pd = _pair(stride, "stride"), _pair(padding, "padding")
    _check_conv(x, weight, st, pd)
    dt = np.result_type(x.dtype, weight.dtype)
    plan = st, pd, dt, _folds(x.shape[2] + 2 * pd[0], weight.shape[2], st[0])
    if key is not None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _conv2d_run(x: np.ndarray, weight: np.ndarray, bias: Any, stride: Any, padding: Any,
                relu: bool, out: np.ndarray | None) -> np.ndarray:
    """conv2d (then ReLU if ``relu``), written into ``out`` when given (any layout)."""
    if weight.ndim == 5:
        y = _stacked_fwd(x, weight, bias, stride, padding)
        return ops._relu(y, out=out) if relu else y
    st, pd, dt, folds = _conv_plan(x, weight, stride, padding)
    xp = _nhwc(x, pd, dt)
    o, _, kh, kw = weight.shape
    n, oh, ow = xp.shape[0], (xp.shape[1] - kh) // st[0] + 1, (xp.shape[2] - kw) // st[1] + 1
    rows = _nhwc_rows(out, (n, oh, ow, o), dt)
    if rows is None:
        rows = np.empty((n * oh * ow, o), dtype=dt)
    wino = _wino.plan(xp.shape, weight.shape, st, dt)
    if wino is not None:  # (a batched update's convolution: rlgrad/nn/winograd.py)
        _wino.forward(xp, _weight_cols(weight.astype(dt, copy=False)), wino,
                      rows.reshape(n, oh, ow, o))
        _bias_relu(rows, bias, relu)
    elif folds:
        _folded_fwd(xp, weight.astype(dt, copy=False), bias, st, relu, rows)
    else:
        b = _Blocks(xp.shape, kh, kw, st, dt)
        w2 = _weight_cols(weight.astype(dt, copy=False))
        for n0, m, r0, r1, cols in b.spans():
            y = np.matmul(b.im2col(xp, n0, m, cols), w2, out=rows[r0:r1])
            _bias_relu(y, bias, relu)  # while the block is in cache
    y = rows.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)  # NHWC memory, NCHW view
    if out is None:
        return y
    if not np.shares_memory(out, rows):
        np.copyto(out, y)
    return out


def _bias_relu(y: np.ndarray, bias: Any, relu: bool) -> None:
    """``y += bias``, then ``y = relu(y)`` if asked, in place on a C-contiguous block (one C
    pass where rlgrad._kernels fits, the same bits as NumPy's two)."""
    if bias is not None:
        _add_bias(y, bias, relu)
    elif relu:
        ops._relu(y, out=y)


def _conv2d_input_grad_fwd(g: np.ndarray, weight: np.ndarray, stride: Any, padding: Any,
                           x_shape: tuple[int, ...], then: _ReluGradAfter | None = None
                           ) -> np.ndarray:
    """Transposed convolution: the adjoint of ``conv2d(., weight)`` applied to ``g`` (``then``:
    an epilogue the col2im path applies block by block, see ``_conv2d_input_grad_relu``)."""
    if weight.ndim == 5:
        return _stacked_input_grad(g, weight, stride, padding, tuple(x_shape))
    o, c, kh, kw = weight.shape
    st, (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    n, _, h, w = x_shape
    hp, wp = h + 2 * ph, w + 2 * pw
    oh, ow = (hp - kh) // st[0] + 1, (wp - kw) // st[1] + 1
    if g.shape != (n, o, oh, ow):
        raise ValueError(f"conv2d_input_grad: gradient of shape {g.shape} does not fit an input "
                         f"{tuple(x_shape)} and weight {weight.shape}")
    dt = np.result_type(g.dtype, weight.dtype)
    wt = weight.astype(dt, copy=False)
    other_paths = _INPUT_GRAD_PATHS and not (_C_COLUMNS and ops._kernels is not None)
    wino = _wino.plan((n, hp, wp, c), weight.shape, st, dt)
    if wino is not None:
        gx = np.zeros((n, hp, wp, c), dtype=dt)
        _wino.input_grad(_rows_of(g.astype(dt, copy=False)).reshape(n, oh, ow, o),
                         _weight_cols(wt), wino, gx)
    elif other_paths and st == (1, 1):
        gx = _offsets_input_grad(_rows_of(g), wt, n, (oh, ow), (hp, wp))
    elif other_paths and _subpixel_pays(kh, kw, st, (oh, ow), (hp, wp)):
        gx = _subpixel_input_grad(g, wt, st, (hp, wp))
    else:
        gx = _col2im_input_grad(g, wt, st, n, (hp, wp), then)
    return gx[:, ph:ph + h, pw:pw + w].transpose(0, 3, 1, 2)


def _col2im_input_grad(g: np.ndarray, wt: np.ndarray, st: tuple[int, int], n: int,
                       hwp: tuple[int, int], then: _ReluGradAfter | None = None) -> np.ndarray:
    """One GEMM into the columns, then col2im (one C loop, or one strided add per kernel
    offset, whose inner runs are only C numbers long), then ``then``'s epilogue if it fits."""
    o, c, kh, kw = wt.shape
    dt = wt.dtype
    shape = (n, *hwp, c)  # padded NHWC
    gx = np.zeros(shape, dtype=dt) if then is None else then.zeros(shape, dt)
    b = _Blocks(gx.shape, kh, kw, st, dt)
    g2, w2t = _rows_of(g), _weight_cols(wt).T
    for n0, m, r0, r1, cols in b.spans():
        d = np.matmul(g2[r0:r1], w2t, out=cols)
        _col2im(gx[n0:n0 + m], d, (kh, kw), st, (b.oh, b.ow))  # on the cached block
        if then is not None:
            then.apply(gx, n0, m)  # still cached
    return gx


# ``relu_grad(conv2d_input_grad(g, w, ...), mask)``: the gradient through a convolution and then
# through the ReLU of the layer below (``mask`` its output), what the backward pass of a CNN
# trunk runs at every layer but the first. As one call (rlgrad.jit's pair, tracer.FUSED_PAIRS) the
# col2im path applies the ReLU's select to each block of samples right after its col2im, while it
# is in cache, and writes into the step's buffer: one pass over the input gradient's memory less
# (SimpleMultiObsEnv's 4x4/2 conv at batch 64: a 1.8 MB gradient). A select: the same bits as the
# two calls, which every other path (and the reference, the pair removed) runs.
class _ReluGradAfter:
    """The epilogue ``relu_grad(., mask)`` of an input gradient, written into ``out`` if given;
    ``done``: the col2im path applied it (else the caller does, to the whole gradient)."""

    def __init__(self, mask: Any, out: np.ndarray | None) -> None:
        self.mask, self.out = mask, out
        self.done = self.in_out = False
        self.rows: np.ndarray | None = None

    def zeros(self, shape: tuple[int, ...], dt: Any) -> np.ndarray:
        """The zeroed padded NHWC gradient (``out``'s memory when it is that, unpadded); the
        epilogue is taken when ``mask`` is that too (a conv's output, unpadded input)."""
        m = self.mask
        if (type(m) is np.ndarray and m.dtype == dt and m.shape == (shape[0], shape[3], *shape[1:3])
                and m.transpose(0, 2, 3, 1).flags.c_contiguous):
            self.rows, self.done = m.transpose(0, 2, 3, 1), True
        o = self.out
        if (self.done and o is not None and o.dtype == dt and o.shape == m.shape
                and o.transpose(0, 2, 3, 1).flags.c_contiguous):
            gx = o.transpose(0, 2, 3, 1)
            gx.fill(0)
            self.in_out = True
            return gx
        return np.zeros(shape, dtype=dt)

    def apply(self, gx: np.ndarray, n0: int, m: int) -> None:
        if self.rows is not None:
            blk = gx[n0:n0 + m]
            ops._relu_grad(blk, self.rows[n0:n0 + m], out=blk)


def _conv2d_input_grad_relu(g: np.ndarray, weight: np.ndarray, stride: Any, padding: Any,
                            x_shape: tuple[int, ...], then: tuple[Any, ...],
                            out: np.ndarray | None = None) -> np.ndarray:
    """``relu_grad(conv2d_input_grad(g, weight, stride, padding, x_shape), *then)`` (the same
    bits), written into ``out`` when given."""
    after = _ReluGradAfter(then[0], out)
    gx = _conv2d_input_grad_fwd(g, weight, stride, padding, x_shape, after)
    if not after.done:  # (a path without the epilogue: the select on the whole, in place)
        return ops._relu_grad(gx, then[0], out=gx if out is None else out)
    if after.in_out or out is None:
        return gx if out is None else out
    np.copyto(out, gx)
    return out


# The input gradient without col2im's short strided adds (measured on the Nature CNN at batch 32,
# one thread: conv3's 3x3/1 1.79 -> 1.55 ms, conv2's 4x4/2 2.82 -> 1.83 ms; their GEMMs ~0.9 and
# ~1.4 ms). Stride 1: one GEMM per kernel offset (i, j), g @ W[:, :, i, j] -> (N, OH, OW, C), added
# into the input's rows i.., columns j..: OW * C contiguous numbers per run instead of C.
# Stride s > 1 (sub-pixel): input row s*a + r, for each phase r < s, collects g's rows a - p
# through kernel row r + s*p, p < ceil(kh / s): the same ceil(kh/s) x ceil(kw/s) window of the
# zero-bordered g for all s*s phases, so one GEMM of those windows by the phases' weights side by
# side ((window, O) x (phase, C)) gives every input pixel, no adds; its FLOPs are those of the
# GEMM + col2im times hq*wq*s*s*ceil(kh/s)*ceil(kw/s) / (oh*ow*kh*kw) (conv2: 1.23), so it is
# taken up to _SUBPIXEL_MAX_FLOPS.
# With col2im in one C loop (rlgrad._kernels' conv_col2im) the col2im path is faster than both
# (CPU time, one thread, float32: conv2 of the Nature CNN at batch 32 4.76 -> 3.30 ms, conv3
# 1.83 -> 1.57 ms; SimpleMultiObsEnv's 3x3 conv at batch 64 1.20 -> 1.00 ms): they are taken only
# where col2im runs in NumPy.
_INPUT_GRAD_PATHS = True  # off: every input gradient takes the col2im path (tests compare)
_SUBPIXEL_MAX_FLOPS = 1.5


def _subpixel_pays(kh: int, kw: int, st: tuple[int, int], ohw: tuple[int, int],
                   hwp: tuple[int, int]) -> bool:
    (sh, sw), (oh, ow), (hp, wp) = st, ohw, hwp
    sub = -(-hp // sh) * -(-wp // sw) * sh * sw * -(-kh // sh) * -(-kw // sw)
    return sub <= _SUBPIXEL_MAX_FLOPS * oh * ow * kh * kw


def _offsets_input_grad(g2: np.ndarray, wt: np.ndarray, n: int, ohw: tuple[int, int],
                        hwp: tuple[int, int]) -> np.ndarray:
    """Stride 1: one GEMM per kernel offset and one add of whole output rows each."""
    o, c, kh, kw = wt.shape
    (oh, ow), dt = ohw, wt.dtype
    gx = np.zeros((n, *hwp, c), dtype=dt)
    w_ij = np.ascontiguousarray(wt.transpose(2, 3, 0, 1))  # (kh, kw, O, C)
    per = max(1, min(n, _BLOCK_ELEMS // (oh * ow * max(o, c))))
    buf = np.empty((per * oh * ow, c), dtype=dt)
    for n0 in range(0, n, per):
        m = min(per, n - n0)
        rows, gb = g2[n0 * oh * ow:(n0 + m) * oh * ow], gx[n0:n0 + m]
        d = buf[:len(rows)].reshape(m, oh, ow, c)
        for i in range(kh):
            for j in range(kw):
                np.matmul(rows, w_ij[i, j], out=buf[:len(rows)])
                gb[:, i:i + oh, j:j + ow] += d
    return gx


def _subpixel_input_grad(g: np.ndarray, wt: np.ndarray, st: tuple[int, int],
                         hwp: tuple[int, int]) -> np.ndarray:
    """Stride > 1: the s*s phases of the input from one GEMM over windows of g (padded NHWC out,
    its size rounded up to whole strides)."""
    o, c, kh, kw = wt.shape
    (sh, sw), dt = st, wt.dtype
    n, _, oh, ow = g.shape
    qh, qw = -(-kh // sh), -(-kw // sw)  # window: kernel rows / columns per phase
    hq, wq = -(-hwp[0] // sh), -(-hwp[1] // sw)  # input rows / columns per phase
    wz = np.zeros((o, c, qh * sh, qw * sw), dtype=dt)  # the kernel padded to whole strides
    wz[:, :, :kh, :kw] = wt
    # rows (window row u = qh-1-p, column, O), columns (phase r, phase t, C)
    wsub = np.ascontiguousarray(wz.reshape(o, c, qh, sh, qw, sw)[:, :, ::-1, :, ::-1].transpose(
        2, 4, 0, 3, 5, 1)).reshape(qh * qw * o, sh * sw * c)
    gp = np.zeros((n, hq + qh - 1, wq + qw - 1, o), dtype=dt)
    gp[:, qh - 1:qh - 1 + oh, qw - 1:qw - 1 + ow] = g.transpose(0, 2, 3, 1)
    gx = np.empty((n, hq, sh, wq, sw, c), dtype=dt)
    b = _Blocks(gp.shape, qh, qw, (1, 1), dt)
    out = np.empty((b.per * b.rows, sh * sw * c), dtype=dt)
    for n0, m, r0, r1, cols in b.spans():
        y = np.matmul(b.im2col(gp, n0, m, cols), wsub, out=out[:r1 - r0])
        np.copyto(gx[n0:n0 + m], y.reshape(m, hq, wq, sh, sw, c).transpose(0, 1, 3, 2, 4, 5))
    return gx.reshape(n, hq * sh, wq * sw, c)


def _conv2d_weight_grad_fwd(x: np.ndarray, g: np.ndarray, stride: Any, padding: Any,
                            w_shape: tuple[int, ...]) -> np.ndarray:
    """Gradient of ``<g, conv2d(x, W)>`` with respect to W."""
    if len(w_shape) == 5:
        return _stacked_weight_grad(x, g, stride, padding, tuple(w_shape))
    o, c, kh, kw = w_shape
    dt = np.result_type(x.dtype, g.dtype)
    xp = _nhwc(x, _pair(padding, "padding"), dt)
    st = _pair(stride, "stride")
    wino = _wino.plan(xp.shape, w_shape, st, dt)
    if wino is not None:
        gy = _rows_of(g.astype(dt, copy=False)).reshape(g.shape[0], g.shape[2], g.shape[3], o)
        return _wino.weight_grad(xp, gy, wino, c)
    if _folds(xp.shape[1], kh, st[0]):
        return _folded_weight_grad(xp, g, w_shape, st)
    b = _Blocks(xp.shape, kh, kw, st, dt)
    g2 = _rows_of(g)
    acc = np.zeros((o, b.k), dtype=dt)
    part = np.empty_like(acc)
    for n0, m, r0, r1, cols in b.spans():
        acc += np.matmul(g2[r0:r1].T, b.im2col(xp, n0, m, cols), out=part)
    return np.ascontiguousarray(acc.reshape(o, kh, kw, c).transpose(0, 3, 1, 2))


# Kernel rows folded into the stride (a vertical space-to-depth) when the kernel height is a
# multiple q > 1 of the vertical stride, as the Nature CNN's 8x8/4 and 4x4/2 layers are: output row
# i reads input rows sh*i .. sh*(i+q)-1, i.e. the folded rows i .. i+q-1 of height sh each. One GEMM
# of the (folded row, output column) windows -- sh*kw*C numbers each, half (q = 2) the im2col
# columns -- by the weight's q row-blocks side by side gives every block's partial sum; output row
# i adds q of them, shifted by one folded row each. The copy is 1/q of im2col's, the GEMM about the
# same (the q-1 extra folded rows), and the weight gradient is the same GEMM transposed against
# the output gradient placed at those q shifts.
# It pays where the q-1 extra folded rows are a small part of the output's rows: measured on the
# Nature CNN at batch 32 (one thread), conv1 (8x8/4, 20 output rows) forward and weight gradient
# each ~10% faster, conv2 (4x4/2, 9 rows) ~3% slower; so at least 20 output rows per extra one.
_FOLD_ROWS = True  # off: every convolution takes the im2col path (tests compare the two)
_FOLD_MIN_ROWS = 20  # output rows per extra folded row for the fold to be taken


def _folds(hp: int, kh: int, sh: int) -> bool:
    """Whether a convolution over ``hp`` (padded) rows with kernel height ``kh``, stride ``sh``
    takes the folded path."""
    if not (_FOLD_ROWS and sh > 1 and kh > sh and kh % sh == 0):
        return False
    return (hp - kh) // sh + 1 >= _FOLD_MIN_ROWS * (kh // sh - 1)


class _Folded:
    """The geometry of a row-folded convolution over a padded NHWC input, in sample blocks."""

    def __init__(self, xp: np.ndarray, kh: int, kw: int, st: tuple[int, int]) -> None:
        self.xp, (self.sh, self.sw), self.kw = xp, st, kw
        self.n, hp, wp, self.c = xp.shape
        self.q = kh // self.sh
        self.oh, self.ow = (hp - kh) // self.sh + 1, (wp - kw) // self.sw + 1
        self.fh = self.oh - 1 + self.q  # folded rows read
        self.k = self.sh * kw * self.c
        self.per = max(1, min(self.n, _BLOCK_ELEMS // (self.fh * self.ow * self.k)))
        self.buf = np.empty((self.per, self.fh, self.ow, self.k), dtype=xp.dtype)

    def spans(self) -> Any:
        """(first sample, samples, that block's windows as (m * fh * ow, sh * kw * C) rows)."""
        for n0 in range(0, self.n, self.per):
            m = min(self.per, self.n - n0)
            cols = _im2col(self.xp[n0:n0 + m], self.buf[:m].reshape(-1, self.k),
                           (self.sh, self.kw), (self.sh, self.sw), (self.fh, self.ow))
            yield n0, m, cols


def _folded_weight(weight: np.ndarray, q: int, sh: int) -> np.ndarray:
    """(O, C, q*sh, kw) -> (sh*kw*C, q*O): rows (row in the fold, column, channel), columns
    (fold, out channel)."""
    o, c, _, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(o, c, q, sh, kw).transpose(3, 4, 1, 2, 0)).reshape(
        sh * kw * c, q * o)


def _folded_fwd(xp: np.ndarray, weight: np.ndarray, bias: Any, st: tuple[int, int], relu: bool,
                rows: np.ndarray) -> None:
    """The row-folded convolution (then ReLU if ``relu``) into ``rows``, its NHWC output's
    (N*OH*OW, O) rows."""
    o, _, kh, kw = weight.shape
    f = _Folded(xp, kh, kw, st)
    wf = _folded_weight(weight, f.q, f.sh)
    out = rows.reshape(f.n, f.oh, f.ow, o)
    part = np.empty((f.per * f.fh * f.ow, f.q * o), dtype=xp.dtype)
    for n0, m, cols in f.spans():
        y = np.matmul(cols, wf, out=part[:len(cols)]).reshape(m, f.fh, f.ow, f.q, o)
        ob = out[n0:n0 + m]
        np.add(y[:, :f.oh, :, 0], y[:, 1:f.oh + 1, :, 1], out=ob)
        for a in range(2, f.q):
            ob += y[:, a:a + f.oh, :, a]
        _bias_relu(ob, bias, relu)


def _folded_weight_grad(xp: np.ndarray, g: np.ndarray, w_shape: tuple[int, ...],
                        st: tuple[int, int]) -> np.ndarray:
    o, c, kh, kw = w_shape
    f = _Folded(xp, kh, kw, st)
    gn = g.transpose(0, 2, 3, 1)
    h = np.empty((f.per, f.fh, f.ow, f.q, o), dtype=xp.dtype)  # g at the q shifts, zeros around
    acc = np.zeros((f.k, f.q * o), dtype=xp.dtype)
    part = np.empty_like(acc)
    for n0, m, cols in f.spans():
        hb = h[:m]
        for a in range(f.q):
            hb[:, a:a + f.oh, :, a] = gn[n0:n0 + m]
            hb[:, :a, :, a] = 0
            hb[:, a + f.oh:, :, a] = 0
        acc += np.matmul(cols.T, hb.reshape(len(cols), -1), out=part)
    dw = acc.reshape(f.sh, kw, c, f.q, o).transpose(4, 2, 3, 0, 1).reshape(o, c, kh, kw)
    return np.ascontiguousarray(dw)


# A stack of E kernels, weight (E, O, C, kh, kw) (an ensemble of CNNs as vmap batches it, its
# bias (E, O)): the same three primitives over the members. An input shared by the members,
# (N, C, H, W), is one convolution by the E*O kernels side by side: one im2col, one GEMM (the
# weight gradient one GEMM too, the input gradient one transposed convolution). An input per
# member, (E, N, C, H, W): one convolution each; or, where every member's kernels are the same
# (a broadcast, stride 0: a weight under per-sample ``grad``), one convolution of the E*N
# images; the weight gradients of small members are batched GEMMs over blocks of members. The
# output is (E, N, O, OH, OW). The plain reference is the loop of single convolutions
# (tests/engine/test_vmap_conv.py) and, under vmap, the decomposed rule (``_conv2d_logical``).
def _side_by_side(g: np.ndarray) -> np.ndarray:
    """(E, N, O, OH, OW) -> (N, E*O, OH, OW): the members' outputs as one convolution's, an
    NCHW view of NHWC memory (a view of what ``_stacked_fwd`` returns for a shared input, else
    one copy)."""
    e, n, o, oh, ow = g.shape
    nhwc = np.ascontiguousarray(g.transpose(1, 3, 4, 0, 2))
    return nhwc.reshape(n, oh, ow, e * o).transpose(0, 3, 1, 2)


def _members(a: np.ndarray) -> np.ndarray:
    """(E, N, ...) -> (E*N, ...)."""
    return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def _shared(a: Any) -> bool:
    """Whether every member's slice of ``a`` is the same memory (a broadcast stack)."""
    return a is None or (a.shape[0] == 1 or a.strides[0] == 0)


def _stacked_fwd(x: np.ndarray, weight: np.ndarray, bias: Any, stride: Any,
                 padding: Any) -> np.ndarray:
    e, o = weight.shape[:2]
    if x.ndim == 4:
        b = None if bias is None else np.broadcast_to(bias, (e, o)).reshape(e * o)
        y = _conv2d_fwd(x, weight.reshape((e * o,) + weight.shape[2:]), b, stride, padding)
        return y.reshape((y.shape[0], e, o) + y.shape[2:]).transpose(1, 0, 2, 3, 4)
    if x.ndim != 5 or x.shape[0] != e:
        raise ValueError(f"conv2d: a stack of {e} kernels {weight.shape} needs an input of "
                         f"shape (N, C, H, W) or ({e}, N, C, H, W), got {x.shape}")
    if _shared(weight) and _shared(bias):
        y = _conv2d_fwd(_members(x), weight[0], None if bias is None else bias[0], stride, padding)
        return y.reshape(x.shape[:2] + y.shape[1:])
    ys = [_conv2d_fwd(x[k], weight[k], None if bias is None else bias[k], stride, padding)
          for k in range(e)]  # channels-last memory kept: the next layer reads it as it is
    return np.stack([y.transpose(0, 2, 3, 1) for y in ys]).transpose(0, 1, 4, 2, 3)


def _stacked_input_grad(g: np.ndarray, weight: np.ndarray, stride: Any, padding: Any,
                        x_shape: tuple[int, ...]) -> np.ndarray:
    e, o = weight.shape[:2]
    if len(x_shape) == 4:  # the members' gradients summed: one transposed convolution
        return _conv2d_input_grad_fwd(_side_by_side(g), weight.reshape((e * o,) + weight.shape[2:]),
                                      stride, padding, x_shape)
    if _shared(weight):
        gx = _conv2d_input_grad_fwd(_members(g), weight[0], stride, padding,
                                    (e * x_shape[1],) + x_shape[2:])
        return gx.reshape(x_shape)
    gxs = [_conv2d_input_grad_fwd(g[k], weight[k], stride, padding, x_shape[1:]) for k in range(e)]
    return np.stack([v.transpose(0, 2, 3, 1) for v in gxs]).transpose(0, 1, 4, 2, 3)


def _stacked_weight_grad(x: np.ndarray, g: np.ndarray, stride: Any, padding: Any,
                         w_shape: tuple[int, ...]) -> np.ndarray:
    e, o, c, kh, kw = w_shape
    if x.ndim == 4:
        dw = _conv2d_weight_grad_fwd(x, _side_by_side(g), stride, padding, (e * o,) + w_shape[2:])
        return dw.reshape(w_shape)
    n, (oh, ow) = x.shape[1], g.shape[3:]
    if _BLOCK_ELEMS // (oh * ow * kh * kw * c) < 2 * n:  # fewer than two members per block
        return np.stack([_conv2d_weight_grad_fwd(x[k], g[k], stride, padding, w_shape[1:])
                         for k in range(e)])
    dt = np.result_type(x.dtype, g.dtype)
    xp = _nhwc(_members(x), _pair(padding, "padding"), dt)
    b = _Blocks(xp.shape, kh, kw, _pair(stride, "stride"), dt)
    per = b.per // n  # members whose columns fit one block
    g2 = _rows_of(_members(g)).reshape(e, n * b.rows, o)
    dw = np.empty((e, o, b.k), dt)
    for k0 in range(0, e, per):  # each block: a batched GEMM, (O, rows) x (rows, K) per member
        m = min(per, e - k0)
        cols = b.im2col(xp, k0 * n, m * n, b.buf[:m * n * b.rows]).reshape(m, n * b.rows, b.k)
        np.matmul(g2[k0:k0 + m].transpose(0, 2, 1), cols, out=dw[k0:k0 + m])
    return np.ascontiguousarray(dw.reshape(e, o, kh, kw, c).transpose(0, 1, 4, 2, 3))


def _bias_grad(g: Any) -> Any:
    """conv2d's bias gradient: ``g`` summed over all but the channels (and the members)."""
    return g.sum(axis=(0, 2, 3)) if len(_shape(g)) == 4 else g.sum(axis=(1, 3, 4))


_conv2d_p = primitive(_conv2d_fwd, "conv2d", fresh=True)
FUSED_PAIRS[("conv2d", "relu")] = _conv2d_relu
defbatch(_conv2d_p, "conv2d")
conv2d_input_grad = primitive(_conv2d_input_grad_fwd, "conv2d_input_grad", fresh=True)
conv2d_weight_grad = primitive(_conv2d_weight_grad_fwd, "conv2d_weight_grad", fresh=True)
FUSED_PAIRS[("conv2d_input_grad", "relu_grad")] = _conv2d_input_grad_relu
defbatch(conv2d_input_grad, "conv2d_input_grad")  # (conv_transpose2d's forward)
nobatch(conv2d_weight_grad, "conv2d's gradients are taken on the batched graph; call rlgrad.func.grad "
        "inside vmap")  # vmap differentiates the physical conv2d instead

defvjp(
    _conv2d_p,
    lambda g, ans, x, w, b=None, stride=1, padding=0:
        conv2d_input_grad(g, w, stride, padding, _shape(x)),
    lambda g, ans, x, w, b=None, stride=1, padding=0:
        conv2d_weight_grad(x, g, stride, padding, _shape(w)),
    lambda g, ans, x, w, b=None, stride=1, padding=0: _bias_grad(g),
)
defvjp(
    conv2d_input_grad,
    lambda h, ans, g, w, stride, padding, xs: _conv2d_p(h, w, stride=stride, padding=padding),
    lambda h, ans, g, w, stride, padding, xs: conv2d_weight_grad(h, g, stride, padding, _shape(w)),
)
defvjp(
    conv2d_weight_grad,
    lambda h, ans, x, g, stride, padding, ws: conv2d_input_grad(g, h, stride, padding, _shape(x)),
    lambda h, ans, x, g, stride, padding, ws: _conv2d_p(x, h, stride=stride, padding=padding),
)
# The three are bilinear (conv2d affine in its bias): one factor replaced by its tangent.
defjvp(
    _conv2d_p,
    lambda t, ans, x, w, b=None, stride=1, padding=0: _conv2d_p(t, w, stride=stride, padding=padding),
    lambda t, ans, x, w, b=None, stride=1, padding=0: _conv2d_p(x, t, stride=stride, padding=padding),
    lambda t, ans, x, w, b=None, stride=1, padding=0: t.reshape(
        (1, -1, 1, 1) if len(_shape(w)) == 4 else (_shape(t)[0], 1, -1, 1, 1)),
)
defjvp(
    conv2d_input_grad,
    lambda t, ans, g, w, stride, padding, xs: conv2d_input_grad(t, w, stride, padding, xs),
    lambda t, ans, g, w, stride, padding, xs: conv2d_input_grad(g, t, stride, padding, xs),
)
defjvp(
    conv2d_weight_grad,
    lambda t, ans, x, g, stride, padding, ws: conv2d_weight_grad(t, g, stride, padding, ws),
    lambda t, ans, x, g, stride, padding, ws: conv2d_weight_grad(x, t, stride, padding, ws),
)


def _images(x: np.ndarray, dtype: np.dtype, scale: float | None,
            out: np.ndarray | None = None) -> np.ndarray:
    """(N, C, H, W) frames as float ``dtype`` (divided by ``scale``) in one pass, written
    channels-last: an NCHW view of NHWC memory, the layout ``conv2d`` reads without a copy
    (into ``out`` when given: a compiled step's buffer, laid out so)."""
    x = np.asarray(x)
    n, c, h, w = x.shape
    if out is not None:
        if (out.dtype == dtype and out.shape == x.shape
                and out.transpose(0, 2, 3, 1).flags.c_contiguous):
            _images_into(x, dtype, scale, out.transpose(0, 2, 3, 1))
        else:
            np.copyto(out, _images(x, dtype, scale))
        return out
    res = np.empty((n, h, w, c), dtype=dtype)
    _images_into(x, dtype, scale, res)
    return res.transpose(0, 3, 1, 2)


def _images_into(x: np.ndarray, dtype: np.dtype, scale: float | None, out: np.ndarray) -> None:
    """``_images``' pass into ``out``, (N, H, W, C) C-contiguous."""
    c = x.shape[1]
    # few channels (4 stacked frames): one contiguous read per channel (a transposing copy that
    # gathers 4 numbers 28 KB apart for every pixel is twice as slow)
    planes = [(x[:, i], out[..., i]) for i in range(c)] if c <= 16 else [
        (x.transpose(0, 2, 3, 1), out)]
    for src, dst in planes:
        if scale is None:
            dst[...] = src
        else:
            np.divide(src, dtype.type(scale), out=dst, casting="unsafe")


# The input step of rlgrad.rl.cnn's trunks, recorded like any op: a traced observation batch
# (rlgrad.jit) stays an input of the compiled step instead of being read once as a constant.
# Observations carry no gradient.
_images_to_float = primitive(_images, "images_to_float", nondiff=True, arity=1, writes_out=True)
defbatch(_images_to_float, "merge_first")


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,  # noqa: A002
           padding: Any = 0) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch): input (N, C, H, W), weight (O, C, kh, kw).

    The result is an (N, O, OH, OW) array whose memory is channels-last (NHWC), as PyTorch's
    ``channels_last`` tensors: its values and shape are the same, only ``strides`` differ."""
    if len(_shape(weight)) != 4:  # (the primitive's stacks of kernels are vmap's)
        raise ValueError(f"conv2d: weight must have shape (out, in, kh, kw), got {_shape(weight)}")
    return _conv2d_p(input, weight, bias, stride=stride, padding=padding)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None,  # noqa: A002
                     stride: ShapeLike = 1, padding: ShapeLike = 0, output_padding: ShapeLike = 0,
                     groups: int = 1, dilation: ShapeLike = 1) -> Tensor:
    """torch's transposed convolution, input (N, C_in, H, W), weight (C_in, C_out, kh, kw): the
    adjoint of ``conv2d(., weight)`` (its input-gradient primitive), so its gradients are the
    other two conv2d primitives. ``groups`` and ``dilation`` other than 1 are not supported."""
    if groups != 1 or dilation not in (1, (1, 1)):
        raise NotImplementedError("conv_transpose2d: groups and dilation other than 1 are not "
                                  "supported by rlgrad")
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    oph, opw = _pair(output_padding, "output_padding")
    if oph >= sh or opw >= sw:
        raise ValueError(f"conv_transpose2d: output_padding {(oph, opw)} must be smaller than the "
                         f"stride {(sh, sw)}")
    n, c, h, w = _shape(input)
    _, co, kh, kw = _shape(weight)
    if _shape(weight)[0] != c:
        raise ValueError(f"conv_transpose2d: input has {c} channels but the weight {_shape(weight)} "
                         f"expects {_shape(weight)[0]}")
    out = (n, co, (h - 1) * sh - 2 * ph + kh + oph, (w - 1) * sw - 2 * pw + kw + opw)
    y = conv2d_input_grad(input, weight, (sh, sw), (ph, pw), out)
    return y if bias is None else y + ops.reshape(bias, (-1, 1, 1))


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None,  # noqa: A002
           stride: ShapeLike = 1, padding: ShapeLike = 0) -> Tensor:
    """(N, C, L) with weight (O, C, k): ``conv2d`` on a height of one."""
    s = stride if isinstance(stride, int | np.integer) else stride[0]
    p = padding if isinstance(padding, int | np.integer) else padding[0]
    out = conv2d(ops.expand_dims(input, 2), ops.expand_dims(weight, 2), bias, stride=(1, s), padding=(0, p))
    return ops.squeeze(out, 2)


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------
relu = ops.relu
tanh = ops.tanh
sigmoid = ops.sigmoid


def _elu(x: Any, alpha: float = 1.0) -> Any:
    # expm1 of min(x, 0): the unused branch never overflows
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


elu_p = primitive(_elu, "elu", arity=1)
defvjp(elu_p, lambda g, ans, x, alpha=1.0: g * ops.where(x > 0, 1.0, ans + alpha))
defjvp_elementwise(elu_p)


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    return elu_p(input, alpha=float(alpha))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """``log(1 + exp(beta x)) / beta``, and exactly ``x`` where ``beta x > threshold`` (PyTorch)."""
    if beta == 1.0:
        y = ops.softplus(input)
    else:
        y = ops.softplus(input * beta) / beta
    if threshold is None:
        return y
    return ops.where(input * beta > threshold, input, y)


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    return ops.leaky_relu(input, negative_slope)


def silu(input: Tensor) -> Tensor:  # noqa: A002
    return input * ops.sigmoid(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """``x * Phi(x)`` (``approximate='none'``) or PyTorch's tanh approximation (``'tanh'``)."""
    if approximate == "none":
        return 0.5 * input * (1.0 + _special.erf(input * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input * input * input)
        return 0.5 * input * (1.0 + ops.tanh(inner))
    raise ValueError(f"gelu: approximate={approximate!r}; use 'none' or 'tanh'")


def mish(input: Tensor) -> Tensor:  # noqa: A002
    """``x * tanh(softplus(x))``."""
    return input * ops.tanh(ops.softplus(input))


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,  # noqa: A002
              max_norm: float | None = None) -> Tensor:
    """Rows of ``weight`` at the integer indices ``input``; the row ``padding_idx`` is read but
    gets no gradient (PyTorch)."""
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm is not supported; renormalise the weight yourself")
    batched = isinstance(input, BatchedTensor)  # vmap: each slice reads its rows (checks see all)
    vals = every_slice(input) if isinstance(input, BatchedTensor) else np.asarray(
        input._value if isinstance(input, Tensor) else input)
    n = _shape(weight)[0]
    if vals.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {vals.dtype}")
    if vals.size and (vals.min() < 0 or vals.max() >= n):
        raise IndexError(f"embedding: index {vals.min() if vals.min() < 0 else vals.max()} is out of "
                         f"range for {n} embeddings (0..{n - 1})")
    idx = input if batched else vals
    rows = ops.getitem(weight, idx)
    if padding_idx is None or not np.any(vals == padding_idx % n):
        return rows
    pad = (idx == padding_idx % n)[..., None]
    return ops.where(pad, ops.getitem(ops.stop_gradient(weight), idx), rows)


def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:  # noqa: A002
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` (training only)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = _draw(lambda rng, s: rng.random(s), _shape(input)) >= p
    dt = _dtype(input)
    if isinstance(keep, Tensor):  # vmap, randomness='different': a mask per slice
        return input * (ops.astype(keep, dt) / dt.type(1.0 - p))
    return input * (keep.astype(dt) / dt.type(1.0 - p))


def softmax(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """Softmax along ``dim``; the max is subtracted first, so large logits do not overflow."""
    return ops.softmax(input, axis=dim)


def log_softmax(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    return ops.log_softmax(input, axis=dim)


def logsumexp(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """``log(sum(exp(x)))`` along ``dim`` (all axes when None), stable for large logits."""
    return ops.logsumexp(input, axis=dim, keepdims=keepdim)


def one_hot(tensor: Any, num_classes: int = -1, dtype: DTypeLike = np.int64) -> Tensor:
    """PyTorch's ``one_hot``: integer tensor of shape ``tensor.shape + (num_classes,)``."""
    return _one_hot(tensor, num_classes, dtype)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # noqa: A002
    shape = _shape(input)
    nd = len(shape)
    if nd == 0:
        return ops.reshape(input, (1,))
    s, e = start_dim % nd, end_dim % nd
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {shape}")
    new = shape[:s] + (int(np.prod(shape[s:e + 1], dtype=np.int64)),) + shape[e + 1:]
    return ops.reshape(input, new)


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,
               bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes (biased variance, as PyTorch)."""
    if isinstance(normalized_shape, int | np.integer):
        normalized_shape = (int(normalized_shape),)
    k = len(normalized_shape)
    if tuple(_shape(input)[-k:]) != tuple(normalized_shape):
        raise ValueError(
            f"layer_norm: input shape {_shape(input)} does not end with normalized_shape "
            f"{tuple(normalized_shape)}"
        )
    axes = tuple(range(-k, 0))
    mu = ops.mean(input, axis=axes, keepdims=True)
    centred = input - mu
    var = ops.mean(centred * centred, axis=axes, keepdims=True)
    y = centred / ops.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _batch_stats(input: Any, axes: tuple[int, ...]) -> tuple[Any, Any]:  # noqa: A002
    mu = ops.mean(input, axis=axes, keepdims=True)
    centred = input - mu
    return mu, ops.mean(centred * centred, axis=axes, keepdims=True)


def _update_running(running_mean: np.ndarray, running_var: np.ndarray, mu: Any, var: Any,
                    n: int, momentum: float) -> None:
    """In place, as PyTorch: the running variance takes the unbiased batch variance."""
    if _Trace.compiling:
        raise TraceError("batch_norm: updating running statistics in training mode writes arrays "
                         "in place, which rlgrad.jit cannot record; call it outside jit or in eval mode")
    m = np.asarray(getattr(mu, "_value", mu)).reshape(running_mean.shape)
    v = np.asarray(getattr(var, "_value", var)).reshape(running_var.shape) * (n / (n - 1))
    running_mean *= 1.0 - momentum
    running_mean += momentum * m
    running_var *= 1.0 - momentum
    running_var += momentum * v


def batch_norm(input: Tensor, running_mean: Tensor | np.ndarray | None,  # noqa: A002
               running_var: Tensor | np.ndarray | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalise each channel (axis 1) over the batch and spatial axes: batch statistics (biased
    variance) in training, updating ``running_mean``/``running_var`` (Tensors or arrays) in place
    when given; the running statistics otherwise (PyTorch's ``F.batch_norm``)."""
    # the statistics' arrays: they are state, never differentiated (torch's buffers)
    if isinstance(running_mean, Tensor):
        running_mean = running_mean._value
    if isinstance(running_var, Tensor):
        running_var = running_var._value
    shape = _shape(input)
    if len(shape) < 2:
        raise ValueError(f"batch_norm: input must be (N, C, ...), got shape {shape}")
    axes = (0,) + tuple(range(2, len(shape)))
    bshape = (1, shape[1]) + (1,) * (len(shape) - 2)
    if training:
        n = _size(input) // shape[1]
        if n <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input shape {shape}")
        mu, var = _batch_stats(input, axes)
        if running_mean is not None and running_var is not None:
            _update_running(running_mean, running_var, mu, var, n, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: eval mode needs running_mean and running_var")
        mu, var = running_mean.reshape(bshape), running_var.reshape(bshape)
    y = (input - mu) / ops.sqrt(var + eps)
    if weight is not None:
        y = y * ops.reshape(weight, bshape)
    if bias is not None:
        y = y + ops.reshape(bias, bshape)
    return y


# ---------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------
def _check_same_shape(input: Any, target: Any, name: str) -> None:  # noqa: A002
    si, st = _shape(input), _shape(target)
    if si != st and si != () and st != ():  # a scalar target (e.g. 0.0) is fine
        # PyTorch only warns; a silent (N, 1) vs (N,) broadcast is the classic value-loss bug.
        raise ValueError(
            f"{name}: input shape {_shape(input)} and target shape {_shape(target)} differ; "
            f"broadcasting them would compare every input with every target. Reshape one "
            f"(e.g. .squeeze(-1) or .reshape(target.shape))"
        )


def _reduction_scale(reduction: str, n: int) -> float:
    if reduction == "mean":
        return 1.0 / n if n else float("nan")
    if reduction in ("sum", "none"):
        return 1.0
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce_np(loss: np.ndarray, reduction: str) -> Any:
    # np.add.reduce skips np.mean's Python-level wrapper (same pairwise sum, same result)
    if reduction == "mean":
        return np.add.reduce(loss, axis=None) / max(loss.size, 1) if loss.size else np.mean(loss)
    if reduction == "sum":
        return np.add.reduce(loss, axis=None)
    return loss


def _reduce_tangent(t: Any, reduction: str) -> Any:
    """A fused loss's tangent: its VJP rule given the input's tangent is the elementwise term
    (already scaled by the reduction), summed unless the loss is per element."""
    return t if reduction == "none" else ops.sum(t)


# The regression losses are fused primitives (difference, elementwise loss and reduction in one
# recorded node): they sit in every value-function and Q-learning update.
def _mse_fwd(input: Any, target: Any, reduction: str = "mean") -> Any:  # noqa: A002
    d = np.subtract(input, target)
    if type(d) is not np.ndarray:  # 0-d operands give a NumPy scalar, which out= cannot take
        return _reduce_np(np.asarray(d * d), reduction)
    np.multiply(d, d, out=d)
    return _reduce_np(d, reduction)


def _mse_vjp(g: Any, ans: Any, input: Any, target: Any, reduction: str = "mean") -> Any:  # noqa: A002
    d = input - target
    return d * (g * (2.0 * _reduction_scale(reduction, _size(d))))


_mse_p = primitive(_mse_fwd, "mse_loss")
defbatch(_mse_p, "mse_loss")
defvjp(_mse_p, _mse_vjp, lambda g, ans, x, t, reduction="mean": -_mse_vjp(g, ans, x, t, reduction))
# the elementwise derivative times the tangent, reduced as the loss is
defjvp(_mse_p,
       lambda t, ans, x, y, reduction="mean": _reduce_tangent(_mse_vjp(t, ans, x, y, reduction), reduction),
       lambda t, ans, x, y, reduction="mean": -_reduce_tangent(_mse_vjp(t, ans, x, y, reduction), reduction))


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean (or summed) squared error; the shapes must match, or the target be a scalar."""
    _check_same_shape(input, target, "mse_loss")
    _reduction_scale(reduction, 1)
    return _mse_p(input, target, reduction=reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    _check_same_shape(input, target, "l1_loss")
    return _reduce(ops.absolute(input - target), reduction)


def _huber_fwd(input: Any, target: Any, delta: float = 1.0, reduction: str = "mean",  # noqa: A002
               scale: float = 1.0) -> Any:
    # q (a - q / 2) with q = min(|d|, delta): d^2 / 2 below delta, delta (|d| - delta / 2) above,
    # in 5 ufunc calls instead of 8 (halving is exact, so the bits are those of either branch)
    loss = np.abs(np.subtract(input, target))
    q = np.minimum(loss, delta)
    loss -= q * 0.5
    loss *= q
    if scale != 1.0:
        loss *= scale
    return _reduce_np(loss, reduction)


def _huber_vjp(g: Any, ans: Any, input: Any, target: Any, delta: float = 1.0,  # noqa: A002
               reduction: str = "mean", scale: float = 1.0) -> Any:
    # d/dd huber = clip(d, -delta, delta); clip's own rule gives the second derivative.
    d = input - target
    k = scale * _reduction_scale(reduction, _size(d))
    return ops.clip(d, -delta, delta) * (g * k if k != 1.0 else g)


_huber_p = primitive(_huber_fwd, "huber_loss")
defbatch(_huber_p, "huber_loss")
defvjp(_huber_p, _huber_vjp, lambda g, ans, x, t, delta=1.0, reduction="mean", scale=1.0:
       -_huber_vjp(g, ans, x, t, delta, reduction, scale))
defjvp(_huber_p, lambda t, ans, x, y, delta=1.0, reduction="mean", scale=1.0:
       _reduce_tangent(_huber_vjp(t, ans, x, y, delta, reduction, scale), reduction),
       lambda t, ans, x, y, delta=1.0, reduction="mean", scale=1.0:
       -_reduce_tangent(_huber_vjp(t, ans, x, y, delta, reduction, scale), reduction))


def huber_loss(input: Tensor, target: Tensor | float, reduction: str = "mean",
               delta: float = 1.0) -> Tensor:  # noqa: A002
    """Quadratic for ``|d| < delta``, linear (slope ``delta``) beyond (PyTorch's ``huber_loss``)."""
    _check_same_shape(input, target, "huber_loss")
    _reduction_scale(reduction, 1)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    return _huber_p(input, target, delta=float(delta), reduction=reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:  # noqa: A002
    """``huber_loss / beta`` (PyTorch's ``smooth_l1_loss``; SB3's DQN loss with ``beta=1``)."""
    _check_same_shape(input, target, "smooth_l1_loss")
    _reduction_scale(reduction, 1)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    if beta == 0:
        return _reduce(ops.absolute(input - target), reduction)
    return _huber_p(input, target, delta=float(beta), reduction=reduction, scale=1.0 / beta)


def _class_axis_last(x: Any) -> Any:
    """(N, C, d1, ...) -> (N, d1, ..., C) so that classes are on the last axis."""
    return ops.moveaxis(x, 1, -1) if len(_shape(x)) > 2 else x


def _int_target(target: Any, where: str) -> np.ndarray:
    """The target's array; under vmap a stand-in of one slice's shape (``_live_target`` gives the
    batched target itself, ``_target_values`` every slice's values for the checks)."""
    t = target._value if isinstance(target, Tensor) else np.asarray(target)
    if type(target) is BatchedTensor:
        t = np.zeros(tuple(target.shape), target.dtype)
    if t.dtype.kind not in "iu":
        raise TypeError(
            f"{where}: target must hold integer class indices (got {t.dtype}); for class "
            "probabilities pass a float target of the same shape as the input to cross_entropy"
        )
    return t


def _live_target(target: Any, t: np.ndarray) -> Any:
    """The target to compute masks and indices from: while rlgrad.jit traces, the traced tensor
    (so the step recomputes them from each call's target), else its array ``t``."""
    if (_Trace.compiling and isinstance(target, Tensor)) or type(target) is BatchedTensor:
        return ops.reshape(target, t.shape) if target.shape != t.shape else target
    return t


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
              # noqa: A002
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of integer ``target`` under log-probabilities ``input`` (N, C, ...).

    With ``weight`` and ``reduction='mean'`` the sum is divided by the total weight of the
    targets, as PyTorch does.
    """
    t = _int_target(target, "nll_loss")
    shape = _shape(input)
    if len(shape) == 1:  # a single sample: (C,) and a scalar target
        input, t = ops.reshape(input, (1, shape[0])), t.reshape(1)
        shape = _shape(input)
    n_cls = shape[1]
    if t.shape != (shape[0],) + tuple(shape[2:]):
        raise ValueError(f"nll_loss: target shape {t.shape} does not match input shape {shape} "
                         f"(expected {(shape[0],) + tuple(shape[2:])})")
    checked = np.where(t != ignore_index, t, 0)  # (while jit traces: the first call's, checked)
    every = every_slice(target) if type(target) is BatchedTensor else checked
    every = np.where(every != ignore_index, every, 0)
    if every.size and (every.min() < 0 or every.max() >= n_cls):
        bad = every[(every < 0) | (every >= n_cls)].flat[0]
        raise IndexError(f"nll_loss: target {int(bad)} is out of bounds for {n_cls} classes")
    live = _live_target(target, t)
    valid = live != ignore_index
    safe_t = ops.where(valid, live, 0) if live is not t else checked
    logp = ops.take_along_axis(_class_axis_last(input), safe_t[..., None], -1)[..., 0]
    w = np.ones(t.shape, dtype=np.result_type(_dtype(input))) if weight is None else None
    if weight is not None:
        wdata = weight._value if isinstance(weight, Tensor) else np.asarray(weight)
        w = ops.astype((wdata if live is t else _const(wdata))[safe_t], _dtype(input))
    w = w * valid
    loss = -logp * w
    if reduction == "mean":
        return _weighted_mean(ops.sum(loss), ops.sum(w))
    return _reduce(loss, reduction)


def _weighted_mean(total: Any, weight: Any) -> Any:
    """``total / weight``; when every target is ignored (``weight`` 0), torch's nan with a zero
    gradient (``total``'s terms all have weight 0; 0/0 would send NaN back through them)."""
    weight = ops.astype(weight, _dtype(total))  # a count of targets is an integer
    some = weight > 0
    return total / ops.where(some, weight, 1) + ops.where(some, 0 * weight, np.nan * weight)


def _dtype(x: Any) -> np.dtype:
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                   # noqa: A002
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` (N, C, ...) with integer class ``target`` (N, ...), or
    with class probabilities of the same shape as the input. Stable for large logits."""
    logp = log_softmax(input, dim=1 if len(_shape(input)) > 1 else 0)
    tdt = _dtype(target)
    if tdt.kind == "f":  # class probabilities
        _check_same_shape(input, target, "cross_entropy")
        n_cls = _shape(input)[1 if len(_shape(input)) > 1 else 0]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / n_cls
        axis = 1 if len(_shape(input)) > 1 else 0
        if weight is not None:
            wshape = [1] * len(_shape(input))
            wshape[axis] = n_cls
            logp = logp * np.reshape(weight._value if isinstance(weight, Tensor) else weight, wshape)
        return _reduce(-ops.sum(logp * target, axis=axis), reduction)
    loss = nll_loss(logp, target, weight=weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return loss
    # PyTorch: (1 - eps) * nll + eps * mean over classes of -log p (ignored targets excluded).
    t = _live_target(target, _int_target(target, "cross_entropy"))
    n_cls = _shape(input)[1 if len(_shape(input)) > 1 else 0]
    axis = 1 if len(_shape(input)) > 1 else 0
    valid = (t != ignore_index)
    if weight is not None:
        wshape = [1] * len(_shape(input))
        wshape[axis] = n_cls
        wv = np.reshape(weight._value if isinstance(weight, Tensor) else weight, wshape)
        smooth = -ops.sum(logp * wv, axis=axis) * valid
    else:
        smooth = -ops.sum(logp, axis=axis) * valid
    if reduction == "mean":
        if weight is not None:
            wa = np.asarray(weight._value if isinstance(weight, Tensor) else weight)
            wd = _const(wa) if isinstance(t, Tensor) else wa
            denom = ops.sum(wd[ops.where(valid, t, 0)] * valid)
        else:
            denom = ops.sum(valid)
        smooth = _weighted_mean(ops.sum(smooth), denom)
    else:
        smooth = _reduce(smooth, reduction)
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / n_cls)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                      # noqa: A002
                                     reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    """``-[p t log s(x) + (1 - t) log(1 - s(x))]`` from logits, stable for any ``x``."""
    _check_same_shape(input, target, "binary_cross_entropy_with_logits")
    if pos_weight is None:
        # softplus(x) - x t  ==  -(t log s(x) + (1 - t) log(1 - s(x)))
        loss = ops.softplus(input) - input * target
    else:
        # (1 - t) x + (1 + (p - 1) t) softplus(-x)
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * ops.softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# ---------------------------------------------------------------------------------------------
# Probability losses and tensor helpers torch.nn.functional has: binary_cross_entropy (on
# probabilities), kl_div, normalize, pad
# ---------------------------------------------------------------------------------------------
def _bce_fwd(x: Any, t: Any) -> Any:
    with np.errstate(divide="ignore"):  # log(0) = -inf, clamped to -100 as PyTorch does
        return -(t * np.maximum(np.log(x), -100.0) + (1 - t) * np.maximum(np.log1p(-x), -100.0))


_bce_p = primitive(_bce_fwd, "binary_cross_entropy", arity=2)
_BCE_EPS = float(np.float32(1e-12))  # PyTorch's floor of x (1 - x), a float32 constant there


def _bce_vjp_target(g: Any, ans: Any, x: Any, t: Any) -> Any:
    with np.errstate(divide="ignore"):  # infinite where x is 0 or 1, as PyTorch's
        return g * (ops.log1p(-x) - ops.log(x))


# PyTorch's derivatives: (x - t) / max(x (1 - x), eps) for the input (finite at 0 and 1), the
# log-odds (not clamped) for the target
defvjp(_bce_p, lambda g, ans, x, t: g * (x - t) / ops.maximum(x * (1 - x), _BCE_EPS),
       _bce_vjp_target)
defjvp_elementwise(_bce_p)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                         reduction: str = "mean") -> Tensor:
    """``-w [t log x + (1 - t) log(1 - x)]`` of probabilities ``x`` (each log clamped at -100, as
    PyTorch's); from logits, ``binary_cross_entropy_with_logits`` is the stable form."""
    _check_same_shape(input, target, "binary_cross_entropy")
    _reduction_scale(reduction, 1)
    x = every_slice(input) if type(input) is BatchedTensor else input._value \
        if isinstance(input, Tensor) else np.asarray(input)  # (inside vmap: all the slices)
    if not _Trace.compiling and np.size(x) and not ((x >= 0) & (x <= 1)).all():
        raise ValueError("binary_cross_entropy: all elements of input should be between 0 and 1 "
                         "(probabilities); pass logits to binary_cross_entropy_with_logits")
    loss = _bce_p(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """PyTorch's ``kl_div``: ``input`` holds log-probabilities, ``target`` probabilities (or
    log-probabilities with ``log_target``); pointwise ``t (log t - input)``, 0 where ``t = 0``.
    ``reduction="batchmean"`` divides the sum by the batch size: the true KL divergence (PyTorch's
    ``"mean"`` divides by the number of elements). Where a target probability is 0 the gradient
    with respect to the target is ``-input`` (``xlogy``'s NaN-free rule); PyTorch gives NaN."""
    if size_average is not None or reduce is not None:
        raise TypeError("kl_div: size_average and reduce are deprecated in PyTorch; use reduction=")
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        loss = _special.xlogy(target, target) - target * input
    if reduction == "batchmean":
        n = _shape(input)[0] if _shape(input) else 1
        return ops.sum(loss) / n
    return _reduce(loss, reduction)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,  # noqa: A002
              out: Any = None) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim`` (the gradient of an all-zero slice is 0)."""
    if out is not None:
        raise TypeError("normalize: out= is not supported; use the returned tensor")
    norm = _rnp.linalg.norm(input, ord=p, axis=dim, keepdims=True)
    return input / ops.clip(norm, eps, None)


_PAD_MODES: dict[str, PadMode] = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                                   "circular": "wrap"}


def pad(input: Tensor, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """PyTorch's ``F.pad``: ``pad = (left, right, top, bottom, ...)`` from the last dimension
    backwards; modes ``constant`` (``value``, default 0), ``reflect``, ``replicate``, ``circular``."""
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    pad = [int(v) for v in pad]
    shape = _shape(input)
    if len(pad) % 2 or len(pad) // 2 > len(shape):
        raise ValueError(f"pad: padding length must be even and at most twice the number of "
                         f"dimensions ({len(shape)}), got {len(pad)}")
    if any(v < 0 for v in pad):
        raise ValueError("pad: negative padding (cropping) is not supported; slice the tensor")
    pairs = [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)][::-1]
    widths = [(0, 0)] * (len(shape) - len(pairs)) + pairs
    if mode == "constant":
        return _rnp.pad(input, widths, mode="constant", constant_values=0 if value is None else value)
    if value is not None:
        raise ValueError(f"pad: value= is only for mode='constant', not {mode!r}")
    for n, (lo, hi) in zip(shape[len(shape) - len(pairs):], pairs):
        if mode == "reflect" and max(lo, hi) >= n:
            raise ValueError(f"pad: reflect padding ({lo}, {hi}) must be smaller than the "
                             f"dimension it pads ({n})")
    return _rnp.pad(input, widths, mode=_PAD_MODES[mode])


from rlgrad.nn import functional_extra as _extra  # noqa: E402 - poolings, activations, losses
from rlgrad.nn.functional_extra import *  # noqa: E402, F403
from rlgrad.nn.functional_extra import _reduce  # noqa: E402 - the losses' reduction, declared once there

__all__ += _extra.__all__
