"""Functional transforms with HIPS autograd's names and signatures (and JAX's ``argnums=``).

They take and return plain NumPy arrays, and lists, tuples and dicts of them.  Inside, each
transform wraps its arguments as fresh graph nodes, runs the function, and runs the backward pass
of ``core.py``.  Nesting is safe: an inner transform differentiates with respect to its *own* fresh
nodes (which are connected to an outer transform's through an identity op), so it never confuses
its variable with an outer one, and while any transform is running, inner ones record their
backward pass so the outer one can differentiate through it.

Forward mode (``jvp``, ``linearize``, ``jacfwd``, ``make_jvp``, ``hessian``, ``hvp``) records the
function the same way and then pushes tangents through the recording with the primitives' JVP
rules (``forward.py``); it nests with reverse mode and with itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.core import match_dtype, run_backward
from rlgrad.forward import graph_between, push_tangents
from rlgrad.ops import identity, reshape, stack, stop_gradient
from rlgrad.tensor import Tensor, _Depth, _next_seq, _Trace, constant
from rlgrad.tracer import VMAP_LEVELS, _GradMode

__all__ = [
    "grad", "value_and_grad", "elementwise_grad", "jacobian", "hessian", "make_vjp", "vjp",
    "hessian_tensor_product", "hvp", "make_hvp", "grad_and_aux", "tensor_jacobian_product",
    "vector_jacobian_product", "make_jvp", "jvp", "linearize", "jacfwd", "jacrev",
    "tree_flatten", "tree_unflatten", "register_pytree_node", "register_dataclass",
]


# ---- pytrees: lists, tuples and dicts of arrays ----------------------------------------------
def dict_keys(tree: dict) -> list[Any]:
    """The order of a dict's leaves in a pytree: sorted names (as JAX), else insertion order."""
    return sorted(tree) if all(type(k) is str for k in tree) else list(tree)


#: classes registered as pytree nodes: ``{cls: (flatten, unflatten)}`` with JAX's signatures,
#: ``flatten(x) -> (children, aux)`` and ``unflatten(aux, children) -> x``
PYTREE_NODES: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(nodetype: type, flatten_func: Callable, unflatten_func: Callable) -> None:
    """JAX's: instances of ``nodetype`` are pytree nodes whose children are
    ``flatten_func(x)[0]``; ``aux`` (``flatten_func(x)[1]``, hashable) is kept with the structure."""
    PYTREE_NODES[nodetype] = (flatten_func, unflatten_func)


def register_dataclass(cls: type) -> type:
    """JAX's ``register_dataclass`` for a dataclass all of whose fields are children (usable as
    a decorator): its instances are pytree nodes, rebuilt with the same field values."""
    names = [f.name for f in dataclasses.fields(cls)]
    register_pytree_node(cls, lambda x: ([getattr(x, n) for n in names], None),
                         lambda _aux, children: cls(**dict(zip(names, children))))
    return cls


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves of a nest of lists, tuples (namedtuples too), dicts and registered nodes, and a
    description to rebuild it."""
    node = PYTREE_NODES.get(type(tree))
    if node is not None:
        children, aux = node[0](tree)
        sub, d = tree_flatten(list(children))
        return sub, ("node", (type(tree), aux), [d])
    if isinstance(tree, dict):
        keys = dict_keys(tree)
        leaves: list[Any] = []
        defs = []
        for k in keys:
            sub, d = tree_flatten(tree[k])
            leaves.extend(sub)
            defs.append(d)
        return leaves, ("dict", keys, defs)
    if isinstance(tree, list | tuple):
        leaves = []
        defs = []
        for item in tree:
            if isinstance(item, dict | list | tuple) or type(item) in PYTREE_NODES:
                sub, d = tree_flatten(item)
                leaves.extend(sub)
                defs.append(d)
            else:  # a leaf (the usual list of parameter arrays): no recursive call
                leaves.append(item)
                defs.append(None)
        return leaves, (type(tree), None, defs)
    return [tree], None


def tree_unflatten(treedef: Any, leaves: list[Any]) -> Any:
    return _build(treedef, iter(leaves))


def _build(d: Any, it: Any) -> Any:
    """A module-level recursion, not a closure calling itself: that closure was a reference
    cycle holding the leaves (a transform's gradients) until the next garbage collection."""
    if d is None:
        return next(it)
    kind, keys, defs = d
    if kind == "dict":
        return {k: _build(sd, it) for k, sd in zip(keys, defs)}
    if kind == "node":
        return PYTREE_NODES[keys[0]][1](keys[1], _build(defs[0], it))
    items = [next(it) if sd is None else _build(sd, it) for sd in defs]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)  # (a namedtuple)


# ---- the core: trace fun with fresh nodes for the chosen arguments ---------------------------
def _fresh(x: Any, where: str) -> Tensor:
    if isinstance(x, Tensor):
        if x.requires_grad and _GradMode.enabled:
            return identity(x)  # connected to the outer graph, distinct from the outer variable
        if _Trace.tape is not None and x._value.dtype.kind in "fc":
            t = stop_gradient(x)  # a new leaf, but one rlgrad.jit can trace back to its input
            t.requires_grad = True
            return t
        x = x._value
    arr = np.asarray(x)
    if arr.dtype.kind not in "fc":
        raise TypeError(
            f"{where}: can only differentiate with respect to floating-point values, got "
            f"{arr.dtype} (value {x!r:.60}). Integer values such as indices and actions are "
            "never differentiable (the gradient flows to the gathered values only); for a "
            "number, pass a float, e.g. 3.0 instead of 3"
        )
    t = constant(arr)
    t.requires_grad = True
    return t


def _nested(leaves: list[Any]) -> bool:
    """Record the backward pass when an enclosing transform or graph may differentiate it."""
    return _Depth.value > 0 or any(isinstance(x, Tensor) and x.requires_grad for x in leaves)


def _argnums(argnum: Any, argnums: Any) -> Any:
    return argnum if argnums is None else argnums


def _trace(fun: Callable, args: tuple, kwargs: dict, argnum: Any, where: str) -> tuple:
    """Run ``fun`` with the chosen arguments replaced by fresh nodes.

    Returns (output, fresh leaves, treedef, unpack) where unpack maps per-leaf gradients back to the
    argument structure (a tuple when ``argnum`` is a tuple).
    """
    if VMAP_LEVELS and not getattr(fun, "_vmap_physical", False):
        raise TypeError(f"rlgrad.{where} inside vmap is not batched: use grad, value_and_grad, "
                        "vjp, jvp, jacrev, jacfwd or hessian (rlgrad's or rlgrad.func's)")
    nums = argnum if isinstance(argnum, tuple | list) else (argnum,)
    for n in nums:
        if not -len(args) <= n < len(args):
            raise IndexError(f"{where}: argnum {n} is out of range for {len(args)} positional arguments")
    args = list(args)
    structure = []
    all_fresh: list[Tensor] = []
    nested = False
    numpy_code = 1  # the function is given arrays, no Tensor: its operators keep NumPy's rules
    for n in nums:
        leaves, treedef = tree_flatten(args[n])
        nested = nested or _nested(leaves)
        if any(isinstance(x, Tensor) for x in leaves):
            numpy_code = 0
        fresh = [_fresh(x, where) for x in leaves]
        args[n] = tree_unflatten(treedef, fresh)
        structure.append((len(fresh), treedef))
        all_fresh.extend(fresh)
    nested = nested or _Depth.value > 0
    _Depth.value += 1
    _Depth.numpy += numpy_code
    prev = _GradMode.enabled
    _GradMode.enabled = True
    try:
        out = fun(*args, **kwargs)
    finally:
        _GradMode.enabled = prev
        _Depth.value -= 1
        _Depth.numpy -= numpy_code

    def unpack(grads: list[Any]) -> Any:
        parts = []
        pos = 0
        for count, treedef in structure:
            parts.append(tree_unflatten(treedef, grads[pos:pos + count]))
            pos += count
        return tuple(parts) if isinstance(argnum, tuple | list) else parts[0]

    return out, all_fresh, nested, unpack


def _unbox(x: Any, nested: bool) -> Any:
    """A plain array for the caller, unless it belongs to an enclosing graph (``nested``)."""
    if isinstance(x, Tensor):
        if _Trace.tape is not None:  # rlgrad.jit is tracing: every value stays a traced Tensor
            if _Trace.compiling and _Depth.value == 1:  # directly under jit: eagerly an array
                _Trace.eager_arrays.add(id(x))
            return x
        return x if nested and x.requires_grad else x._value
    if isinstance(x, dict | list | tuple):
        leaves, d = tree_flatten(x)
        return tree_unflatten(d, [_unbox(v, nested) for v in leaves])
    return x


def _backprop(out: Any, fresh: list[Tensor], cotangent: Any, nested: bool, retain: bool) -> list[Any]:
    """Gradients of ``out`` (seeded by ``cotangent``) w.r.t. each fresh leaf; zeros if unused.

    ``out`` may be a pytree (lists, tuples, dicts of arrays): ``cotangent`` then has its structure.
    """
    outs, odef = tree_flatten(out)
    cts = [cotangent] if odef is None else tree_flatten(cotangent)[0]
    if len(cts) != len(outs):
        raise ValueError(f"the cotangent has {len(cts)} arrays but the output has {len(outs)}; "
                         "it must have the output's structure")
    roots, seeds = [], []
    for o, c in zip(outs, cts):
        if isinstance(c, Tensor) and not nested:
            c = c._value
        if np.shape(c) != np.shape(_data(o)):
            raise ValueError(f"the cotangent has shape {np.shape(c)} but the output has shape "
                             f"{np.shape(_data(o))}")
        if isinstance(o, Tensor) and o.requires_grad:
            roots.append(o)
            seeds.append(c if isinstance(c, Tensor) else np.asarray(c, dtype=o._value.dtype))
    if not roots:
        return [np.zeros_like(x._value) for x in fresh]
    # Not nested, the graph holds no other differentiable leaves worth pruning for: skip the
    # pre-pass that finds the part reaching the inputs (unwanted leaves are skipped anyway).
    found = run_backward(roots, seeds, retain_graph=retain or nested, create_graph=nested, inputs=fresh,
                         prune=nested)
    result = []
    for x in fresh:
        g = found.get(id(x))
        if g is None:
            g = np.zeros_like(x._value)
        elif g.dtype != x._value.dtype:
            g = match_dtype(g, x)
        result.append(_unbox(g, nested))
    return result


def _scalar_output(out: Any, where: str) -> Any:
    size = out._value.size if isinstance(out, Tensor) else np.size(out)
    if size != 1:
        raise TypeError(
            f"{where} only applies to functions with a scalar output, this one returned shape "
            f"{np.shape(out._value if isinstance(out, Tensor) else out)}; use elementwise_grad, "
            "jacobian or vjp for non-scalar outputs"
        )
    return out


#: rlgrad.func's transforms by name ("grad_and_value", "vjp", "jvp", "jacrev", "jacfwd"), set
#: when rlgrad.func is imported (it imports this module): what these run inside vmap, where the
#: function sees batched tensors
BATCHED: dict[str, Callable] = {}


def _tuple(argnums: Any) -> Any:
    return tuple(argnums) if isinstance(argnums, list) else argnums


def _in_vmap(fun: Callable) -> bool:
    """Called inside vmap on the user's function (not on rlgrad.func's physical one)."""
    return bool(VMAP_LEVELS) and not getattr(fun, "_vmap_physical", False)


# ---- the transforms ---------------------------------------------------------------------------
def value_and_grad(fun: Callable, argnum: Any = 0, *, argnums: Any = None,
                   has_aux: bool = False) -> Callable:
    """``f(*args) -> (fun(*args), d fun / d args[argnum])``; with ``has_aux`` (JAX's), ``fun``
    returns ``(value, aux)`` and ``f`` returns ``((value, aux), gradient of value)``."""
    argnum = _argnums(argnum, argnums)

    def value_and_grad_fun(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if _in_vmap(fun):  # inside vmap: batched
            g, value = BATCHED["grad_and_value"](fun, _tuple(argnum), has_aux)(*args, **kwargs)
            return value, g
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "value_and_grad")
        aux = None
        if has_aux:
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError("value_and_grad(has_aux=True) needs a function returning a pair "
                                f"(value, aux), got {type(out).__name__}")
            out, aux = out
        _scalar_output(out, "value_and_grad")
        grads = _backprop(out, fresh, np.ones(np.shape(_data(out))), nested, retain=False)
        value = _unbox(out, nested)
        return ((value, _unbox(aux, nested)) if has_aux else value), unpack(grads)

    return value_and_grad_fun


def grad(fun: Callable, argnum: Any = 0, *, argnums: Any = None, has_aux: bool = False) -> Callable:
    """The gradient of scalar-valued ``fun`` w.r.t. argument ``argnum`` (an int or a tuple)."""
    if has_aux:
        inner = grad_and_aux(fun, argnum, argnums=argnums)
        return inner
    vg = value_and_grad(fun, argnum, argnums=argnums)

    def grad_fun(*args: Any, **kwargs: Any) -> Any:
        return vg(*args, **kwargs)[1]

    grad_fun.__name__ = f"grad_{getattr(fun, '__name__', 'fun')}"
    return grad_fun


def grad_and_aux(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """For ``fun`` returning ``(value, aux)``: ``f(*args) -> (gradient of value, aux)``."""
    argnum = _argnums(argnum, argnums)

    def grad_and_aux_fun(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if _in_vmap(fun):  # inside vmap: batched
            g, (_, aux) = BATCHED["grad_and_value"](fun, _tuple(argnum), True)(*args, **kwargs)
            return g, aux
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "grad_and_aux")
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError("grad_and_aux needs a function returning a pair (value, aux)")
        value, aux = out
        _scalar_output(value, "grad_and_aux")
        grads = _backprop(value, fresh, np.ones(np.shape(_data(value))), nested, retain=False)
        return unpack(grads), _unbox(aux, nested)

    return grad_and_aux_fun


def _data(x: Any) -> Any:
    return x._value if isinstance(x, Tensor) else x


def elementwise_grad(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """The sum over outputs of their gradients: the derivative of each element for elementwise fun."""
    argnum = _argnums(argnum, argnums)

    def elementwise_grad_fun(*args: Any, **kwargs: Any) -> Any:
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "elementwise_grad")
        return unpack(_backprop(out, fresh, np.ones(np.shape(_data(out))), nested, retain=False))

    return elementwise_grad_fun


def make_vjp(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """HIPS autograd: ``make_vjp(fun)(*args) -> (vjp, ans)`` with ``vjp(g)`` the VJP at args."""
    argnum = _argnums(argnum, argnums)

    def vjp_maker(*args: Any, **kwargs: Any) -> tuple[Callable, Any]:
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "make_vjp")

        def vjp_fn(g: Any) -> Any:
            return unpack(_backprop(out, fresh, g, nested, retain=True))

        return vjp_fn, _unbox(out, nested)

    return vjp_maker


def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """JAX: ``vjp(fun, *primals) -> (out, vjp_fn)``; ``vjp_fn(ct)`` returns one cotangent per primal."""
    if _in_vmap(fun):
        return BATCHED["vjp"](fun, *primals, has_aux=has_aux)
    out, fresh, nested, unpack = _trace(fun, primals, {}, tuple(range(len(primals))), "vjp")
    aux = None
    if has_aux:
        out, aux = out

    def vjp_fn(ct: Any) -> tuple:
        return unpack(_backprop(out, fresh, _data(ct) if not nested else ct, nested, retain=True))

    if has_aux:
        return _unbox(out, nested), vjp_fn, _unbox(aux, nested)
    return _unbox(out, nested), vjp_fn


# ---- Jacobians and forward mode ---------------------------------------------------------------
def _one_hot(k: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    e = np.zeros(math.prod(shape), dtype=dtype)
    e[k] = 1
    return e.reshape(shape)


def _assemble(parts: list[Any], out_shape: tuple, in_shape: tuple, dtype: Any, axis: int) -> Any:
    """One Jacobian block of shape ``out_shape + in_shape`` from its columns (forward mode,
    ``axis=-1``: one tangent of the output per input element) or rows (reverse mode, ``axis=0``:
    one gradient per output element)."""
    if not parts:
        return np.zeros(out_shape + in_shape, dtype=dtype)
    return reshape(stack(parts, axis=axis), out_shape + in_shape)


class _Linearized:
    """``fun`` recorded once at its arguments (``_trace``'s fresh leaves); called with one tangent
    per fresh leaf (None: zero), it pushes them through the recording (``forward.py``) and
    returns one tangent per output leaf."""

    def __init__(self, out: Any, fresh: list[Tensor], nested: bool, floor: int, where: str) -> None:
        self.outs, self.odef = tree_flatten(out)
        self.fresh = fresh
        self.nested = nested
        self.where = where
        self.nodes = graph_between(self.outs, floor)

    def __call__(self, tangents: list[Any]) -> list[Any]:
        if len(tangents) != len(self.fresh):
            raise ValueError(f"{self.where}: {len(tangents)} tangent arrays for {len(self.fresh)} "
                             "primal arrays; the tangents must have the primals' structure")
        # a tangent that requires grad (reverse over forward in the torch style) is kept in the graph
        keep = self.nested or any(isinstance(v, Tensor) and v.requires_grad for v in tangents)
        recorded = keep or _Trace.tape is not None
        seeds: dict[int, Any] = {}
        for x, v in zip(self.fresh, tangents):
            if v is not None:
                seeds[id(x)] = self._seed(x, v, recorded)
        push_tangents(self.nodes, seeds, recorded)
        result = []
        for o in self.outs:
            t = seeds.get(id(o)) if isinstance(o, Tensor) else None
            if t is None:  # no path from a tangent to this output
                t = np.zeros_like(np.asarray(_data(o)))
            elif isinstance(o, Tensor) and t.dtype != o._value.dtype:
                t = match_dtype(t, o)
            result.append(_unbox(t, keep))
        return result

    def _seed(self, x: Tensor, v: Any, recorded: bool) -> Any:
        shape = np.shape(_data(v))
        if shape != x._value.shape:
            raise ValueError(f"{self.where}: a tangent has shape {shape} but its primal has shape "
                             f"{x._value.shape}; each tangent must have its primal's shape")
        if isinstance(v, Tensor):
            v = match_dtype(v, x)
            return v if recorded else v._value
        v = np.asarray(v, dtype=x._value.dtype)
        return constant(v) if recorded else v


def _linearize(fun: Callable, args: tuple, kwargs: dict, argnum: Any, where: str,
               has_aux: bool = False) -> tuple[_Linearized, Callable, Any, Any]:
    """Record ``fun`` at ``args`` for forward mode: (linearized, unpack, out, aux)."""
    floor = _next_seq()  # every node the fresh leaves can reach is numbered after this
    out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, where)
    aux = None
    if has_aux:
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"{where}(has_aux=True) needs a function returning a pair (output, aux)")
        out, aux = out
    return _Linearized(out, fresh, nested, floor, where), unpack, out, aux


def _tangent_leaves(primals: Sequence[Any], tangents: Sequence[Any], where: str) -> list[Any]:
    if len(primals) != len(tangents):
        raise ValueError(f"{where}: {len(primals)} primals but {len(tangents)} tangents; give one "
                         "tangent per primal, with its structure and shapes")
    leaves: list[Any] = []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        pl, pdef = tree_flatten(p)
        tl, tdef = tree_flatten(t)
        if pdef != tdef or len(pl) != len(tl):
            raise ValueError(f"{where}: tangent {i} does not have the structure of primal {i} "
                             f"({len(tl)} arrays in {type(t).__name__} vs {len(pl)} in "
                             f"{type(p).__name__}); each tangent must match its primal")
        leaves.extend(tl)
    return leaves


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any],
        has_aux: bool = False) -> tuple:
    """JAX: ``jvp(fun, primals, tangents) -> (fun(*primals), J @ tangents)`` in forward mode.

    ``primals`` and ``tangents`` are tuples (or lists) with one entry per argument of ``fun``,
    each an array or a pytree of arrays; a tangent has its primal's structure and shapes. The
    output's tangent has the output's structure. ``has_aux``: ``fun`` returns ``(out, aux)``
    and the result is ``(out, out_tangent, aux)``."""
    if _in_vmap(fun):
        return BATCHED["jvp"](fun, tuple(primals), tuple(tangents), has_aux=has_aux)
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise TypeError(
            "jvp: primals and tangents must be tuples or lists with one entry per argument of "
            f"fun, e.g. jvp(f, (x,), (v,)); got {type(primals).__name__} and "
            f"{type(tangents).__name__}")
    leaves = _tangent_leaves(primals, tangents, "jvp")
    lin, _, out, aux = _linearize(fun, tuple(primals), {}, tuple(range(len(primals))), "jvp", has_aux)
    t_out = tree_unflatten(lin.odef, lin(leaves))
    if has_aux:
        return _unbox(out, lin.nested), t_out, _unbox(aux, lin.nested)
    return _unbox(out, lin.nested), t_out


def linearize(fun: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """JAX: ``linearize(fun, *primals) -> (fun(*primals), f_jvp)``, ``f_jvp(*tangents)`` the JVP
    at ``primals``. ``fun`` runs once; each call of ``f_jvp`` is one forward sweep over what it
    recorded (which ``f_jvp`` keeps alive). ``has_aux``: ``(out, f_jvp, aux)``."""
    lin, _, out, aux = _linearize(fun, primals, {}, tuple(range(len(primals))), "linearize", has_aux)

    def f_jvp(*tangents: Any) -> Any:
        return tree_unflatten(lin.odef, lin(_tangent_leaves(primals, tangents, "linearize")))

    if has_aux:
        return _unbox(out, lin.nested), f_jvp, _unbox(aux, lin.nested)
    return _unbox(out, lin.nested), f_jvp


def make_jvp(fun: Callable, argnum: Any = 0) -> Callable:
    """HIPS autograd: ``make_jvp(fun)(*args)(v) -> (fun(*args), J @ v)`` in forward mode. ``v``
    has the structure of ``args[argnum]`` (an array, or a list/tuple/dict of them)."""

    def jvp_maker(*args: Any, **kwargs: Any) -> Callable:
        def jvp_fn(v: Any) -> tuple[Any, Any]:
            lin, _, out, _ = _linearize(fun, args, kwargs, argnum, "make_jvp")
            t = tree_unflatten(lin.odef, lin(tree_flatten(v)[0]))
            return _unbox(out, lin.nested), t

        return jvp_fn

    return jvp_maker


def jacfwd(fun: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """JAX: the Jacobian by forward mode: ``fun`` runs once, then one forward sweep per input
    element (the cheaper way when there are fewer inputs than outputs). ``argnums``: an int or
    a tuple; inputs and outputs may be pytrees. The result has the output's structure, each leaf
    holding the argument's structure (a tuple over ``argnums`` if it is one) of blocks of shape
    ``out.shape + in.shape``."""

    def jacfwd_fun(*args: Any, **kwargs: Any) -> Any:
        if _in_vmap(fun):
            return BATCHED["jacfwd"](fun, _tuple(argnums), has_aux)(*args, **kwargs)
        lin, unpack, _, aux = _linearize(fun, args, kwargs, argnums, "jacfwd", has_aux)
        n_in = len(lin.fresh)
        blocks: list[list[Any]] = [[None] * n_in for _ in lin.outs]
        for j, x in enumerate(lin.fresh):
            cols: list[list[Any]] = [[] for _ in lin.outs]
            for k in range(x._value.size):
                seeds: list[Any] = [None] * n_in
                seeds[j] = _one_hot(k, x._value.shape, x._value.dtype)
                for o, t in enumerate(lin(seeds)):
                    cols[o].append(t)
            for o, out in enumerate(lin.outs):
                od = np.asarray(_data(out))
                blocks[o][j] = _assemble(cols[o], od.shape, x._value.shape, od.dtype, axis=-1)
        jac = tree_unflatten(lin.odef, [unpack(row) for row in blocks])
        return (jac, _unbox(aux, lin.nested)) if has_aux else jac

    return jacfwd_fun


def jacrev(fun: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """JAX: the Jacobian by reverse mode: ``fun`` runs once, then one backward pass per output
    element (the cheaper way when there are fewer outputs than inputs). Same arguments and
    result structure as ``jacfwd``."""

    def jacrev_fun(*args: Any, **kwargs: Any) -> Any:
        if _in_vmap(fun):
            return BATCHED["jacrev"](fun, _tuple(argnums), has_aux=has_aux)(*args, **kwargs)
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnums, "jacrev")
        aux = None
        if has_aux:
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError("jacrev(has_aux=True) needs a function returning a pair (output, aux)")
            out, aux = out
        outs, odef = tree_flatten(out)
        per_out = []
        for o in outs:
            od = np.asarray(_data(o))
            rows: list[list[Any]] = [[] for _ in fresh]
            for k in range(od.size):
                grads = _backprop(o, fresh, _one_hot(k, od.shape, od.dtype), nested, retain=True)
                for j, g in enumerate(grads):
                    rows[j].append(g)
            per_out.append(unpack([_assemble(r, od.shape, x._value.shape, x._value.dtype, axis=0)
                                   for r, x in zip(rows, fresh)]))
        jac = tree_unflatten(odef, per_out)
        return (jac, _unbox(aux, nested)) if has_aux else jac

    return jacrev_fun


def jacobian(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """HIPS autograd: the Jacobian, of shape ``out.shape + in.shape``, by reverse mode (one
    backward pass per output element): ``jacrev``. ``argnum`` may be a tuple, inputs and outputs
    pytrees (``jacrev``'s structure); ``jacfwd`` is the forward-mode one."""
    return jacrev(fun, _argnums(argnum, argnums))


def hessian(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """The matrix (tensor) of second derivatives, ``jacfwd(jacrev(fun))`` as JAX's: forward mode
    over the recorded gradient, one sweep per input element."""
    a = _argnums(argnum, argnums)
    return jacfwd(jacrev(fun, a), a)


def make_hvp(fun: Callable, argnum: int = 0) -> Callable:
    """HIPS autograd: ``make_hvp(fun)(*args) -> (hvp, grad)`` where ``hvp(v)`` is H @ v at args
    and ``grad`` the gradient of ``fun`` there. The gradient is recorded once; each ``hvp(v)`` is
    a forward sweep over it (forward over reverse)."""

    def hvp_maker(*args: Any, **kwargs: Any) -> tuple[Callable, Any]:
        lin, _, g, _ = _linearize(grad(fun, argnum), args, kwargs, argnum, "make_hvp")

        def hvp_fn(v: Any) -> Any:
            return tree_unflatten(lin.odef, lin(tree_flatten(v)[0]))

        return hvp_fn, _unbox(g, lin.nested)

    return hvp_maker


def hessian_tensor_product(fun: Callable, argnum: int = 0) -> Callable:
    """``f(*args, v) -> H(args) @ v`` without forming H: the JVP of ``grad(fun)`` along ``v``
    (forward over reverse, as JAX's ``jvp(grad(f), (x,), (v,))``)."""

    def hvp_fun(*args: Any, **kwargs: Any) -> Any:
        *fargs, v = args
        return make_hvp(fun, argnum)(*fargs, **kwargs)[0](v)

    return hvp_fun


hvp = hessian_tensor_product


def tensor_jacobian_product(fun: Callable, argnum: int = 0) -> Callable:
    """``f(*args, t) -> t . J`` (a VJP with the cotangent given last)."""

    def tjp(*args: Any, **kwargs: Any) -> Any:
        *fargs, t = args
        return make_vjp(fun, argnum)(*fargs, **kwargs)[0](t)

    return tjp


vector_jacobian_product = tensor_jacobian_product

