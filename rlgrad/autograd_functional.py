"""``torch.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp``, ``hvp`` with
torch's signatures and result structures, on ``autograd.grad`` (reachable as
``rlgrad.autograd.functional``). The JAX-style transforms are ``rlgrad.vjp`` ... (``transforms.py``).

``inputs`` is a Tensor or a tuple of Tensors; results follow it (a tuple for a tuple). With
``create_graph=False`` the results are detached; with ``True`` they are differentiable (also
w.r.t. inputs that require grad). An output independent of an input gives zeros, or raises
under ``strict=True``. ``jacobian``'s ``vectorize`` and ``strategy`` are accepted and change
nothing but the speed in torch: the result is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import autograd
from rlgrad.creation import stack
from rlgrad.tensor import Tensor, constant
from rlgrad.tracer import enable_grad

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _tuple(x: Any, what: str, name: str) -> tuple[bool, tuple[Tensor, ...]]:
    """(was a tuple, the Tensors), or torch's TypeError for anything else."""
    is_tuple = isinstance(x, tuple | list)
    xs = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(xs):
        if not isinstance(t, Tensor):
            raise TypeError(f"The {what} given to {name} must be either a Tensor or a tuple of "
                            f"Tensors but the value at index {i} has type {type(t).__name__}.")
    return is_tuple, xs


def _prepare(inputs: Any, create_graph: bool, name: str) -> tuple[bool, tuple[Tensor, ...]]:
    """The inputs to differentiate w.r.t.: themselves when the graph is kept and they require
    grad (the results then reach them), else detached copies that require grad."""
    is_tuple, xs = _tuple(inputs, "inputs", name)
    for i, x in enumerate(xs):
        if x.dtype.kind != "f":
            raise TypeError(f"{name}: input {i} has dtype {x.dtype}; only floating inputs can be "
                            "differentiated")
    return is_tuple, tuple(x if create_graph and x.requires_grad else x.detach().requires_grad_(True)
                           for x in xs)


def _outputs(func: Callable, xs: tuple[Tensor, ...], name: str) -> tuple[bool, tuple[Tensor, ...]]:
    with enable_grad():
        out = func(*xs)
    return _tuple(out, "outputs of the user-provided function", name)


def _grads(outs: tuple, ins: tuple, grad_outputs: tuple, create_graph: bool, strict: bool,
           name: str) -> tuple[Tensor, ...]:
    """``autograd.grad`` of the outputs that require grad; zeros (or strict's error) elsewhere."""
    used = [(o, g) for o, g in zip(outs, grad_outputs, strict=True) if o.requires_grad]
    found: tuple = (None,) * len(ins)
    if used:
        found = autograd.grad([o for o, _ in used], ins, [g for _, g in used], retain_graph=True,
                              create_graph=create_graph, allow_unused=True)
    res = []
    for i, (x, g) in enumerate(zip(ins, found, strict=True)):
        if g is None:
            if strict:
                raise RuntimeError(f"The output of the user-provided function is independent of "
                                   f"input {i}. This is not allowed in strict mode.")
            g = constant(np.zeros_like(x._value))
        res.append(g if create_graph else g.detach())
    return tuple(res)


def _vectors(v: Any, like: tuple[Tensor, ...], what: str, name: str) -> tuple[Tensor, ...]:
    """``v`` matched against ``like`` (the outputs or the inputs): one Tensor per entry, same shapes;
    None only where ``like`` is one single-element Tensor (then 1)."""
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError(f"{name}: the vector v can only be None if the {what} is a single "
                               "Tensor with a single element.")
        return (constant(np.ones(like[0].shape, like[0].dtype)),)
    _, vs = _tuple(v, "v", name)
    if len(vs) != len(like):
        raise RuntimeError(f"{name}: v has {len(vs)} entries and the {what} {len(like)}; they must match")
    for i, (a, b) in enumerate(zip(vs, like, strict=True)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"{name}: entry {i} of v has shape {tuple(a.shape)} where the {what} "
                               f"has shape {tuple(b.shape)}; they must match")
    return vs


def _out(is_tuple: bool, xs: tuple) -> Any:
    return xs if is_tuple else xs[0]


def _detach(xs: tuple, create_graph: bool) -> tuple:
    return xs if create_graph else tuple(x.detach() for x in xs)


def vjp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``."""
    in_tuple, xs = _prepare(inputs, create_graph, "vjp")
    out_tuple, outs = _outputs(func, xs, "vjp")
    vs = _vectors(v, outs, "output", "vjp")
    g = _grads(outs, xs, vs, create_graph, strict, "vjp")
    return _out(out_tuple, _detach(outs, create_graph)), _out(in_tuple, g)


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), J v)``: through two reverse passes (the vjp is linear in its vector,
    so the gradient of ``u -> vjp(u) . v`` in ``u`` is ``J v``), as torch computes it."""
    in_tuple, xs = _prepare(inputs, create_graph, "jvp")
    vs = _vectors(v, xs, "input", "jvp")
    out_tuple, outs = _outputs(func, xs, "jvp")
    us = tuple(constant(np.zeros_like(o._value)).requires_grad_(True) for o in outs)
    with enable_grad():
        g = _grads(outs, xs, us, True, strict, "jvp")
    res = _grads(g, us, vs, create_graph, False, "jvp")
    if strict and create_graph is False and any(not o.requires_grad for o in outs):
        raise RuntimeError("jvp: an output of the user-provided function is independent of the "
                           "inputs. This is not allowed in strict mode.")
    return _out(out_tuple, _detach(outs, create_graph)), _out(out_tuple, res)


def _jacobian_rows(outs: tuple, xs: tuple, create_graph: bool, strict: bool, name: str) -> list:
    """For each output, one Jacobian per input, shaped ``out.shape + in.shape``."""
    table = []
    for o in outs:
        n = o.numel()
        rows: list[list] = [[] for _ in xs]
        for k in range(n):
            seed = np.zeros(n, o.dtype)
            seed[k] = 1
            g = _grads((o,), xs, (constant(seed.reshape(o.shape)),), create_graph, strict, name)
            for j, gj in enumerate(g):
                rows[j].append(gj)
        table.append(tuple(
            (stack(r) if create_graph else constant(np.stack([t._value for t in r])))
            .reshape(tuple(o.shape) + tuple(x.shape)) if n else
            constant(np.zeros(tuple(o.shape) + tuple(x.shape), x.dtype))
            for r, x in zip(rows, xs, strict=True)))
    return table


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode") -> Any:
    """The Jacobian of ``func`` at ``inputs``: a Tensor ``out.shape + in.shape`` for one output
    and one input; a tuple over inputs, over outputs, or a tuple of tuples (outputs, inputs)."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError("torch.autograd.functional.jacobian: `strategy=\"forward-mode\"` "
                                  "is only implemented for `vectorize=True`.")
    in_tuple, xs = _prepare(inputs, create_graph, "jacobian")
    out_tuple, outs = _outputs(func, xs, "jacobian")
    table = _jacobian_rows(outs, xs, create_graph, strict, "jacobian")
    return _out(out_tuple, tuple(_out(in_tuple, row) for row in table))


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode") -> Any:
    """The Hessian of a scalar ``func`` at ``inputs``: ``in.shape + in.shape``, or a tuple of
    tuples ``H[i][j]`` of shape ``in_i.shape + in_j.shape``."""
    in_tuple, xs = _prepare(inputs, create_graph, "hessian")

    def gradient(*ys: Tensor) -> tuple[Tensor, ...]:
        _, outs = _outputs(func, ys, "hessian")
        _scalar(outs, "hessian")
        return _grads(outs, ys, (None,), True, strict, "hessian")

    with enable_grad():
        grads = gradient(*xs)
    table = _jacobian_rows(grads, xs, create_graph, strict, "hessian")
    return _out(in_tuple, tuple(_out(in_tuple, row) for row in table))


def _scalar(outs: tuple, name: str) -> None:
    if len(outs) != 1:
        raise RuntimeError(f"The function given to {name} should return a single Tensor")
    if outs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {name} should contain "
                           "a single element")


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T H)`` for a scalar ``func``."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), H v)`` for a scalar ``func`` (H is symmetric: the same as vhp)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func: Callable, inputs: Any, v: Any, create_graph: bool, strict: bool,
                     name: str) -> tuple[Any, Any]:
    in_tuple, xs = _prepare(inputs, create_graph, name)
    vs = _vectors(v, xs, "input", name)
    _, outs = _outputs(func, xs, name)
    _scalar(outs, name)
    with enable_grad():
        g = _grads(outs, xs, (None,), True, strict, name)
    res = _grads(g, xs, vs, create_graph, strict, name)
    return _detach(outs, create_graph)[0], _out(in_tuple, res)
