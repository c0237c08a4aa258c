"""``rlgrad.nn.utils``: gradient clipping and flat parameter vectors (PyTorch's names)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from rlgrad.tensor import Tensor, constant, mark_written
from rlgrad.tracer import replayed

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _params(parameters: Tensor | Iterable[Tensor] | Any) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        return [parameters]
    if hasattr(parameters, "parameters") and callable(parameters.parameters):
        return list(parameters.parameters())  # a Module
    return list(parameters)


@replayed  # under rlgrad.jit: made again by the compiled step, at its place
def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale all gradients together so that their global ``norm_type`` norm is at most
    ``max_norm``; returns the norm before clipping (a 0-d Tensor, as PyTorch).

    Gradients are replaced by scaled copies, never modified in place: the backward pass may hand
    the same array to several parameters (e.g. both sides of an addition).
    """
    params = [p for p in _params(parameters) if p.grad is not None]
    grads = [p.grad._value for p in params if p.grad is not None]  # (the same list: for the checker)
    if not params:
        return constant(np.array(0.0, dtype=np.float32))
    dtype = grads[0].dtype
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = max(float(np.max(np.abs(g))) if g.size else 0.0 for g in grads)
    elif norm_type == 2.0:
        sq = 0.0
        for g in grads:
            g = g.reshape(-1)
            sq += float(np.dot(g, g))
        total = math.sqrt(sq)
    else:
        total = float(sum(float(np.sum(np.abs(g) ** norm_type)) for g in grads)) ** (1 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(
            f"the total norm of order {norm_type} of the gradients is non-finite ({total}), so "
            "it cannot be clipped; check the loss for inf/nan, or pass error_if_nonfinite=False"
        )
    coef = float(max_norm) / (total + 1e-6)
    if coef < 1.0:
        for p, g in zip(params, grads):
            p.grad = constant(g * g.dtype.type(coef))
    return constant(np.array(total, dtype=dtype))


@replayed
def clip_grad_value_(parameters: Any, clip_value: float) -> None:
    """Clip every gradient element to ``[-clip_value, clip_value]``."""
    for p in _params(parameters):
        if p.grad is not None:
            p.grad = constant(np.clip(p.grad._value, -clip_value, clip_value))


def parameters_to_vector(parameters: Iterable[Tensor]) -> np.ndarray:
    """All parameters flattened into one new array (in iteration order)."""
    params = _params(parameters)
    if not params:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([p._value.reshape(-1) for p in params])


@replayed
def vector_to_parameters(vec: Any, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into the parameters, in place."""
    v = vec._value if isinstance(vec, Tensor) else np.asarray(vec)
    params = _params(parameters)
    n = sum(p._value.size for p in params)
    if v.ndim != 1 or v.size != n:
        raise ValueError(f"vector_to_parameters: expected a 1-D vector of {n} values, got shape {v.shape}")
    i = 0
    for p in params:
        k = p._value.size
        p._value[...] = v[i:i + k].reshape(p._value.shape)
        mark_written(p)
        i += k
