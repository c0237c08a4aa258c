"""PyTorch-style entry points to the backward pass: ``Tensor.backward`` and ``autograd.grad``."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rlgrad import autograd_function as function
from rlgrad.autograd_function import Function, FunctionCtx, once_differentiable
from rlgrad.core import NO_GRAD_HINT, match_dtype, run_backward
from rlgrad.tensor import Tensor, constant
from rlgrad.tracer import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

sys.modules[__name__ + ".function"] = function  # ``from rlgrad.autograd.function import ...``

__all__ = ["Function", "FunctionCtx", "once_differentiable", "function", "backward", "grad", "no_grad",
           "enable_grad", "set_grad_enabled", "is_grad_enabled"]


def _as_tuple(x: Any) -> tuple:
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _root_grads(outputs: tuple[Tensor, ...], grad_outputs: Any, what: str) -> list[Any]:
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    elif isinstance(grad_outputs, Tensor | np.ndarray | float | int):
        grad_outputs = (grad_outputs,)
    grad_outputs = tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"{what}: got {len(grad_outputs)} gradients for {len(outputs)} outputs")
    roots = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(out, Tensor):
            raise TypeError(f"{what}: output {i} is a {type(out).__name__}, not a Tensor")
        if not out.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn. "
                + NO_GRAD_HINT
            )
        if g is None:
            if out._value.size != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs, but output {i} has "
                    f"shape {out.shape}: pass gradient= (backward) or grad_outputs= (grad) with "
                    f"that shape, e.g. the gradient of the loss w.r.t. this output"
                )
            g = np.array(1, dtype=out._value.dtype).reshape(out.shape)  # C-level, unlike ones_like
        else:
            g_shape = np.shape(g._value if isinstance(g, Tensor) else g)
            if g_shape != out.shape:
                raise RuntimeError(
                    f"{what}: the gradient for output {i} has shape {g_shape} but the output has "
                    f"shape {out.shape}; they must match"
                )
            if not isinstance(g, Tensor):
                g = np.array(g, dtype=out._value.dtype)  # a copy, as torch makes: .grad never aliases it
        roots.append(g)
    return roots


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Add the gradients of ``tensors`` into the ``.grad`` of the leaves (``torch.autograd.backward``).

    ``grad_tensors`` seeds the backward pass at any tensor, not only a scalar loss: this is how
    DQN 3.0's ``network:backward(s, targets)`` starts at the output layer.
    """
    outs = _as_tuple(tensors)
    roots = _root_grads(outs, grad_tensors, "backward")
    if not create_graph:
        roots = [g._value if isinstance(g, Tensor) else g for g in roots]
    run_backward(outs, roots, retain_graph=create_graph if retain_graph is None else retain_graph,
                 create_graph=create_graph)


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False,
         materialize_grads: bool = False) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned rather than stored (``torch.autograd.grad``).

    With ``create_graph=True`` the returned gradients are themselves differentiable.
    """
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    for i, x in enumerate(ins):
        if not isinstance(x, Tensor):
            raise TypeError(f"grad: input {i} is a {type(x).__name__}, not a Tensor")
        if x._value.dtype.kind not in "fc":
            raise TypeError(
                f"grad: input {i} is an integer/boolean tensor ({x.dtype}, shape {x.shape}); "
                "indices (actions, gather/gather_nd indices) are never differentiable: the "
                "gradient flows to the gathered values only"
            )
        if not x.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {x.shape}) does not require grad; "
                               "call .requires_grad_() on it before computing the output")
    roots = _root_grads(outs, grad_outputs, "grad")
    if not create_graph:
        roots = [g._value if isinstance(g, Tensor) else g for g in roots]
    found = run_backward(outs, roots, retain_graph=create_graph if retain_graph is None else retain_graph,
                         create_graph=create_graph, inputs=ins)
    result: list[Tensor | None] = []
    for i, x in enumerate(ins):
        g = found.get(id(x))
        if g is None:
            if materialize_grads:
                result.append(constant(np.zeros_like(x._value)))
                continue
            if not allow_unused:
                raise RuntimeError(
                    f"grad: input {i} (shape {x.shape}) was not used to compute the outputs "
                    "(or the path to it was cut). Pass allow_unused=True to get None for it."
                )
            result.append(None)
            continue
        g = match_dtype(g, x)
        result.append(g if isinstance(g, Tensor) else constant(g))
    return tuple(result)


_ONES: dict[tuple, np.ndarray] = {}  # loss.backward()'s seed per (shape, dtype): a copy is ~1/3 of np.ones


def _tensor_backward(self: Tensor, gradient: Any = None, retain_graph: bool | None = None,
                     create_graph: bool = False, inputs: Any = None) -> None:
    """Backpropagate from this tensor with ``gradient`` (required unless it is a scalar)."""
    data = self._value
    if gradient is None and inputs is None and not create_graph and self._op is not None \
            and data.size == 1:  # the usual loss.backward(): no argument checks to make
        key = (data.shape, data.dtype)
        one = _ONES.get(key)
        if one is None:  # a size-1 shape: a handful of keys
            one = _ONES[key] = np.ones(data.shape, data.dtype)
        run_backward((self,), (one.copy(),), bool(retain_graph), False)  # a copy: .grad may take it
        return
    if inputs is not None:
        ins = _as_tuple(inputs)
        grads = grad(self, ins, gradient, retain_graph=retain_graph, create_graph=create_graph,
                     allow_unused=True)
        for x, g in zip(ins, grads):
            if g is not None:
                x.grad = g if x.grad is None else x.grad + g
        return
    backward(self, None if gradient is None else (gradient,), retain_graph, create_graph)


setattr(Tensor, "backward", _tensor_backward)  # noqa: B010 - typed in rlgrad/_tensor_api.pyi
