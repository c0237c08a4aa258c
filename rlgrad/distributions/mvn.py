"""``MultivariateNormal(loc, covariance_matrix= | precision_matrix= | scale_tril=)`` (torch's
semantics), parameterised internally by the lower Cholesky factor L (covariance = L L^T)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    _OFF_HINT,
    Distribution,
    _as_param,
    _float_dtype,
    _rng,
    _standard_normal,
)
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["MultivariateNormal"]

_LOG_2PI = math.log(2 * math.pi)


class MultivariateNormal(Distribution):
    """Gaussian over vectors of size n: ``loc`` (..., n) and exactly one of
    ``covariance_matrix``, ``precision_matrix`` (symmetric positive-definite) or
    ``scale_tril`` (lower-triangular with a positive diagonal), each (..., n, n)."""

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: bool | None = None) -> None:
        given = [n for n, v in (("covariance_matrix", covariance_matrix),
                                ("precision_matrix", precision_matrix),
                                ("scale_tril", scale_tril)) if v is not None]
        if len(given) != 1:
            raise ValueError("MultivariateNormal takes exactly one of covariance_matrix=, "
                             f"precision_matrix= or scale_tril=, got {given or 'none'}")
        name = given[0]
        raw = {"covariance_matrix": covariance_matrix, "precision_matrix": precision_matrix,
               "scale_tril": scale_tril}[name]
        dtype = _float_dtype(loc, raw)
        loc_t, m = _as_param(loc, dtype), _as_param(raw, dtype)
        if loc_t._value.ndim < 1 or m._value.ndim < 2 or m._value.shape[-1] != m._value.shape[-2] \
                or m._value.shape[-1] != loc_t._value.shape[-1]:
            raise ValueError(
                f"MultivariateNormal: loc must be (..., n) and {name} (..., n, n), got shapes "
                f"{loc_t._value.shape} and {m._value.shape}")
        n = m._value.shape[-1]
        batch = np.broadcast_shapes(loc_t._value.shape[:-1], m._value.shape[:-2])
        self.loc = ops.broadcast_to(loc_t, batch + (n,))
        super().__init__(batch, (n,), validate_args)
        # the factor as given (torch multiplies by it as is) and its lower triangle (which
        # torch's triangular solves read): they differ only in the gradient of the upper part
        self._raw_tril = self._factor(name, m)
        self._unbroadcasted_scale_tril = ops.tril(self._raw_tril) if name == "scale_tril" \
            else self._raw_tril

    def _factor(self, name: str, m: Tensor) -> Tensor:
        data = m._value
        if self._validate_args:
            if name == "scale_tril":
                ok = np.all(np.triu(data, 1) == 0) and np.all(np.diagonal(data, 0, -2, -1) > 0)
                if not ok:
                    raise ValueError("MultivariateNormal: argument 'scale_tril' must be lower-"
                                     "triangular with a positive diagonal. " + _OFF_HINT)
            elif not np.allclose(data, np.swapaxes(data, -1, -2), rtol=1e-6, atol=1e-8):
                raise ValueError(f"MultivariateNormal: argument '{name}' must be symmetric. "
                                 + _OFF_HINT)
        if name == "scale_tril":
            return m
        try:
            cov = m if name == "covariance_matrix" else ops.inv(m)
            return ops.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError(f"MultivariateNormal: argument '{name}' must be positive-definite "
                             "(its Cholesky factorisation failed); add a small multiple of the "
                             "identity, e.g. + 1e-6 * eye(n)") from None

    # ---- parameters ------------------------------------------------------------------------
    @property
    def scale_tril(self) -> Tensor:
        n = self._event_shape[0]
        return ops.broadcast_to(self._raw_tril, self._batch_shape + (n, n))

    @property
    def covariance_matrix(self) -> Tensor:
        lt = self.scale_tril
        return ops.matmul(lt, ops.swapaxes(lt, -1, -2))

    @property
    def precision_matrix(self) -> Tensor:
        return ops.inv(self.covariance_matrix)

    def _half_log_det(self) -> Tensor:
        lt = self._unbroadcasted_scale_tril
        diag = ops.sum(lt * _const(np.eye(self._event_shape[0], dtype=lt._value.dtype)), axis=-1)
        return ops.sum(ops.log(diag), axis=-1)

    # ---- sampling and densities ------------------------------------------------------------
    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        eps = _standard_normal(_rng(generator), self._extended_shape(sample_shape),
                               self.loc._value.dtype)
        lt = self._raw_tril
        return self.loc + ops.matmul(lt, _const(eps[..., None]))[..., 0]

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        m = _mahalanobis(self._unbroadcasted_scale_tril, diff)
        n = self._event_shape[0]
        return -0.5 * (n * _LOG_2PI + m) - self._half_log_det()

    def entropy(self) -> Tensor:
        n = self._event_shape[0]
        h = 0.5 * n * (1.0 + _LOG_2PI) + self._half_log_det()
        return h if h._value.shape == self._batch_shape else ops.broadcast_to(h, self._batch_shape)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        lt = self._raw_tril
        v = ops.sum(lt * lt, axis=-1)
        return ops.broadcast_to(v, self._batch_shape + self._event_shape)

    def __repr__(self) -> str:
        return f"MultivariateNormal(loc: {self.loc.shape})"


def _mahalanobis(lt: Tensor, diff: Any) -> Tensor:
    """|L^{-1} diff|^2 over the last dimension, L broadcast against diff's batch dimensions."""
    d = diff if isinstance(diff, Tensor) else _const(np.asarray(diff))
    shape = np.broadcast_shapes(lt._value.shape[:-2], d._value.shape[:-1])
    n = lt._value.shape[-1]
    lb = lt if lt._value.shape[:-2] == shape else ops.broadcast_to(lt, shape + (n, n))
    db = d if d._value.shape[:-1] == shape else ops.broadcast_to(d, shape + (n,))
    z = ops.solve(lb, db[..., None])[..., 0]
    return ops.sum(z * z, axis=-1)
