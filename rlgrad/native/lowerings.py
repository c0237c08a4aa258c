"""How each primitive is written in C: ``LOWERINGS[name](ctx, e) -> Val``, one entry per
primitive name (``Primitive.name``), nothing else to register.

``e`` is the tape entry: ``e.args`` with every traced value (and every array read at run time)
as a ``Val`` and everything static (axes, shapes, indices, Python scalars) as it was; ``e.raw``
the traced arrays and scalars themselves (for NumPy's dtype rules); ``e.res`` the traced result.
A lowering writes the result into ``ctx.out(e)`` (the result's buffer: an output array when the
caller gets it) or returns a view of an argument, and raises ``Unsupported`` for an argument it
does not handle; the program then runs as the NumPy replay. Elementwise ops are a C expression
(``{0}``, ``{1}``: the operands read as the computation's type ``{T}``; ``{f}``: C's suffix of
the float functions, ``f`` for float32; ``{s}``: the prelude's suffix, ``_f`` or ``_d``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.native.codegen import Unsupported, Val, c_strides, ctype, literal

LOWERINGS: dict[str, Callable[[Any, Any], Val]] = {}

# float-only math: NumPy computes these in the float result type (ints are cast first)
UNARY_FLOAT = {
    "exp": "exp{f}({0})", "log": "log{f}({0})", "tanh": "tanh{f}({0})", "sin": "sin{f}({0})",
    "cos": "cos{f}({0})", "tan": "tan{f}({0})", "sqrt": "sqrt{f}({0})", "expm1": "expm1{f}({0})",
    "log1p": "log1p{f}({0})", "arctan": "atan{f}({0})", "arcsin": "asin{f}({0})",
    "arccos": "acos{f}({0})", "arctanh": "atanh{f}({0})", "arcsinh": "asinh{f}({0})",
    "arccosh": "acosh{f}({0})", "sinh": "sinh{f}({0})", "cosh": "cosh{f}({0})",
    "floor": "floor{f}({0})", "ceil": "ceil{f}({0})", "trunc": "trunc{f}({0})",
    "absolute": "fabs{f}({0})", "reciprocal": "({T})1 / {0}", "square": "{0} * {0}",
    "sign": "{0} > 0 ? ({T})1 : ({0} < 0 ? ({T})-1 : {0})",
    "sigmoid": "exp{f}(-logaddexp{s}(({T})0, -{0}))", "softplus": "logaddexp{s}(({T})0, {0})",
    "relu": "({0} != {0} || {0} >= 0) ? {0} : ({T})0",
}
BINARY_FLOAT = {
    "divide": "{0} / {1}", "power": "pow{f}({0}, {1})", "arctan2": "atan2{f}({0}, {1})",
    "hypot": "hypot{f}({0}, {1})", "logaddexp": "logaddexp{s}({0}, {1})",
    "tanh_grad": "{0} * (({T})1 - {1} * {1})", "relu_grad": "{1} <= 0 ? ({T})0 : {0}",
    "leaky_relu": "{0} > 0 ? {0} : {0} * {1}", "leaky_relu_grad": "{1} > 0 ? {0} : {0} * {2}",
}
# any dtype: computed in the result's type
ARITHMETIC = {
    "add": "{0} + {1}", "subtract": "{0} - {1}", "multiply": "{0} * {1}", "negative": "-{0}",
    "maximum": "({0} != {0} || {0} >= {1}) ? {0} : {1}",
    "minimum": "({0} != {0} || {0} <= {1}) ? {0} : {1}",
    # (a select of values already read: codegen._Fused.render loads every operand first)
    "where": "{0} ? {1} : {2}",
}
# integers and booleans only (NumPy has no float loops for these): computed in the result's type
BITWISE = {
    "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}", "bitwise_xor": "{0} ^ {1}",
}
# boolean results: computed in the operands' common type
PREDICATES = {
    "greater": "{0} > {1}", "greater_equal": "{0} >= {1}", "less": "{0} < {1}",
    "less_equal": "{0} <= {1}", "equal": "{0} == {1}", "not_equal": "{0} != {1}",
    "logical_and": "{0} && {1}", "logical_or": "{0} || {1}", "logical_not": "!{0}",
    "isnan": "{0} != {0}", "isfinite": "isfinite({0})", "isinf": "isinf({0})",
}


def _suffixes(dtype: np.dtype) -> dict[str, str]:
    return {"f": "f" if dtype == np.float32 else "", "s": "_f" if dtype == np.float32 else "_d",
            "T": "float" if dtype == np.float32 else "double"}


def _template(tmpl: str, dtype: np.dtype) -> Callable[[list[str]], str]:
    sub = _suffixes(dtype)
    return lambda ops: tmpl.format(*ops, **sub) if "{" in tmpl else tmpl


def _elementwise(tmpl: str, kind: str) -> Callable[[Any, Any], Val]:
    def lower(ctx: Any, e: Any) -> Val:
        if e.kwargs:
            raise Unsupported(f"{e.name} with keywords {sorted(e.kwargs)}")
        out = ctx.out(e)
        compute = out.dtype
        if kind == "predicate":  # NumPy compares in the operands' common type
            compute = np.result_type(*e.raw) if len(e.raw) > 1 else np.asarray(e.raw[0]).dtype
            if e.name.startswith("is") and compute.kind != "f":
                raise Unsupported(f"{e.name} of {compute}")
        if kind == "float" and out.dtype.kind != "f":
            raise Unsupported(f"{e.name} of {out.dtype}")
        if kind == "integer" and out.dtype.kind not in "iub":
            raise Unsupported(f"{e.name} of {out.dtype}")
        if compute.kind not in "fiub":
            raise Unsupported(f"{e.name} in {compute}")
        fmt = _template(tmpl, compute if compute.kind == "f" else np.dtype(np.float64))
        ctx.p.elementwise(out, fmt, [ctx.val(a) for a in e.args], compute)
        return out

    return lower


for _table, _kind in ((UNARY_FLOAT, "float"), (BINARY_FLOAT, "float"), (ARITHMETIC, "any"),
                      (BITWISE, "integer"), (PREDICATES, "predicate")):
    for _name, _tmpl in _table.items():
        LOWERINGS[_name] = _elementwise(_tmpl, _kind)


def lowers(*names: str) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        for n in names:
            LOWERINGS[n] = fn
        return fn

    return register


def _params(e: Any, names: Sequence[str], defaults: Sequence[Any]) -> list[Any]:
    """The arguments after the first by position or keyword (``out=`` refused)."""
    if "out" in e.kwargs or set(e.kwargs) - set(names):
        raise Unsupported(f"{e.name} with keywords {sorted(e.kwargs)}")
    rest = list(e.args[1:]) + list(defaults[len(e.args) - 1:])
    return [e.kwargs.get(n, rest[i]) for i, n in enumerate(names)]


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, tuple | list):
        return tuple(sorted(int(a) % ndim for a in axis))
    return (int(axis) % ndim,)


def _reduce_into(ctx: Any, kind: str, out: Val, x: Val, axes: Sequence[int]) -> None:
    """``out`` (any shape holding the kept dimensions, contiguous) = the reduction of ``x``."""
    kept = [n for k, n in enumerate(x.shape) if k not in axes]
    ctx.p.reduce(kind, out.view(kept, c_strides(kept)), x, axes)


def _reduction(kind: str, mean: bool = False) -> Callable[[Any, Any], Val]:
    def lower(ctx: Any, e: Any) -> Val:
        x = ctx.val(e.args[0])
        axis, _keep = _params(e, ("axis", "keepdims"), (None, False))
        axes = _axes(axis, len(x.shape))
        out = ctx.out(e)
        if out.dtype.kind not in "fi" or (kind == "sum" and x.dtype.kind == "b" and out.dtype.kind != "i"):
            raise Unsupported(f"{e.name} of {x.dtype} into {out.dtype}")
        _reduce_into(ctx, kind, out, x, axes)
        if mean:
            count = max(x.size // max(out.size, 1), 1)
            ctx.p.elementwise(out, lambda v: f"{v[0]} / {count}", [out])
        return out

    return lower


LOWERINGS.update({"sum": _reduction("sum"), "prod": _reduction("prod"), "max": _reduction("max"),
                  "min": _reduction("min"), "mean": _reduction("sum", mean=True)})


@lowers("identity", "stop_gradient", "while_loop_result")
def _alias(ctx: Any, e: Any) -> Val:
    return ctx.val(e.args[0])


@lowers("clone", "astype")
def _copy(ctx: Any, e: Any) -> Val:
    out = ctx.out(e)
    x = ctx.val(e.args[0])
    tmpl = "{0} != 0" if out.dtype.kind == "b" else "{0}"
    ctx.p.elementwise(out, lambda v: tmpl.format(*v), [x], x.dtype)
    return out


def contiguous(ctx: Any, x: Val) -> Val:
    """``x`` itself when C-contiguous, else a contiguous copy."""
    if x.contiguous():
        return x
    copy = ctx.p.buffer(x.dtype, x.shape)
    ctx.p.elementwise(copy, lambda v: v[0], [x])
    return copy


@lowers("reshape")
def _reshape(ctx: Any, e: Any) -> Val:
    shape = np.shape(e.res)
    x = contiguous(ctx, ctx.val(e.args[0]))
    return x.view(shape, c_strides(shape))


@lowers("transpose")
def _transpose(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    (axes,) = _params(e, ("axes",), (None,))
    axes = tuple(reversed(range(len(x.shape)))) if axes is None else tuple(a % len(x.shape) for a in axes)
    return x.view([x.shape[a] for a in axes], [x.strides[a] for a in axes])


@lowers("broadcast_to")
def _broadcast_to(ctx: Any, e: Any) -> Val:
    return ctx.val(e.args[0]).broadcast(np.shape(e.res))


@lowers("expand")
def _expand(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    return x.view((int(e.args[1]),) + x.shape, (0,) + x.strides)


@lowers("sum_to")
def _sum_to(ctx: Any, e: Any) -> Val:
    g, shape = ctx.val(e.args[0]), tuple(e.args[1])
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and g.shape[i + lead] != 1)
    if not axes:
        return _reshape(ctx, e)
    out = ctx.out(e)
    _reduce_into(ctx, "sum", out, g, axes)
    return out


def _basic_view(x: Val, idx: Any, want: tuple[int, ...]) -> Val:
    """``x[idx]`` for a basic index (ints, slices, None, Ellipsis) as a view of ``x``."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if not all(i is None or i is Ellipsis or isinstance(i, int | np.integer | slice) for i in idx):
        raise Unsupported("an index array other than one on the first axis")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if any(i is Ellipsis for i in idx):
        k = next(j for j, i in enumerate(idx) if i is Ellipsis)
        idx = idx[:k] + (slice(None),) * (len(x.shape) - n_real) + idx[k + 1:]
    idx = idx + (slice(None),) * (len(x.shape) - sum(1 for i in idx if i is not None))
    shape, strides, off, d = [], [], 0, 0
    for i in idx:
        if i is None:
            shape.append(1)
            strides.append(0)
            continue
        n, s = x.shape[d], x.strides[d]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            shape.append(len(range(start, stop, step)))
            strides.append(s * step)
            off += start * s
        else:
            off += (int(i) % n) * s
        d += 1
    if tuple(shape) != tuple(want):
        raise Unsupported("an index this lowering reads otherwise than NumPy")
    return x.view(shape, strides, off)


def _row_index(ctx: Any, idx: Any) -> Val | None:
    """The index array of ``x[idx]`` / ``x[idx, ...]`` / ``x[idx, :]`` (rows of the first axis),
    else None."""
    parts = idx if isinstance(idx, tuple) else (idx,)
    if not parts or any(p is not Ellipsis and p != slice(None) for p in parts[1:]):
        return None
    first = parts[0]
    if isinstance(first, Val) or (isinstance(first, np.ndarray) and first.dtype.kind in "iu"):
        v = ctx.val(first)
        return v if v.dtype.kind in "iu" and v.lit is None else None
    return None


@lowers("getitem")
def _getitem(ctx: Any, e: Any) -> Val:
    """Basic indexing: a view; an integer array on the first axis: rows gathered."""
    x, idx = ctx.val(e.args[0]), e.args[1]
    rows_idx = _row_index(ctx, idx)
    if rows_idx is not None and x.shape:
        out = ctx.out(e)
        ctx.rows(out, contiguous(ctx, x), contiguous(ctx, rows_idx), scatter=False)
        return out
    return _basic_view(x, idx, np.shape(e.res))


@lowers("untake")
def _untake(ctx: Any, e: Any) -> Val:
    """Zeros with ``g`` put at a basic index, or added at rows of the first axis (repeats add)."""
    g, idx = ctx.val(e.args[0]), e.args[1]
    out = ctx.out(e)
    ctx.p.elementwise(out, lambda v: "0", [])
    rows_idx = _row_index(ctx, idx)
    if rows_idx is not None:
        ctx.rows(contiguous(ctx, g), out, contiguous(ctx, rows_idx), scatter=True)
    else:
        try:
            want = np.empty(out.shape, dtype=bool)[idx].shape  # (a basic index: no arrays)
        except (IndexError, TypeError):
            raise Unsupported("untake at an index other than basic or rows") from None
        ctx.p.elementwise(_basic_view(out, idx, want), lambda v: v[0], [g])
    return out


def rows(ctx: Any, x: Val) -> Val:
    """``x`` as a 2-D (rows, last axis) matrix; a 1-D ``x`` is one row."""
    if len(x.shape) == 2:
        return x
    if len(x.shape) == 1:
        return x.view((1,) + x.shape, (0,) + x.strides)
    x = contiguous(ctx, x)
    shape = (x.size // max(x.shape[-1], 1), x.shape[-1])
    return x.view(shape, c_strides(shape))


def transposed(x: Val) -> Val:
    return x.view(x.shape[::-1], x.strides[::-1])


def _as_matrix(out: Val) -> Val:
    shape = (out.size // max(out.shape[-1], 1), out.shape[-1]) if out.shape else (1, 1)
    return out.view(shape, c_strides(shape))


@lowers("linear")
def _linear(ctx: Any, e: Any) -> Val:
    if e.kwargs:
        raise Unsupported("linear with keywords")
    x, w = ctx.val(e.args[0]), ctx.val(e.args[1])
    bias = ctx.val(e.args[2]) if len(e.args) > 2 and e.args[2] is not None else None
    out = ctx.out(e)
    o2 = _as_matrix(out)
    ctx.p.gemm(o2, rows(ctx, x), transposed(w))
    if bias is not None:
        ctx.p.elementwise(o2, lambda v: f"{v[0]} + {v[1]}", [o2, bias])
    return out


@lowers("linear_grad_input", "linear_grad_input_dense")
def _linear_grad_input(ctx: Any, e: Any) -> Val:
    g, w = ctx.val(e.args[0]), ctx.val(e.args[1])
    out = ctx.out(e)
    ctx.p.gemm(_as_matrix(out), rows(ctx, g), w)
    return out


@lowers("linear_grad_weight", "linear_grad_weight_dense")
def _linear_grad_weight(ctx: Any, e: Any) -> Val:
    g, x = ctx.val(e.args[0]), ctx.val(e.args[1])
    out = ctx.out(e)
    if len(x.shape) == 1:  # g[..., None] * x
        gv = g.view(g.shape + (1,), g.strides + (0,))
        ctx.p.elementwise(out, lambda v: f"{v[0]} * {v[1]}", [gv, x])
        return out
    ctx.p.gemm(out, transposed(rows(ctx, g)), rows(ctx, x))
    return out


@lowers("matmul", "bmatmul")
def _matmul(ctx: Any, e: Any) -> Val:
    a, b = ctx.val(e.args[0]), ctx.val(e.args[1])
    if e.kwargs or not a.shape or not b.shape:
        raise Unsupported("matmul of a scalar or with keywords")
    out = ctx.out(e)
    a2 = a.view((1,) + a.shape, (0,) + a.strides) if len(a.shape) == 1 else a
    b2 = b.view(b.shape + (1,), b.strides + (0,)) if len(b.shape) == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, n = a2.shape[-2], b2.shape[-1]
    full = batch + (m, n)
    if np.prod(batch, dtype=int) > 256:
        raise Unsupported("matmul over more than 256 matrices")
    ov = out.view(full, c_strides(full))
    av, bv = a2.broadcast(batch + a2.shape[-2:]), b2.broadcast(batch + b2.shape[-2:])
    for index in np.ndindex(*batch):
        def at(v: Val, index: tuple = index) -> Val:
            off = sum(i * s for i, s in zip(index, v.strides))
            return v.view(v.shape[len(batch):], v.strides[len(batch):], off)
        ctx.p.gemm(at(ov), at(av), at(bv))
    return out


def _softmax_parts(ctx: Any, x: Val, axis: int) -> tuple[Val, Val]:
    """(x - max over ``axis``, the sum of its exp over ``axis``), keepdims shapes."""
    ax = axis % len(x.shape)
    kshape = tuple(1 if k == ax else n for k, n in enumerate(x.shape))
    m = ctx.p.buffer(x.dtype, kshape)
    _reduce_into(ctx, "max", m, x, (ax,))
    shifted = ctx.p.buffer(x.dtype, x.shape)
    ctx.p.elementwise(shifted, lambda v: f"{v[0]} - {v[1]}", [x, m])
    ex = ctx.p.buffer(x.dtype, x.shape)
    ctx.p.elementwise(ex, _template("exp{f}({0})", x.dtype), [shifted])
    total = ctx.p.buffer(x.dtype, kshape)
    _reduce_into(ctx, "sum", total, ex, (ax,))
    return shifted, total


@lowers("log_softmax", "softmax")
def _log_softmax(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    (axis,) = _params(e, ("axis",), (-1,))
    if x.dtype.kind != "f" or not x.shape:
        raise Unsupported(f"{e.name} of {x.dtype} {x.shape}")
    shifted, total = _softmax_parts(ctx, x, axis)
    out = ctx.out(e)
    tmpl = ("{0} - log{f}({1})" if e.name == "log_softmax" else "exp{f}({0}) / {1}")
    ctx.p.elementwise(out, _template(tmpl, x.dtype), [shifted, total])
    return out


@lowers("logsumexp")
def _logsumexp(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    axis, _keep = _params(e, ("axis", "keepdims"), (None, False))
    axes = _axes(axis, len(x.shape))
    if x.dtype.kind != "f":
        raise Unsupported(f"logsumexp of {x.dtype}")
    kshape = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
    m = ctx.p.buffer(x.dtype, kshape)
    _reduce_into(ctx, "max", m, x, axes)
    ctx.p.elementwise(m, lambda v: f"isfinite({v[0]}) ? {v[0]} : 0", [m])
    ex = ctx.p.buffer(x.dtype, x.shape)
    ctx.p.elementwise(ex, _template("exp{f}({0} - {1})", x.dtype), [x, m])
    total = ctx.p.buffer(x.dtype, kshape)
    _reduce_into(ctx, "sum", total, ex, axes)
    out = ctx.out(e)
    flat = out.view(kshape, c_strides(kshape))
    ctx.p.elementwise(flat, _template("log{f}({0}) + {1}", x.dtype), [total, m])
    return out


@lowers("clip")
def _clip(ctx: Any, e: Any) -> Val:
    lo, hi = _params(e, ("a_min", "a_max"), (None, None))
    x = ctx.val(e.args[0])
    out = ctx.out(e)
    if out.dtype.kind not in "fiu":
        raise Unsupported(f"clip of {out.dtype}")
    src, ins = "{0}", [x]
    for bound, op in ((lo, ">="), (hi, "<=")):
        if bound is not None:
            k = len(ins)
            src = f"(({src}) != ({src}) || ({src}) {op} {{{k}}}) ? ({src}) : {{{k}}}"
            ins.append(ctx.val(bound))
    ctx.p.elementwise(out, lambda v: src.format(*v), ins)
    return out


@lowers("mse_loss")
def _mse_loss(ctx: Any, e: Any) -> Val:
    x, y = ctx.val(e.args[0]), ctx.val(e.args[1])
    (reduction,) = _params(e, ("target", "reduction"), (None, "mean"))[1:]
    shape = np.broadcast_shapes(x.shape, y.shape)
    out = ctx.out(e)
    sq = out if reduction == "none" else ctx.p.buffer(out.dtype, shape)
    ctx.p.elementwise(sq, lambda v: f"({v[0]} - {v[1]}) * ({v[0]} - {v[1]})", [x, y])
    if reduction in ("mean", "sum"):
        _reduce_into(ctx, "sum", out, sq, tuple(range(len(shape))))
        if reduction == "mean":
            ctx.p.elementwise(out, lambda v: f"{v[0]} / {max(sq.size, 1)}", [out])
    elif reduction != "none":
        raise Unsupported(f"mse_loss reduction {reduction!r}")
    return out


@lowers("ppo_clipped_surrogate")
def _ppo_surrogate(ctx: Any, e: Any) -> Val:
    """-sum(w * minimum(adv * r, adv * clip(r, 1 - c, 1 + c))), r = exp(log_prob - old)."""
    lp, old, adv, c, w = (ctx.val(a) for a in e.args)
    out = ctx.out(e)
    shape = np.broadcast_shapes(lp.shape, old.shape, adv.shape, c.shape, w.shape)
    terms = ctx.p.buffer(out.dtype, shape)
    src = _template(
        "ppo_term{s}(exp{f}({0} - {1}), {2}, ({T})1 - {3}, ({T})1 + {3}, {4})", out.dtype)
    ctx.p.elementwise(terms, src, [lp, old, adv, c, w])
    _reduce_into(ctx, "sum", out, terms, tuple(range(len(shape))))
    ctx.p.elementwise(out, lambda v: f"-{v[0]}", [out])
    return out


@lowers("categorical_pick")
def _categorical_pick(ctx: Any, e: Any) -> Val:
    table, idx = ctx.val(e.args[0]), ctx.val(e.args[1])
    if len(table.shape) != 2 or len(idx.shape) != 1 or idx.dtype.kind != "i":
        raise Unsupported("categorical_pick beyond an (n, K) table")
    out = ctx.out(e)
    ctx.pick(out, table, idx, write=False)
    return out


@lowers("categorical_unpick")
def _categorical_unpick(ctx: Any, e: Any) -> Val:
    g, idx = ctx.val(e.args[0]), ctx.val(e.args[1])
    out = ctx.out(e)
    if len(out.shape) != 2 or len(idx.shape) != 1 or idx.dtype.kind != "i":
        raise Unsupported("categorical_unpick beyond an (n, K) table")
    ctx.p.elementwise(out, lambda v: "0", [])
    ctx.pick(g, out, idx, write=True)
    return out


@lowers("concatenate", "stack")
def _concatenate(ctx: Any, e: Any) -> Val:
    parts = [ctx.val(a) for a in e.args]  # (variadic: the arrays, then axis=)
    if set(e.kwargs) - {"axis"}:
        raise Unsupported(f"{e.name} with keywords {sorted(e.kwargs)}")
    axis = e.kwargs.get("axis", 0)
    out = ctx.out(e)
    if axis is None or not out.shape:
        raise Unsupported(f"{e.name} with axis None")
    ax = axis % len(out.shape)
    start = 0
    for part in parts:
        if e.name == "stack":
            part = part.view(part.shape[:ax] + (1,) + part.shape[ax:],
                             part.strides[:ax] + (0,) + part.strides[ax:])
        n = part.shape[ax]
        dst = out.view(out.shape[:ax] + (n,) + out.shape[ax + 1:], out.strides,
                       start * out.strides[ax])
        ctx.p.elementwise(dst, lambda v: v[0], [part])
        start += n
    return out


def _copy_into(ctx: Any, dst: Val, src: Val) -> None:
    ctx.p.elementwise(dst, lambda v: v[0], [src], src.dtype)


def _update_carries(ctx: Any, carry: list[Val], new: list[Val]) -> None:
    """``carry[k] = new[k]`` for all k at once: a new value that reads a carry's buffer (a swap,
    a pass-through) is copied aside before any carry is written."""
    mine = {c.ptr for c in carry}
    sources = []
    for c, v in zip(carry, new):
        same = v.ptr == c.ptr and v.off == c.off and v.strides == c.strides
        if v.ptr in mine and not same:
            tmp = ctx.p.buffer(v.dtype, v.shape)
            _copy_into(ctx, tmp, v)
            v = tmp
        sources.append(None if same else v)
    for c, v in zip(carry, sources):
        if v is not None:
            _copy_into(ctx, c, v)


def node_part(node: Any, out: Val, k: int) -> Val:
    """Output ``k`` of a loop node's packed value ``out`` (1-D, as ``lax._Node`` lays it out:
    ``layout[k] = (offset, count, bits)``) as a view: of the carrier's dtype (the value cast on
    copy), or of the output's own dtype over the carrier's bytes where it is stored as bits. A
    node without ``layout`` packs its outputs end to end in its one dtype."""
    shape, dtype = node.avals[k]
    layout = getattr(node, "layout", None)
    if layout is None:
        return out.view(shape, c_strides(shape), sum(math.prod(s) for s, _ in node.avals[:k]))
    off, n, bits = layout[k]
    if not bits:
        return out.view(shape, c_strides(shape), off)
    size, item = out.dtype.itemsize, np.dtype(dtype).itemsize
    if n * size != math.prod(shape) * item or (off * size) % item or out.off != 0:
        raise Unsupported("a loop output stored as bits with padding")
    return Val(dtype, shape, f"(({ctype(dtype)} *){out.ptr})", (off * size) // item)


def _pack_into(ctx: Any, node: Any, out: Val, parts: list[Val]) -> None:
    """The parts in the 1-D ``out`` (a loop node's packed result) where ``node`` lays them."""
    for k, v in enumerate(parts):
        _copy_into(ctx, node_part(node, out, k), v)


@lowers("lax_bits")
def _lax_bits(ctx: Any, e: Any) -> Val:
    """An output of a loop node stored as its bytes in the node's value: a view of that value
    read as the output's dtype."""
    packed = ctx.val(e.args[0])
    if e.kwargs or len(e.args) != 5:
        raise Unsupported("lax_bits with keywords")
    off, n = int(e.args[1]), int(e.args[2])
    dtype, shape = np.dtype(e.args[3]), tuple(e.args[4])
    size, item = packed.dtype.itemsize, dtype.itemsize
    if len(packed.shape) != 1 or not packed.contiguous() or isinstance(packed.off, str) \
            or (packed.off * size + off * size) % item or n * size < math.prod(shape) * item:
        raise Unsupported("lax_bits of a packed value this lowering does not read")
    return Val(dtype, shape, f"(({ctype(dtype)} *){packed.ptr})",
               (packed.off * size + off * size) // item)


@lowers("while_loop")
def _while_loop(ctx: Any, e: Any) -> Val:
    """``lax.while_loop``'s node: cond and body lowered inside one C loop, the values in buffers
    of their own, packed at the end as ``lax._while_fwd`` packs them."""
    wc = e.kwargs.get("ctx")
    na, nb = len(wc.cond.captured), len(wc.body.captured)
    args = [ctx.val(a) for a in e.args]
    kc, kb, init = args[:na], args[na:na + nb], args[na + nb:]
    out = ctx.out(e)
    vals = [ctx.p.buffer(d, s) for s, d in wc.avals]
    for c, v in zip(vals, init):
        _copy_into(ctx, c, v)
    start = len(ctx.p.lines)
    (go,) = ctx.body(wc.cond.tape, wc.cond.inputs + wc.cond.captured, vals + kc, wc.cond.outs)
    ctx.p.lines.append(f"if (!({go.at([])})) break;")
    _update_carries(ctx, vals, ctx.body(wc.body.tape, wc.body.inputs + wc.body.captured, vals + kb,
                                        wc.body.outs, vals))
    lines = ctx.p.lines[start:]
    del ctx.p.lines[start:]
    ctx.p.lines += ["for (;;) {", *["    " + ln for ln in lines], "}"]
    _pack_into(ctx, wc, out, vals)
    return out


@lowers("switch")
def _switch(ctx: Any, e: Any) -> Val:
    """``lax.switch``/``cond``'s node: the index clamped to the branches, as ``_SwitchCtx.pick``,
    and each branch lowered in its own block of an if-else chain, packing its outputs."""
    sc = e.kwargs.get("ctx")
    index, ops_, consts = sc.split([ctx.val(a) for a in e.args])
    if index.shape or index.dtype.kind not in "iub":
        raise Unsupported("switch on an index that is not one integer")
    out = ctx.out(e)
    last = len(sc.branches) - 1
    k = f"k{len(ctx.p.lines)}"
    ctx.p.lines.append(f"int64_t {k} = (int64_t){index.at([])}; {k} = {k} < 0 ? 0 : "
                       f"({k} > {last} ? {last} : {k});")
    for j, branch in enumerate(sc.branches):
        start = len(ctx.p.lines)
        res = ctx.body(branch.tape, branch.inputs + branch.captured, ops_ + consts[j], branch.outs)
        _pack_into(ctx, sc, out, res)
        lines = ctx.p.lines[start:]
        del ctx.p.lines[start:]
        ctx.p.lines += [f"{'if' if j == 0 else 'else if'} ({k} == {j}) {{",
                        *["    " + ln for ln in lines], "}"]
    return out


@lowers("scan")
def _scan(ctx: Any, e: Any) -> Val:
    """``lax.scan``'s node: its body lowered once inside a C loop over the steps, the carries in
    buffers of their own, each step's slice of the scanned arrays a view at the step's offset,
    the outputs written into the node's packed result (final carries, stacked ys, and the carries
    entering each step when a gradient needs them), as ``lax._scan_fwd`` lays them out."""
    sc = e.kwargs.get("ctx")
    body, nc = sc.body, sc.n_carry
    nk = len(body.captured)
    args = [ctx.val(a) for a in e.args]
    consts, init, xs = args[:nk], args[nk:nk + nc], args[nk + nc:]
    out = ctx.out(e)
    carry = [ctx.p.buffer(d, s) for s, d in sc.avals[:nc]]
    for c, v in zip(carry, init):
        _copy_into(ctx, c, v)
    t = f"t{len(ctx.p.lines)}"
    step = f"({sc.length - 1} - {t})" if sc.reverse else t
    start = len(ctx.p.lines)

    def row(k: int) -> Val:  # output k's slice of this step
        part = node_part(sc, out, k)
        return part.view(part.shape[1:], part.strides[1:], f"{step}*{part.strides[0]}")

    if sc.save:
        for j, c in enumerate(carry):
            _copy_into(ctx, row(nc + len(sc.y_avals) + j), c)
    x_rows = [x.view(x.shape[1:], x.strides[1:], f"{step}*{x.strides[0]}") for x in xs]
    res = ctx.body(body.tape, body.inputs + body.captured, carry + x_rows + consts, body.outs, carry)
    for j, y in enumerate(res[nc:]):  # before the carries change: a y may be one of them
        _copy_into(ctx, row(nc + j), y)
    _update_carries(ctx, carry, res[:nc])
    lines = ctx.p.lines[start:]
    del ctx.p.lines[start:]
    ctx.p.lines += [f"for (npy_intp {t} = 0; {t} < {sc.length}; {t}++) {{",
                    *["    " + ln for ln in lines], "}"]
    for k, c in enumerate(carry):
        _copy_into(ctx, node_part(sc, out, k), c)
    return out


def _row_loops(ctx: Any, idx: Val) -> tuple[str, list[str]]:
    """The C loops over an index's elements (``for (...) for (...)``) and their variables."""
    iv = ctx.p._loop_vars(len(idx.shape))
    return "".join(f"for (npy_intp {v} = 0; {v} < {n}; {v}++) " for v, n in zip(iv, idx.shape)), iv


@lowers("write_rows")
def _write_rows(ctx: Any, e: Any) -> Val:
    """Rows written into x at a run-time index (later rows win, outside [0, N) skipped), in
    place when x is a carry nothing reads after (``ctx.donated``: O(rows), not O(x))."""
    x, idx, rows = (ctx.val(a) for a in e.args)
    if e.kwargs or idx.dtype.kind not in "iu" or idx.lit is not None or rows.dtype != x.dtype:
        raise Unsupported("write_rows with keywords, a constant index or rows of another dtype")
    out = x if ctx.donated(x) else ctx.out(e)
    if out is not x:
        _copy_into(ctx, out, x)
    rows = contiguous(ctx, rows)
    lead, n = len(idx.shape) - 1, x.shape[len(idx.shape) - 1]
    row = math.prod(x.shape[lead + 1:])
    loops, iv = _row_loops(ctx, idx)
    batch = " + ".join(f"{v}*{out.strides[k]}" for k, v in enumerate(iv[:-1])) or "0"
    ctx.p.lines.append(
        f"{loops}{{ int64_t j = (int64_t){idx.at(iv)}; if (j >= 0 && j < {n}) "
        f"memcpy({out.ptr} + {out.off} + {batch} + j*{row}, {rows.ptr} + {rows.off} + "
        f"({' + '.join(f'{v}*{rows.strides[k]}' for k, v in enumerate(iv))}), "
        f"{row} * sizeof({ctype(x.dtype)})); }}")
    return out


@lowers("written_rows")
def _written_rows(ctx: Any, e: Any) -> Val:
    """The rows of g that ``write_rows`` with this index wrote (zeros for the skipped ones and
    for those a later row overwrote)."""
    g, idx = (ctx.val(a) for a in e.args)
    if e.kwargs or idx.dtype.kind not in "iu" or idx.lit is not None:
        raise Unsupported("written_rows with keywords or a constant index")
    g, out = contiguous(ctx, g), ctx.out(e)
    lead, n, r_n = len(idx.shape) - 1, g.shape[len(idx.shape) - 1], idx.shape[-1]
    row = math.prod(g.shape[lead + 1:])
    loops, iv = _row_loops(ctx, idx)
    later = idx.at(iv[:-1] + ["q"])
    batch = " + ".join(f"{v}*{g.strides[k]}" for k, v in enumerate(iv[:-1])) or "0"
    dst = f"{out.ptr} + {out.off} + ({' + '.join(f'{v}*{out.strides[k]}' for k, v in enumerate(iv))})"
    ctx.p.lines.append(
        f"{loops}{{ int64_t j = (int64_t){idx.at(iv)}; int won = j >= 0 && j < {n}; "
        f"for (npy_intp q = {iv[-1]} + 1; q < {r_n} && won; q++) won = (int64_t){later} != j; "
        f"if (won) memcpy({dst}, {g.ptr} + {g.off} + {batch} + j*{row}, {row} * sizeof({ctype(g.dtype)})); "
        f"else memset({dst}, 0, {row} * sizeof({ctype(g.dtype)})); }}")
    return out


@lowers("elu")
def _elu(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    (alpha,) = _params(e, ("alpha",), (1.0,))
    out = ctx.out(e)
    if out.dtype.kind != "f":
        raise Unsupported(f"elu of {out.dtype}")
    ctx.p.elementwise(out, _template("{0} > 0 ? {0} : {1} * expm1{f}({0} < 0 ? {0} : 0)", out.dtype),
                      [x, ctx.val(alpha)])
    return out


@lowers("huber_loss")
def _huber_loss(ctx: Any, e: Any) -> Val:
    x, y = ctx.val(e.args[0]), ctx.val(e.args[1])
    _target, delta, reduction, scale = _params(e, ("target", "delta", "reduction", "scale"),
                                               (None, 1.0, "mean", 1.0))
    shape = np.broadcast_shapes(x.shape, y.shape)
    out = ctx.out(e)
    if reduction not in ("mean", "sum", "none") or out.dtype.kind != "f":
        raise Unsupported(f"huber_loss reduction {reduction!r} of {out.dtype}")
    terms = out if reduction == "none" else ctx.p.buffer(out.dtype, shape)
    ctx.p.elementwise(terms, _template("huber{s}({0} - {1}, {2}) * {3}", out.dtype),
                      [x, y, ctx.val(delta), ctx.val(scale)])
    if reduction != "none":
        _reduce_into(ctx, "sum", out, terms, tuple(range(len(shape))))
        if reduction == "mean":
            ctx.p.elementwise(out, lambda v: f"{v[0]} / {max(terms.size, 1)}", [out])
    return out


@lowers("argmax", "argmin")
def _argmax(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    axis, _out, keep = _params(e, ("axis", "out", "keepdims"), (None, None, False))
    if _out is not None or x.dtype.kind not in "fi" or not x.shape:
        raise Unsupported(f"{e.name} with out= or of {x.dtype}{list(x.shape)}")
    axes = _axes(axis, len(x.shape))
    out = ctx.out(e)
    kept = [n for k, n in enumerate(x.shape) if k not in axes]
    ctx.p.arg_reduce(e.name, out.view(kept, c_strides(kept)), x, axes)
    return out


@lowers("flip")
def _flip(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    (axis,) = _params(e, ("axis",), (None,))
    axes = _axes(axis, len(x.shape))
    off = sum((x.shape[k] - 1) * x.strides[k] for k in axes)
    return x.view(x.shape, [-s if k in axes else s for k, s in enumerate(x.strides)], off)


@lowers("cumsum")
def _cumsum(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    (axis,) = _params(e, ("axis",), (None,))
    if axis is None:
        x = contiguous(ctx, x)
        x, axis = x.view((x.size,), (1,)), 0
    out = ctx.out(e)
    ctx.p.cumulative(out, x, int(axis) % len(x.shape))
    return out


@lowers("take_along_axis")
def _take_along_axis(ctx: Any, e: Any) -> Val:
    x, idx = ctx.val(e.args[0]), ctx.val(e.args[1])
    (axis,) = _params(e, ("indices", "axis"), (None, -1))[1:]
    if axis is None or len(idx.shape) != len(x.shape) or idx.dtype.kind not in "iu":
        raise Unsupported("take_along_axis beyond indices of the array's rank along one axis")
    out = ctx.out(e)
    ctx.along(out, x, idx, int(axis) % len(x.shape))
    return out


@lowers("invert")
def _invert(ctx: Any, e: Any) -> Val:
    """``~x``: the bits flipped, or ``not`` for booleans (NumPy's invert of bool)."""
    out = ctx.out(e)
    if out.dtype.kind not in "iub" or e.kwargs:
        raise Unsupported(f"invert of {out.dtype}")
    tmpl = "!{0}" if out.dtype.kind == "b" else "~{0}"
    ctx.p.elementwise(out, lambda v: tmpl.format(*v), [ctx.val(e.args[0])])
    return out


@lowers("floor_divide", "remainder")
def _floor_divide(ctx: Any, e: Any) -> Val:
    """NumPy's ``//`` and ``%``: rounded down, the remainder with the divisor's sign, through
    the prelude's helpers (npymath's divmod for floats; a zero integer divisor gives 0)."""
    if e.kwargs or len(e.args) != 2:
        raise Unsupported(f"{e.name} with keywords")
    out = ctx.out(e)
    mod = e.name == "remainder"
    kind = out.dtype.kind
    if kind == "f":
        fn = ("fmod_py" if mod else "fdiv") + ("_f" if out.dtype == np.float32 else "_d")
    elif kind in "iu":
        fn = ("imod_" if mod else "idiv_") + ("u" if kind == "u" else "s")
    else:
        raise Unsupported(f"{e.name} of {out.dtype}")
    ctx.p.elementwise(out, lambda v: f"{fn}({v[0]}, {v[1]})", [ctx.val(a) for a in e.args])
    return out


@lowers("any", "all")
def _any(ctx: Any, e: Any) -> Val:
    x = ctx.val(e.args[0])
    axis, _keep = _params(e, ("axis", "keepdims"), (None, False))
    out = ctx.out(e)
    if out.dtype.kind != "b" or not x.shape:
        raise Unsupported(f"{e.name} of {x.dtype}{list(x.shape)} into {out.dtype}")
    _reduce_into(ctx, e.name, out, x, _axes(axis, len(x.shape)))
    return out


_SORT_SUFFIX = {"f4": "_f", "f8": "_d", "i8": "_i64", "i4": "_i32", "u8": "_u64", "u4": "_u32",
                "b1": "_b"}


@lowers("argsort")
def _argsort(ctx: Any, e: Any) -> Val:
    """``argsort(x, axis, kind="stable")``: the prelude's merge sort along ``axis`` for each
    position of the other axes (NumPy's default kind is not stable: its order of ties differs)."""
    x = ctx.val(e.args[0])
    axis, kind, order = _params(e, ("axis", "kind", "order"), (-1, None, None))
    suffix = _SORT_SUFFIX.get(x.dtype.str[1:])
    if kind not in ("stable", "mergesort") or order is not None or axis is None or not x.shape \
            or suffix is None:
        raise Unsupported(f"argsort of {x.dtype}{list(x.shape)} kind={kind!r} axis={axis!r} "
                          "(only a stable sort along one axis lowers)")
    ax = int(axis) % len(x.shape)
    n = x.shape[ax]
    out = ctx.out(e)
    idx, tmp = ctx.p.buffer(np.int64, (n,)), ctx.p.buffer(np.int64, (n,))
    keep = [k for k in range(len(x.shape)) if k != ax]
    iv = ctx.p._loop_vars(len(x.shape))
    first = list(iv)
    first[ax] = "0"
    src = x.at(first) if n > 1 and x.strides[ax] else None
    body = [f"argsort{suffix}(&{src}, {x.strides[ax]}, {n}, {idx.ptr}, {tmp.ptr});" if src
            else f"for (npy_intp j = 0; j < {n}; j++) {idx.ptr}[j] = j;",
            f"for (npy_intp {iv[ax]} = 0; {iv[ax]} < {n}; {iv[ax]}++) "
            f"{out.at(iv)} = {idx.ptr}[{iv[ax]}];"]
    ctx.p.lines += [f"for (npy_intp {iv[k]} = 0; {iv[k]} < {x.shape[k]}; {iv[k]}++)" for k in keep]
    ctx.p.lines.append("{ " + " ".join(body) + " }")
    return out


@lowers("scatter_along_axis")
def _scatter_along_axis(ctx: Any, e: Any) -> Val:
    """Zeros of ``shape`` with ``g`` added at ``indices`` along ``axis`` (take_along_axis's
    adjoint; repeats add up; a size-1 dimension of ``shape`` sums the lanes), IndexError outside."""
    g, idx = ctx.val(e.args[0]), ctx.val(e.args[1])
    axis = int(e.args[2])
    out = ctx.out(e)
    nd = len(out.shape)
    if e.kwargs or len(g.shape) != nd or len(idx.shape) != nd or idx.dtype.kind not in "iu" \
            or out.dtype != g.dtype or not nd:
        raise Unsupported("scatter_along_axis beyond values and indices of the output's rank")
    ax = axis % nd
    n = out.shape[ax]
    ctx.p.elementwise(out, lambda v: "0", [])
    iv = ctx.p._loop_vars(nd)
    at = list(iv)
    at[ax] = "j"
    ctx.p.lines += [f"for (npy_intp {v} = 0; {v} < {m}; {v}++)" for v, m in zip(iv, g.shape)]
    ctx.p.lines.append(
        f"{{ int64_t j = (int64_t){idx.broadcast(g.shape).at(iv)}; if (j < 0) j += {n}; "
        f"if (j < 0 || j >= {n}) {{ index_error(j < 0 ? j - {n} : j, {n}, {ax}); goto fail; }} "
        f"{out.at(at)} += {g.at(iv)}; }}")
    return out


# ---- appended for the compiled DQN loop (rlgrad/rl/compiled_loop/dqn.py) ----------------------
@lowers("fused_adam")
def _fused_adam(ctx: Any, e: Any) -> Val:
    """``dqn.fused_adam``: per seed, the gradient's squared norm (in double, as the reference's
    float64 sum of float32 squares), then one loop doing the clip's scaling and ``_adam_math``'s
    operations in its order and precision (no FMA: -ffp-contract=off), its flush every 50 steps
    included; the parameters, moments stacked in the output ``(3, S, P)``. The per-element
    arithmetic is ``adam_step_T`` of rlgrad/_adam.h, the one C spelling of Adam that
    rlgrad/optim/_fused.c (the eager optimizers' update) calls too."""
    p, g, m, v = (contiguous(ctx, ctx.val(a)) for a in e.args[:4])
    t, lr = ctx.val(e.args[4]), ctx.val(e.args[5])
    kw = e.kwargs
    if len(e.args) != 6 or set(kw) != {"b1", "b2", "eps", "max_norm"} or p.dtype.kind != "f" \
            or any(x.dtype != p.dtype for x in (g, m, v)) or len(p.shape) != 2:
        raise Unsupported("fused_adam beyond flat (S, P) float arrays of one dtype")
    out = ctx.out(e)
    S, P = p.shape
    T = ctype(p.dtype)
    b1, b2, eps = float(kw["b1"]), float(kw["b2"]), float(kw["eps"])
    lit = lambda x: f"(({T}){literal(p.dtype.type(x))})"  # noqa: E731 - in the array's type
    floor = lit(np.finfo(p.dtype).tiny * 1e13)
    clip = ""  # (the factor rounded to float32 in either dtype, as the reference's np.float32)
    if kw["max_norm"] is not None:
        clip = (f"double sq = 0; _Pragma(\"omp simd reduction(+:sq)\") "
                f"for (npy_intp i = 0; i < {P}; i++) {{ {T} q = G[i] * G[i]; "
                f"sq += (double)q; }} double c = {literal(float(kw['max_norm']))} / (sqrt(sq) + "
                f"{literal(1e-6)}); scale = ({T})(float)((c != c || c <= 1.0) ? c : 1.0);")
    ctx.p.lines.append(  # (the flush: a floor of 0 at the other steps; rlgrad/_adam.h's step)
        f"for (npy_intp s = 0; s < {S}; s++) {{ const {T} *G = {g.ptr} + {g.off} + s*{P}; "
        f"{T} scale = 1; {clip} double tt = (double){t.broadcast((S,)).at(['s'])}; "
        f"double bc2 = sqrt(1.0 - pow({literal(b2)}, tt)); "
        f"{T} step = ({T})((double){lr.at([])} * bc2 / (1.0 - pow({literal(b1)}, tt))); "
        f"{T} eps_t = ({T})({literal(eps)} * bc2); "
        f"{T} floor_ = fmod(tt, 50.0) == 0.0 ? {floor} : ({T})0; "
        f"const {T} *Pp = {p.ptr} + {p.off} + s*{P}, *M = {m.ptr} + {m.off} + s*{P}, "
        f"*V = {v.ptr} + {v.off} + s*{P}; {T} *oP = {out.ptr} + {out.off} + s*{P}, "
        f"*oM = oP + {S * P}, *oV = oP + {2 * S * P}; "
        f"_Pragma(\"omp simd\") for (npy_intp i = 0; i < {P}; i++) {{ {T} mm = M[i], vv = V[i]; "
        f"oP[i] = adam_step_{T}(Pp[i], G[i] * scale, &mm, &vv, {lit(1 - b1)}, {lit(b2)}, "
        f"{lit(1 - b2)}, eps_t, step, floor_); oM[i] = mm; oV[i] = vv; }} }}")
    return out
