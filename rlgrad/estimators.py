"""Gradient estimators for expectations over random samples.

For ``J(theta) = E_{x ~ p_theta}[f(x)]`` two unbiased estimators of ``dJ/dtheta``:

* **score function** (REINFORCE, likelihood ratio): ``E[f(x) * d log p_theta(x) / dtheta]``.
  ``x = dist.sample()`` carries no graph; the gradient comes from ``dist.log_prob(x)``, weighted
  by ``f(x)`` with its own gradient stopped.  Works for any distribution, discrete included;
  high variance, reduced by subtracting a baseline ``b`` (any quantity independent of x).
  :func:`score_function_surrogate` builds the scalar whose gradient is this estimate.
* **pathwise** (reparameterization): ``x = dist.rsample()`` is a differentiable function of theta
  and noise, and ``dJ/dtheta = E[f'(x) dx/dtheta]``: just backpropagate ``f(x)``.  Needs a
  differentiable f and ``has_rsample``; usually far lower variance.

Higher orders: differentiating a score-function surrogate twice does not give an unbiased
Hessian (the stopped ``f`` and the missing dependence terms are wrong at order 2).  DiCE's
:func:`magic_box` fixes that: ``magic_box(w) = exp(w - stop_gradient(w))`` is 1 in value but
its derivative is ``magic_box(w) * dw``, so ``magic_box(sum log p) * f`` has unbiased gradients
of every order (Foerster et al., 2018).  :func:`dice_objective` applies it to a sequence.
"""

from __future__ import annotations

from typing import Any

from rlgrad import ops
from rlgrad.tensor import Tensor
from rlgrad.tracer import defjvp_elementwise, defvjp, primitive

__all__ = ["score_function_surrogate", "magic_box", "dice_objective", "straight_through"]


def _reduce(x: Any, reduction: str) -> Any:
    if reduction == "mean":
        return ops.mean(x)
    if reduction == "sum":
        return ops.sum(x)
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def score_function_surrogate(log_prob: Any, advantage: Any, baseline: Any = None,
                             reduction: str = "mean") -> Any:
    """``log_prob * stop_gradient(advantage - baseline)``, reduced: its gradient is the
    score-function (REINFORCE) estimate of ``d E[advantage] / d theta``.

    Maximise it (or minimise its negative) to increase the expected ``advantage``.  ``advantage``
    is a return, a reward or an advantage estimate; ``baseline`` (optional) is subtracted to
    reduce variance.  Neither receives a gradient from this term: train a learned baseline with
    its own loss.
    """
    weight = advantage if baseline is None else advantage - baseline
    return _reduce(log_prob * ops.stop_gradient(weight), reduction)


def magic_box(x: Any) -> Any:
    """DiCE's operator: ``exp(x - stop_gradient(x))``, 1 in value, ``d box(x) = box(x) dx``.

    ``x`` is the sum of the log-probabilities of the stochastic nodes a cost depends on.
    """
    return ops.exp(x - ops.stop_gradient(x))


def dice_objective(log_probs: Any, costs: Any, axis: int = -1, baselines: Any = None) -> Any:
    """The DiCE surrogate of a sequence: ``sum_t box(sum_{t' <= t} log_probs_t') * costs_t``.

    ``log_probs`` and ``costs`` have time along ``axis`` (one stochastic node and one cost per
    step; a cost at step t depends on the draws up to t).  Its value equals ``sum_t costs_t``
    and its gradients of every order are unbiased estimates of those of the expected total.
    ``baselines`` (one per step, independent of the step's own draw) add the zero-mean term
    ``sum_t (1 - box(log_probs_t)) * box(sum_{t' < t} log_probs_t') * baselines_t``, which
    reduces variance without changing the expectation of any order of derivative
    (Mao et al., 2019).  Sum over a batch dimension and divide to average over episodes.
    """
    cum = ops.cumsum(log_probs, axis=axis)
    out = ops.sum(magic_box(cum) * costs, axis=axis)
    if baselines is not None:
        before = cum - log_probs  # sum over t' < t
        term = (1 - magic_box(log_probs)) * magic_box(before) * baselines
        out = out + ops.sum(term, axis=axis)
    return out


def _st_forward(forward_value: Any, surrogate: Any) -> Any:
    return forward_value


_straight_through = primitive(_st_forward, "straight_through", arity=2)
defvjp(_straight_through, None, lambda g, ans, fwd, sur: g)
defjvp_elementwise(_straight_through)  # the tangent of the surrogate (the value's is dropped)


def straight_through(forward_value: Any, surrogate: Any) -> Tensor:
    """The value of ``forward_value`` with the gradient of ``surrogate`` (straight-through
    estimator): e.g. a hard one-hot sample that backpropagates like its soft relaxation.

    Same as ``forward_value - stop_gradient(surrogate) + surrogate`` but exact in value."""
    return _straight_through(forward_value, surrogate)
