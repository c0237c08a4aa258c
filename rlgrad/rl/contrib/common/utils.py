"""``sb3_contrib.common.utils``: the quantile Huber loss of QR-DQN and TQC, conjugate gradient
(TRPO's, ``rlgrad.rl.trpo``) and the flattened gradient, with sb3-contrib's signatures, on
rlgrad's engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad import autograd, nn, ops
from rlgrad.nn import functional as F
from rlgrad.rl.trpo import conjugate_gradient
from rlgrad.tensor import Tensor


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x, dtype=np.float32))


def _check_quantile_shapes(current: Tensor, target: Tensor) -> None:
    if current.ndim != target.ndim:
        raise ValueError(f"quantile_huber_loss: current_quantiles has {current.ndim} dimensions "
                         f"and target_quantiles {target.ndim}; they must have the same number")
    if current.shape[0] != target.shape[0]:
        raise ValueError(f"quantile_huber_loss: batch sizes differ: current_quantiles "
                         f"{current.shape[0]}, target_quantiles {target.shape[0]}")
    if current.ndim not in (2, 3):
        raise ValueError(f"quantile_huber_loss: current_quantiles has {current.ndim} dimensions; "
                         "it must be (batch, n_quantiles) or (batch, n_critics, n_quantiles)")


def quantile_huber_loss(current_quantiles: Any, target_quantiles: Any, cum_prob: Any = None,
                        sum_over_quantiles: bool = True) -> Tensor:
    """sb3-contrib's: the quantile Huber loss (kappa 1) of ``current_quantiles`` (batch, N) or
    (batch, n_critics, N) against ``target_quantiles`` of the same rank, at the levels
    ``cum_prob`` (default the midpoints ``(i + 0.5) / N``); summed over the N estimates
    (``sum_over_quantiles``) and averaged over the rest, else averaged over everything.
    ValueError for shapes that do not fit. (QR-DQN's training loss, ``rlgrad.rl.qrdqn``, is the
    2-D case.)"""
    current, target = _tensor(current_quantiles), _tensor(target_quantiles)
    _check_quantile_shapes(current, target)
    n = current.shape[-1]
    if cum_prob is None:
        cum_prob = ((np.arange(n, dtype=np.float32) + 0.5) / n).reshape(
            (1, -1, 1) if current.ndim == 2 else (1, 1, -1, 1))
    cum = cum_prob._value if isinstance(cum_prob, Tensor) else np.asarray(cum_prob, np.float32)
    u = (ops.reshape(target, (*target.shape[:-1], 1, target.shape[-1]))
         - ops.reshape(current, (*current.shape, 1)))  # (..., N, N')
    huber = F.huber_loss(u, 0.0, reduction="none", delta=1.0)
    loss = ops.abs(cum - ops.stop_gradient(ops.where(u < 0, np.float32(1.0), np.float32(0.0)))) * huber
    return ops.mean(ops.sum(loss, axis=-2)) if sum_over_quantiles else ops.mean(loss)


def conjugate_gradient_solver(matrix_vector_dot_fn: Callable[[Any], Any], b: Any,
                              max_iter: int = 10, residual_tol: float = 1e-10) -> Any:
    """sb3-contrib's: an approximate solution of ``A x = b`` (``matrix_vector_dot_fn(v) = A v``)
    by conjugate gradient, from ``x = 0`` (sb3-contrib starts from 1e-4 Gaussian noise)."""
    return conjugate_gradient(matrix_vector_dot_fn, b, max_iter, residual_tol)


def flat_grad(output: Any, parameters: Sequence[nn.Parameter], create_graph: bool = False,
              retain_graph: bool = False) -> Tensor:
    """sb3-contrib's: the gradients of ``output`` with respect to ``parameters``, flattened and
    joined in order (parameters ``output`` does not depend on are left out)."""
    grads = autograd.grad(output, list(parameters), create_graph=create_graph,
                          retain_graph=retain_graph or create_graph, allow_unused=True)
    return ops.concatenate([ops.reshape(g, (-1,)) for g in grads if g is not None])


__all__ = ["conjugate_gradient_solver", "flat_grad", "quantile_huber_loss"]
