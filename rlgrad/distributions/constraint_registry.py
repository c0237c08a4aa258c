"""``biject_to`` and ``transform_to`` (``torch.distributions.constraint_registry``): from a
constraint to a transform whose codomain it is, so that an unconstrained parameter can be
optimized and mapped into the support (``transform_to(constraints.positive)(x)`` is ``exp(x)``).

``biject_to(c)`` is a bijection (``log_abs_det_jacobian`` defined: for change of variables in a
density); ``transform_to(c)`` may not be (``simplex`` through softmax). Both are
``ConstraintRegistry`` objects: ``register(constraint_or_type, factory)`` adds or replaces an
entry, as torch's, and lookup is by the constraint's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlgrad.distributions import constraints
from rlgrad.distributions import transforms as T

__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]

Factory = Callable[[Any], T.Transform]


class ConstraintRegistry:
    """A table from constraint types to functions ``factory(constraint) -> Transform``."""

    def __init__(self) -> None:
        self._registry: dict[type, Factory] = {}

    def register(self, constraint: type[constraints.Constraint] | constraints.Constraint,
                 factory: Factory | None = None) -> Factory | Callable[[Factory], Factory]:
        """``register(c, f)`` or as a decorator ``@register(c)``; ``c`` a Constraint subclass or
        an instance (its type is registered)."""
        if factory is None:
            def decorate(f: Factory) -> Factory:
                self.register(constraint, f)
                return f
            return decorate
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not (isinstance(constraint, type) and issubclass(constraint, constraints.Constraint)):
            raise TypeError("Expected constraint to be either a Constraint subclass or instance, "
                            f"but got {constraint}")
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint: constraints.Constraint) -> T.Transform:
        for cls in type(constraint).__mro__:
            factory = self._registry.get(cls)
            if factory is not None:
                return factory(constraint)
        raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _real(c: Any) -> T.Transform:
    return T.identity_transform


def _independent(registry: ConstraintRegistry) -> Factory:
    def factory(c: Any) -> T.Transform:
        return T.IndependentTransform(registry(c.base_constraint), c.reinterpreted_batch_ndims)
    return factory


def _greater_than(c: Any) -> T.Transform:
    # (torch's entry for positive/nonnegative, ExpTransform alone, is registered under the same
    # type as greater_than's and replaced by it: torch gives this composition for them too)
    return T.ComposeTransform([T.ExpTransform(), T.AffineTransform(c.lower_bound, 1)])


def _less_than(c: Any) -> T.Transform:
    return T.ComposeTransform([T.ExpTransform(), T.AffineTransform(c.upper_bound, -1)])


def _interval(c: Any) -> T.Transform:
    lo, hi = c.lower_bound, c.upper_bound
    if lo == 0 and hi == 1:
        return T.SigmoidTransform()
    return T.ComposeTransform([T.SigmoidTransform(), T.AffineTransform(lo, hi - lo)])


def _cat(registry: ConstraintRegistry) -> Factory:
    def factory(c: Any) -> T.Transform:
        return T.CatTransform([registry(ci) for ci in c.cseq], c.dim, c.lengths)
    return factory


def _stack(registry: ConstraintRegistry) -> Factory:
    def factory(c: Any) -> T.Transform:
        return T.StackTransform([registry(ci) for ci in c.cseq], c.dim)
    return factory


for _reg in (biject_to, transform_to):
    _reg.register(constraints._Real, _real)
    _reg.register(constraints.independent, _independent(_reg))
    _reg.register(constraints._RealVector, lambda c: T.IndependentTransform(T.identity_transform, 1))
    _reg.register(constraints._GreaterThan, _greater_than)
    _reg.register(constraints._GreaterThanEq, _greater_than)
    _reg.register(constraints._LessThan, _less_than)
    _reg.register(constraints._Interval, _interval)
    _reg.register(constraints._HalfOpenInterval, _interval)
    _reg.register(constraints._CorrCholesky, lambda c: T.CorrCholeskyTransform())
    _reg.register(constraints.cat, _cat(_reg))
    _reg.register(constraints.stack, _stack(_reg))
biject_to.register(constraints._Simplex, lambda c: T.StickBreakingTransform())
transform_to.register(constraints._Simplex, lambda c: T.SoftmaxTransform())
transform_to.register(constraints._LowerCholesky, lambda c: T.LowerCholeskyTransform())
transform_to.register(constraints._PositiveDefinite, lambda c: T.PositiveDefiniteTransform())
transform_to.register(constraints._PositiveSemidefinite, lambda c: T.PositiveDefiniteTransform())
