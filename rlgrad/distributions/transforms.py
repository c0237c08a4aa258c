"""Bijections for ``TransformedDistribution`` (names and semantics of
``torch.distributions.transforms``): ``y = t(x)``, ``x = t.inv(y)`` and
``t.log_abs_det_jacobian(x, y)`` = log |dy/dx|, summed over the transform's event dimensions.

With ``cache_size=1`` a transform remembers its last ``(x, y)`` pair, so the inverse of the very
Tensor it produced is the ``x`` it came from (by identity, graph included): SAC's squashed
Gaussian ``TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)])`` gets
``log_prob`` of its own ``rsample()`` without ``atanh`` of a value that rounded to +-1.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _as_param, _data, _float_dtype, _sum_rightmost
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import ArrayLike

__all__ = [
    "Transform", "ComposeTransform", "AffineTransform", "ExpTransform", "SigmoidTransform",
    "TanhTransform", "identity_transform", "StickBreakingTransform", "PowerTransform",
    "AbsTransform", "SoftmaxTransform", "IndependentTransform", "ReshapeTransform", "CatTransform",
    "StackTransform", "CorrCholeskyTransform", "LowerCholeskyTransform",
    "CumulativeDistributionTransform", "SoftplusTransform", "PositiveDefiniteTransform",
]

_LOG2 = math.log(2.0)


class Transform:
    """Base class: ``__call__`` / ``inv`` with the optional one-pair cache, shapes, sign."""

    bijective = True
    domain: constraints.Constraint = constraints.real
    codomain: constraints.Constraint = constraints.real
    sign: Any = 1

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, got {cache_size!r}")
        self._cache_size = cache_size
        self._cached_x_y: tuple[Any, Any] = (None, None)

    @property
    def event_dim(self) -> int:
        if self.domain.event_dim != self.codomain.event_dim:
            raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")
        return self.domain.event_dim

    @property
    def inv(self) -> Transform:
        return _InverseTransform(self)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        new = copy.copy(self)
        Transform.__init__(new, cache_size)
        return new

    def __call__(self, x: Tensor) -> Tensor:
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = (x, y)
        return y

    def _inv_call(self, y: Any) -> Any:
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = (x, y)
        return x

    def _call(self, x: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement its forward map")

    def _inverse(self, y: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement its inverse")

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement log_abs_det_jacobian")

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def __eq__(self, other: object) -> bool:
        # parameter-free transforms are equal to any of their type (torch's rule); those
        # with parameters compare them; the base class compares identity
        if type(self) in _PARAMETER_FREE:
            return type(other) is type(self)
        return self is other

    __hash__ = None  # type: ignore[assignment]  # unhashable: __eq__ compares parameters

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    """``t.inv``: the same cache as ``t``, read the other way round."""

    def __init__(self, transform: Transform) -> None:
        super().__init__(transform._cache_size)
        self._inv = transform

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return self._inv.codomain

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return self._inv.domain

    @property
    def sign(self) -> Any:
        return self._inv.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def __call__(self, x: Any) -> Any:
        return self._inv._inv_call(x)

    def _inv_call(self, y: Any) -> Any:
        return self._inv(y)

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return -self._inv.log_abs_det_jacobian(y, x)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self._inv.forward_shape(shape)

    def __repr__(self) -> str:
        return f"{self._inv!r}.inv"


class ComposeTransform(Transform):
    """``parts`` applied in order; the log-det-Jacobians add (each summed over the dimensions
    the composition treats as one event beyond its own)."""

    def __init__(self, parts: list[Transform], cache_size: int = 0) -> None:
        parts = list(parts)
        for p in parts:
            if not isinstance(p, Transform):
                raise TypeError(f"ComposeTransform: parts must be Transforms, got {type(p).__name__}")
        if cache_size:
            parts = [p.with_cache(cache_size) for p in parts]
        super().__init__(cache_size)
        self.parts = parts

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        if not self.parts:
            return constraints.real
        dom = self.parts[0].domain
        ev = self.parts[-1].codomain.event_dim
        for p in reversed(self.parts):
            ev = max(ev + p.domain.event_dim - p.codomain.event_dim, p.domain.event_dim)
        return constraints.independent(dom, ev - dom.event_dim) if ev > dom.event_dim else dom

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        if not self.parts:
            return constraints.real
        cod = self.parts[-1].codomain
        ev = self.parts[0].domain.event_dim
        for p in self.parts:
            ev = max(ev + p.codomain.event_dim - p.domain.event_dim, p.codomain.event_dim)
        return constraints.independent(cod, ev - cod.event_dim) if ev > cod.event_dim else cod

    @property
    def sign(self) -> int | Tensor:
        s = 1
        for p in self.parts:
            s = s * p.sign
        return s

    @property
    def inv(self) -> Transform:
        return ComposeTransform([p.inv for p in reversed(self.parts)])

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self if self._cache_size == cache_size else ComposeTransform(self.parts, cache_size)

    def _call(self, x: Any) -> Any:
        for p in self.parts:
            x = p(x)
        return x

    def _inverse(self, y: Any) -> Any:
        for p in reversed(self.parts):
            y = p._inv_call(y)
        return y

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.parts:
            return _const(np.zeros_like(_data(x)))
        xs = [x]
        for p in self.parts[:-1]:
            xs.append(p(xs[-1]))
        xs.append(y)
        total = None
        ev = self.domain.event_dim
        for p, xi, yi in zip(self.parts, xs[:-1], xs[1:], strict=True):
            term = _sum_rightmost(p.log_abs_det_jacobian(xi, yi), ev - p.domain.event_dim)
            total = term if total is None else total + term
            ev += p.codomain.event_dim - p.domain.event_dim
        assert total is not None  # (no parts returned above)
        return total

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for p in self.parts:
            shape = p.forward_shape(shape)
        return tuple(shape)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for p in reversed(self.parts):
            shape = p.inverse_shape(shape)
        return tuple(shape)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    def __repr__(self) -> str:
        return f"ComposeTransform([{', '.join(repr(p) for p in self.parts)}])"


identity_transform = ComposeTransform([])


class ExpTransform(Transform):
    """``y = exp(x)``; log |dy/dx| = x."""

    codomain = constraints.positive

    def _call(self, x: Any) -> Any:
        return ops.exp(x)

    def _inverse(self, y: Any) -> Any:
        return ops.log(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return x


class SigmoidTransform(Transform):
    """``y = sigmoid(x)`` kept inside [tiny, 1 - eps] (as torch, so the inverse stays finite);
    log |dy/dx| = -softplus(-x) - softplus(x)."""

    codomain = constraints.unit_interval

    def _call(self, x: Any) -> Any:
        fi = np.finfo(_dtype_of(x))
        return ops.clip(ops.sigmoid(x), fi.tiny, 1.0 - fi.eps)

    def _inverse(self, y: Any) -> Any:
        fi = np.finfo(_dtype_of(y))
        y = ops.clip(y, fi.tiny, 1.0 - fi.eps)
        return ops.log(y) - ops.log1p(-y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -ops.softplus(-x) - ops.softplus(x)


class TanhTransform(Transform):
    """``y = tanh(x)``; log |dy/dx| = 2 (log 2 - x - softplus(-2x)), which does not overflow.
    The inverse is ``arctanh`` unclipped (as torch): use ``cache_size=1`` so that the inverse
    of a draw is the pre-tanh value itself."""

    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x: Any) -> Any:
        return ops.tanh(x)

    def _inverse(self, y: Any) -> Any:
        return ops.arctanh(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return 2.0 * (_LOG2 - x - ops.softplus(-2.0 * x))


class AffineTransform(Transform):
    """``y = loc + scale * x``; log |dy/dx| = log |scale|, summed over ``event_dim`` trailing
    dimensions (``loc``/``scale`` may be Tensors with gradients)."""

    def __init__(self, loc: ArrayLike, scale: ArrayLike, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        dtype = _float_dtype(loc, scale)
        self.loc = loc if isinstance(loc, int | float) else _as_param(loc, dtype)
        self.scale = scale if isinstance(scale, int | float) else _as_param(scale, dtype)
        self._event_dim = int(event_dim)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        n = self._event_dim
        return constraints.independent(constraints.real, n) if n else constraints.real

    codomain = domain

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @property
    def sign(self) -> int | Tensor:
        s = self.scale
        return (1 if s > 0 else -1 if s < 0 else 0) if isinstance(s, int | float) else ops.sign(s)

    def _call(self, x: Any) -> Any:
        return self.loc + self.scale * x

    def _inverse(self, y: Any) -> Any:
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        shape = _data(x).shape
        s = self.scale
        if isinstance(s, int | float):
            out: Any = _const(np.full(shape, math.log(abs(s)), _dtype_of(x)))
        else:
            out = ops.log(ops.absolute(s))
            full = np.broadcast_shapes(out._value.shape, shape)
            if out._value.shape != full:  # every element's own term, then the event sum
                out = ops.broadcast_to(out, full)
        return _sum_rightmost(out, self._event_dim)

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(shape, np.shape(_data(self.loc)), np.shape(_data(self.scale))))

    inverse_shape = forward_shape

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AffineTransform) or self._event_dim != other._event_dim:
            return False
        return all(np.array_equal(_data(a), _data(b))
                   for a, b in ((self.loc, other.loc), (self.scale, other.scale)))

    def __repr__(self) -> str:
        return f"AffineTransform(event_dim={self._event_dim})"


class StickBreakingTransform(Transform):
    """Unconstrained vectors of size K to the (K+1)-simplex by breaking a stick (torch's map):
    ``z_i = sigmoid(x_i - log(K + 1 - i))``, ``y_i = z_i prod_{j<i} (1 - z_j)``, the rest last."""

    domain = constraints.independent(constraints.real, 1)
    codomain = constraints.simplex

    @staticmethod
    def _offset(k: int, like: Any) -> np.ndarray:
        return np.log(np.arange(k, 0, -1, dtype=_dtype_of(like)))

    def _call(self, x: Any) -> Any:
        xs = x - self._offset(_data(x).shape[-1], x)
        z = ops.sigmoid(xs)
        # prod_{j<=i} (1 - z_j) as exp(cumsum(log(1 - z))), log(1 - z) = -softplus(xs)
        rest = ops.exp(ops.cumsum(-ops.softplus(xs), axis=-1))
        one = _const(np.ones(_data(z).shape[:-1] + (1,), _dtype_of(x)))
        return ops.concatenate([z, one], axis=-1) * ops.concatenate([one, rest], axis=-1)

    def _inverse(self, y: Any) -> Any:
        crop = y[..., :-1]
        sf = ops.clip(1 - ops.cumsum(crop, axis=-1), np.finfo(_dtype_of(y)).tiny, None)
        return ops.log(crop) - ops.log(sf) + self._offset(_data(crop).shape[-1], y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        xs = x - self._offset(_data(x).shape[-1], x)
        return ops.sum(-xs - ops.softplus(-xs) + ops.log(y[..., :-1]), axis=-1)

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[:-1]) + (shape[-1] - 1,)


def _dtype_of(x: Any) -> np.dtype:
    d = _data(x).dtype
    return d if d.kind == "f" else np.dtype(np.float64)


class PowerTransform(Transform):
    """``y = x ** exponent`` on positive numbers; log |dy/dx| = log |exponent y / x|."""

    domain = constraints.positive
    codomain = constraints.positive

    def __init__(self, exponent: ArrayLike, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.exponent = exponent if isinstance(exponent, int | float) else _as_param(
            exponent, _float_dtype(exponent))

    @property
    def sign(self) -> int | Tensor:
        e = self.exponent
        return (1 if e > 0 else -1 if e < 0 else 0) if isinstance(e, int | float) else ops.sign(e)

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self if self._cache_size == cache_size else PowerTransform(self.exponent, cache_size)

    def _call(self, x: Any) -> Any:
        return ops.power(x, self.exponent)

    def _inverse(self, y: Any) -> Any:
        return ops.power(y, 1 / self.exponent)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return ops.log(ops.absolute(self.exponent * y / x))

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(shape, np.shape(_data(self.exponent))))

    inverse_shape = forward_shape

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PowerTransform) and bool(
            np.all(_data(self.exponent) == _data(other.exponent)))


class AbsTransform(Transform):
    """``y = |x|`` (not bijective: the inverse is the positive branch, ``y`` itself)."""

    bijective = False
    codomain = constraints.positive

    def _call(self, x: Any) -> Any:
        return ops.absolute(x)

    def _inverse(self, y: Any) -> Any:
        return y


class SoftmaxTransform(Transform):
    """Unconstrained vectors to the simplex by ``softmax`` (not bijective: the inverse is
    ``log y``, one of the preimages); no log-det-Jacobian (torch has none)."""

    bijective = False
    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x: Any) -> Any:
        probs = ops.exp(x - ops.stop_gradient(ops.max(x, axis=-1, keepdims=True)))
        return probs / ops.sum(probs, axis=-1, keepdims=True)

    def _inverse(self, y: Any) -> Any:
        return ops.log(y)

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape)

    inverse_shape = forward_shape


_PARAMETER_FREE: tuple[type, ...] = (ExpTransform, SigmoidTransform, TanhTransform,
                                     StickBreakingTransform, AbsTransform, SoftmaxTransform)


class IndependentTransform(Transform):
    """``base_transform`` applied elementwise, with ``reinterpreted_batch_ndims`` more trailing
    dimensions treated as one event (its log-det-Jacobian summed over them)."""

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int,
                 cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = int(reinterpreted_batch_ndims)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims, cache_size)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        return self.base_transform.bijective

    @property
    def sign(self) -> int | Tensor:
        return self.base_transform.sign

    def _call(self, x: Any) -> Any:
        if _data(x).ndim < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y: Any) -> Any:
        if _data(y).ndim < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return _sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return f"IndependentTransform({self.base_transform!r}, {self.reinterpreted_batch_ndims})"


class ReshapeTransform(Transform):
    """The rightmost ``in_shape`` dimensions reshaped to ``out_shape`` (log-det-Jacobian 0)."""

    def __init__(self, in_shape: Sequence[int], out_shape: Sequence[int], cache_size: int = 0) -> None:
        self.in_shape, self.out_shape = tuple(int(n) for n in in_shape), tuple(int(n) for n in out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.independent(constraints.real, len(self.in_shape))

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.independent(constraints.real, len(self.out_shape))

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size)

    def _call(self, x: Any) -> Any:
        batch = _data(x).shape[:_data(x).ndim - len(self.in_shape)]
        return ops.reshape(x, batch + self.out_shape)

    def _inverse(self, y: Any) -> Any:
        batch = _data(y).shape[:_data(y).ndim - len(self.out_shape)]
        return ops.reshape(y, batch + self.in_shape)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        batch = _data(x).shape[:_data(x).ndim - len(self.in_shape)]
        return _const(np.zeros(batch, _dtype_of(x)))

    @staticmethod
    def _reshaped(shape: tuple[int, ...], have: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) < len(have):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(have)
        if tuple(shape[cut:]) != have:
            raise ValueError(f"Shape mismatch: expected {tuple(shape[cut:])} but got {have}")
        return tuple(shape[:cut]) + want

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self._reshaped(shape, self.in_shape, self.out_shape)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self._reshaped(shape, self.out_shape, self.in_shape)


def _slice(x: Any, dim: int, start: int, length: int) -> Any:
    """``x.narrow(dim, start, length)``."""
    key = [slice(None)] * _data(x).ndim
    key[dim] = slice(start, start + length)
    return x[tuple(key)]


def _select(x: Any, dim: int, i: int) -> Any:
    key: list[Any] = [slice(None)] * _data(x).ndim
    key[dim] = i
    return x[tuple(key)]


class CatTransform(Transform):
    """``tseq[i]`` applied to the i-th piece (of ``lengths[i]``, default 1) along ``dim``, the
    results concatenated (torch's ``torch.cat`` of transforms)."""

    def __init__(self, tseq: list[Transform], dim: int = 0, lengths: list[int] | None = None,
                 cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("CatTransform: tseq must be Transforms")
        super().__init__(cache_size)
        self.transforms = [t.with_cache(cache_size) for t in tseq]
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.transforms)} transforms but "
                             f"{len(self.lengths)} lengths")
        self.dim = dim

    @property
    def event_dim(self) -> int:
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self) -> int:
        return sum(self.lengths)

    @property
    def bijective(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, x: Any) -> list[tuple[Transform, Any, int, int]]:
        nd = _data(x).ndim
        if not -nd <= self.dim < nd or _data(x).shape[self.dim] != self.length:
            raise ValueError(f"CatTransform: the input must have size {self.length} along dim "
                             f"{self.dim}, got shape {_data(x).shape}")
        starts = np.cumsum([0] + self.lengths[:-1])
        return [(t, _slice(x, self.dim, int(s), n), int(s), n)
                for t, s, n in zip(self.transforms, starts, self.lengths, strict=True)]

    def _call(self, x: Any) -> Any:
        return ops.concatenate([t(xi) for t, xi, _, _ in self._pieces(x)], axis=self.dim)

    def _inverse(self, y: Any) -> Any:
        return ops.concatenate([t.inv(yi) for t, yi, _, _ in self._pieces(y)], axis=self.dim)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        terms = []
        for t, xi, s, n in self._pieces(x):
            term = t.log_abs_det_jacobian(xi, _slice(y, self.dim, s, n))
            if t.event_dim < self.event_dim:
                term = _sum_rightmost(term, self.event_dim - t.event_dim)
            terms.append(term)
        dim = (self.dim - _data(x).ndim if self.dim >= 0 else self.dim) + self.event_dim
        return ops.concatenate(terms, axis=dim) if dim < 0 else sum(terms[1:], terms[0])


class StackTransform(Transform):
    """``tseq[i]`` applied to the slice ``i`` along ``dim``, the results stacked."""

    def __init__(self, tseq: list[Transform], dim: int = 0, cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("StackTransform: tseq must be Transforms")
        super().__init__(cache_size)
        self.transforms = [t.with_cache(cache_size) for t in tseq]
        self.dim = dim

    @property
    def bijective(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        return constraints.stack([t.codomain for t in self.transforms], self.dim)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, x: Any) -> list[Any]:
        nd = _data(x).ndim
        if not -nd <= self.dim < nd or _data(x).shape[self.dim] != len(self.transforms):
            raise ValueError(f"StackTransform: the input must have size {len(self.transforms)} along dim "
                             f"{self.dim}, got shape {_data(x).shape}")
        return [_select(x, self.dim, i) for i in range(len(self.transforms))]

    def _call(self, x: Any) -> Any:
        parts = [t(xi) for t, xi in zip(self.transforms, self._slices(x), strict=True)]
        return ops.stack(parts, axis=self.dim)

    def _inverse(self, y: Any) -> Any:
        parts = [t.inv(yi) for t, yi in zip(self.transforms, self._slices(y), strict=True)]
        return ops.stack(parts, axis=self.dim)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return ops.stack([t.log_abs_det_jacobian(xi, yi) for t, xi, yi in
                          zip(self.transforms, self._slices(x), self._slices(y), strict=True)], axis=self.dim)


def _tril_index(n: int, diag: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tril_indices(n, diag)


def _vec_to_tril(vec: Any, n: int, diag: int) -> Any:
    """The entries of ``vec`` placed row by row below the ``diag``-th diagonal of n x n zeros
    (a product with a constant 0/1 matrix: differentiable to every order)."""
    rows, cols = _tril_index(n, diag)
    place = np.zeros((rows.size, n * n), _dtype_of(vec))
    place[np.arange(rows.size), rows * n + cols] = 1
    flat = ops.matmul(vec, place)
    return ops.reshape(flat, _data(vec).shape[:-1] + (n, n))


def _tril_to_vec(mat: Any, diag: int) -> Any:
    rows, cols = _tril_index(_data(mat).shape[-1], diag)
    return mat[..., rows, cols]


class CorrCholeskyTransform(Transform):
    """Unconstrained vectors of size D(D-1)/2 to Cholesky factors of D x D correlation matrices
    (torch's map: ``tanh``, then a stick-breaking of each row's unit length)."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky

    def _call(self, x: Any) -> Any:
        eps = float(np.finfo(_dtype_of(x)).eps)
        r = ops.clip(ops.tanh(x), -1 + eps, 1 - eps)
        n = self.forward_shape(_data(x).shape)[-1]
        r = _vec_to_tril(r, n, -1)
        # prod_{j<=i} sqrt(1 - r_j^2) as exp(cumsum(log(1 - r^2) / 2)): 1 - r^2 >= eps
        rest = ops.exp(ops.cumsum(0.5 * ops.log1p(-(r * r)), axis=-1))
        one = _const(np.ones(_data(r).shape[:-1] + (1,), _dtype_of(x)))
        return (r + np.eye(n, dtype=_dtype_of(x))) * ops.concatenate([one, rest[..., :-1]], axis=-1)

    def _inverse(self, y: Any) -> Any:
        cum = 1 - ops.cumsum(y * y, axis=-1)
        one = _const(np.ones(_data(y).shape[:-1] + (1,), _dtype_of(y)))
        shifted = ops.concatenate([one, cum[..., :-1]], axis=-1)
        t = _tril_to_vec(y, -1) / ops.sqrt(_tril_to_vec(shifted, -1))
        return 0.5 * (ops.log1p(t) - ops.log1p(-t))

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        cum = 1 - ops.cumsum(y * y, axis=-1)
        stick = 0.5 * ops.sum(ops.log(_tril_to_vec(cum, -2)), axis=-1)
        tanh = -2 * ops.sum(x + ops.softplus(-2 * x) - _LOG2, axis=-1)
        return stick + tanh

    def forward_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)


class LowerCholeskyTransform(Transform):
    """Square matrices to lower-triangular ones with a positive diagonal: the strictly lower
    triangle kept, the diagonal exponentiated (not bijective on all matrices: no
    log-det-Jacobian, as torch)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    @staticmethod
    def _map(x: Any, fn: Any) -> Any:
        eye = np.eye(_data(x).shape[-1], dtype=bool)
        return ops.where(eye, fn(ops.where(eye, x, 1.0)), ops.tril(x, -1))

    def _call(self, x: Any) -> Any:
        return self._map(x, ops.exp)

    def _inverse(self, y: Any) -> Any:
        return self._map(y, ops.log)


class CumulativeDistributionTransform(Transform):
    """``y = distribution.cdf(x)`` to the unit interval; the inverse is its ``icdf``, the
    log-det-Jacobian its ``log_prob``."""

    bijective = True
    codomain = constraints.unit_interval
    sign = 1

    def __init__(self, distribution: Distribution, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.distribution = distribution

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Transform (torch's layout)
        support = self.distribution.support
        if support is None:
            raise NotImplementedError(f"{type(self.distribution).__name__} has no support constraint")
        return support

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size)

    def _call(self, x: Any) -> Any:
        return self.distribution.cdf(x)

    def _inverse(self, y: Any) -> Any:
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return self.distribution.log_prob(x)


class SoftplusTransform(Transform):
    """``y = log(1 + exp(x))``; log |dy/dx| = -softplus(-x)."""

    codomain = constraints.positive

    def _call(self, x: Any) -> Any:
        return ops.softplus(x)

    def _inverse(self, y: Any) -> Any:
        return y + ops.log(-ops.expm1(-y))

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -ops.softplus(-x)


class PositiveDefiniteTransform(Transform):
    """Square matrices to positive-definite ones: ``L L^T`` of ``LowerCholeskyTransform``'s L."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x: Any) -> Any:
        low = LowerCholeskyTransform()(x)
        return ops.matmul(low, ops.swapaxes(low, -1, -2))

    def _inverse(self, y: Any) -> Any:
        return LowerCholeskyTransform().inv(ops.cholesky(y))


_PARAMETER_FREE += (LowerCholeskyTransform, SoftplusTransform, PositiveDefiniteTransform)
