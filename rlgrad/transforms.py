"""Functional transforms with HIPS autograd's names and signatures (and JAX's ``argnums=``).

They take and return plain NumPy arrays, and lists, tuples and dicts of them.  Inside, each
transform wraps its arguments as fresh graph nodes, runs the function, and runs the backward pass
of ``core.py``.  Nesting is safe: an inner transform differentiates with respect to its *own* fresh
nodes (which are connected to an outer transform's through an identity op), so it never confuses
its variable with an outer one, and while any transform is running, inner ones record their
backward pass so the outer one can differentiate through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.core import match_dtype, run_backward
from rlgrad.ops import identity, multiply, reshape, stack, stop_gradient
from rlgrad.ops import sum as _sum
from rlgrad.tensor import Tensor, _Depth, _Trace, constant
from rlgrad.tracer import _GradMode

__all__ = [
    "grad", "value_and_grad", "elementwise_grad", "jacobian", "hessian", "make_vjp", "vjp",
    "hessian_tensor_product", "hvp", "make_hvp", "grad_and_aux", "tensor_jacobian_product",
    "vector_jacobian_product", "make_jvp", "jvp", "tree_flatten", "tree_unflatten",
]


# ---- pytrees: lists, tuples and dicts of arrays ----------------------------------------------
def dict_keys(tree: dict) -> list[Any]:
    """The order of a dict's leaves in a pytree: sorted names (as JAX), else insertion order."""
    return sorted(tree) if all(type(k) is str for k in tree) else list(tree)


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves of a nest of lists, tuples and dicts, and a description to rebuild it."""
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
            if isinstance(item, dict | list | tuple):
                sub, d = tree_flatten(item)
                leaves.extend(sub)
                defs.append(d)
            else:  # a leaf (the usual list of parameter arrays): no recursive call
                leaves.append(item)
                defs.append(None)
        return leaves, (type(tree), None, defs)
    return [tree], None


def tree_unflatten(treedef: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def build(d: Any) -> Any:
        if d is None:
            return next(it)
        kind, keys, defs = d
        if kind == "dict":
            return {k: build(sd) for k, sd in zip(keys, defs)}
        return kind([next(it) if sd is None else build(sd) for sd in defs])

    return build(treedef)


# ---- the core: trace fun with fresh nodes for the chosen arguments ---------------------------
def _fresh(x: Any, where: str) -> Tensor:
    if isinstance(x, Tensor):
        if x.requires_grad and _GradMode.enabled:
            return identity(x)  # connected to the outer graph, distinct from the outer variable
        if _Trace.tape is not None and x.data.dtype.kind in "fc":
            t = stop_gradient(x)  # a new leaf, but one rlgrad.jit can trace back to its input
            t.requires_grad = True
            return t
        x = x.data
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
    nums = argnum if isinstance(argnum, tuple | list) else (argnum,)
    for n in nums:
        if not -len(args) <= n < len(args):
            raise IndexError(f"{where}: argnum {n} is out of range for {len(args)} positional arguments")
    args = list(args)
    structure = []
    all_fresh: list[Tensor] = []
    nested = False
    for n in nums:
        leaves, treedef = tree_flatten(args[n])
        nested = nested or _nested(leaves)
        fresh = [_fresh(x, where) for x in leaves]
        args[n] = tree_unflatten(treedef, fresh)
        structure.append((len(fresh), treedef))
        all_fresh.extend(fresh)
    nested = nested or _Depth.value > 0
    _Depth.value += 1
    prev = _GradMode.enabled
    _GradMode.enabled = True
    try:
        out = fun(*args, **kwargs)
    finally:
        _GradMode.enabled = prev
        _Depth.value -= 1

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
            return x
        return x if nested and x.requires_grad else x.data
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
            c = c.data
        if np.shape(c) != np.shape(_data(o)):
            raise ValueError(f"the cotangent has shape {np.shape(c)} but the output has shape "
                             f"{np.shape(_data(o))}")
        if isinstance(o, Tensor) and o.requires_grad:
            roots.append(o)
            seeds.append(c if isinstance(c, Tensor) else np.asarray(c, dtype=o.data.dtype))
    if not roots:
        return [np.zeros_like(x.data) for x in fresh]
    # Not nested, the graph holds no other differentiable leaves worth pruning for: skip the
    # pre-pass that finds the part reaching the inputs (unwanted leaves are skipped anyway).
    found = run_backward(roots, seeds, retain_graph=retain or nested, create_graph=nested, inputs=fresh,
                         prune=nested)
    result = []
    for x in fresh:
        g = found.get(id(x))
        if g is None:
            g = np.zeros_like(x.data)
        elif g.dtype != x.data.dtype:
            g = match_dtype(g, x)
        result.append(_unbox(g, nested))
    return result


def _scalar_output(out: Any, where: str) -> Any:
    size = out.data.size if isinstance(out, Tensor) else np.size(out)
    if size != 1:
        raise TypeError(
            f"{where} only applies to functions with a scalar output, this one returned shape "
            f"{np.shape(out.data if isinstance(out, Tensor) else out)}; use elementwise_grad, "
            "jacobian or vjp for non-scalar outputs"
        )
    return out


# ---- the transforms ---------------------------------------------------------------------------
def value_and_grad(fun: Callable, argnum: Any = 0, *, argnums: Any = None) -> Callable:
    """``f(*args) -> (fun(*args), d fun / d args[argnum])``."""
    argnum = _argnums(argnum, argnums)

    def value_and_grad_fun(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "value_and_grad")
        _scalar_output(out, "value_and_grad")
        grads = _backprop(out, fresh, np.ones(np.shape(_data(out))), nested, retain=False)
        return _unbox(out, nested), unpack(grads)

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
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "grad_and_aux")
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError("grad_and_aux needs a function returning a pair (value, aux)")
        value, aux = out
        _scalar_output(value, "grad_and_aux")
        grads = _backprop(value, fresh, np.ones(np.shape(_data(value))), nested, retain=False)
        return unpack(grads), _unbox(aux, nested)

    return grad_and_aux_fun


def _data(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


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
    out, fresh, nested, unpack = _trace(fun, primals, {}, tuple(range(len(primals))), "vjp")
    aux = None
    if has_aux:
        out, aux = out

    def vjp_fn(ct: Any) -> tuple:
        return unpack(_backprop(out, fresh, _data(ct) if not nested else ct, nested, retain=True))

    if has_aux:
        return _unbox(out, nested), vjp_fn, _unbox(aux, nested)
    return _unbox(out, nested), vjp_fn


def jacobian(fun: Callable, argnum: int = 0, *, argnums: Any = None) -> Callable:
    """The Jacobian, of shape ``out.shape + in.shape`` (one VJP per output element)."""
    argnum = _argnums(argnum, argnums)
    if isinstance(argnum, tuple | list):
        raise NotImplementedError("jacobian takes a single argnum; call it once per argument")

    def jacobian_fun(*args: Any, **kwargs: Any) -> Any:
        out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "jacobian")
        if len(fresh) != 1:
            raise TypeError("jacobian needs a single array argument, not a list or dict")
        x = fresh[0]
        out_shape = np.shape(_data(out))
        n = int(np.prod(out_shape))
        rows = []
        for k in range(n):
            basis = np.zeros(n, dtype=_data(out).dtype if isinstance(out, Tensor) else x.data.dtype)
            basis[k] = 1
            rows.append(_backprop(out, fresh, basis.reshape(out_shape), nested, retain=True)[0])
        jac = stack(rows) if rows else np.zeros((0,) + x.shape, dtype=x.data.dtype)
        return _unbox(reshape(jac, out_shape + x.shape), nested)

    return jacobian_fun


def hessian(fun: Callable, argnum: int = 0, *, argnums: Any = None) -> Callable:
    """Matrix (tensor) of second derivatives: the Jacobian of the gradient."""
    return jacobian(jacobian(fun, argnum, argnums=argnums), argnum, argnums=argnums)


def make_hvp(fun: Callable, argnum: int = 0) -> Callable:
    """HIPS autograd: ``make_hvp(fun)(*args) -> (hvp, grad)`` where ``hvp(v)`` is H @ v at args
    and ``grad`` the gradient of ``fun`` there (what autograd returns: the VJP's ``ans``)."""

    def hvp_maker(*args: Any, **kwargs: Any) -> tuple[Callable, Any]:
        return make_vjp(grad(fun, argnum), argnum)(*args, **kwargs)

    return hvp_maker


def hessian_tensor_product(fun: Callable, argnum: int = 0) -> Callable:
    """``f(*args, v) -> H(args) @ v`` without forming H (the gradient of ``grad(fun) . v``)."""

    def vector_dot_grad(*args: Any, **kwargs: Any) -> Any:
        *fargs, v = args
        inner = grad(fun, argnum)

        def gdot(*a: Any) -> Any:
            gx = inner(*a, **kwargs)
            gl, _ = tree_flatten(gx)
            vl, _ = tree_flatten(v)
            total = 0
            for gi, vi in zip(gl, vl):
                total = total + _sum(multiply(gi, vi))
            return total

        return grad(gdot, argnum)(*fargs)

    return vector_dot_grad


hvp = hessian_tensor_product


def tensor_jacobian_product(fun: Callable, argnum: int = 0) -> Callable:
    """``f(*args, t) -> t . J`` (a VJP with the cotangent given last)."""

    def tjp(*args: Any, **kwargs: Any) -> Any:
        *fargs, t = args
        return make_vjp(fun, argnum)(*fargs, **kwargs)[0](t)

    return tjp


vector_jacobian_product = tensor_jacobian_product


def make_jvp(fun: Callable, argnum: int = 0) -> Callable:
    """HIPS autograd: ``make_jvp(fun)(*args)(v) -> (fun(*args), J @ v)``, the forward-mode
    product obtained from two reverse passes (the transpose trick). ``v`` has the structure of
    ``args[argnum]`` (an array, or a list/tuple/dict of them)."""

    def jvp_maker(*args: Any, **kwargs: Any) -> Callable:
        def jvp_fn(v: Any) -> tuple[Any, Any]:
            out, fresh, nested, unpack = _trace(fun, args, kwargs, argnum, "make_jvp")
            vs = tree_flatten(v)[0]
            if len(vs) != len(fresh):
                raise ValueError(f"make_jvp: the tangent has {len(vs)} arrays but the argument "
                                 f"has {len(fresh)}; it must have the argument's structure")
            od = _data(out)
            zeros = np.zeros(np.shape(od), dtype=np.result_type(od))
            if not (isinstance(out, Tensor) and out.requires_grad):
                return _unbox(out, nested), zeros
            u = constant(zeros)
            u.requires_grad = True
            g = run_backward([out], [u], retain_graph=True, create_graph=True, inputs=fresh)
            roots, seeds = [], []
            for x, vi in zip(fresh, vs):
                if np.shape(_data(vi)) != x.shape:
                    raise ValueError(f"make_jvp: the tangent has shape {np.shape(_data(vi))} but "
                                     f"the argument has shape {x.shape}")
                gx = g.get(id(x))
                if isinstance(gx, Tensor) and gx.requires_grad:
                    roots.append(gx)
                    seeds.append(np.asarray(_data(vi), dtype=gx.data.dtype))
            r = None
            if roots:
                res = run_backward(roots, seeds, retain_graph=nested, create_graph=nested, inputs=[u])
                r = res.get(id(u))
            return _unbox(out, nested), (_unbox(r, nested) if r is not None else zeros)

        return jvp_fn

    return jvp_maker


def jvp(fun: Callable, primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    """JAX: ``jvp(fun, (x,), (v,)) -> (fun(x), J @ v)`` for a single primal."""
    if len(primals) != 1:
        raise NotImplementedError("jvp supports one primal; close over the others")
    return make_jvp(fun)(*primals)(tangents[0])
