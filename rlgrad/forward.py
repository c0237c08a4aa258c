"""Forward mode: push tangents through a recorded graph, oldest node first, applying each
primitive's JVP rules (``defjvp`` beside its ``defvjp``).

The function is run once with its inputs as graph leaves, recorded exactly as reverse mode
records it; a Jacobian-vector product is then one sweep over the recorded nodes that lie between
those inputs and the outputs, in creation order (``_seq``: an argument is always older than the
tensors computed from it, so sorting by it is a topological order). One recording serves any
number of tangents (``linearize``, ``jacfwd``). Nothing here runs unless a forward-mode transform
asks for it: the recording and the backward pass are reverse mode's own, unchanged.

Two modes, as in the backward pass:
* fast: the rules receive plain arrays (the graph's values and the tangents);
* recorded (inside another transform, under ``rlgrad.jit``, or for a tangent that requires grad):
  the rules receive the graph's Tensors with recording on, so the tangents are themselves
  recorded and can be differentiated again, in either mode (forward-over-reverse is an HVP).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from rlgrad.core import edges
from rlgrad.ops import astype, broadcast_to
from rlgrad.tensor import Tensor
from rlgrad.tracer import Primitive, _GradMode, pass_through

_creation_order = operator.attrgetter("_seq")


def graph_between(outputs: Sequence[Any], floor: int) -> list[Tensor]:
    """The recorded tensors under ``outputs`` made at or after creation number ``floor`` (those
    older cannot depend on inputs made after it), oldest first."""
    stack = [o for o in outputs if isinstance(o, Tensor) and o._op is not None and o._seq >= floor]
    seen = {id(o) for o in stack}
    nodes = []
    while stack:
        t = stack.pop()
        nodes.append(t)
        if t._args is None:
            raise _freed_error(t)
        for a in edges(t):  # each the version t used (in-place ops rebase)
            if isinstance(a, Tensor) and a._op is not None and a._seq >= floor and id(a) not in seen:
                seen.add(id(a))
                stack.append(a)
    nodes.sort(key=_creation_order)
    return nodes


def push_tangents(nodes: list[Tensor], tangents: dict[int, Any], recorded: bool) -> None:
    """Give every node of ``nodes`` (oldest first) its tangent in ``tangents`` (keyed by ``id``,
    seeded with the inputs' tangents), from its arguments' tangents; a node none reaches gets
    none (a zero tangent)."""
    prev = _GradMode.enabled
    _GradMode.enabled = recorded
    try:
        for t in nodes:
            tan = _node_tangent(t, tangents, recorded)
            if tan is not None:
                tangents[id(t)] = tan
    finally:
        _GradMode.enabled = prev


def _node_tangent(t: Tensor, tangents: dict[int, Any], recorded: bool) -> Any:
    if t._args is None:
        raise _freed_error(t)
    args = edges(t)  # the versions t used; a rule reading a value written since refuses
    ts = [tangents.get(id(a)) if isinstance(a, Tensor) else None for a in args]
    if all(x is None for x in ts):
        return None
    p: Primitive = t._op
    ans, vals = (t, args) if recorded else (
        t._value, [a._value if isinstance(a, Tensor) else a for a in args])
    kw = t._kw or {}
    if p.jvp_linear:
        out = _linear_tangent(p, ts, vals, kw)
    else:
        out = _sum_of_rules(p, ts, ans, vals, kw)
        if out is None:
            return None
    if out.shape != t._value.shape:
        out = broadcast_to(out, t._value.shape)
    if out.dtype != t._value.dtype and t._value.dtype.kind in "fc":
        if out.dtype.kind == "c" and t._value.dtype.kind != "c":  # never the real part of a wrong number
            raise TypeError(
                f"forward mode: the tangent of {p.name}'s real output came through complex values, "
                "which rlgrad does not differentiate; keep the real and imaginary parts as two "
                "real tensors")
        out = astype(out, t._value.dtype)
    return out


def _sum_of_rules(p: Primitive, ts: list[Any], ans: Any, vals: Sequence[Any], kw: dict) -> Any:
    """The sum over arguments with a tangent of their rules' contributions (None: no
    contribution, as for an argument a None rule declares without derivative)."""
    if p.jvps is not None:
        rules: Sequence[Any] = p.jvps
    elif p.jvp_argnum is not None:
        rules = [partial(p.jvp_argnum, i) for i in range(len(ts))]
    else:
        raise NotImplementedError(
            f"forward mode: primitive {p.name!r} has no JVP rule; register one with "
            f"rlgrad.tracer.defjvp beside its defvjp, or use reverse mode (grad, vjp, jacrev)")
    out = None
    for ti, rule in zip(ts, rules):
        if ti is None or rule is None:
            continue
        r = ti if rule is pass_through else rule(ti, ans, *vals, **kw)
        if r is not None:
            out = r if out is None else out + r
    return out


def _linear_tangent(p: Primitive, ts: list[Any], vals: Sequence[Any], kw: dict) -> Any:
    """A primitive linear in the arguments at ``p.jvp_linear``: itself applied to their tangents
    (zeros for those without one)."""
    positions = range(len(vals)) if p.jvp_linear is True else p.jvp_linear
    new = list(vals)
    for i in positions:
        if i >= len(vals):
            continue
        if ts[i] is not None:
            new[i] = ts[i]
        elif vals[i] is not None:
            v = vals[i]._value if isinstance(vals[i], Tensor) else vals[i]
            # a Python number stays one (NumPy 2 would let a 0-d float64 array upcast float32)
            new[i] = np.zeros_like(v) if isinstance(v, np.ndarray | np.generic) else v * 0
    return p.call(*new, **kw)


def _freed_error(t: Tensor) -> RuntimeError:
    return RuntimeError(
        f"forward mode: the graph through {t._op.name} was freed by a backward pass without "
        "retain_graph=True inside the function, so its tangent cannot be computed; pass "
        "retain_graph=True there, or use rlgrad.grad/vjp inside the function")
