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
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import _as_param, _data, _float_dtype, _sum_rightmost
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import ArrayLike

__all__ = [
    "Transform", "ComposeTransform", "AffineTransform", "ExpTransform", "SigmoidTransform",
    "TanhTransform", "identity_transform", "StickBreakingTransform",
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


_PARAMETER_FREE = (ExpTransform, SigmoidTransform, TanhTransform, StickBreakingTransform)
