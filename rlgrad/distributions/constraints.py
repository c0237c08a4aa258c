"""Constraints on parameters and values: what each must satisfy, checked when validation is on.

Each constraint is a predicate on NumPy data (never on the graph: checking does not record) and a
phrase used in the ValueError that names the offending argument, e.g. ``"must be positive (> 0)"``.
Names follow ``torch.distributions.constraints``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "Constraint", "real", "positive", "unit_interval", "open_unit_interval", "boolean",
    "simplex", "integer_interval", "interval", "real_vector", "independent", "open_interval",
    "greater_than", "greater_than_eq", "less_than", "half_open_interval", "nonnegative",
    "nonnegative_integer", "positive_integer", "lower_triangular", "lower_cholesky",
    "corr_cholesky", "square", "symmetric", "positive_definite", "positive_semidefinite",
    "cat", "stack", "dependent", "dependent_property", "is_dependent", "one_hot", "multinomial",
]


class Constraint:
    """``check(data)`` returns a boolean array (False where violated); ``event_dim`` trailing
    dimensions are checked jointly (a simplex is one event of size K)."""

    event_dim = 0
    is_discrete = False
    description = "satisfy its constraint"

    def check(self, x: np.ndarray) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"constraints.{type(self).__name__.lstrip('_')}"


class _Real(Constraint):
    description = "must be a real number (not NaN)"

    def check(self, x: np.ndarray) -> Any:
        return x == x  # False only for NaN


class _RealVector(_Real):
    event_dim = 1

    def check(self, x: np.ndarray) -> Any:
        return np.all(x == x, axis=-1)


class _GreaterThan(Constraint):
    """``x > lower_bound`` (torch's ``greater_than``; ``positive`` is the one at 0)."""

    def __init__(self, lower_bound: float) -> None:
        self.lower_bound = lower_bound
        self.description = f"must be greater than {lower_bound}"

    def check(self, x: np.ndarray) -> Any:
        return np.asarray(x) > self.lower_bound


class _Positive(_GreaterThan):
    def __init__(self) -> None:
        super().__init__(0.0)
        self.description = "must be positive (> 0)"


class _GreaterThanEq(Constraint):
    def __init__(self, lower_bound: float) -> None:
        self.lower_bound = lower_bound
        self.description = f"must be at least {lower_bound}"

    def check(self, x: np.ndarray) -> Any:
        return np.asarray(x) >= self.lower_bound


class _LessThan(Constraint):
    def __init__(self, upper_bound: float) -> None:
        self.upper_bound = upper_bound
        self.description = f"must be less than {upper_bound}"

    def check(self, x: np.ndarray) -> Any:
        return np.asarray(x) < self.upper_bound


class _HalfOpenInterval(Constraint):
    def __init__(self, lower_bound: float, upper_bound: float) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.description = f"must lie in [{lower_bound}, {upper_bound})"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        return (x >= self.lower_bound) & (x < self.upper_bound)


class _Interval(Constraint):
    def __init__(self, lower: float, upper: float, closed: bool = True) -> None:
        self.lower, self.upper, self.closed = lower, upper, closed
        self.lower_bound, self.upper_bound = lower, upper  # torch's names
        lo, hi = ("[", "]") if closed else ("(", ")")
        self.description = f"must lie in {lo}{lower}, {upper}{hi}"

    def check(self, x: np.ndarray) -> Any:
        if self.closed:
            return (x >= self.lower) & (x <= self.upper)
        return (x > self.lower) & (x < self.upper)


class _Boolean(Constraint):
    is_discrete = True
    description = "must be 0 or 1"

    def check(self, x: np.ndarray) -> Any:
        return (x == 0) | (x == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower: int | float, upper: int | float) -> None:
        self.lower, self.upper = lower, upper
        self.lower_bound, self.upper_bound = lower, upper  # torch's names
        self.description = f"must be an integer in [{lower}, {upper}]"

    def check(self, x: np.ndarray) -> Any:
        ok = (x >= self.lower) & (x <= self.upper)
        if x.dtype.kind == "f":
            ok &= x == np.floor(x)
        return ok


class _Simplex(Constraint):
    event_dim = 1
    description = "must be non-negative and sum to 1 along the last dimension"

    def check(self, x: np.ndarray) -> Any:
        tol = _sum_tolerance(x.dtype)
        return np.all(x >= 0, axis=-1) & (np.abs(x.sum(-1) - 1) <= tol)


def _sum_tolerance(dtype: np.dtype) -> float:
    # torch uses 1e-6; float32 sums of softmax outputs are off by a few eps, so scale with eps.
    eps = float(np.finfo(dtype).eps) if np.dtype(dtype).kind == "f" else 0.0
    return max(1e-6, 64 * eps)


real = _Real()
real_vector = _RealVector()
positive = _Positive()
unit_interval = _Interval(0.0, 1.0)
open_unit_interval = _Interval(0.0, 1.0, closed=False)
boolean = _Boolean()
simplex = _Simplex()


def interval(lower: float, upper: float) -> Constraint:
    return _Interval(lower, upper)


def integer_interval(lower: int | float, upper: int | float) -> Constraint:
    return _IntegerInterval(lower, upper)


def open_interval(lower: float, upper: float) -> Constraint:
    return _Interval(lower, upper, closed=False)


class independent(Constraint):  # noqa: N801 - torch's name
    """``base`` checked elementwise, then jointly over ``reinterpreted_batch_ndims`` more
    trailing dimensions (the domain of a transform acting on whole vectors)."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = int(reinterpreted_batch_ndims)
        self.event_dim = base_constraint.event_dim + self.reinterpreted_batch_ndims
        self.description = base_constraint.description

    def check(self, x: np.ndarray) -> Any:
        ok = np.asarray(self.base_constraint.check(x))
        n = self.reinterpreted_batch_ndims
        return np.all(ok, axis=tuple(range(-n, 0))) if n and ok.ndim >= n else ok


# ---- the rest of torch.distributions.constraints ---------------------------------------------
class _Matrix(Constraint):
    """A predicate on the last two dimensions (one event of a matrix)."""

    event_dim = 2

    def _square(self, x: np.ndarray) -> bool:
        return x.ndim >= 2 and x.shape[-1] == x.shape[-2]


class _LowerTriangular(_Matrix):
    description = "must be lower-triangular"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        return np.all(np.tril(x) == x, axis=(-2, -1))


class _LowerCholesky(_Matrix):
    description = "must be lower-triangular with a positive diagonal"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        return np.all(np.tril(x) == x, axis=(-2, -1)) & np.all(np.diagonal(x, 0, -2, -1) > 0, axis=-1)


class _CorrCholesky(_Matrix):
    description = "must be the Cholesky factor of a correlation matrix (rows of unit length)"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        tol = np.finfo(x.dtype if x.dtype.kind == "f" else np.float64).eps * x.shape[-1] * 10
        unit = np.all(np.abs(np.linalg.norm(x, axis=-1) - 1.0) <= tol, axis=-1)
        return _LowerCholesky().check(x) & unit


class _Square(_Matrix):
    description = "must be a square matrix"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        return np.full(x.shape[:-2], x.shape[-1] == x.shape[-2], bool)


class _Symmetric(_Matrix):
    description = "must be a symmetric matrix"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        if not self._square(x):
            return np.zeros(x.shape[:-2], bool)
        return np.all(np.isclose(x, np.swapaxes(x, -1, -2), atol=1e-6), axis=(-2, -1))


class _PositiveSemidefinite(_Symmetric):
    description = "must be a symmetric positive semi-definite matrix"

    def check(self, x: np.ndarray) -> Any:
        sym = super().check(x)
        if not sym.all():
            return sym
        return np.all(np.linalg.eigvalsh(np.asarray(x)) >= 0, axis=-1)


class _PositiveDefinite(_Symmetric):
    description = "must be a symmetric positive-definite matrix"

    def check(self, x: np.ndarray) -> Any:
        sym = super().check(x)
        if not sym.all():
            return sym
        return np.all(np.linalg.eigvalsh(np.asarray(x)) > 0, axis=-1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1
    description = "must be one-hot vectors"

    def check(self, x: np.ndarray) -> Any:
        x = np.asarray(x)
        return np.all((x == 0) | (x == 1), axis=-1) & (x.sum(-1) == 1)


class multinomial(Constraint):  # noqa: N801 - torch's name
    """Non-negative integer vectors summing to at most ``upper_bound``."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound: int) -> None:
        self.upper_bound = upper_bound
        self.description = f"must be non-negative counts summing to at most {upper_bound}"

    def check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        return np.all(x >= 0, axis=-1) & (x.sum(-1) <= self.upper_bound)


class cat(Constraint):  # noqa: N801 - torch's name
    """Constraints ``cseq`` on consecutive pieces of sizes ``lengths`` along ``dim``."""

    def __init__(self, cseq: list[Constraint], dim: int = 0, lengths: list[int] | None = None) -> None:
        self.cseq = list(cseq)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"cat: {len(self.cseq)} constraints but {len(self.lengths)} lengths")
        self.dim = dim
        self.description = "must satisfy each piece's constraint"

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]  # a property here (torch's layout)
        return max(c.event_dim for c in self.cseq)

    def check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        bounds = np.cumsum([0] + self.lengths)
        parts = [np.asarray(c.check(np.take(x, range(a, b), axis=self.dim)))
                 for c, a, b in zip(self.cseq, bounds[:-1], bounds[1:], strict=True)]
        return np.concatenate(parts, self.dim)


class stack(Constraint):  # noqa: N801 - torch's name
    """Constraint ``cseq[i]`` on the slice ``i`` along ``dim``."""

    def __init__(self, cseq: list[Constraint], dim: int = 0) -> None:
        self.cseq, self.dim = list(cseq), dim
        self.description = "must satisfy each slice's constraint"

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]  # a property here (torch's layout)
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        return np.stack([np.asarray(c.check(np.take(x, i, axis=self.dim)))
                         for i, c in enumerate(self.cseq)], self.dim)


class _Dependent(Constraint):
    """A placeholder for a support that depends on other variables (not checkable)."""

    description = "depends on other parameters"

    def __init__(self, *, is_discrete: Any = NotImplemented, event_dim: Any = NotImplemented) -> None:
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]  # a property here (torch's layout)
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return bool(self._is_discrete)

    @property
    def event_dim(self) -> int:  # type: ignore[override]  # a property here (torch's layout)
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return int(self._event_dim)

    def __call__(self, *, is_discrete: Any = NotImplemented, event_dim: Any = NotImplemented) -> _Dependent:
        return _Dependent(is_discrete=self._is_discrete if is_discrete is NotImplemented else is_discrete,
                          event_dim=self._event_dim if event_dim is NotImplemented else event_dim)

    def check(self, x: np.ndarray) -> Any:
        raise ValueError("Cannot determine validity of dependent constraint")


class dependent_property(property):  # noqa: N801 - torch's name
    """A property that is also a dependent constraint (``Distribution.support`` that depends
    on the parameters)."""

    def __init__(self, fn: Callable[..., Any] | None = None, *, is_discrete: object = NotImplemented,
                 event_dim: object = NotImplemented) -> None:
        super().__init__(fn)
        self._is_discrete, self._event_dim = is_discrete, event_dim

    def __call__(self, fn: Callable[..., Any]) -> dependent_property:
        return dependent_property(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


def is_dependent(constraint: object) -> bool:
    return isinstance(constraint, _Dependent | dependent_property)


def greater_than(lower_bound: float) -> Constraint:
    return _GreaterThan(lower_bound)


def greater_than_eq(lower_bound: float) -> Constraint:
    return _GreaterThanEq(lower_bound)


def less_than(upper_bound: float) -> Constraint:
    return _LessThan(upper_bound)


def half_open_interval(lower_bound: float, upper_bound: float) -> Constraint:
    return _HalfOpenInterval(lower_bound, upper_bound)


dependent = _Dependent()
nonnegative = _GreaterThanEq(0.0)
nonnegative_integer = _IntegerInterval(0, np.inf)
positive_integer = _IntegerInterval(1, np.inf)
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
one_hot = _OneHot()
