"""Random programs for the engine's tests: compositions of its operations on random shapes with
broadcasting, drawn by hypothesis (tests/engine/test_random_programs.py checks their gradients
and compiled steps; test_vmap, test_native_random and test_reference_paths run them too).

A program is a list of steps over a growing list of values (the inputs first): each step applies
one operation to values drawn from the list (so values are reused, and gradients accumulate), and
the program returns ``sum(last * w)``. Operations with kinks (abs, max, sort, clip, ...) are only
kept where the input is at least ``MARGIN`` away from the kink, where finite differences mean
something. ``RLGRAD_RANDOM_PROGRAMS`` raises the number of programs for a deep run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

import rlgrad
import rlgrad.nn.functional as F
import rlgrad.numpy as rnp
from rlgrad import special

MARGIN = 1e-3
EXAMPLES = int(os.environ.get("RLGRAD_RANDOM_PROGRAMS", "150"))


def _t(a: Any) -> Any:
    """A Tensor for the PyTorch-style methods (finite differences call the program on arrays)."""
    return a if isinstance(a, rlgrad.Tensor) else rlgrad.tensor(np.asarray(a))


def _gap(x: Any, axis: Any = -1) -> float:
    """The smallest difference between two values along ``axis`` (ties of max, min, sort)."""
    x = np.asarray(x)
    if x.ndim == 0 or x.shape[axis] < 2:
        return np.inf
    s = np.sort(x, axis=axis)
    return float(np.min(np.diff(s, axis=axis)))


def _gap_all(x: Any) -> float:
    return _gap(np.ravel(x), 0)


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    # draw(data, shapes) -> (fn, margin_fn or None), or None when the op does not fit the shapes
    draw: Callable[[Any, list[tuple[int, ...]]], Any]


def _axis(data: Any, ndim: int, none: bool = True, tuples: bool = False) -> Any:
    choices: list[Any] = [st.none()] if none else []
    if ndim:
        choices.append(st.integers(-ndim, ndim - 1))
        if tuples:
            choices.append(hnp.valid_tuple_axes(ndim, min_size=1))
    return data.draw(st.one_of(choices)) if choices else None


def fixed(fn: Callable, margin: Callable | None = None) -> Callable:
    return lambda data, shapes: (fn, margin)


def reduction(fn: Callable, margin: Callable | None = None, tuples: bool = True) -> Callable:
    def draw(data: Any, shapes: list) -> Any:
        nd = len(shapes[0])
        axis = _axis(data, nd, tuples=tuples)
        kd = data.draw(st.booleans())
        m = (lambda x: margin(x, axis)) if margin is not None else None
        return (lambda x: fn(x, axis, kd)), m

    return draw


def along(fn: Callable, margin: Callable | None = None) -> Callable:
    """An op along one axis (cumsum, sort, softmax ...); scalars do not fit."""
    def draw(data: Any, shapes: list) -> Any:
        nd = len(shapes[0])
        if nd == 0:
            return None
        axis = data.draw(st.integers(-nd, nd - 1))
        m = (lambda x: margin(x, axis)) if margin is not None else None
        return (lambda x: fn(x, axis)), m

    return draw


def _max_margin(x: Any, axis: Any) -> float:
    """The gap between the largest and the second largest along the reduced axes."""
    x = np.asarray(x)
    if axis is None or x.ndim == 0:
        return _gap_all(x)
    axes = axis if isinstance(axis, tuple) else (axis,)
    moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))
    return _gap(flat, -1)


def _kink(at: float = 0.0) -> Callable:
    return lambda x: float(np.min(np.abs(np.asarray(x) - at))) if np.size(x) else np.inf


def _broadcast_pair(fn: Callable, margin: Callable | None = None) -> Callable:
    def draw(data: Any, shapes: list) -> Any:
        try:
            np.broadcast_shapes(shapes[0], shapes[1])
        except ValueError:
            return None
        return fn, margin

    return draw


def _matmul(data: Any, shapes: list) -> Any:
    a = shapes[0]
    if not a:
        return None
    if len(a) < 2:
        return (lambda x: rnp.dot(x, x[::-1])), None
    return (lambda x: x @ rnp.swapaxes(x, -1, -2)), None


def _take_along(data: Any, shapes: list) -> Any:
    shape = shapes[0]
    if not shape:
        return None
    axis = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(1, 3))
    idx_shape = shape[:axis] + (k,) + shape[axis + 1:]
    idx = np.asarray(data.draw(hnp.arrays(np.int64, idx_shape,
                                          elements=st.integers(0, shape[axis] - 1))))
    return (lambda x: rnp.take_along_axis(x, idx, axis)), None


def _getitem(data: Any, shapes: list) -> Any:
    shape = shapes[0]
    if not shape:
        return None
    idx = np.asarray(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1,
                                        max_size=4)))  # repeats accumulate
    return (lambda x: x[idx, ...] * 1.0 if np.ndim(x) > 1 else x[idx]), None


def _concat(data: Any, shapes: list) -> Any:
    a, b = shapes
    if not a or len(a) != len(b):
        return (lambda x, y: rnp.stack([x, x * 2.0])), None
    axis = data.draw(st.integers(0, len(a) - 1))
    if any(i != axis and p != q for i, (p, q) in enumerate(zip(a, b))):
        return (lambda x, y: rnp.concatenate([x, x], axis)), None
    return (lambda x, y: rnp.concatenate([x, y], axis)), None


def _where(data: Any, shapes: list) -> Any:
    try:
        shape = np.broadcast_shapes(shapes[0], shapes[1])
    except ValueError:
        return None
    mask = np.asarray(data.draw(hnp.arrays(np.bool_, shape)))
    return (lambda x, y: rnp.where(mask, x, y)), None


OPS = [
    # elementwise, smooth on the domain they are given
    Op("exp", 1, fixed(rnp.exp)), Op("tanh", 1, fixed(rnp.tanh)), Op("sin", 1, fixed(rnp.sin)),
    Op("sigmoid", 1, fixed(F.sigmoid)), Op("softplus", 1, fixed(F.softplus)),
    Op("arctan", 1, fixed(rnp.arctan)), Op("square", 1, fixed(rnp.square)),
    Op("log", 1, fixed(lambda x: rnp.log(x * x + 0.25))),
    Op("sqrt", 1, fixed(lambda x: rnp.sqrt(x * x + 0.25))),
    Op("reciprocal", 1, fixed(lambda x: rnp.reciprocal(x * x + 0.5))),
    Op("arcsin", 1, fixed(lambda x: rnp.arcsin(0.8 * rnp.tanh(x)))),
    Op("arctanh", 1, fixed(lambda x: rnp.arctanh(0.8 * rnp.tanh(x)))),
    Op("log1p", 1, fixed(lambda x: rnp.log1p(x * x))), Op("expm1", 1, fixed(rnp.expm1)),
    Op("cosh", 1, fixed(rnp.cosh)), Op("pow_int", 1, fixed(lambda x: x ** 3)),
    Op("pow_float", 1, fixed(lambda x: (x * x + 0.5) ** 1.5)),
    Op("xlogy", 1, fixed(lambda x: special.xlogy(x, x * x + 0.5))),
    Op("abs", 1, fixed(rnp.abs, _kink())), Op("relu", 1, fixed(F.relu, _kink())),
    Op("clip", 1, fixed(lambda x: rnp.clip(x, -0.5, 0.7),
                        lambda x: min(_kink(-0.5)(x), _kink(0.7)(x)))),
    Op("clamp_method", 1, fixed(lambda x: _t(x).clamp(-0.6, None),
                                _kink(-0.6))),
    # binary, broadcasting
    Op("add", 2, _broadcast_pair(lambda x, y: x + y)),
    Op("sub", 2, _broadcast_pair(lambda x, y: x - y)),
    Op("mul", 2, _broadcast_pair(lambda x, y: x * y)),
    Op("div", 2, _broadcast_pair(lambda x, y: x / (y * y + 0.5))),
    Op("pow", 2, _broadcast_pair(lambda x, y: (x * x + 0.5) ** y)),
    Op("pow_method", 2, _broadcast_pair(lambda x, y: _t(x * x + 0.5).pow(y))),
    Op("logaddexp", 2, _broadcast_pair(rnp.logaddexp)),
    Op("arctan2", 2, _broadcast_pair(lambda x, y: rnp.arctan2(x, y * y + 0.5))),
    Op("maximum", 2, _broadcast_pair(rnp.maximum, lambda x, y: _kink()(np.subtract(x, y)))),
    Op("minimum", 2, _broadcast_pair(rnp.minimum, lambda x, y: _kink()(np.subtract(x, y)))),
    Op("where", 2, _where),
    Op("concatenate", 2, _concat),
    # reductions
    Op("sum", 1, reduction(lambda x, a, k: rnp.sum(x, axis=a, keepdims=k))),
    Op("mean", 1, reduction(lambda x, a, k: rnp.mean(x, axis=a, keepdims=k))),
    Op("prod", 1, reduction(lambda x, a, k: rnp.prod(x, axis=a, keepdims=k))),
    Op("max", 1, reduction(lambda x, a, k: rnp.max(x, axis=a, keepdims=k), _max_margin)),
    Op("min", 1, reduction(lambda x, a, k: rnp.min(x, axis=a, keepdims=k), _max_margin)),
    Op("logsumexp", 1, reduction(lambda x, a, k: rnp.logsumexp(x, axis=a, keepdims=k))),
    Op("var", 1, reduction(lambda x, a, k: rnp.var(x, axis=a, keepdims=k))),
    Op("mean_method", 1, reduction(lambda x, a, k: _t(x).mean(dim=a, keepdim=k))),
    Op("prod_method", 1, reduction(lambda x, a, k: _t(x).prod(dim=a, keepdim=k), tuples=False)),
    Op("amax_method", 1, reduction(lambda x, a, k: _t(x).amax(dim=a, keepdim=k), _max_margin,
                                   tuples=False)),
    Op("max_dim_method", 1, along(lambda x, a: _t(x).max(a)[0], lambda x, a: _gap(x, a))),
    Op("min_dim_method", 1, along(lambda x, a: _t(x).min(dim=a, keepdim=True).values,
                                  lambda x, a: _gap(x, a))),
    # along an axis
    Op("cumsum", 1, along(lambda x, a: rnp.cumsum(x, axis=a))),
    Op("cumprod", 1, along(lambda x, a: rnp.cumprod(x, axis=a))),
    Op("sort", 1, along(lambda x, a: rnp.sort(x, axis=a), lambda x, a: _gap(x, a))),
    Op("softmax", 1, along(lambda x, a: F.softmax(x, dim=a))),
    Op("log_softmax", 1, along(lambda x, a: F.log_softmax(x, dim=a))),
    Op("flip", 1, along(lambda x, a: rnp.flip(x, a))),
    Op("roll", 1, along(lambda x, a: rnp.roll(x, 1, a))),
    Op("diff", 1, along(lambda x, a: rnp.diff(x, axis=a))),
    Op("repeat", 1, along(lambda x, a: rnp.repeat(x, 2, axis=a))),
    # shapes and indexing
    Op("transpose", 1, fixed(rnp.transpose)),
    Op("ravel", 1, fixed(rnp.ravel)),
    Op("expand_broadcast", 1, fixed(lambda x: rnp.broadcast_to(x, (2,) + np.shape(x)))),
    Op("tile", 1, fixed(lambda x: rnp.tile(x, 2))),
    Op("pad", 1, fixed(lambda x: rnp.pad(x, 1))),
    Op("unsqueeze_method", 1, fixed(lambda x: _t(x).unsqueeze(0) * 1.0)),
    Op("reversed_slice", 1, fixed(lambda x: x[..., ::-1] if np.ndim(x) else x)),
    Op("getitem_array", 1, _getitem),
    Op("take_along_axis", 1, _take_along),
    Op("matmul", 1, _matmul),
]


def _last_axis(fn: Callable, margin: Callable | None = None, min_len: int = 1) -> Callable:
    """An op on the last axis (layer_norm, linear, einsum ...): needs at least one dimension."""
    def draw(data: Any, shapes: list) -> Any:
        if not shapes[0] or shapes[0][-1] < min_len:
            return None
        return fn, margin

    return draw


def _square(fn: Callable) -> Callable:
    """A linear-algebra op on a symmetric positive definite matrix made from x: x x^T + I."""
    def draw(data: Any, shapes: list) -> Any:
        if len(shapes[0]) < 2:
            return None
        def spd(x: Any) -> Any:  # noqa: E306
            return x @ rnp.swapaxes(x, -1, -2) + np.eye(np.shape(x)[-2])
        return (lambda x: fn(spd(x), x)), None

    return draw


def _gather(data: Any, shapes: list) -> Any:
    shape = shapes[0]
    if not shape:
        return None
    dim = data.draw(st.integers(0, len(shape) - 1))
    idx_shape = tuple(data.draw(st.integers(1, n)) for n in shape)
    idx = np.asarray(data.draw(hnp.arrays(np.int64, idx_shape,
                                          elements=st.integers(0, shape[dim] - 1))))
    if data.draw(st.booleans()):
        return (lambda x: rlgrad.gather(x, dim, idx)), None
    src_shape = idx_shape
    return (lambda x: rlgrad.scatter_add(x, dim, idx, rnp.reshape(
        x[tuple(slice(0, n) for n in src_shape)], src_shape) * 2.0)), None


def _same_shape_pair(fn: Callable, margin: Callable | None = None) -> Callable:
    def draw(data: Any, shapes: list) -> Any:
        return (lambda x, y: fn(x, rnp.broadcast_to(y, np.shape(x))) if _fits(x, y) else
                fn(x, x[::-1] if np.ndim(x) else x * 0.5)), margin

    return draw


def _fits(x: Any, y: Any) -> bool:
    try:
        return np.broadcast_shapes(np.shape(x), np.shape(y)) == np.shape(x)
    except ValueError:
        return False


def _normal_logp(x: Any, y: Any) -> Any:
    from rlgrad.distributions import Normal

    d = Normal(x, F.softplus(y) + 0.2)
    return d.log_prob(np.full(np.broadcast_shapes(np.shape(x), np.shape(y)), 0.3)) + d.entropy()


def _categorical(data: Any, shapes: list) -> Any:
    from rlgrad.distributions import Categorical

    shape = shapes[0]
    if not shape:
        return None
    acts = np.asarray(data.draw(hnp.arrays(np.int64, shape[:-1],
                                           elements=st.integers(0, shape[-1] - 1))))
    return (lambda x: Categorical(logits=x).log_prob(acts) * 1.0 + Categorical(
        logits=x).entropy()), None


OPS += [
    Op("linear", 1, _last_axis(lambda x: F.linear(x, rnp.reshape(x, (-1, np.shape(x)[-1])),
                                                  rnp.reshape(x, (-1, np.shape(x)[-1]))[:, 0]))),
    Op("einsum_outer", 1, _last_axis(lambda x: rnp.einsum("...i,...j->...ij", x, x[..., ::-1]))),
    Op("einsum_dot", 1, _last_axis(lambda x: rnp.einsum("...i,...i->...", x, x[..., ::-1]))),
    Op("layer_norm", 1, _last_axis(lambda x: F.layer_norm(x, np.shape(x)[-1:]),
                                   lambda x: _gap(x, -1), min_len=2)),
    Op("elu", 1, fixed(F.elu, _kink())), Op("silu", 1, fixed(F.silu)),
    Op("leaky_relu", 1, fixed(lambda x: F.leaky_relu(x, 0.1), _kink())),
    Op("softplus_beta", 1, fixed(lambda x: F.softplus(x, beta=2.0))),
    Op("gammaln", 1, fixed(lambda x: special.gammaln(x * x + 0.5))),
    Op("digamma", 1, fixed(lambda x: special.digamma(x * x + 0.5))),
    Op("betaln", 2, _broadcast_pair(lambda x, y: special.betaln(x * x + 0.5, y * y + 0.5))),
    Op("mse", 2, _same_shape_pair(lambda x, y: F.mse_loss(x, y, reduction="none"))),
    Op("huber", 2, _same_shape_pair(lambda x, y: F.huber_loss(x, y, reduction="sum", delta=0.5),
                                    lambda x, y: _kink()(np.abs(np.subtract(x, y)) - 0.5)
                                    if _fits(x, y) else np.inf)),
    Op("bce_logits", 2, _same_shape_pair(lambda x, y: F.binary_cross_entropy_with_logits(
        x, F.sigmoid(y), reduction="none"))),
    Op("cross_entropy_probs", 1, _last_axis(lambda x: F.cross_entropy(
        x, F.softmax(x[..., ::-1], dim=-1), reduction="sum"))),
    Op("std", 1, reduction(lambda x, a, k: rnp.std(x, axis=a, keepdims=k),
                           lambda x, a: _max_margin(x, a))),
    Op("std_method", 1, along(lambda x, a: _t(x).std(dim=a, correction=0),
                              lambda x, a: _gap(x, a))),
    Op("norm", 1, fixed(lambda x: rnp.linalg.norm(x), lambda x: float(np.sum(np.square(x))))),
    Op("norm_3", 1, _last_axis(lambda x: rnp.linalg.norm(x, 3, axis=-1), _kink())),
    Op("inv", 1, _square(lambda a, x: rnp.linalg.inv(a))),
    Op("det", 1, _square(lambda a, x: rnp.linalg.det(a))),
    Op("slogdet", 1, _square(lambda a, x: rnp.linalg.slogdet(a)[1])),
    Op("solve", 1, _square(lambda a, x: rnp.linalg.solve(a, x))),
    Op("cholesky", 1, _square(lambda a, x: rnp.linalg.cholesky(a))),
    Op("triu_tril", 1, _square(lambda a, x: rnp.triu(x) * 2.0 + rnp.tril(x, -1))),
    Op("trace", 1, _square(lambda a, x: rnp.trace(x) + rnp.sum(rnp.diagonal(x, 0, -2, -1)))),
    Op("gather_scatter", 1, _gather),
    Op("stack_split", 2, _broadcast_pair(lambda x, y: rnp.split(rnp.stack(
        [x + 0 * y, y + 0 * x]), 2)[1] * 1.5)),
    Op("outer", 2, _broadcast_pair(lambda x, y: rnp.outer(x, y))),
    Op("tensordot", 2, _broadcast_pair(lambda x, y: rnp.tensordot(x + 0 * y, y + 0 * x,
                                                                  axes=np.ndim(x + 0 * y)))),
    Op("average", 1, reduction(lambda x, a, k: rnp.average(x, axis=a, weights=np.abs(x) * 0 + 1.5)
                               , tuples=False)),
    Op("normal_logp", 2, _broadcast_pair(_normal_logp)),
    Op("categorical", 1, _categorical),
    Op("permute_flatten", 1, fixed(lambda x: _t(x).permute(*reversed(range(np.ndim(x)))).flatten())),
    Op("logsumexp_method", 1, along(lambda x, a: _t(x).logsumexp(dim=a, keepdim=True))),
    Op("cumsum_method", 1, along(lambda x, a: _t(x).cumsum(a))),
]
BY_NAME = {op.name: op for op in OPS}


@dataclass
class Program:
    inputs: list[np.ndarray]
    steps: list[tuple[str, Callable, tuple[int, ...]]]
    weight: np.ndarray

    def __call__(self, *xs: Any) -> Any:
        vals = list(xs)
        for _, fn, idx in self.steps:
            vals.append(fn(*(vals[i] for i in idx)))
        return rnp.sum(vals[-1] * self.weight)

    def __repr__(self) -> str:
        return (f"Program(inputs={[x.shape for x in self.inputs]}, "
                f"steps={[(n, i) for n, _, i in self.steps]})")


def _input_shapes(data: Any) -> list[tuple[int, ...]]:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                         min_side=1, max_side=3))
    n = data.draw(st.integers(1, 2))
    return list(shapes.input_shapes[:n])


def draw_program(data: Any) -> Program:
    shapes = _input_shapes(data)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    inputs = [rng.uniform(-1.5, 1.5, s) for s in shapes]
    if data.draw(st.booleans()):  # exact zeros: where 0/0, 0*inf and x**0 lurk in a rule
        for x in inputs:
            x[rng.random(x.shape) < 0.4] = 0.0
    vals: list[Any] = list(inputs)
    steps = []
    for name in data.draw(st.lists(st.sampled_from(sorted(BY_NAME)), min_size=1, max_size=5)):
        op = BY_NAME[name]
        idx = tuple(data.draw(st.integers(0, len(vals) - 1)) for _ in range(op.arity))
        drawn = op.draw(data, [np.shape(vals[i]) for i in idx])
        if drawn is None:
            continue
        fn, margin = drawn
        args = [vals[i] for i in idx]
        if min(np.size(a) for a in args) == 0:
            continue
        if margin is not None and margin(*args) < MARGIN:
            continue  # too close to a kink here: finite differences would mean nothing
        out = fn(*args)
        out = out._value if isinstance(out, rlgrad.Tensor) else np.asarray(out)
        if (out.size > 200 or out.size == 0 or not np.all(np.isfinite(out))
                or np.max(np.abs(out)) > 1e3):
            continue  # keep values moderate: finite differences in float64 stay accurate
        vals.append(out)
        steps.append((name, fn, idx))
    assume(steps)
    weight = rng.standard_normal(np.shape(vals[-1]))
    return Program(inputs, steps, weight)


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])
