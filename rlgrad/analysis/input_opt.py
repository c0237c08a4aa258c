"""Optimizing a model's input with the model frozen (adversarial inputs, fixed points, feature
visualisation): the input is the only tensor that requires grad, so the optimizer moves it and the
parameters are left exactly as they were."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgrad import autograd, optim
from rlgrad.analysis._common import fresh_input, param_list
from rlgrad.tensor import Tensor, constant

__all__ = ["frozen", "optimize_input", "InputOptimizationResult"]


@contextlib.contextmanager
def frozen(params: Any) -> Iterator[list[Tensor]]:
    """Set ``requires_grad=False`` on ``params`` (a Module or tensors) for the block and restore
    each tensor's own flag afterwards, even if the block raises."""
    ps = [p for p in param_list(params) if p.is_leaf]
    flags = [p.requires_grad for p in ps]
    try:
        for p in ps:
            p.requires_grad = False
        yield ps
    finally:
        for p, f in zip(ps, flags):
            p.requires_grad = f


@dataclass
class InputOptimizationResult:
    """``x``: the optimized input (a leaf without grad); ``loss``: the objective there;
    ``losses``: the objective before each step."""

    x: Tensor
    loss: float
    losses: list[float] = field(default_factory=list)
    steps: int = 0


def _make_optimizer(optimizer: Any, x: Tensor, lr: float) -> Any:
    if optimizer is None or optimizer == "adam":
        return optim.Adam([x], lr=lr)
    if optimizer == "sgd":
        return optim.SGD([x], lr=lr)
    if isinstance(optimizer, str):
        raise ValueError(f"unknown optimizer {optimizer!r}: use 'adam', 'sgd', a class or a factory")
    if isinstance(optimizer, type) and issubclass(optimizer, optim.Optimizer):
        return optimizer([x], lr=lr)
    if callable(optimizer):  # a factory: lambda params: SGD(params, lr=0.1, momentum=0.9)
        return optimizer([x])
    raise TypeError(f"optimizer must be a name, an Optimizer class or a factory, not {optimizer!r}")


def optimize_input(model: Callable, objective: Callable, x0: Any, steps: int = 100, *,
                   optimizer: Any = None, lr: float = 0.05, params: Any = None,
                   bounds: tuple[float, float] | None = None,
                   tol: float | None = None) -> InputOptimizationResult:
    """Minimize ``objective(x, model(x))`` over the input ``x``, starting at ``x0``.

    The model's parameters (``model.parameters()`` for a Module, else ``params=``) get
    ``requires_grad=False`` during the run and their flags are restored afterwards; their values
    never change. ``optimizer`` is ``"adam"`` (default), ``"sgd"``, an ``rlgrad.optim``
    class (built with ``lr``) or a factory ``f([x]) -> optimizer``. ``bounds=(lo, hi)`` clips x
    after each step; ``tol`` stops once the objective is below it.

    Example, the fixed point of f: ``optimize_input(f, lambda x, y: ((x - y) ** 2).sum(), x0)``.
    """
    if params is None and hasattr(model, "parameters") and callable(model.parameters):
        params = model
    x = fresh_input(x0)
    losses: list[float] = []
    with frozen(params if params is not None else []):
        opt = _make_optimizer(optimizer, x, lr)
        n = 0
        for n in range(1, steps + 1):
            opt.zero_grad()
            loss = objective(x, model(x))
            if not isinstance(loss, Tensor) or loss._value.size != 1:
                raise ValueError("objective(x, output) must return a scalar Tensor")
            if not loss.requires_grad:
                raise RuntimeError(
                    "the objective does not depend on x through differentiable ops; "
                    "rlgrad.explain(lambda: objective(x, model(x)), [x]) says which op cut it"
                )
            losses.append(float(loss._value))
            if tol is not None and losses[-1] < tol:
                n -= 1
                break
            # grad w.r.t. x only: a parameter we were not told about still gets no .grad
            (x.grad,) = autograd.grad(loss, [x])
            opt.step()
            if bounds is not None:
                np.clip(x._value, bounds[0], bounds[1], out=x._value)
        final = objective(x, model(x))
    xf = constant(np.array(x._value, copy=True))
    return InputOptimizationResult(x=xf, loss=float(final._value), losses=losses, steps=n)
