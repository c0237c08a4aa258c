"""Input attributions: which input features a chosen output (or a loss) is sensitive to.

``saliency`` is the plain gradient d target / d x. Which scalar you differentiate matters: the
gradient of an action's probability says how to move the input to make that action likelier; the
gradient of a loss also carries dloss/doutput (the error), so it is zero where the model is
already right. ``integrated_gradients`` averages the gradient along the straight path from a
baseline to ``x`` and scales by ``x - baseline``, so the attributions add up to
``f(x) - f(baseline)`` (the completeness axiom), which a single gradient does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import autograd
from rlgrad.analysis._common import fresh_input, select_target
from rlgrad.tensor import Tensor, constant

__all__ = ["saliency", "integrated_gradients"]


def _input_grad(model: Callable, x: Tensor, target: Any) -> tuple[np.ndarray, float]:
    val = select_target(model(x), target)
    if not val.requires_grad:
        raise RuntimeError(
            "the target does not depend on the input through differentiable ops (a detach, "
            "argmax, integer cast, sample() or no_grad inside the model?): rlgrad.explain("
            "lambda: <target>, [x]) says which op cut it"
        )
    (g,) = autograd.grad(val, [x], allow_unused=True)
    gx = np.zeros_like(x._value) if g is None else g._value
    return gx, float(val._value)


def saliency(model: Callable, x: Any, target: Any = None, *, absolute: bool = False) -> Tensor:
    """Gradient of a chosen scalar w.r.t. the input ``x`` (same shape as ``x``).

    ``target`` picks the scalar from ``model(x)``: None (the output is already a scalar), an
    output index (e.g. an action's probability or Q-value, summed over a batch), one index per
    row, ``"max"`` (the greedy action / predicted class), or a callable ``target(output)`` such
    as ``lambda q: F.mse_loss(q, y)`` for the gradient of a loss. The model's parameters are not
    touched (their ``.grad`` stays as it was). ``absolute=True`` returns ``|grad|``, the usual
    saliency map.
    """
    xt = fresh_input(x)
    g, _ = _input_grad(model, xt, target)
    return constant(np.abs(g) if absolute else g)


def integrated_gradients(model: Callable, x: Any, baseline: Any = None, steps: int = 50, *,
                         target: Any = None, method: str = "gausslegendre",
                         return_delta: bool = False) -> Tensor | tuple[Tensor, float]:
    """Integrated gradients (Sundararajan et al. 2017): ``(x - baseline) * mean_a grad f(baseline
    + a (x - baseline))`` with ``steps`` points ``a`` in [0, 1].

    ``baseline`` defaults to zeros. ``method`` is ``"gausslegendre"`` (Gauss-Legendre nodes: exact
    for polynomial paths, accurate for smooth models), ``"trapezoid"`` or ``"midpoint"``.
    ``target`` is as in :func:`saliency`. With ``return_delta=True`` also returns
    ``sum(attributions) - (f(x) - f(baseline))``, the completeness error (0 for an exact
    integral).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    xd = fresh_input(x)._value
    bd = np.zeros_like(xd) if baseline is None else fresh_input(baseline)._value.astype(xd.dtype)
    if bd.shape != xd.shape:
        bd = np.broadcast_to(bd, xd.shape).copy()
    alphas, weights = _quadrature(steps, method)
    diff = xd - bd
    total = np.zeros(xd.shape, dtype=np.float64)
    for a, w in zip(alphas, weights):
        g, _ = _input_grad(model, fresh_input(bd + xd.dtype.type(a) * diff), target)
        total += w * g
    attr = (diff * total).astype(xd.dtype)
    if not return_delta:
        return constant(attr)
    f_x = _value(model, xd, target)
    f_b = _value(model, bd, target)
    return constant(attr), float(attr.sum(dtype=np.float64) - (f_x - f_b))


def _value(model: Callable, x: np.ndarray, target: Any) -> float:
    # a leaf that requires grad so a callable target sees the same kind of input as above
    return float(select_target(model(fresh_input(x)), target)._value)


def _quadrature(steps: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in [0, 1] and weights summing to 1."""
    if method == "gausslegendre":
        nodes, w = np.polynomial.legendre.leggauss(steps)
        return (nodes + 1) / 2, w / 2
    if method == "midpoint":
        return (np.arange(steps) + 0.5) / steps, np.full(steps, 1.0 / steps)
    if method == "trapezoid":
        if steps == 1:
            return np.array([0.5]), np.array([1.0])
        nodes = np.linspace(0.0, 1.0, steps)
        w = np.full(steps, 1.0 / (steps - 1))
        w[0] = w[-1] = 0.5 / (steps - 1)
        return nodes, w
    raise ValueError(f"unknown method {method!r}: use 'gausslegendre', 'trapezoid' or 'midpoint'")
