"""More of ``torch.nn.functional`` (issue 29's survey of what RL code calls): the poolings,
the remaining activations and a few losses, each a composition of primitives (so its
gradients, forward mode, ``vmap`` and ``rlgrad.jit`` come from theirs).
``rlgrad.nn.functional`` re-exports them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.random import draw
from rlgrad.tensor import Tensor
from rlgrad.typing import ShapeLike

__all__ = [
    "max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "softmin", "hardtanh", "relu6", "hardsigmoid", "hardswish", "selu", "celu",
    "glu", "logsigmoid", "softsign", "tanhshrink", "threshold", "softshrink", "hardshrink",
    "cosine_similarity", "pairwise_distance", "gumbel_softmax", "poisson_nll_loss",
    "gaussian_nll_loss", "margin_ranking_loss", "interpolate", "upsample",
]


def _two(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, int | np.integer):
        return int(v), int(v)
    t = tuple(int(a) for a in v)
    if len(t) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t[0], t[1]


def _windows(x: Any, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
             fill: float) -> Any:
    """The (kh, kw) windows of an (N, C, H, W) input as (N, C, OH, OW, kh, kw): one index read
    (its gradient adds back into the input), the border filled with ``fill``."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if ph > kh // 2 or pw > kw // 2:
        raise RuntimeError(f"pad should be at most half of the effective kernel size, got padding "
                           f"{padding} for kernel {kernel}")
    if ph or pw:
        x = ops.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    h, w = tuple(x.shape)[-2:]
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise RuntimeError(f"pooling: input of size {(h - 2 * ph, w - 2 * pw)} is smaller than the "
                           f"kernel {kernel}")
    rows = (np.arange(oh) * sh)[:, None, None, None] + np.arange(kh)[:, None]
    cols = (np.arange(ow) * sw)[:, None, None] + np.arange(kw)
    return ops.getitem(x, (Ellipsis, rows, cols))


def _pool_args(kernel_size: Any, stride: Any, padding: Any) -> tuple:
    k = _two(kernel_size, "kernel_size")
    return k, _two(stride if stride is not None and stride != [] else k, "stride"), _two(padding, "padding")


def max_pool2d(input: Tensor, kernel_size: ShapeLike, stride: ShapeLike | None = None,  # noqa: A002
               padding: ShapeLike = 0, dilation: ShapeLike = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """torch's (``dilation=1``, ``ceil_mode=False``): the max of each window; the gradient goes
    to the window's maximum (split between equal maxima, where torch picks one)."""
    if dilation not in (1, (1, 1)) or ceil_mode or return_indices:
        raise NotImplementedError("max_pool2d: dilation, ceil_mode and return_indices are not "
                                  "supported by rlgrad; use the defaults")
    k, s, p = _pool_args(kernel_size, stride, padding)
    return ops.amax(_windows(input, k, s, p, -np.inf), axis=(-2, -1))


def avg_pool2d(input: Tensor, kernel_size: ShapeLike, stride: ShapeLike | None = None,  # noqa: A002
               padding: ShapeLike = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """torch's (``ceil_mode=False``): the mean of each window (zero padding counted unless
    ``count_include_pad=False``)."""
    if ceil_mode:
        raise NotImplementedError("avg_pool2d: ceil_mode is not supported by rlgrad")
    k, s, p = _pool_args(kernel_size, stride, padding)
    total = ops.sum(_windows(input, k, s, p, 0.0), axis=(-2, -1))
    if divisor_override is not None:
        return total / divisor_override
    if count_include_pad or p == (0, 0):
        return total / (k[0] * k[1])
    ones = np.ones((1, 1) + tuple(input.shape)[-2:], np.dtype(input.dtype))
    counts = ops.sum(_windows(ones, k, s, p, 0.0), axis=(-2, -1))
    return total / ops.astype(counts, np.dtype(input.dtype))


def max_pool1d(input: Tensor, kernel_size: ShapeLike, stride: ShapeLike | None = None,  # noqa: A002
               padding: ShapeLike = 0) -> Tensor:
    st = kernel_size if stride is None else stride
    return ops.squeeze(max_pool2d(ops.expand_dims(input, -2), (1, _first(kernel_size)), (1, _first(st)),
                                  (0, _first(padding))), -2)


def avg_pool1d(input: Tensor, kernel_size: ShapeLike, stride: ShapeLike | None = None,  # noqa: A002
               padding: ShapeLike = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    st = kernel_size if stride is None else stride
    return ops.squeeze(avg_pool2d(ops.expand_dims(input, -2), (1, _first(kernel_size)), (1, _first(st)),
                                  (0, _first(padding)), ceil_mode, count_include_pad), -2)


def _first(v: ShapeLike) -> int:
    return int(v) if isinstance(v, int | np.integer) else int(v[0])


def _adaptive(input: Any, output_size: Any, reduce: Any) -> Any:  # noqa: A002
    """torch's adaptive bins: output cell i covers [floor(i*n/o), ceil((i+1)*n/o))."""
    h, w = tuple(input.shape)[-2:]
    oh, ow = _two(output_size if output_size is not None else (h, w), "output_size") if not (
        isinstance(output_size, tuple | list) and None in output_size) else tuple(
        n if o is None else o for o, n in zip(output_size, (h, w)))
    rows = []
    for i in range(oh):
        r0, r1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        cells = []
        for j in range(ow):
            c0, c1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            cells.append(reduce(ops.getitem(input, (Ellipsis, slice(r0, r1), slice(c0, c1))), (-2, -1)))
        rows.append(ops.stack(cells, axis=-1))
    return ops.stack(rows, axis=-2)


def adaptive_avg_pool2d(input: Tensor, output_size: ShapeLike) -> Tensor:  # noqa: A002
    return _adaptive(input, output_size, lambda t, ax: ops.mean(t, axis=ax))


def adaptive_max_pool2d(input: Tensor, output_size: ShapeLike, return_indices: bool = False) -> Tensor:  # noqa: A002
    if return_indices:
        raise NotImplementedError("adaptive_max_pool2d: return_indices is not supported by rlgrad")
    return _adaptive(input, output_size, lambda t, ax: ops.amax(t, axis=ax))


# ---- activations ------------------------------------------------------------------------------
def softmin(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    return ops.softmax(ops.negative(input), axis=dim)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,  # noqa: A002
             inplace: bool = False) -> Tensor:
    return ops.clip(input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return hardtanh(input / 6 + 0.5, 0.0, 1.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return input * hardsigmoid(input)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    neg = alpha * ops.expm1(ops.minimum(input, 0) / alpha)
    return ops.maximum(input, 0) + neg


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``scale * (max(0, x) + min(0, alpha * (exp(x) - 1)))``."""
    return _SELU_SCALE * (ops.maximum(input, 0) + _SELU_ALPHA * ops.expm1(ops.minimum(input, 0)))


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    n = tuple(input.shape)[dim]
    if n % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {dim} is size {n}")
    d = dim % len(tuple(input.shape))
    a = ops.getitem(input, (slice(None),) * d + (slice(0, n // 2),))
    b = ops.getitem(input, (slice(None),) * d + (slice(n // 2, n),))
    return a * ops.sigmoid(b)


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """``-softplus(-x)``, stable for large |x|."""
    return ops.minimum(input, 0) - ops.log1p(ops.exp(ops.negative(ops.absolute(input))))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    return input / (1 + ops.absolute(input))


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    return input - ops.tanh(input)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    return ops.where(ops.greater(input, threshold), input, value)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    return ops.where(ops.greater(input, lambd), input - lambd,
                     ops.where(ops.less(input, -lambd), input + lambd, 0 * input))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    return ops.where(ops.greater(ops.absolute(input), lambd), input, 0 * input)


# ---- similarities and losses --------------------------------------------------------------------
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """torch's: ``x1 . x2 / max(|x1| |x2|, eps)`` along ``dim``."""
    dot = ops.sum(x1 * x2, axis=dim)
    n = ops.sqrt(ops.sum(x1 * x1, axis=dim) * ops.sum(x2 * x2, axis=dim))
    return dot / ops.maximum(n, eps)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """torch's: the ``p``-norm of ``x1 - x2 + eps`` along the last dimension."""
    d = ops.absolute(x1 - x2 + eps)
    if p == math.inf:
        return ops.amax(d, axis=-1, keepdims=keepdim)
    return ops.power(ops.sum(ops.power(d, p), axis=-1, keepdims=keepdim), 1.0 / p)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """torch's: ``softmax((logits + Gumbel noise) / tau)``; ``hard=True`` is the one-hot of its
    argmax in the forward pass with the soft sample's gradient (straight-through)."""
    g = draw(lambda rng, s: -np.log(rng.exponential(size=s)), tuple(logits.shape), None)
    if not isinstance(g, Tensor):
        g = np.asarray(g, np.dtype(logits.dtype))
    y = ops.softmax((logits + g) / tau, axis=dim)
    if not hard:
        return y
    idx = ops.argmax(y, axis=dim, keepdims=True)
    n = tuple(y.shape)[dim]
    shape = [1] * len(tuple(y.shape))
    shape[dim] = n
    one = ops.astype(ops.equal(idx, np.arange(n).reshape(shape)), np.dtype(y.dtype))
    return one - ops.stop_gradient(y) + y


def _reduce(loss: Any, reduction: str) -> Any:
    """torch's ``reduction`` of a loss (every loss of ``functional`` and this module uses it)."""
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True,  # noqa: A002
                     full: bool = False, eps: float = 1e-8, reduction: str = "mean") -> Tensor:
    """torch's: ``exp(input) - target * input`` (``log_input``) or ``input - target *
    log(input + eps)``; ``full`` adds Stirling's term where target > 1."""
    loss = ops.exp(input) - target * input if log_input else input - target * ops.log(input + eps)
    if full:
        t = target
        stirling = t * ops.log(ops.where(ops.greater(t, 1), t, 1)) - t + 0.5 * ops.log(
            2 * math.pi * ops.where(ops.greater(t, 1), t, 1))
        loss = loss + ops.where(ops.greater(t, 1), stirling, 0 * t)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor, full: bool = False,  # noqa: A002
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """torch's: ``0.5 * (log(max(var, eps)) + (input - target)^2 / max(var, eps))`` (+ the
    constant ``0.5 log(2 pi)`` with ``full``); ``var`` clamped without gradient, as torch."""
    v = ops.clip(var, eps, None)
    v = var + ops.stop_gradient(v - var)  # torch's clamp under no_grad: the gradient of var itself
    loss = 0.5 * (ops.log(v) + (input - target) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    return _reduce(ops.maximum(-target * (input1 - input2) + margin, 0), reduction)


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _out_sizes(x: Any, size: Any, scale_factor: Any, recompute: Any) -> tuple[tuple, tuple]:
    """torch's output sizes, and the scale each source index is computed with (None: in/out)."""
    nsp = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out = tuple(int(s) for s in (size if isinstance(size, list | tuple) else [size] * nsp))
        scales: tuple = (None,) * nsp
    else:
        sf = tuple(float(s) for s in (scale_factor if isinstance(scale_factor, list | tuple)
                                      else [scale_factor] * nsp))
        out = tuple(math.floor(n * f) for n, f in zip(x.shape[2:], sf, strict=False))
        scales = (None,) * nsp if recompute else tuple(1.0 / f for f in sf)
    if len(out) != nsp:
        raise ValueError(f"interpolate: input with {nsp} spatial dimensions got {len(out)} sizes")
    return out, scales


def _source(n_in: int, n_out: int, scale: float | None, mode: str, align: bool) -> np.ndarray:
    """Where each output position reads the input along one axis (a float for linear modes)."""
    dst = np.arange(n_out, dtype=np.float64)
    s = n_in / n_out if scale is None else scale
    if mode == "nearest":
        return np.minimum(np.floor(dst * s), n_in - 1)
    if mode == "nearest-exact":
        return np.minimum(np.floor((dst + 0.5) * s), n_in - 1)
    if align:
        return dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    return np.maximum((dst + 0.5) * s - 0.5, 0.0)


def interpolate(input: Tensor, size: int | Sequence[int] | None = None,  # noqa: A002
                scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """torch's ``F.interpolate`` for modes nearest, nearest-exact, linear, bilinear and
    trilinear on (N, C, ...) inputs: one index read per spatial axis (plus a weighted sum for
    the linear modes), so the gradient goes back to the inputs that were read."""
    if mode not in ("nearest", "nearest-exact", *_LINEAR_MODES):
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported by rlgrad; use "
                                  "nearest, nearest-exact, linear, bilinear or trilinear")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by rlgrad")
    if mode in _LINEAR_MODES and input.ndim - 2 != _LINEAR_MODES[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{_LINEAR_MODES[mode] + 2}D input")
    if mode not in _LINEAR_MODES and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if input.ndim < 3:
        raise ValueError(f"interpolate: expected an (N, C, ...) input of 3 to 5 dims, got {input.ndim}-D")
    out, scales = _out_sizes(input, size, scale_factor, recompute_scale_factor)
    x = input
    for k, (n_out, scale) in enumerate(zip(out, scales, strict=True)):
        axis, n_in = 2 + k, x.shape[2 + k]
        src = _source(n_in, n_out, scale, mode, bool(align_corners))
        lead = (slice(None),) * axis
        if mode not in _LINEAR_MODES:
            x = x[lead + (src.astype(np.int64),)]
            continue
        i0 = np.floor(src).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        w = (src - i0).astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        a, b = x[lead + (i0,)], x[lead + (i1,)]
        x = a + (b - a) * w
    return x


def upsample(input: Tensor, size: int | Sequence[int] | None = None,  # noqa: A002
             scale_factor: float | Sequence[float] | None = None,
             mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
    """torch's deprecated ``F.upsample``: ``interpolate``."""
    return interpolate(input, size, scale_factor, mode, align_corners)
