"""``torch.func`` with torch's signatures: ``vmap``, ``grad``, ``grad_and_value``, ``vjp``, ``jvp``,
``jacrev``, ``jacfwd``, ``hessian``, ``functional_call``, ``stack_module_state``.

``vmap`` batches through the engine's primitives (``rlgrad/batching.py``: one batching rule per
primitive), not a Python loop over slices. The differentiating transforms are rlgrad's own
(``rlgrad/transforms.py``) run on the *physical* tensors of the open vmap levels: inside
``vmap(grad(f))``, ``grad`` differentiates the sum over the vmapped slices of ``f``'s values
with respect to its inputs broadcast along those levels; each slice's value depends on its own
slice of the inputs only, so the gradient's slices are the per-slice gradients. That is
per-sample gradients in one forward and one backward pass over the batch.

Inputs and outputs are Tensors, as in torch; rlgrad's JAX-style ``rlgrad.grad`` / ``vjp`` /
``jvp`` / ``hessian`` (NumPy arrays in and out) are unchanged, and ``rlgrad.vmap`` is this
``vmap`` with JAX's ``in_axes`` / ``out_axes``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from rlgrad import ops, transforms
from rlgrad.batching import (
    Level,
    VmapError,
    as_tensor,
    batch_size,
    close_level,
    from_level,
    open_level,
    rewrap,
    to_front,
    to_physical,
)
from rlgrad.tensor import Tensor, _Depth, constant
from rlgrad.tracer import VMAP_LEVELS
from rlgrad.transforms import tree_flatten, tree_unflatten

if TYPE_CHECKING:
    from rlgrad.nn import Module
    from rlgrad.typing import MapDims

__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
           "functional_call", "stack_module_state"]

RANDOMNESS = ("error", "different", "same")


# ---- vmap -------------------------------------------------------------------------------------
def _dims_per_leaf(dims: Any, tree: Any, where: str, what: str) -> list[Any]:
    """``in_dims``/``out_dims`` (an int, None, or a tree prefix of the arguments) per leaf."""
    if dims is None or isinstance(dims, int):
        if isinstance(tree, Tensor):  # no flattening needed
            return [dims]
        if type(tree) is dict and all(isinstance(v, Tensor) for v in tree.values()):
            return [dims] * len(tree)
        return [dims] * len(tree_flatten(tree)[0])
    if isinstance(dims, tuple | list) and isinstance(tree, tuple | list) and len(dims) == len(tree):
        return [d for sub_d, sub in zip(dims, tree) for d in _dims_per_leaf(sub_d, sub, where, what)]
    if isinstance(dims, dict) and isinstance(tree, dict) and set(dims) == set(tree):
        return [d for k in transforms.dict_keys(tree)
                for d in _dims_per_leaf(dims[k], tree[k], where, what)]
    raise ValueError(f"{where}: {what}={dims!r} does not match the structure of the "
                     f"{'inputs' if what == 'in_dims' else 'outputs'} ({type(tree).__name__} of "
                     f"{len(tree) if isinstance(tree, Sequence | dict) else 1}); give an int, None, "
                     "or one entry per argument")


def _check_dim(d: Any, ndim: int, where: str, what: str) -> int | None:
    if d is None:
        return None
    if not isinstance(d, int) or not -ndim <= d < max(ndim, 1):
        raise ValueError(f"{where}: {what} {d!r} is out of range for a tensor with {ndim} "
                         f"dimension(s); use an int in [-{ndim}, {ndim}) or None")
    return d % ndim


def vmap(func: Callable, in_dims: MapDims = 0, out_dims: MapDims = 0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:
    """torch.func.vmap: ``func`` mapped over dimension ``in_dims`` of its inputs (an int, None
    for an input shared by every slice, or a tuple/dict prefix of the arguments), its outputs
    stacked along ``out_dims``. ``chunk_size``: that many slices at a time (less memory).
    Nested vmaps and transforms inside (``vmap(grad(f))``) batch through the same rules.
    ``randomness``: "error" (torch's default) refuses a random draw inside ``func``; "same"
    lets every slice see the same draws; "different" draws one per slice (``rlgrad.random.draw``:
    with the same seed, the draw of the whole batch outside vmap)."""
    if randomness not in RANDOMNESS:
        raise ValueError(f"vmap: randomness={randomness!r}; use one of {', '.join(RANDOMNESS)}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size={chunk_size!r}; use a positive int or None")

    @functools.wraps(func)
    def vmapped(*args: Any, **kwargs: Any) -> Any:
        leaves, treedef = tree_flatten(list(args))
        dims = [_check_dim(d, np.ndim(x._value if isinstance(x, Tensor) else x), "vmap", "in_dims")
                for d, x in zip(_leaf_dims(in_dims, args), leaves)]
        size = batch_size([np.shape(x._value if isinstance(x, Tensor) else x)[d]
                           for d, x in zip(dims, leaves) if d is not None], "vmap")
        run = functools.partial(_vmap_once, func, randomness, out_dims, treedef, kwargs)
        if chunk_size is None or chunk_size >= size:
            return run(leaves, dims, size)
        return _chunked(run, leaves, dims, size, chunk_size, out_dims)

    return vmapped


def _vmap_once(func: Callable, randomness: str, out_dims: Any, treedef: Any, kwargs: dict,
               leaves: list, dims: list, size: int) -> Any:
    level = open_level(size, randomness)
    try:
        inner = [x if d is None else to_front(x, d, level) for x, d in zip(leaves, dims)]
        out = func(*tree_unflatten(treedef, inner), **kwargs)
    finally:
        close_level(level)
    return _outputs(out, level, out_dims)


def _leaf_dims(in_dims: Any, args: tuple) -> list[Any]:
    if isinstance(in_dims, int) or in_dims is None:
        return _dims_per_leaf(in_dims, list(args), "vmap", "in_dims")
    if not isinstance(in_dims, tuple | list) or len(in_dims) != len(args):
        raise ValueError(f"vmap: in_dims={in_dims!r} must be an int, None, or a tuple with one "
                         f"entry per positional argument ({len(args)} given)")
    return _dims_per_leaf(tuple(in_dims), tuple(args), "vmap", "in_dims")


def _outputs(out: Any, level: Level, out_dims: Any) -> Any:
    leaves, treedef = tree_flatten(out)
    dims = _dims_per_leaf(out_dims, out, "vmap", "out_dims")
    res = []
    for x, d in zip(leaves, dims):
        if not isinstance(x, Tensor | np.ndarray | float | int):
            raise TypeError(f"vmap: the function returned a {type(x).__name__}; it must return "
                            "tensors (or tuples, lists and dicts of them)")
        rank = len(x.shape) if isinstance(x, Tensor) else np.ndim(x)
        res.append(from_level(x, level, _check_dim(d, rank + 1, "vmap", "out_dims")))
    return tree_unflatten(treedef, res)


def _chunked(run: Callable, leaves: list, dims: list, size: int, chunk: int, out_dims: Any) -> Any:
    """vmap's ``chunk_size``: the slices in groups of ``chunk``, the outputs concatenated."""
    from rlgrad.creation import cat

    parts = []
    for start in range(0, size, chunk):
        stop = min(size, start + chunk)
        sub = [x if d is None else ops.getitem(as_tensor(x), (slice(None),) * d + (slice(start, stop),))
               for x, d in zip(leaves, dims)]
        parts.append(tree_flatten(run(sub, dims, stop - start)))
    treedef = parts[0][1]
    dims_out = _dims_per_leaf(out_dims, tree_unflatten(treedef, parts[0][0]), "vmap", "out_dims")
    return tree_unflatten(treedef, [x if d is None else cat([p[0][i] for p in parts], d)
                                    for i, (x, d) in enumerate(zip(parts[0][0], dims_out))])


# ---- the differentiating transforms, on the physical tensors of the open vmap levels -----------
def _tree_map(fn: Callable, tree: Any) -> Any:
    if isinstance(tree, Tensor):  # the common cases without flattening: a tensor, a state dict
        return fn(tree)
    if type(tree) is dict and all(isinstance(v, Tensor) for v in tree.values()):
        return {k: fn(v) for k, v in tree.items()}
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [fn(x) for x in leaves])


def _nums(argnums: Any, nargs: int, where: str) -> tuple[int, ...]:
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for n in nums:
        if not isinstance(n, int) or not -nargs <= n < nargs:
            raise ValueError(f"{where}: argnums={argnums!r} is out of range for {nargs} positional "
                             "argument(s); use an int or a tuple of ints")
    return tuple(n % nargs for n in nums)


def _result(x: Any, levels: Sequence[Level]) -> Any:
    """A transform's physical result as the caller sees it: a Tensor batched at ``levels``
    (detached unless an enclosing transform differentiates it)."""
    if not isinstance(x, Tensor):
        x = constant(np.asarray(x))
    elif x.requires_grad and not _Depth.value:
        x = ops.stop_gradient(x)
    return rewrap(x, levels)


class _Physical:
    """``fun`` with the arguments at ``nums`` given as physical tensors (one leading dimension
    per open vmap level): it rewraps them, calls ``fun`` and returns its output physical. The
    aux output (``has_aux``) is kept aside, logical."""

    _vmap_physical = True  # rlgrad.transforms may trace it while vmap levels are open

    def __init__(self, fun: Callable, nums: tuple[int, ...], has_aux: bool, where: str,
                 kwargs: dict) -> None:
        self.fun, self.nums, self.has_aux, self.where, self.kwargs = fun, nums, has_aux, where, kwargs
        self.levels = list(VMAP_LEVELS)
        self.aux: Any = None
        self.out: Any = None

    def args(self, args: tuple) -> list[Any]:
        phys = list(args)
        for n in self.nums:
            phys[n] = _tree_map(lambda x: to_physical(x, self.levels), args[n])
        return phys

    def __call__(self, *args: Any) -> Any:
        logical = list(args)
        for n in self.nums:
            logical[n] = _tree_map(lambda x: rewrap(x, self.levels), args[n])
        out = self.fun(*logical, **self.kwargs)
        if self.has_aux:
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError(f"{self.where}(has_aux=True): the function must return a pair "
                                f"(output, aux), got {type(out).__name__}")
            out, self.aux = out
        self.out = out
        return _tree_map(lambda x: to_physical(x, self.levels), out)

    def aux_result(self) -> Any:
        return _tree_map(lambda x: ops.stop_gradient(x) if isinstance(x, Tensor) and x.requires_grad
                         and not _Depth.value else x, self.aux)


def _summed(phys: _Physical) -> Callable:
    """``phys`` summed over the vmapped dimensions: each slice depends on its own inputs only,
    so this sum's gradient holds every slice's gradient."""
    k = len(phys.levels)

    def fun(*args: Any) -> Any:
        out = phys(*args)
        return _tree_map(lambda x: ops.sum(x, axis=tuple(range(k))) if k else x, out)

    fun._vmap_physical = True  # type: ignore[attr-defined]  # a marker on the function object
    return fun


def grad_and_value(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """torch.func.grad_and_value: ``(gradient, value)``, or ``(gradient, (value, aux))``."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums = _nums(argnums, len(args), "grad")
        phys = _Physical(func, nums, has_aux, "grad", kwargs)

        def scalar(*a: Any) -> Any:
            out = _summed(phys)(*a)
            if not isinstance(phys.out, Tensor) or phys.out.numel() != 1:
                raise RuntimeError("grad: the function must return a tensor with one element "
                                   f"(got {type(phys.out).__name__} of shape "
                                   f"{tuple(getattr(phys.out, 'shape', ()))}); use jacrev or vjp")
            return out

        scalar._vmap_physical = True  # type: ignore[attr-defined]  # a marker on the function object
        g = transforms.grad(scalar, argnums if isinstance(argnums, tuple) else nums[0])(*phys.args(args))
        grads = _tree_map(lambda x: _result(x, phys.levels), g)
        value = _result(to_physical(phys.out, phys.levels), phys.levels)
        return grads, ((value, phys.aux_result()) if has_aux else value)

    return wrapper


def grad(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """torch.func.grad: the gradient of ``func`` (one-element output) w.r.t. ``argnums``;
    ``has_aux``: ``func`` returns ``(output, aux)`` and this ``(gradient, aux)``."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """torch.func.vjp: ``(output, vjp_fn)`` (``(output, vjp_fn, aux)``); ``vjp_fn(cotangents)``
    returns a tuple with one gradient per primal."""
    phys = _Physical(func, tuple(range(len(primals))), has_aux, "vjp", {})
    out, fn = transforms.vjp(phys, *phys.args(primals))
    levels = phys.levels

    def vjp_fn(cotangents: Any) -> tuple:
        if list(VMAP_LEVELS[:len(levels)]) != levels:
            raise VmapError("vjp: vjp_fn must be called inside the vmap levels vjp was called in")
        grads = fn(_tree_map(lambda c: to_physical(c, levels), cotangents))
        return tuple(_tree_map(lambda x: _result(x, levels), g) for g in grads)

    result = _tree_map(lambda x: _result(x, levels), out)
    return (result, vjp_fn, phys.aux_result()) if has_aux else (result, vjp_fn)


def jvp(func: Callable, primals: tuple[Any, ...], tangents: tuple[Any, ...], *, strict: bool = False,
        has_aux: bool = False) -> tuple:
    """torch.func.jvp: ``(output, jvp_out)`` (``(..., aux)``) in forward mode; ``primals``
    and ``tangents`` are tuples with one entry per argument."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise TypeError("jvp: primals and tangents must be tuples, e.g. jvp(f, (x,), (v,))")
    phys = _Physical(func, tuple(range(len(primals))), has_aux, "jvp", {})
    levels = phys.levels
    ptan = tuple(_tree_map(lambda t: to_physical(t, levels), t) for t in tangents)
    out, tout = transforms.jvp(phys, tuple(phys.args(primals)), ptan)
    res = (_tree_map(lambda x: _result(x, levels), out), _tree_map(lambda x: _result(x, levels), tout))
    return (*res, phys.aux_result()) if has_aux else res


def _rows_by_reverse(phys: _Physical, pargs: list, nums: tuple[int, ...], k: int) -> list[list[Any]]:
    """Jacobian blocks (vmapped dimensions first, then output, then input dimensions), one
    backward pass per element of a slice's output (all slices at once)."""
    vjp_fn, out = transforms.make_vjp(_summed(phys), argnum=nums)(*pargs)
    outs, odef = tree_flatten(out)
    blocks = []
    for i, o in enumerate(outs):
        shape = np.shape(o._value if isinstance(o, Tensor) else o)
        rows: list[list[Any]] = []
        for j in range(int(np.prod(shape))):
            ct = [np.zeros(np.shape(v._value if isinstance(v, Tensor) else v)) for v in outs]
            ct[i] = transforms._one_hot(j, shape, np.float64)
            rows.append(tree_flatten(list(vjp_fn(tree_unflatten(odef, ct))))[0])
        per_in = []
        for n, leaf in enumerate(tree_flatten([pargs[m] for m in nums])[0]):
            in_shape = tuple(as_tensor(leaf).shape)
            col = ops.stack([r[n] for r in rows], axis=0) if rows else np.zeros((0,) + in_shape)
            col = ops.reshape(col, shape + in_shape)
            per_in.append(ops.moveaxis(col, tuple(range(len(shape), len(shape) + k)), tuple(range(k)))
                          if k else col)
        blocks.append(per_in)
    return blocks


def _cols_by_forward(phys: _Physical, pargs: list, nums: tuple[int, ...], k: int) -> list[list[Any]]:
    """The same blocks by forward mode: one sweep per element of a slice's input."""
    lin, _, _, _ = transforms._linearize(phys, tuple(pargs), {}, nums, "jacfwd")
    per_in: list[list[Any]] = []
    for n, x in enumerate(lin.fresh):
        full = x._value.shape
        in_shape = full[k:]
        cols: list[list[Any]] = []
        for j in range(int(np.prod(in_shape))):
            seeds: list[Any] = [None] * len(lin.fresh)
            seeds[n] = np.broadcast_to(transforms._one_hot(j, in_shape, x._value.dtype), full)
            cols.append(lin(seeds))
        outs = []
        for o in range(len(lin.outs)):
            oshape = tuple(np.shape(lin.outs[o]._value if isinstance(lin.outs[o], Tensor) else lin.outs[o]))
            col = ops.stack([c[o] for c in cols], axis=-1) if cols else np.zeros(oshape + (0,))
            outs.append(ops.reshape(col, oshape + in_shape))
        per_in.append(outs)
    return [list(row) for row in zip(*per_in)]


def _jacobian(func: Callable, argnums: Any, has_aux: bool, where: str, forward: bool) -> Callable:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums = _nums(argnums, len(args), where)
        phys = _Physical(func, nums, has_aux, where, kwargs)
        pargs = phys.args(args)
        find = _cols_by_forward if forward else _rows_by_reverse
        blocks = find(phys, pargs, nums, len(phys.levels))
        in_def = tree_flatten([pargs[n] for n in nums])[1]
        per_out = []
        for row in blocks:
            parts = tree_unflatten(in_def, [_result(b, phys.levels) for b in row])
            per_out.append(tuple(parts) if isinstance(argnums, tuple) else parts[0])
        jac = tree_unflatten(tree_flatten(phys.out)[1], per_out)
        return (jac, phys.aux_result()) if has_aux else jac

    return wrapper


def jacrev(func: Callable, argnums: int | tuple[int, ...] = 0, *, has_aux: bool = False,
           chunk_size: int | None = None) -> Callable:
    """torch.func.jacrev: the Jacobian (output dimensions, then input dimensions) by reverse
    mode, one backward pass per output element. ``chunk_size`` is accepted (the passes run one
    at a time anyway)."""
    return _jacobian(func, argnums, has_aux, "jacrev", forward=False)


def jacfwd(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *,
           randomness: str = "error") -> Callable:
    """torch.func.jacfwd: the same Jacobian by forward mode, one sweep per input element."""
    return _jacobian(func, argnums, has_aux, "jacfwd", forward=True)


def hessian(func: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """torch.func.hessian: ``jacfwd(jacrev(func, argnums), argnums)``."""
    return jacfwd(jacrev(func, argnums), argnums)




transforms.BATCHED.update(grad_and_value=grad_and_value, vjp=vjp, jvp=jvp, jacrev=jacrev, jacfwd=jacfwd)


# ---- modules as functions ----------------------------------------------------------------------
@contextmanager
def _swapped(module: Any, values: dict[str, Any]) -> Iterator[None]:
    """``module``'s parameters and buffers named in ``values`` replaced for the call."""
    saved = []
    try:
        for name, value in values.items():
            *path, leaf = name.split(".")
            mod = module
            for part in path:
                mod = mod._modules[part] if part in mod._modules else getattr(mod, part)
            reg = "_parameters" if leaf in mod._parameters else "_buffers" if leaf in mod._buffers else None
            if reg is None:
                raise ValueError(f"functional_call: the module has no parameter or buffer {name!r}")
            store = getattr(mod, reg)
            saved.append((mod, store, leaf, store[leaf], leaf in mod.__dict__))
            store[leaf] = value
            if leaf in mod.__dict__:  # a Module keeps its parameters as attributes too
                mod.__dict__[leaf] = value
        yield
    finally:
        for mod, store, leaf, old, attr in reversed(saved):
            store[leaf] = old
            if attr:
                mod.__dict__[leaf] = old


def functional_call(module: Module,
                    parameter_and_buffer_dicts: dict[str, Tensor] | Sequence[dict[str, Tensor]],
                    args: object = None, kwargs: dict | None = None, *, tie_weights: bool = True,
                    strict: bool = False) -> object:
    """torch.func.functional_call: ``module(*args, **kwargs)`` with its parameters and buffers
    taken from the dict(s) given (by their ``named_parameters`` names), the module unchanged after."""
    dicts = parameter_and_buffer_dicts
    values: dict[str, Any] = {}
    for d in (dicts if isinstance(dicts, tuple | list) else (dicts,)):
        for k, v in d.items():
            if k in values:
                raise ValueError(f"functional_call: {k!r} is given in more than one dict")
            values[k] = v
    if strict:
        names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        if set(values) != names:
            raise RuntimeError(f"functional_call(strict=True): missing {sorted(names - set(values))}, "
                               f"unexpected {sorted(set(values) - names)}")
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _swapped(module, values):
        return module(*args, **(kwargs or {}))


def stack_module_state(models: Sequence[Any]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """torch.func.stack_module_state: each parameter (and buffer) of the same-shaped
    ``models`` stacked along a new first dimension, as new leaves (for ``vmap`` over an ensemble
    with ``functional_call``)."""
    if not models:
        raise RuntimeError("stack_module_state: expected at least one model, got 0")
    if len({type(m) for m in models}) > 1:
        raise RuntimeError("stack_module_state: all models must be of the same class")

    def stacked(named: list[dict[str, Tensor]], leaf: bool) -> dict[str, Tensor]:
        out = {}
        for name in named[0]:
            s = ops.stack([d[name].detach() for d in named], axis=0)
            t = constant(np.ascontiguousarray(s._value))
            if leaf and all(d[name].requires_grad for d in named):
                t.requires_grad_(True)
            out[name] = t
        return out

    params = stacked([dict(m.named_parameters()) for m in models], True)
    buffers = stacked([dict(m.named_buffers()) for m in models], False)
    return params, buffers


# ---- JAX's spelling -----------------------------------------------------------------------------
def vmap_axes(fun: Callable, in_axes: MapDims = 0, out_axes: MapDims = 0, axis_name: str | None = None,
              axis_size: int | None = None, spmd_axis_name: str | None = None, *,
              in_dims: MapDims | None = None, out_dims: MapDims | None = None,
              randomness: str = "error", chunk_size: int | None = None) -> Callable:
    """``rlgrad.vmap``: JAX's ``vmap(fun, in_axes=0, out_axes=0)`` over the same batching rules
    as ``rlgrad.func.vmap``. Given NumPy arrays (no Tensor), it returns NumPy arrays, as
    rlgrad's JAX-style transforms do. ``axis_name`` (collectives) is not supported. torch's
    top-level ``torch.vmap(func, in_dims=..., out_dims=...)`` keywords are accepted too (after
    ``import rlgrad as torch``), and so are its ``randomness`` and ``chunk_size``."""
    if in_dims is not None or out_dims is not None or chunk_size is not None or randomness != "error":
        return vmap(fun, in_axes if in_dims is None else in_dims,
                    out_axes if out_dims is None else out_dims, randomness, chunk_size=chunk_size)
    if axis_name is not None or spmd_axis_name is not None:
        raise NotImplementedError("rlgrad.vmap: axis_name (collective operations over the mapped "
                                  "axis) is not supported; reduce the output after vmap instead")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    batched_fn = vmap(fun, in_axes, out_axes)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if axis_size is not None and all(d is None for d in _leaf_dims(in_axes, args)):
            out = fun(*args, **kwargs)  # nothing mapped: the output repeated axis_size times
            return _tree_map(lambda x: np.repeat(np.asarray(x)[None], axis_size, axis=0), out)
        out = batched_fn(*args, **kwargs)
        if any(isinstance(x, Tensor) for x in tree_flatten(list(args))[0]):
            return out
        return _tree_map(lambda x: x._value if isinstance(x, Tensor) and not x.requires_grad else x, out)

    return wrapper
