"""Trace once, replay many times: ``rlgrad.jit`` for fixed-shape steps.

An RL update runs the same computation on arrays of the same shapes thousands of times. Eager
execution pays Python bookkeeping for every op on every call; ``jit`` pays it once:

1. *trace*: call the function with its array arguments wrapped as Tensors; every primitive call
   that touches a Tensor is appended to a tape (``tracer._record``), including the backward pass
   of any ``grad`` / ``value_and_grad`` / ``autograd.grad`` inside, which records itself as
   ordinary ops while a trace is active;
2. *compile*: turn the tape into straight-line Python source, one NumPy-level call per line
   (``v7 = f7(v3, v5)``), dropping ops whose results are not needed and aliasing identities;
   every intermediate that the caller never sees is written into a buffer allocated once and
   shared by values whose lives do not overlap (``v7 = f7(v3, v5, out=b2)``);
3. *replay*: later calls with the same shapes and dtypes run that function on the raw arrays.

Python control flow may depend on shapes but not on values (``bool()``, ``.item()``,
``.numpy()`` on a traced tensor raise ``TraceError`` naming the line), and randomness must come
in as an argument. Tensors captured from outside (a network's parameters) are read at every
replay. Calls that change state (in-place updates, ``optimizer.step()``, ``zero_grad()``, target
updates: ``tracer.replayed``) are recorded whole and made again at their place in every replay,
with the ``.grad`` attributes set as the trace left them. docs/engine.md says what is traced,
replayed and refused, and why; ``check=True`` compares every replay with eager execution.
"""

from __future__ import annotations

import builtins
import math
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.creation import _empty_aligned
from rlgrad.jit_check import CheckError, Snapshot, compare
from rlgrad.tensor import Tensor, TraceError, _shape, _size, _Trace, constant
from rlgrad.tracer import FUSED_PAIRS, VMAP_LEVELS, _GradMode
from rlgrad.transforms import PYTREE_NODES, _Depth, dict_keys, tree_flatten, tree_unflatten

__all__ = ["jit", "compile", "CheckError", "TraceError"]

_ALIAS_OPS = ("identity", "stop_gradient")  # replay needs no code for these
#: the traced function's arguments (Tensors) while a trace runs: values of this trace, like the
#: ones on its tape (rlgrad.lax never caches a loop body that reads one)
TRACE_INPUTS: list[Tensor | None] = []  # (None: an empty subtree)
_INDEX_OPS = ("getitem", "untake")  # their second argument is an index


class _Compiled:
    """One traced program: the generated function (it returns the output pytree itself), its
    source and how many ops it runs; ``guards``: (tensor, whether its ``.grad`` was None) that
    the program assumes at entry; ``first``: ``(outputs,)`` of the trace, which computed that
    call's outputs and made its replayed calls (an optimizer step...), until the call returns
    them instead of running the program again (a tuple, since the outputs may be None: a soft
    target update returns nothing)."""

    def __init__(self, fn: Callable, source: str, n_ops: int) -> None:
        self.fn = fn
        self.source = source
        self.n_ops = n_ops
        self.guards: list[tuple[Tensor, bool]] = []
        self.first: tuple[Any] | None = None
        self.state: list[Any] = []  # what the replayed calls reach (for check=True)
        self.made: set[int] = set()  # ids of the buffers the step makes at every call
        self.slow = False  # replayed through jit._run: guards to check, or check=True
        self.backend = "numpy"  # or "native": rlgrad.native replaced fn (native_source: its C)


def _array_or_none(x: Any) -> Any:
    return x if x is None else np.asarray(x._value if isinstance(x, Tensor) else x)


def _guards_hold(guards: list[tuple[Tensor, bool]]) -> bool:
    return all((t.grad is None) == was_none for t, was_none in guards)


def _flatten(tree: Any, leaves: list[Any], key: list[Any]) -> None:
    """Leaves of a pytree, and (in ``key``) its structure with every leaf's shape and dtype: one
    pass, hashable, so finding the compiled program costs a few microseconds."""
    kind = type(tree)
    if kind is np.ndarray:
        leaves.append(tree)
        key.append((tree.shape, tree.dtype.char))
    elif isinstance(tree, list | tuple) and kind not in PYTREE_NODES:  # namedtuples too
        key.append((kind, len(tree)))
        for item in tree:
            _flatten(item, leaves, key)
    elif tree is None:  # an empty subtree (JAX's): no input
        key.append(None)
    elif kind in PYTREE_NODES:
        children, aux = PYTREE_NODES[kind][0](tree)
        key.append(("node", kind, aux))
        _flatten(list(children), leaves, key)
    elif kind is dict:
        names = tuple(dict_keys(tree))  # the leaf order tree_flatten traced with
        key.append((dict, names))
        for name in names:
            _flatten(tree[name], leaves, key)
    elif isinstance(tree, Tensor):  # marked: given Tensors, the function follows torch's
        key.append(Tensor)  # promotion, given arrays NumPy's (promotion.py): two programs
        _flatten(tree._value, leaves, key)
    else:
        arr = np.asarray(tree)
        if arr.dtype.kind in "OUSV":
            raise TypeError(
                f"rlgrad.jit: an argument holds a {kind.__name__!r} value, not an array: pass "
                "it in static_argnums, or register its class as a pytree "
                "(rlgrad.tree_util.register_dataclass)")
        leaves.append(arr)
        key.append((arr.shape, arr.dtype.char, "scalar"))


def _flat_call(args: tuple) -> tuple[tuple, list[np.ndarray]] | None:
    """(cache key, leaves) when every argument is an array or a dict of arrays (a step's batch),
    else None. The key never equals a tree walk's, which starts with the arguments' (tuple,
    length); the leaves follow the dicts' sorted names, as ``tree_flatten``'s do."""
    key: list[Any] = []
    leaves: list[np.ndarray] = []
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            leaves.append(a)
            key.append((a.shape, a.dtype.char))
        elif kind is dict:
            names = tuple(sorted(a)) if all(type(n) is str for n in a) else None
            if names is None:
                return None
            key.append(names)
            for name in names:
                v = a[name]
                if type(v) is not np.ndarray:
                    return None
                leaves.append(v)
                key.append((v.shape, v.dtype.char))
        else:
            return None
    return tuple(key), leaves


def _numpy_code(leaves: list[Any]) -> int:
    """1 when ``fun`` was given arrays and no Tensor: it is NumPy code, whose operators keep
    NumPy's promotion while traced or run eagerly for ``check=True`` (``_Depth.numpy``), else 0."""
    return 0 if any(isinstance(x, Tensor) for x in leaves) else 1


class jit:  # noqa: N801 - lower-case like jax.jit
    """``jit(fun)(*args)``: compile ``fun`` for the shapes and dtypes of ``args``; retrace on change.

    ``fun`` takes arrays (and lists, tuples, namedtuples, dicts, registered dataclasses of them,
    None) as positional or keyword arguments and returns the same, typed as eagerly: given
    Tensors, what it returns as a Tensor comes back a Tensor (0-d too); given arrays, arrays
    (NumPy's scalars where NumPy returns them), and so are the results of a transform it calls
    directly (``grad``, ``value_and_grad``: arrays at top level). It may call rlgrad's
    functional transforms (``grad``, ``value_and_grad``, ...), ``autograd.grad`` or
    ``backward()``, and update state in place (an optimizer's ``step()``, ``p.sub_(...)``:
    replayed at every call). ``static_argnums`` names arguments that are not arrays (they are
    part of the cache key). ``check=True`` (or the environment variable ``RLGRAD_JIT_CHECK=1``)
    runs ``fun`` eagerly beside every replay and raises ``CheckError`` at the first difference.
    ``backend``: "numpy" (the replay of NumPy calls), "native" or "auto" (the program lowered to
    C by ``rlgrad.native`` where it can be, else the replay; "native" logs a warning when it
    cannot), default ``RLGRAD_JIT_BACKEND`` or "numpy"; ``.backend`` says which runs.
    """

    def __init__(self, fun: Callable, static_argnums: tuple[int, ...] = (),
                 check: bool | None = None, backend: str | None = None) -> None:
        self.fun = fun
        self.static_argnums = tuple(static_argnums)
        self.check = os.environ.get("RLGRAD_JIT_CHECK", "0") == "1" if check is None else check
        backend = backend or os.environ.get("RLGRAD_JIT_BACKEND") or "numpy"
        if backend not in ("numpy", "native", "auto"):
            raise ValueError(f"rlgrad.jit: backend={backend!r}; use 'numpy', 'native' or 'auto'")
        self.requested_backend = backend
        self.backend: str | None = None  # the backend of the program compiled last
        self._cache: dict[Any, _Compiled] = {}
        self._kw_jit: jit | None = None
        self.__name__ = getattr(fun, "__name__", "jitted")
        self.__doc__ = getattr(fun, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if VMAP_LEVELS:  # inside vmap: eagerly, through the batching rules (a trace would see a slice)
            return self.fun(*args, **kwargs)
        if kwargs:
            return self._call_with_keywords(args, kwargs)
        if not self.static_argnums:  # the common calls, keyed without the recursive tree walk
            fast = _flat_call(args)
            if fast is not None:
                fast_key, leaves = fast
                compiled = self._cache.get(fast_key)
                if compiled is not None and not compiled.slow:
                    return compiled.fn(*leaves)
                return self._run(fast_key, compiled, args, leaves)
        leaves = []
        key: list[Any] = []
        if self.static_argnums:
            for i, a in enumerate(args):
                if i in self.static_argnums:
                    key.append(("static", a))
                else:
                    _flatten(a, leaves, key)
        else:
            _flatten(args, leaves, key)
        frozen = tuple(key)
        compiled = self._cache.get(frozen)
        if compiled is not None and not compiled.slow:
            return compiled.fn(*leaves)
        return self._run(frozen, compiled, args, leaves)

    def _call_with_keywords(self, args: tuple, kwargs: dict) -> Any:
        """Keyword arguments are one more argument, a dict, of a jit of their own."""
        if self._kw_jit is None:
            fun = self.fun

            def with_keywords(*a: Any) -> Any:
                return fun(*a[:-1], **a[-1])

            self._kw_jit = jit(with_keywords, self.static_argnums, self.check, self.requested_backend)
        out = self._kw_jit(*args, kwargs)
        self.backend = self._kw_jit.backend
        return out

    def _run(self, key: Any, compiled: _Compiled | None, args: tuple, leaves: list[Any]) -> Any:
        """A call that needs more than the replay: the first for its shapes, one whose
        ``.grad`` state differs from the trace's (traced again), or a checked one."""
        if compiled is not None and _guards_hold(compiled.guards):
            if self.check:
                return self._checked(compiled, args, leaves)
            return compiled.fn(*leaves)
        compiled = self._cache[key] = self._compile_for(args)
        self.backend = compiled.backend
        compiled.slow = bool(compiled.guards) or self.check
        first, compiled.first = compiled.first, None
        if first is not None:  # the trace made this call's updates: its outputs are this call's
            return first[0]
        return compiled.fn(*leaves)

    def _checked(self, compiled: _Compiled, args: tuple, leaves: list[Any]) -> Any:
        """The replay, checked against ``fun`` run eagerly from the same state."""
        state = Snapshot(compiled.state, compiled.made)
        dyn, in_def = tree_flatten([a for i, a in enumerate(args) if i not in self.static_argnums])
        copies = [x if x is None else constant(np.array(x._value if isinstance(x, Tensor) else x))
                  for x in dyn]  # called as the trace called it: Tensors, here fresh copies
        prev_mode = _GradMode.enabled
        _GradMode.enabled = True  # as while tracing
        numpy_code = _numpy_code(dyn)  # as while tracing: arrays given, NumPy's promotion
        _Depth.numpy += numpy_code
        try:
            eager, _ = tree_flatten(self.fun(*self._call_args(args, copies, in_def)))
        finally:
            _GradMode.enabled = prev_mode
            _Depth.numpy -= numpy_code
        eager_state = state.values()
        state.restore()
        got = compiled.fn(*leaves)
        name = f"the outputs of {self.__name__}"
        compare([("output", _array_or_none(e)) for e in eager],
                [("output", _array_or_none(g)) for g in tree_flatten(got)[0]], name)
        compare(eager_state, state.values(), f"the state after {self.__name__}")
        return got

    def lower(self, *args: Any) -> str:
        """The generated source for these arguments (to read what a step compiles to). It traces
        ``fun``, so replayed calls (an optimizer's step) are made once, as by a call."""
        return self._compile_for(args).source

    def _compile_for(self, args: tuple) -> _Compiled:
        dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, in_def = tree_flatten(dyn)
        numpy_code = _numpy_code(leaves)
        leaves = [x._value if isinstance(x, Tensor) else x if x is None else np.asarray(x)
                  for x in leaves]  # (None: an empty subtree, as in JAX; not an input)
        _Depth.numpy += numpy_code
        try:
            return self._trace(args, leaves, in_def, torch_style=not numpy_code)
        finally:
            _Depth.numpy -= numpy_code

    def _call_args(self, args: tuple, leaves: list[Any], in_def: Any) -> list[Any]:
        """``args`` with their array leaves replaced by ``leaves`` (the static ones kept)."""
        it = iter(tree_unflatten(in_def, leaves))
        return [a if i in self.static_argnums else next(it) for i, a in enumerate(args)]

    # ---- tracing ------------------------------------------------------------------------------
    def _trace(self, args: tuple, leaves: list[Any], in_def: Any, torch_style: bool) -> _Compiled:
        """The compiled program of ``fun`` for these arguments. ``torch_style``: some were
        Tensors, and the outputs the function returns as Tensors come back as Tensors (given
        arrays, it returns arrays), as eager execution returns them."""
        if _Trace.tape is not None:
            raise RuntimeError("rlgrad.jit: nested jit is not supported; jit the outer function only")
        inputs: list[Tensor | None] = [None if x is None else constant(np.asarray(x)) for x in leaves]
        call_args = self._call_args(args, inputs, in_def)
        tape: list = []
        TRACE_INPUTS[:] = inputs
        _Trace.tape = tape
        _Trace.compiling = True
        _Trace.grads, _Trace.touched, _Trace.guards = {}, set(), []
        _Trace.eager_arrays = set()
        _Trace.entry = {id(t): (t, t.grad) for t in list(_Trace.leaves.values())}
        _Depth.value += 1  # transforms inside record their backward pass (they are "nested")
        prev_mode = _GradMode.enabled
        _GradMode.enabled = True
        try:
            out = _call_traced(self.fun, call_args, any(x is None for x in inputs))
            grads = _TracedGrads(_Trace.grads, _Trace.guards, _Trace.entry)
        finally:
            TRACE_INPUTS.clear()
            _Trace.tape = None
            _Trace.compiling = False
            _Trace.grads, _Trace.touched, _Trace.guards, _Trace.entry = {}, set(), [], {}
            _Trace.born = {}
            fresh, _Trace.fresh = list(_Trace.fresh.values()), {}
            eager_arrays, _Trace.eager_arrays = _Trace.eager_arrays, set()
            _Depth.value -= 1
            _GradMode.enabled = prev_mode
        out_leaves, out_def = tree_flatten(out)
        as_tensor = [torch_style and isinstance(o, Tensor) and id(o) not in eager_arrays
                     for o in out_leaves]
        compiled = _compile([t for t in inputs if t is not None], tape, out_leaves, out_def, grads,
                            fresh, self.requested_backend, as_tensor)
        compiled.guards = grads.guards
        compiled.made = {id(t) for t, _ in fresh}
        compiled.state = [e[1] for e in tape if getattr(e[0], "effect", False)] + [
            t for t, _g in grads.final]
        # the trace computed this call's outputs (and made its updates): the first call returns
        # them rather than running the program again
        compiled.first = (tree_unflatten(out_def, [
            _tensor_out(o._value) if wrap else o._value if isinstance(o, Tensor) else o
            for o, wrap in zip(out_leaves, as_tensor)]),)
        grads.settle()
        return compiled


def _call_traced(fun: Callable, args: list[Any], has_none: bool) -> Any:
    """``fun(*args)``; a None argument used as a value is said in one line, as None."""
    try:
        return fun(*args)
    except TypeError as e:
        if not has_none or "NoneType" not in str(e):
            raise
        pkg = os.path.dirname(os.path.abspath(__file__)) + os.sep
        where, tb = "", e.__traceback__.tb_next if e.__traceback__ else None  # (the first frame is ours)
        while tb is not None:  # the innermost frame outside rlgrad: where None was used
            name = tb.tb_frame.f_code.co_filename
            if not os.path.abspath(name).startswith(pkg):
                where = f" at {name}:{tb.tb_lineno}"
            tb = tb.tb_next
        raise TypeError(f"rlgrad.jit: {e}{where}: an argument is None, which jit passes on as "
                        "None (an empty pytree, as jax.jit does); give an array instead") from None


class _TracedGrads:
    """The ``.grad`` of the tensors a trace's recorded calls and backward passes touched: when
    first seen (``initial``) and at the end (``final``), so that the step sets them as eager
    execution does."""

    def __init__(self, seen: dict[int, list], guards: list[tuple[Tensor, bool]],
                 entry: dict[int, tuple[Tensor, Any]]) -> None:
        self.initial = {k: g for k, (_t, g) in seen.items()}
        self.final = [(t, t.grad) for t, _g in seen.values()]
        self.guards = list(guards)
        # the .grad objects the caller left on the parameters -> their parameter
        self.owners = {id(g): t for t, g in entry.values() if g is not None}

    def settle(self) -> None:
        """After the trace: a ``.grad`` computed in it (a recorded graph node) becomes the plain
        constant an eager backward leaves."""
        for t, g in self.final:
            if g is not None and t.grad is g and (g.requires_grad or g._op is not None):
                t.grad = constant(g._value)


def compile(model: Callable | None = None, *, fullgraph: bool = False, dynamic: bool | None = None,  # noqa: A001
            backend: Any = "inductor", mode: str | None = None, options: dict | None = None,
            disable: bool = False) -> Any:
    """``torch.compile``'s name and signature over ``jit``: a function (a training step with its
    ``backward()``, ``clip_grad_norm_`` and ``optimizer.step()``) is traced once per input shape
    and replayed, with eager execution's results; used bare, as ``@compile``, or as
    ``@compile(mode=...)``. The PyTorch-only options (``fullgraph``, ``dynamic``, ``backend``,
    ``mode``, ``options``) are accepted and ignored. A Module is returned as it is: its calls
    must stay differentiable by a ``backward()`` outside, which a replayed step's arrays are not.
    """
    if model is None:
        return lambda m: compile(m, disable=disable)
    if disable or (hasattr(model, "parameters") and hasattr(model, "forward")):
        return model
    return jit(model)


class _Names:
    """The generated code's names: ``a<i>`` for the arguments, ``v<k>`` for the tape's values,
    ``c<j>`` for constants (captured tensors, arrays, forwards), looked up by object identity."""

    def __init__(self, inputs: list[Tensor], grad_owner: dict[int, Tensor] | None = None) -> None:
        self.slot: dict[int, str] = {}  # id(traced Tensor) -> variable name in the generated code
        # id(a .grad the caller left) -> its tensor: the step reads that .grad when it runs
        self.grad_owner = grad_owner or {}
        self.owners_read: list[Tensor] = []
        self.by_array: dict[int, str] = {}  # id(input ndarray) -> name: indices unwrapped from inputs
        self.traced_arrays: list[np.ndarray] = []
        for i, t in enumerate(inputs):
            self.slot[id(t)] = self.by_array[id(t._value)] = f"a{i}"
            self.traced_arrays.append(t._value)
        self.consts: dict[str, Any] = {}
        self.keep_alive: list[Any] = []  # ids are only unique while the objects live
        self.wrap: str | None = None  # the name of ``constant`` in the step, once needed

    def const(self, value: Any) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = value
        return name

    def find(self, t: Tensor) -> str | None:
        """The step's name of Tensor ``t``'s value if the trace computed it, else None."""
        return self.slot.get(id(t))

    def obj(self, value: Any) -> str:
        """Source for ``value`` passed to a replayed call: the object itself when it comes from
        outside (a parameter, an optimizer), a Tensor around the array the step computed."""
        if isinstance(value, Tensor):
            name = self.find(value)
            owner = self.grad_owner.get(id(value)) if name is None else None
            if owner is not None:  # p.grad as the caller left it: the one found at this call
                self.owners_read.append(owner)
                return f"{self.obj(owner)}.grad"
            if name is None:
                self.keep_alive.append(value)
                return self.const(value)
            if self.wrap is None:
                self.wrap = self.const(constant)
            return f"{self.wrap}({name})"
        if isinstance(value, tuple):
            return "(" + "".join(f"{self.obj(v)}, " for v in value) + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self.obj(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.obj(k)}: {self.obj(v)}" for k, v in value.items()) + "}"
        return self.ref(value)

    def ref(self, value: Any) -> str:
        """Source text that stands for ``value`` in the step."""
        if isinstance(value, Tensor):
            name = self.find(value)
            if name is not None:
                return name
            owner = self.grad_owner.get(id(value))
            if owner is not None:  # p.grad as the caller left it: the one found at this call
                self.owners_read.append(owner)
                return f"{self.obj(owner)}.grad._value"
            self.keep_alive.append(value)
            return f"{self.const(value)}._value"  # a tensor from outside: read its current value
        if isinstance(value, np.ndarray | np.generic):  # (a 1-D argmax is a NumPy scalar)
            name = self.by_array.get(id(value))
            if name is not None:
                return name
            for traced in self.traced_arrays:  # the arguments and every value computed so far
                if type(value) is np.ndarray and value.size and np.shares_memory(value, traced):
                    raise RuntimeError(
                        "rlgrad.jit: an array derived from a traced value outside rlgrad's "
                        "operations (e.g. a NumPy slice of .numpy()) was used in the step; the "
                        "compiled step would freeze it. Compute it with rlgrad operations or pass "
                        "it as an argument."
                    )
            return self.const(value)
        if isinstance(value, tuple):
            inner = ", ".join(self.ref(v) for v in value)
            return f"({inner},)" if value else "()"
        if isinstance(value, list) and any(isinstance(v, Tensor | np.ndarray | np.generic) for v in value):
            return "[" + ", ".join(self.ref(v) for v in value) + "]"
        kind = type(value)
        if value is None or kind is bool or kind is int or kind is str or (
                kind is float and math.isfinite(value)):
            return repr(value)  # repr reads back as the same value (nan, inf, np.float64 do not)
        return self.const(value)

    def bind(self, res: Tensor, name: str) -> None:
        """``res`` is ``name`` from here on."""
        self.slot[id(res)] = name
        # A traced value may come back unwrapped (an index computed in the step, e.g. an argmax,
        # reaches x[rows, a] as its array): map its array to the same variable, never a constant.
        # (not np.True_/np.False_: NumPy's boolean scalars are shared objects)
        if (isinstance(res._value, np.ndarray | np.generic) and type(res._value) is not np.bool_
                and not name.startswith("c")):
            self.by_array[id(res._value)] = name
            if type(res._value) is np.ndarray:
                self.traced_arrays.append(res._value)


def _compile(inputs: list[Tensor], tape: list, out_leaves: list[Any], out_def: Any,
             grads: _TracedGrads | None = None, fresh: list | None = None,
             backend: str = "numpy", as_tensor: list[bool] | None = None) -> _Compiled:
    names = _Names(inputs, grads.owners if grads else None)
    # the buffers made inside the step and written in place: made again first, at every call
    prologue = [f"{names.obj(t)}._value = {names.const(init)}.copy()  # made in the step"
                for t, init in fresh or ()]
    sync = _GradSync(grads.initial if grads else {})
    lines, writers, fresh_values = _emit(tape, names, _one_element_broadcasts(tape, out_leaves),
                                         _fused_pairs(tape, out_leaves), sync)
    if grads is not None:
        lines += sync.lines(grads.final, names, "end")
    lines = _fold_constants(lines, names.consts)
    # ref(), not const(): an array returned from the step (a traced value's ._value) is that value
    outs = [names.ref(o) if isinstance(o, Tensor | np.ndarray) else names.const(o) for o in out_leaves]
    # what replayed calls and .grad assignments read escapes the step, as its outputs do
    roots = outs + [code for target, code, _ in lines if _is_effect(target)]
    body = _reuse_buffers(_live_lines(lines, roots), roots, writers, names.const, fresh_values)
    if grads is not None:  # the step reads these .grad: the caller must have left one
        grads.guards += [(t, False) for t in {id(t): t for t in names.owners_read}.values()]
    structure = _structure_source if not any(as_tensor or ()) else _tensor_structure(as_tensor or [])
    step = _build_step(body, outs, out_def, len(inputs), names.consts, names.keep_alive, prologue,
                       structure)
    if backend != "numpy":
        from rlgrad import native  # (imported when asked for: it builds C modules)
        # a step that makes buffers again at every call writes state: the NumPy replay keeps it
        pure = not prologue and not any(_is_effect(target) for target, _, _ in body)
        native.lower(step, inputs, tape, out_leaves, out_def, outs, names.consts, backend, pure,
                     structure)
    return step


def _is_effect(target: str) -> bool:
    """Lines that change state (``e``: a replayed call, ``s``: a ``.grad`` assignment): always
    run, in their place, never folded."""
    return target[0] in "es"


def _replay(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """A recorded call, made again by the step; a Tensor result as its array."""
    out = fn(*args, **kwargs)
    return out._value if isinstance(out, Tensor) else out


class _GradSync:
    """The ``t.grad = ...`` lines of a step: before each replayed call, and at the end, every
    ``.grad`` the trace changed is set to what it was at that point of the trace (the value the
    step computed, None, or a tensor from outside)."""

    def __init__(self, initial: dict[int, Any]) -> None:
        self.last = dict(initial)

    def lines(self, now: list[tuple[Tensor, Any]], names: _Names, tag: Any) -> list:
        out = []
        for j, (t, g) in enumerate(now):
            if id(t) in self.last and self.last[id(t)] is g:
                continue
            self.last[id(t)] = g
            code = f"{names.obj(t)}.grad = {'None' if g is None else names.obj(g)}  # .grad"
            out.append((f"s{tag}_{j}", code, _names(code)))
        return out

    def seen(self, now: list[tuple[Tensor, Any]]) -> None:
        """A replayed call set these itself."""
        for t, g in now:
            self.last[id(t)] = g


def _emit_effect(k: int, entry: tuple, names: _Names, sync: _GradSync) -> list:
    """The lines of tape entry ``k``, a replayed call: the ``.grad`` it must find, the call,
    and a live read of each ``.grad`` it replaced with a tensor the trace did not compute."""
    p, args, kwargs, res = entry
    lines = sync.lines(p.before, names, k)
    kw = ", ".join(f"{key!r}: {names.obj(v)}" for key, v in kwargs.items())
    target = f"e{k}"
    code = (f"{target} = {names.const(_replay)}({names.const(p.fwd)}, {names.obj(tuple(args))}, "
            f"{{{kw}}})  # {p.name}, replayed")
    lines.append((target, code, _names(code)))
    if isinstance(res, Tensor) and names.find(res) is None and not any(
            res is a for a in (*args, *kwargs.values())):  # (not self, as in-place methods return)
        names.bind(res, target)
    sync.seen(p.after)
    changed = {id(t) for (t, g0), (_, g1) in zip(p.before, p.after) if g0 is not g1}
    for j, (t, g) in enumerate(p.after):
        if id(t) in changed and isinstance(g, Tensor) and names.find(g) is None:
            read = f"e{k}_{j}"
            lines.append((read, f"{read} = {names.obj(t)}.grad._value  # .grad, read", []))
            names.bind(g, read)
    return lines


def _one_element_broadcasts(tape: list, out_leaves: list[Any]) -> dict[int, Any]:
    """``{id(broadcast result): what to read instead}`` for the broadcasts of one element (a
    reduction's gradient, spread over its input) whose every use is a two-operand ufunc whose
    other operand has the broadcast's shape: the ufunc broadcasts the one element itself, to
    the same values, without the copy. A one-element reshape right before goes too."""
    made: dict[int, tuple[Any, tuple, Any]] = {}
    cand: dict[int, Any] = {}
    for p, args, kwargs, res in tape:
        made[id(res)] = (p, args, res)
        if p.name == "broadcast_to" and not kwargs and _size(args[0]) == 1:
            src = made.get(id(args[0]))
            cand[id(res)] = (src[1][0] if src is not None and src[0].name == "reshape"
                             and src[2] is args[0] and _size(src[1][0]) == 1 else args[0])
    if not cand:
        return cand
    keep = {id(o) for o in out_leaves if id(o) in cand}
    for p, args, kwargs, res in tape:
        used = [a for a in (*args, *kwargs.values()) if id(a) in cand]
        nested = [x for a in args if isinstance(a, list | tuple) for x in a if id(x) in cand]
        keep.update(id(a) for a in nested)
        if not used:
            continue
        ok = (isinstance(p.fwd, np.ufunc) and p.fwd.nin == 2 and len(args) == 2 and not kwargs
              and len(used) == 1 and _shape(args[0]) == _shape(args[1]) == _shape(res))
        if not ok:
            keep.update(id(a) for a in used)
    return {k: v for k, v in cand.items() if k not in keep}


def _fused_pairs(tape: list, out_leaves: list[Any]) -> dict[int, int]:
    """``{k: m}``: tape entry ``m`` applies primitive ``second`` to the result of entry ``k``
    (``first``) as its first argument (its further arguments, if any, are others), a pair of
    ``tracer.FUSED_PAIRS``, and nothing else (no other entry, no output) reads that result: the
    step runs the two as the pair's one function at ``m``, nothing at ``k``."""
    if not FUSED_PAIRS:
        return {}
    made = {id(res): k for k, (_p, _a, _kw, res) in enumerate(tape)}
    reads: dict[int, int] = {}  # id(result) -> how many times an entry reads it
    for _p, args, kwargs, _res in tape:
        for a in (*args, *kwargs.values()):
            items = a if isinstance(a, list | tuple) else (a,)
            for x in items:
                reads[id(x)] = reads.get(id(x), 0) + 1
    outs = {id(o) for o in out_leaves}
    pairs = {}
    for m, (p, args, kwargs, _res) in enumerate(tape):
        k = made.get(id(args[0])) if args and not kwargs else None
        if k is None or (tape[k][0].name, p.name) not in FUSED_PAIRS:
            continue
        first = tape[k][3]
        if reads.get(id(first)) == 1 and id(first) not in outs:
            pairs[k] = m
    return pairs


def _emit(tape: list, names: _Names, skip: dict[int, Any] | None = None,
          fused: dict[int, int] | None = None, sync: _GradSync | None = None,
          ) -> tuple[list, dict[str, tuple[str, str, str, np.ndarray]], set[str]]:
    """One line of source per op on the tape (identity-like ops and the broadcasts in ``skip``
    just rename; the pairs in ``fused`` are one line, at the second's place: the pair's function
    on the first's arguments, the second's further arguments as ``then=(...)``), the in-place
    forms of the lines whose primitive can write into a given buffer (see _reuse_buffers), and
    the lines whose primitive makes a new array (``Primitive.fresh``)."""
    lines: list[tuple[str, str, set[str]]] = []  # (target, code, names used)
    writers: dict[str, tuple[str, str, str, np.ndarray]] = {}
    fresh: set[str] = set()
    skip = skip or {}
    fused = fused or {}
    second = {m: k for k, m in fused.items()}
    for k, (p, args, kwargs, res) in enumerate(tape):
        names.keep_alive.append(res)
        if getattr(p, "effect", False):
            lines += _emit_effect(k, tape[k], names, sync or _GradSync({}))
            continue
        if p.fwd is None:
            raise RuntimeError(f"rlgrad.jit: {p.name} cannot be compiled")
        if p.name in _INDEX_OPS and len(args) > 1:
            _refuse_traced_mask(args[1], names.by_array)
        if k in fused:  # computed with the op that reads it
            continue
        if id(res) in skip:
            name = names.ref(skip[id(res)])
        elif p.name in _ALIAS_OPS and len(args) == 1 and not kwargs:
            name = names.ref(args[0])
        else:
            name = f"v{k}"
            op_name, fwd, then = p.name, p.fwd, ()
            if k in second:  # the pair's function on the first's arguments
                then = args[1:]
                fp, args, kwargs = tape[second[k]][:3]
                op_name, fwd = f"{fp.name}+{p.name}", FUSED_PAIRS[(fp.name, p.name)]
            fn = names.const(fwd)
            arg_src = [names.ref(a) for a in args]
            kw_src = [f"{key}={names.ref(v)}" for key, v in kwargs.items()]
            if then:
                kw_src.append(f"then=({''.join(names.ref(a) + ', ' for a in then)})")
            call_args = ", ".join(arg_src + kw_src)
            code = f"{name} = {fn}({call_args})  # {op_name}"
            lines.append((name, code, _names(code)))
            value = res._value
            if (p.writes_out and type(value) is np.ndarray and value.ndim
                    and "out" not in kwargs):  # (forward, its arguments, op name, traced value)
                writers[name] = (fn, call_args, op_name, value)
            if p.fresh:
                fresh.add(name)
        names.bind(res, name)
    return lines, writers, fresh


def _live_lines(lines: list, outs: list[str]) -> list:
    """Dead-code elimination: the lines an output depends on, found from the outputs back."""
    needed = set().union(*(_names(o) for o in outs)) if outs else set()
    body = []
    for target, code, used in reversed(lines):
        if target in needed or _is_effect(target):
            body.append((target, code, used))
            needed.update(used)
    body.reverse()
    return body


def _build_step(body: list, outs: list[str], out_def: Any, n_inputs: int, consts: dict[str, Any],
                keep_alive: list[Any], prologue: list[str] | None = None,
                structure: Callable[[Any, Any, Callable[[Any], str]], str] | None = None,
                ) -> _Compiled:
    """The straight-line source ``def step(a0, a1, ...)`` of ``prologue`` and ``body``, compiled."""
    def const(value: Any) -> str:
        name = f"c{len(consts)}"
        consts[name] = value
        return name

    params = ", ".join(f"a{i}" for i in range(n_inputs))
    src = f"def step({params}):\n"
    src += "".join(f"    {code}\n" for code in prologue or ())
    src += "".join(f"    {code}\n" for _, code, _ in body)
    src += f"    return {(structure or _structure_source)(out_def, iter(outs), const)}\n"
    namespace = dict(consts)
    exec(builtins.compile(src, "<rlgrad.jit>", "exec"), namespace)  # noqa: S102 - our own generated code
    step = namespace["step"]
    step.__rlgrad_keep_alive__ = keep_alive
    return _Compiled(step, src, len(body))


def _refuse_traced_mask(idx: Any, by_array: dict[int, str]) -> None:
    """A boolean mask made from the traced values selects a data-dependent number of elements:
    the step's shapes (and its buffers) would be those of the first call."""
    for part in idx if isinstance(idx, tuple | list) else (idx,):
        if isinstance(part, np.ndarray) and part.dtype == bool and id(part) in by_array:
            raise RuntimeError(
                "rlgrad.jit: indexing with a boolean mask of the traced values selects a number "
                "of elements that depends on the data, which a compiled step cannot replay; use "
                "rlgrad.numpy.where(mask, x, 0) (and a sum or mean over it) instead"
            )


def _memory_order(a: np.ndarray) -> tuple[int, ...]:
    """The axes from the largest stride to the smallest: (0, 1, ..., n-1) for C order, and e.g.
    (0, 2, 3, 1) for conv2d's NCHW view of channels-last memory."""
    if a.flags.c_contiguous:
        return tuple(range(a.ndim))
    return tuple(sorted(range(a.ndim), key=lambda i: -a.strides[i]))  # stable: ties keep C order


def _buffer_key(value: np.ndarray) -> tuple:
    return value.shape, value.dtype.str, _memory_order(value)


def _buffer_like(value: np.ndarray) -> np.ndarray:
    """An aligned buffer with ``value``'s shape and memory order: a ufunc that writes a value
    laid out channels-last keeps writing it so (the convolution that reads it next needs no
    transposing copy)."""
    order = _memory_order(value)
    buf = _empty_aligned(tuple(value.shape[i] for i in order), value.dtype)
    return buf.transpose(np.argsort(order)) if order != tuple(range(value.ndim)) else buf


def _reuse_buffers(body: list, outs: list[str],
                   writers: dict[str, tuple[str, str, str, Any]],
                   const: Callable[[Any], str], fresh: set[str] | frozenset = frozenset()) -> list:
    """Write every intermediate value that can be written in place (its primitive has a
    ``writes_out``) into a buffer allocated here, once, instead of a fresh array per call: no
    allocator round trip, and memory that stays in cache from one call to the next.

    * A value the caller can still see after the call gets none: the outputs, and whatever an
      output may be a view of (ops without ``writes_out`` or ``fresh``, such as reshape or
      transpose, may return views of their arguments).
    * Values whose lives do not overlap share a buffer, as registers are allocated: a buffer is
      free again after the last line that reads its value or any view of it, and the line that
      writes a buffer never reads it. That keeps the step's working set about as small as the
      allocator's reuse of freed arrays did.

    The price: one compiled step must not run in two threads at once."""
    escaping = set().union(*(_names(o) for o in outs)) if outs else set()
    for target, _code, used in reversed(body):
        if target in escaping and target not in writers and target not in fresh:
            escaping.update(used)
    buffered = {t for t, _, _ in body if t in writers and t not in escaping}
    # roots[v]: the buffered values whose memory v may be (itself, or what it may be a view of)
    roots: dict[str, set[str]] = {}
    last_use: dict[str, int] = {}
    for i, (target, _code, used) in enumerate(body):
        for name in used:
            for r in roots.get(name, ()):
                last_use[r] = i
        if target in buffered:
            roots[target] = {target}
        elif target not in writers and target not in fresh:
            roots[target] = set().union(*(roots.get(n, set()) for n in used)) if used else set()
    free: dict[tuple, list[str]] = {}  # (shape, dtype) -> buffers no live value uses
    holder: dict[str, str] = {}  # buffered value -> its buffer's name
    releases: dict[int, list[str]] = {}
    for r, i in last_use.items():
        releases.setdefault(i, []).append(r)
    new_body = []
    for i, (target, code, used) in enumerate(body):
        if target in buffered:
            fn, args, op_name, value = writers[target]
            key = _buffer_key(value)
            pool = free.get(key)
            buf = pool.pop() if pool else const(_buffer_like(value))
            holder[target] = buf
            code = f"{target} = {fn}({args}, out={buf})  # {op_name}, in place"
            if target not in last_use:  # never read: free at once
                free.setdefault(key, []).append(buf)
        for r in releases.get(i, ()):  # after this line, these buffers are free again
            free.setdefault(_buffer_key(writers[r][3]), []).append(holder[r])
        new_body.append((target, code, used))
    return new_body


def _tensor_out(value: Any) -> Tensor:
    """An output the function returned as a Tensor, as one (0-d too: never a NumPy scalar)."""
    return constant(value if type(value) is np.ndarray else np.asarray(value))


def _tensor_structure(as_tensor: list[bool]) -> Callable[[Any, Any, Callable[[Any], str]], str]:
    """``_structure_source`` with the leaves marked in ``as_tensor`` wrapped by ``_tensor_out``
    (the NumPy replay and the native backend build their outputs with it)."""
    def structure(treedef: Any, names: Any, const: Callable[[Any], str]) -> str:
        fn = const(_tensor_out)
        marked = [f"{fn}({n})" if t else n for n, t in zip(names, as_tensor)]
        return _structure_source(treedef, iter(marked), const)
    return structure


def _structure_source(treedef: Any, names: Any, const: Callable[[Any], str]) -> str:
    """Source that builds the output pytree directly (no unflattening at every call), as
    ``tree_unflatten`` builds it."""
    if treedef is None:
        return next(names)
    kind, keys, defs = treedef
    parts = [_structure_source(d, names, const) for d in defs]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(keys, parts)) + "}"
    if kind == "node":  # a registered class: its unflatten(aux, children)
        return f"{const(PYTREE_NODES[keys[0]][1])}({const(keys[1])}, {parts[0]})"
    if kind is list:
        return "[" + ", ".join(parts) + "]"
    if kind is tuple:
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if hasattr(kind, "_fields"):  # a namedtuple
        return f"{const(kind)}({', '.join(parts)})"
    return f"{const(kind)}([{', '.join(parts)}])"


def _fold_constants(lines: list[tuple[str, str, set[str]]], consts: dict[str, Any]) -> list:
    """Evaluate, once, the lines that read no argument and no outside tensor (e.g. the seed
    gradient of the backward pass and what is computed from it alone)."""
    kept = []
    folded: dict[str, Any] = {}
    for target, code, used in lines:
        if not used and "._value" not in code and not _is_effect(target):
            scope = {**consts, **folded}
            exec(code, scope)  # noqa: S102 - our own generated line
            folded[target] = scope[target]
        else:
            kept.append((target, code, used))
    for name, value in folded.items():
        consts[name] = value  # folded values become constants under their old names
    return kept


def _names(code: str) -> set[str]:
    rhs = code.split(" = ", 1)[1] if " = " in code else code  # a line, or a bare output name
    rhs = rhs.split("  #", 1)[0]
    return set(re.findall(r"\b(?:[va]\d+|e\d+(?:_\d+)?)\b", rhs))
