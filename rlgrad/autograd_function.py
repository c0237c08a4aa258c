"""``rlgrad.autograd.Function``: a custom gradient written PyTorch's way, on the engine's own nodes.

Each ``Function`` subclass gets one primitive (``tracer.primitive``). ``apply`` runs the user's
``forward`` with recording off and records ONE node of that primitive whose arguments are the
forward's differentiable outputs (no rule: their own history is not followed) and then the
call's arguments; the node's value is the output (several outputs: their flattened values end to
end, handed back as slices of the node). The node's VJP rule calls the user's ``backward``, once
per backward pass, so ``backward``, ``autograd.grad``, ``create_graph`` and ``rlgrad.jit`` treat
it as any other op: written with differentiable ops, ``backward`` can itself be differentiated.

The same node serves ``rlgrad.custom_vjp`` / ``custom_jvp`` (custom_derivatives.py): a ``_Ctx``
subclass says how the output's gradients become the arguments' (``_backward``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.ops import getitem, reshape
from rlgrad.tensor import Tensor, constant
from rlgrad.tracer import (
    Primitive,
    defbatch,
    defjvp_argnum,
    defjvp_is_linear,
    defvjp_argnum,
    is_grad_enabled,
    no_grad,
    nobatch,
    primitive,
)

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class _Ctx:
    """What a node of a custom-gradient primitive keeps between the forward and backward passes."""

    _n_out = 0  # number of differentiable outputs: the node's first arguments
    _shapes: list[tuple[int, ...]]
    _outputs: list[Any]  # weak references to the outputs as the caller got them (node or slices)
    _last = -1  # the last argument a rule is called for: the memo is dropped after it
    _name = "Function"

    def _backward(self, grads: list[Any], argv: tuple) -> tuple:
        """One gradient (or None) per argument from the outputs' gradients ``grads``."""
        raise NotImplementedError

    def _all_grads(self, grads: list[Any], materialize: bool = True) -> list[Any]:
        """One gradient per output of the forward (``grads`` holds the differentiable ones')."""
        return [grads[o] if isinstance(o, int) else _no_gradient(o, materialize)
                for o in self._layout]

    def _grads_for(self, g: Any, argv: tuple) -> list[Any]:
        """The arguments' gradients for the node's gradient ``g``, computed once for all the
        node's rules (the engine calls one rule per argument with the same ``g``)."""
        memo = getattr(self, "_memo", None)
        if memo is not None and memo[0] is g:  # a strong reference: ids cannot be reused
            return memo[1]
        cg = is_grad_enabled()  # the engine turns recording on exactly for create_graph
        gt = g if isinstance(g, Tensor) else constant(g)
        out = _fit(self, self._backward(_split(self, gt), argv[self._n_out:]), argv, cg)
        self._memo = (g, out)
        return out


def _split(ctx: _Ctx, g: Any) -> list[Any]:
    """The node's gradient cut back into one gradient per differentiable output."""
    if ctx._n_out == 1:
        return [g]
    out, off = [], 0
    for shape in ctx._shapes:
        n = int(np.prod(shape))
        out.append(reshape(getitem(g, slice(off, off + n)), shape))
        off += n
    return out


def _fit(ctx: _Ctx, grads: Any, argv: tuple, cg: bool) -> list[Any]:
    """Check ``backward``'s result against the arguments; arrays for a plain pass, Tensors for
    ``create_graph``."""
    args = argv[ctx._n_out:]
    if not isinstance(grads, tuple | list):
        grads = (grads,)
    grads = list(grads)
    if len(grads) < len(args) or any(r is not None for r in grads[len(args):]):
        raise RuntimeError(f"{ctx._name}.backward returned {len(grads)} gradients but forward had "
                           f"{len(args)} inputs: return one per input (None for a non-tensor one)")
    out: list[Any] = []
    for i, (a, r) in enumerate(zip(args, grads)):
        if r is None:
            out.append(None)
            continue
        if not isinstance(a, Tensor | np.ndarray):
            raise RuntimeError(f"{ctx._name}.backward returned a gradient for input {i}, which is "
                               f"a {type(a).__name__}, not a tensor: return None there")
        shape = np.shape(a)
        rs = np.shape(r._value if isinstance(r, Tensor) else r)
        if not _sums_to(rs, shape):
            raise RuntimeError(f"{ctx._name}.backward returned a gradient of shape {rs} for "
                               f"input {i} of shape {shape}: they must match")
        if cg:
            out.append(r if isinstance(r, Tensor) else constant(np.asarray(r)))
        else:
            out.append(np.asarray(r._value if isinstance(r, Tensor) else r))
    return out


def _sums_to(have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether a gradient of shape ``have`` sums down to ``want`` (undoing broadcasting)."""
    if len(have) < len(want):
        return False
    return all(w == h or w == 1 for w, h in zip(want[::-1], have[::-1]))


def _fwd(*vals: Any, ctx: _Ctx) -> Any:
    """The node's value from its first ``ctx._n_out`` arguments: the outputs, already computed
    (a compiled step recomputes them with the ops that made them, then calls this)."""
    if ctx._n_out == 1:
        return vals[0]
    return np.concatenate([np.ravel(v) for v in vals[:ctx._n_out]])


def _vjp(i: int, g: Any, ans: Any, *argv: Any, ctx: _Ctx) -> Any:
    k = i - ctx._n_out
    if k < 0:  # an output's own history is not followed: the custom rule replaces it
        return None
    out = ctx._grads_for(g, argv)[k]
    if i == ctx._last:
        ctx._memo = None  # the pass is done with this node: free what backward made
    return out


def _no_jvp(i: int, t: Any, ans: Any, *argv: Any, ctx: _Ctx) -> Any:
    if i < ctx._n_out:
        return None
    raise TypeError(f"forward mode (jvp, jacfwd, linearize) cannot go through {ctx._name}: it "
                    "defines only a reverse-mode rule; use reverse mode (grad, vjp, jacrev)")


def new_primitive(name: str, jvp: Callable = _no_jvp) -> Primitive:
    """A custom-gradient primitive: its VJP rule calls the node's ``ctx``."""
    call = primitive(_fwd, name)
    defvjp_argnum(call, _vjp)
    defjvp_argnum(call, jvp)
    nobatch(call, "a custom-gradient function (autograd.Function, custom_vjp/custom_jvp) has no "
                  "vmap rule in rlgrad; call it outside vmap, or write it with batched operations")
    return call


def connect(call: Callable, ctx: _Ctx, args: tuple, out: Any, nondiff: set[int]) -> Any:
    """Record the node of ``call`` for outputs ``out`` of arguments ``args``; what the caller
    gets. ``nondiff``: ids of outputs that carry no gradient (returned unchanged)."""
    outs = out if isinstance(out, tuple) else (out,)
    diff = [o for o in outs if isinstance(o, Tensor) and id(o) not in nondiff
            and o._value.dtype.kind in "fc"]
    if not diff:
        return out
    dtypes = {o._value.dtype for o in diff}
    if len(dtypes) > 1:
        raise TypeError(f"{ctx._name}: its differentiable outputs have dtypes "
                        f"{sorted(map(str, dtypes))}; give them one dtype (or mark the others "
                        "non-differentiable)")
    ctx._n_out = len(diff)
    ctx._shapes = [o.shape for o in diff]
    node = call(*diff, *args, ctx=ctx)
    if not isinstance(node, Tensor) or not node.requires_grad:
        return out  # nothing needed a gradient
    new = _split(ctx, node)
    ctx._outputs = [weakref.ref(o) for o in new]  # weak: the node holds ctx (no cycle)
    needing = [ctx._n_out + i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    ctx._last = needing[-1] if needing else -1
    ctx._index = {id(o): k for k, o in enumerate(diff)}
    ctx._layout = [ctx._index.get(id(o), o) for o in outs]  # k: the k-th gradient; else the output
    swap = dict(zip(map(id, diff), new))
    res = tuple(swap.get(id(o), o) for o in outs)
    return res if isinstance(out, tuple) else res[0]


# ---- PyTorch's API ---------------------------------------------------------------------------

class FunctionCtx(_Ctx):
    """The ``ctx`` of ``Function.forward``/``backward`` (torch's ``FunctionCtx``)."""

    def __init__(self, cls: type, args: tuple) -> None:
        self._cls = cls
        self._name = cls.__name__
        self._saved: tuple = ()
        self._nondiff: set[int] = set()
        self.materialize_grads = True
        on = is_grad_enabled()
        self.needs_input_grad = tuple(on and isinstance(a, Tensor) and a.requires_grad for a in args)

    def save_for_backward(self, *tensors: Any) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{self._name}: save_for_backward takes tensors (or None), got a "
                                f"{type(t).__name__}; keep other values as ctx attributes")
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple:
        """The saved tensors; an output saved in ``forward`` is, under ``create_graph``, the
        output the caller got (so a second derivative goes through it, as torch's does)."""
        index = getattr(self, "_index", {})
        if not is_grad_enabled() or not index:
            return self._saved
        return tuple(_output(self, index[id(t)], t) if id(t) in index else t for t in self._saved)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._nondiff.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted for torch's API. rlgrad always hands ``backward`` tensors (zeros for an
        output no gradient reached), which a backward written for either setting handles."""
        self.materialize_grads = bool(value)

    def _backward(self, grads: list[Any], argv: tuple) -> tuple:
        # every output has its place, as in torch
        return self._cls.backward(self, *self._all_grads(grads, self.materialize_grads))


def _no_gradient(out: Any, materialize: bool) -> Any:
    """What ``backward`` gets for an output that carries no gradient: zeros (None when the
    gradients are not materialized, or for a non-tensor output)."""
    if not materialize or not isinstance(out, Tensor):
        return None
    return constant(np.zeros_like(out._value))


def _output(ctx: _Ctx, k: int, saved: Tensor) -> Tensor:
    """Output ``k`` as the caller got it (in the graph), or the saved value if it is gone."""
    out = ctx._outputs[k]()
    return saved if out is None else out


class Function:
    """Subclass with ``forward``/``backward`` staticmethods and call ``.apply`` (torch's
    ``torch.autograd.Function``), in either style:

    * ``forward(ctx, *args)``, or ``forward(*args)`` with ``setup_context(ctx, inputs, output)``;
    * ``backward(ctx, *grad_outputs)`` returns one gradient per input of ``forward`` (None for a
      non-tensor one or one that needs none).

    ``forward`` runs with recording off; ``backward`` runs with it on exactly when the backward
    pass is recorded (``create_graph=True``, ``rlgrad.jit``), so one written with rlgrad ops can
    be differentiated again. Forward mode is not defined for it (one-line TypeError).
    """

    _prim: Callable | None = None

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define forward as a staticmethod")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> None:
        raise NotImplementedError  # replaced by subclasses that use this style

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define backward as a staticmethod "
                                  "to be differentiated")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply takes positional arguments only (as torch's), "
                            f"got {sorted(kwargs)}")
        if cls.__dict__.get("_prim") is None:  # one primitive per Function class
            cls._prim = new_primitive(cls.__name__)
        ctx = FunctionCtx(cls, args)
        with no_grad():
            if cls.setup_context is not Function.setup_context:
                out = cls.forward(*args)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args)
        if not any(ctx.needs_input_grad):
            return out
        return connect(cls._prim, ctx, args, out, ctx._nondiff)


# ---- once_differentiable ---------------------------------------------------------------------

def _refuse_twice(i: int, g: Any, ans: Any, *argv: Any, name: str) -> Any:
    if i == 0:  # the value itself (computed with recording off: reached only in tests)
        return g
    raise RuntimeError(f"{name}.backward is decorated with @once_differentiable, so its result "
                       "cannot be differentiated again; write backward with rlgrad ops and drop "
                       "the decorator for double backward")


def _first(v: Any, *sources: Any, name: str) -> Any:
    return v


_delayed_error = primitive(_first, "once_differentiable")
defbatch(_delayed_error, "first_value")
defvjp_argnum(_delayed_error, _refuse_twice)
defjvp_is_linear(_delayed_error, (0,))  # the value itself, whatever the sources


def once_differentiable(fn: Callable) -> Callable:
    """``backward`` runs with recording off; its results, when the backward pass is recorded,
    refuse a second derivative with one clear error (torch's ``once_differentiable``)."""

    def wrapper(ctx: FunctionCtx, *grads: Any) -> Any:
        recorded = is_grad_enabled()
        with no_grad():
            out = fn(ctx, *grads)
        if not recorded:
            return out
        sources = [t for t in (*grads, *ctx._saved) if isinstance(t, Tensor) and t.requires_grad]
        if not sources:
            return out
        name = ctx._name
        wrap = (lambda r: _delayed_error(r, *sources, name=name)  # noqa: E731
                if isinstance(r, Tensor) else r)
        return tuple(wrap(r) for r in out) if isinstance(out, tuple) else wrap(out)

    wrapper.__name__ = getattr(fn, "__name__", "backward")
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
