"""The native backend of ``rlgrad.jit``: a traced program lowered to one C function.

``rlgrad.jit(f, backend="auto" | "native")`` hands each program it traces to ``lower``: every
op the program needs is written in C by its entry of ``lowerings.LOWERINGS`` (with static shapes,
GEMMs through the BLAS NumPy uses), the module is built once by the C compiler that builds
rlgrad's own modules and cached on disk by the source's hash (``build.py``), and the program's
replay becomes one call into it. A program with an op that has no lowering, a replayed call
(``optimizer.step()``) or ``.grad`` updates, or a machine without a compiler keeps the NumPy
replay, which stays the reference: a lowered program is checked against the trace's values once,
at compile time, and falls back per call when an argument is not what it was traced with
(a non-contiguous array). docs/engine.md, "Native backend", says how to add an op.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from rlgrad.native import build
from rlgrad.native.codegen import (
    TYPENUMS,
    Program,
    Unsupported,
    Val,
    ctype,
    drop_dead_stores,
    literal,
    share_buffers,
)
from rlgrad.native.lowerings import LOWERINGS
from rlgrad.native.prelude import MODULE_END, prelude
from rlgrad.tensor import Tensor

__all__ = ["lower", "LOWERINGS", "Unsupported", "check_tolerance"]

LOG = logging.getLogger("rlgrad.jit")
BACKENDS = ("numpy", "native", "auto")
# The first call's check (``_verify``): each output against the trace's, within these fractions
# of the output's largest magnitude (at least 1). Loose, for any program: long scans, glibc's
# vector math against NumPy's, sums in another order. A caller that knows how far its program's
# rounding goes narrows them for its own trace (``check_tolerance``: the compiled DQN's probe).
CHECK_TOLERANCE = {"float32": 1e-3, "float64": 1e-6}
_CHECK: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "rlgrad_native_check", default=None)


@contextlib.contextmanager
def check_tolerance(float32: float | None = None, float64: float | None = None) -> Iterator[None]:
    """The first-call check's tolerances (``CHECK_TOLERANCE``'s) for the programs traced in the
    block; None keeps a dtype's default."""
    given = {"float32": float32, "float64": float64}
    token = _CHECK.set({k: CHECK_TOLERANCE[k] if v is None else float(v) for k, v in given.items()})
    try:
        yield
    finally:
        _CHECK.reset(token)


class Entry:
    """A tape entry as a lowering sees it (see lowerings.py)."""

    __slots__ = ("name", "args", "raw", "kwargs", "res", "tensor")

    def __init__(self, name: str, args: list, raw: list, kwargs: dict, tensor: Any) -> None:
        self.name, self.args, self.raw, self.kwargs = name, args, raw, kwargs
        self.tensor = tensor
        self.res = tensor._value if isinstance(tensor, Tensor) else tensor


def _raw(a: Any) -> Any:
    return a._value if isinstance(a, Tensor) else a


class _Lowering:
    """One program being lowered: the C under construction and what its names stand for."""

    def __init__(self, inputs: list[Tensor], slots: dict[int, int]) -> None:
        self.p = Program()
        self.vals: dict[int, Val] = {}  # id(Tensor) or id(its array) -> its value in C
        self.runtime: list[tuple[str, Any]] = []  # the C function's arguments, in order
        self.arg_vals: list[Val] = []
        self.slots = slots  # id(output made on the tape) -> its output slot
        self.slot_vals: dict[int, Val] = {}  # output slot -> its array in C
        # donation: the buffers an op may overwrite (the carries of the loop whose body is being
        # lowered), the tape entry being lowered and where each value is read last (id -> entry)
        self.donatable: set[str] = set()
        self.position = -1
        self.last_use: dict[int, float] = {}
        for i, t in enumerate(inputs):
            self._argument(("input", i), t._value, t)

    def _argument(self, what: tuple[str, Any], value: np.ndarray, key: Any) -> Val:
        """A new argument of the C function: ``what`` is ("input", i), ("tensor", t) (its value
        at each call) or ("const", array)."""
        arr = np.asarray(value)
        ctype(arr.dtype)  # (Unsupported for other dtypes)
        v = Val(arr.dtype, arr.shape, f"in{len(self.runtime)}")
        self.runtime.append(what)
        self.arg_vals.append(v)
        self.vals[id(key)] = v
        if isinstance(key, Tensor):
            self.vals[id(key._value)] = v
        return v

    def val(self, x: Any) -> Val:
        """``x`` (an argument of an op) as a C value."""
        if isinstance(x, Val):
            return x
        found = self.vals.get(id(x))
        if found is not None:
            return found
        if isinstance(x, Tensor):  # from outside (a parameter): read at every call
            return self._argument(("tensor", x), x._value, x)
        if type(x) is np.ndarray:
            return self._argument(("const", x), x, x)
        if isinstance(x, np.generic | bool | int | float) and not isinstance(x, complex):
            dt = x.dtype if isinstance(x, np.generic) else np.result_type(type(x))
            ctype(dt)
            return Val(dt, (), None, lit=literal(x))
        raise Unsupported(f"an argument of type {type(x).__name__}")

    def out(self, e: Entry) -> Val:
        """The buffer of ``e``'s result: its output array when the caller gets it."""
        res = np.asarray(e.res)
        slot = self.slots.get(id(e.tensor), self.slots.get(id(e.res)))
        if slot is not None and slot not in self.slot_vals:
            v = self.slot_vals[slot] = Val(res.dtype, res.shape, f"o{slot}")
            ctype(res.dtype)
            return v
        return self.p.buffer(res.dtype, res.shape)

    def pick(self, g: Val, table: Val, idx: Val, write: bool) -> None:
        """``g[r] = table[r, idx[r]]``, or ``table[r, idx[r]] = g[r]`` (``write``): NumPy's
        negative indices, and IndexError (from the call) outside the table."""
        n, k = table.shape
        r = f"r{len(self.p.lines)}"
        cell = table.at([r, "j"])
        move = f"{cell} = {g.at([r])};" if write else f"{g.at([r])} = {cell};"
        self.p.lines.append(
            f"for (npy_intp {r} = 0; {r} < {n}; {r}++) {{ int64_t j = (int64_t){idx.at([r])}; "
            f"if (j < 0) j += {k}; if (j < 0 || j >= {k}) {{ index_error(j < 0 ? j - {k} : j, {k}, 1); "
            f"goto fail; }} {move} }}")


    def body(self, tape: list, inputs: list[Tensor], given: list[Val], outs: list[Any],
             carries: Sequence[Val] = ()) -> list[Val]:
        """A loop body lowered here, its inputs bound to ``given`` (see ``lower_body``); its ops
        may write ``carries`` (the loop's own carry buffers) in place where donated."""
        saved = self.donatable, self.position, self.last_use
        self.donatable = {c.ptr for c in carries if c.ptr is not None}
        try:
            return lower_body(self, tape, inputs, given, outs)
        finally:
            self.donatable, self.position, self.last_use = saved

    def donated(self, x: Val) -> bool:
        """Whether the op being lowered may write its result over ``x``: a carry buffer of the
        loop being lowered (contiguous, whole) that no later op of the body reads, through
        ``x`` or any view of it, and that the body does not return as it is."""
        if x.ptr not in self.donatable or x.off != 0 or not x.contiguous():
            return False
        return all(v.ptr != x.ptr or self.last_use.get(key, -1) <= self.position
                   for key, v in self.vals.items())

    def along(self, out: Val, x: Val, idx: Val, axis: int) -> None:
        """``out[..., i, ...] = x[..., idx[..., i, ...], ...]`` along ``axis`` (the other axes
        broadcast, as NumPy's take_along_axis), negative indices wrapped, IndexError outside."""
        n = x.shape[axis]
        iv = self.p._loop_vars(len(out.shape))
        xv = x.broadcast(tuple(n if k == axis else m for k, m in enumerate(out.shape)))
        at = list(iv)
        at[axis] = "j"
        body = (f"{{ int64_t j = (int64_t){idx.broadcast(out.shape).at(iv)}; if (j < 0) j += {n}; "
                f"if (j < 0 || j >= {n}) {{ index_error(j < 0 ? j - {n} : j, {n}, {axis}); goto fail; }} "
                f"{out.at(iv)} = {xv.at(at)}; }}")
        self.p.lines += [f"for (npy_intp {v} = 0; {v} < {m}; {v}++)" for v, m in zip(iv, out.shape)]
        self.p.lines.append(body)

    def rows(self, g: Val, x: Val, idx: Val, scatter: bool) -> None:
        """``g[i] = x[idx[i]]`` over the rows of x's first axis, or ``x[idx[i]] += g[i]``
        (``scatter``: repeated rows add up, as ``np.add.at``); NumPy's negative indices, and
        IndexError outside."""
        n = x.shape[0]
        row = math.prod(x.shape[1:])
        r = f"r{len(self.p.lines)}"
        ri = [r] + [f"{r}_{k}" for k in range(len(idx.shape) - 1)]
        loops = "".join(f"for (npy_intp {v} = 0; {v} < {m}; {v}++) " for v, m in zip(ri, idx.shape))
        flat = " + ".join(f"{v}*{math.prod(idx.shape[k + 1:])}" for k, v in enumerate(ri)) or "0"
        at_j, at_i = f"{x.off} + j*{row} + c", f"{g.off} + ({flat})*{row} + c"
        move = (f"{x.ptr}[{at_j}] += {g.ptr}[{at_i}];" if scatter else f"{g.ptr}[{at_i}] = {x.ptr}[{at_j}];")
        self.p.lines.append(
            f"{loops}{{ int64_t j = (int64_t){idx.at(ri)}; if (j < 0) j += {n}; "
            f"if (j < 0 || j >= {n}) {{ index_error(j < 0 ? j - {n} : j, {n}, 0); goto fail; }} "
            f"for (npy_intp c = 0; c < {row}; c++) {move} }}")


def _convert(ctx: _Lowering, a: Any) -> Any:
    if isinstance(a, Tensor | np.ndarray):
        return ctx.val(a)
    if isinstance(a, list | tuple) and any(isinstance(x, Tensor | np.ndarray) for x in a):
        return type(a)(_convert(ctx, x) for x in a)
    return a


def _arrays_in(args: Any) -> list[Any]:
    found = []
    for a in args:
        if isinstance(a, Tensor | np.ndarray):
            found.append(a)
        elif isinstance(a, list | tuple):
            found += _arrays_in(a)
    return found


def _live(tape: list, outs: list[Any], inputs: list[Any]) -> tuple[list[int], set[int]]:
    """(the tape entries the outputs need, in order; the ids of values computed from the
    arguments (``inputs``: Tensors) or from outside tensors: the others are constants, folded
    at compile time)."""
    made = {}
    for k, (_p, _a, _kw, res) in enumerate(tape):
        made[id(res)] = k
        if isinstance(res, Tensor):
            made[id(res._value)] = k
    need = {id(o) for o in outs}
    live = []
    for k in range(len(tape) - 1, -1, -1):
        _p, args, kwargs, res = tape[k]
        if id(res) in need or (isinstance(res, Tensor) and id(res._value) in need):
            live.append(k)
            need.update(id(a) for a in _arrays_in([*args, *kwargs.values()]))
    live.reverse()
    varying = {id(t) for t in inputs} | {id(_raw(t)) for t in inputs}
    for k in live:
        _p, args, kwargs, res = tape[k]
        if any(id(a) in varying or (isinstance(a, Tensor) and id(a) not in made)
               for a in _arrays_in([*args, *kwargs.values()])):
            varying.update((id(res), id(_raw(res))))
    return live, varying


def _last_uses(tape: list, live: list[int], outs: list[Any]) -> dict[int, float]:
    """id of a value (Tensor or array) -> the last live entry that reads it (inf: an output)."""
    last: dict[int, float] = {}
    for k in live:
        _p, args, kwargs, _res = tape[k]
        for a in _arrays_in([*args, *kwargs.values()]):
            last[id(a)] = last[id(_raw(a))] = k
    for o in outs:
        last[id(o)] = last[id(_raw(o))] = math.inf
    return last


def _lower_tape(ctx: _Lowering, tape: list, live: list[int], varying: set[int]) -> None:
    for k in live:
        ctx.position = k
        p, args, kwargs, res = tape[k]
        if getattr(p, "effect", False):
            raise Unsupported(f"the replayed call {p.name}")
        if id(res) not in varying:  # computed from constants alone: its traced value
            ctx.vals[id(res)] = ctx.val(np.array(_raw(res)))
            continue
        fn = LOWERINGS.get(p.name)
        if fn is None:
            raise Unsupported(f"op {p.name!r} has no native lowering")
        e = Entry(p.name, [_convert(ctx, a) for a in args], [_raw(a) for a in args],
                  {key: _convert(ctx, v) for key, v in kwargs.items()}, res)
        v = fn(ctx, e)
        want = np.asarray(e.res)
        if v.shape != want.shape or v.dtype != want.dtype:
            raise LoweringError(f"the lowering of {p.name} gives {v.dtype}{list(v.shape)}, "
                                f"the trace {want.dtype}{list(want.shape)}")
        ctx.vals[id(res)] = v
        if isinstance(res, Tensor):
            ctx.vals[id(res._value)] = v


def lower_body(ctx: _Lowering, tape: list, inputs: list[Tensor], given: list[Val],
               outs: list[Any]) -> list[Val]:
    """Lower a loop body's tape (lax) into ``ctx`` with its ``inputs`` (carries, slices of the
    scanned arrays, captured tensors) bound to the values ``given``: its outputs' values."""
    for t, v in zip(inputs, given):
        ctx.vals[id(t)] = v
        ctx.vals[id(t._value)] = v
    live, varying = _live(tape, outs, inputs)
    ctx.last_use = _last_uses(tape, live, outs)
    _lower_tape(ctx, tape, live, varying)
    return [ctx.val(o) for o in outs]


class LoweringError(RuntimeError):
    """A lowering or the compiler got a program wrong: a bug, never an unsupported op."""




def _slots(tape: list, outs: list[Any]) -> dict[int, int]:
    """{id(output): slot} for the outputs the tape computes (the first of repeated ones)."""
    made = set()
    for _p, _a, _kw, res in tape:
        made.add(id(res))
        if isinstance(res, Tensor):
            made.add(id(res._value))
    slots: dict[int, int] = {}
    for o in outs:
        if id(o) in made and id(o) not in slots:
            slots[id(o)] = len(slots)
    return slots


def _finish_outputs(ctx: _Lowering) -> None:
    """Every output slot holds its value: a view, an argument or a constant is copied in."""
    for key, j in ctx.slots.items():
        if j not in ctx.slot_vals:
            v = ctx.vals[key]
            dst = ctx.slot_vals[j] = Val(v.dtype, v.shape, f"o{j}")
            ctx.p.elementwise(dst, lambda x: x[0], [v])


def _c_source(ctx: _Lowering, scalar: set[int]) -> str:
    """The whole module: prelude, buffers, ``step(*arrays)`` -> tuple of outputs, or None when
    an argument is not what the program was traced with (``scalar``: slots returned as NumPy
    scalars, as the replay returns them)."""
    n = len(ctx.runtime)
    head = ["static PyObject *step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {",
            f"    if (nargs != {n}) {{ PyErr_SetString(PyExc_TypeError, \"rlgrad.jit (native): "
            f"{n} arrays expected\"); return NULL; }}"]
    decl = []
    for j, v in enumerate(ctx.arg_vals):
        decl.append(f"static const npy_intp dims_in{j}[] = {{{', '.join(map(str, v.shape)) or '0'}}};")
        head += [f"    if (!arg_ok(args[{j}], {TYPENUMS[v.dtype]}, {len(v.shape)}, dims_in{j})) "
                 "Py_RETURN_NONE;",
                 f"    const {ctype(v.dtype)} *in{j} = PyArray_DATA((PyArrayObject *)args[{j}]);"]
    slots = sorted(ctx.slot_vals)
    head += [f"    PyObject *r{j} = NULL;" for j in slots]
    for j in slots:
        v = ctx.slot_vals[j]
        decl.append(f"static const npy_intp dims_o{j}[] = {{{', '.join(map(str, v.shape)) or '0'}}};")
        head += [f"    r{j} = PyArray_SimpleNew({len(v.shape)}, (npy_intp *)dims_o{j}, "
                 f"{TYPENUMS[v.dtype]});",
                 f"    if (!r{j}) goto fail;",
                 f"    {ctype(v.dtype)} *o{j} = PyArray_DATA((PyArrayObject *)r{j});"]
    packed = ", ".join(f"PyArray_Return((PyArrayObject *)r{j})" if j in scalar else f"r{j}"
                       for j in slots)
    tail = ["    }", f"    return Py_BuildValue(\"({'N' * len(slots)})\"{', ' if slots else ''}{packed});",
            "fail:", *[f"    Py_XDECREF(r{j});" for j in slots], "    return NULL;", "}"]
    lines = drop_dead_stores(ctx.p.lines)
    body = ["    " + ln for ln in lines]
    statics = share_buffers(ctx.p.statics, lines)
    return "\n".join([prelude(), *statics, *decl, *head, "    {", *body, *tail, MODULE_END])


def _kernel(inputs: list[Tensor], tape: list, outs: list[Any], pure: bool,
            ) -> tuple[_Lowering, Any, str]:
    """(the lowering, the built module's ``step``, its C source); raises Unsupported."""
    if not pure:
        raise Unsupported("the program makes replayed calls (an optimizer's step), sets .grad or "
                          "makes a buffer again at every call")
    if build.compiler() is None:
        raise Unsupported("no C compiler (sysconfig's CC) on this machine")
    slots = _slots(tape, outs)
    ctx = _Lowering(inputs, slots)
    live, varying = _live(tape, outs, inputs)
    _lower_tape(ctx, tape, live, varying)
    _finish_outputs(ctx)
    scalar = {slots[id(o)] for o in outs if id(o) in slots and isinstance(_raw(o), np.generic)}
    source = _c_source(ctx, scalar)
    try:
        module = build.build(source)
    except build.BuildError as e:
        raise LoweringError(str(e)) from None
    except build.Unavailable as e:
        raise Unsupported(str(e)) from None
    return ctx, module.step, source


def _runtime_values(ctx: _Lowering, inputs: list[Tensor]) -> list[Any]:
    return [inputs[x]._value if what == "input" else x._value if what == "tensor" else x
            for what, x in ctx.runtime]


def _verify(ctx: _Lowering, kernel: Any, inputs: list[Tensor], outs: list[Any]) -> None:
    """The kernel on the traced arguments gives the traced outputs, within float rounding
    (``CHECK_TOLERANCE``, or ``check_tolerance``'s: float32 1e-3, float64 1e-6 of the output's
    largest magnitude by default)."""
    tols = _CHECK.get() or CHECK_TOLERANCE
    got = kernel(*_runtime_values(ctx, inputs))
    if got is None:  # the trace's own arrays are not contiguous: nothing to compare
        return
    firsts = {}
    for o in outs:
        firsts.setdefault(ctx.slots.get(id(o)), o)
    for j, g in enumerate(got):
        want = np.asarray(_raw(firsts[j]))
        g = np.asarray(g)
        tol = tols["float32"] if want.dtype == np.float32 else tols["float64"]
        finite = np.abs(want[np.isfinite(want)]) if want.dtype.kind == "f" else np.abs(want)
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        if g.shape != want.shape or g.dtype != want.dtype or not np.allclose(
                g, want, rtol=tol, atol=tol * scale, equal_nan=True):
            raise LoweringError(f"output {j} differs from the trace's (max difference "
                                f"{np.max(np.abs(g.astype(float) - want.astype(float)), initial=0)})")


def _wrapper(ctx: _Lowering, kernel: Any, numpy_step: Callable, n_inputs: int, outs: list[Any],
             out_src: list[str], out_def: Any, consts: dict[str, Any],
             structure_source: Callable) -> Callable:
    """``step(a0, ...)``: the kernel's call (on C-contiguous copies of the arguments when one is
    laid out otherwise: a copy costs less than the replay), the NumPy replay when it still
    declines them, and the output pytree built as jit builds it."""
    namespace = dict(consts)
    namespace["_kernel"], namespace["_numpy_step"] = kernel, numpy_step
    namespace["_c"] = np.ascontiguousarray
    args = []
    for j, (what, x) in enumerate(ctx.runtime):
        if what == "input":
            args.append(f"a{x}")
        else:
            namespace[f"_arg{j}"] = x
            args.append(f"_arg{j}._value" if what == "tensor" else f"_arg{j}")
    pos = {key: k for k, key in enumerate(sorted(ctx.slots, key=ctx.slots.get))}
    names = [f"r[{pos[id(o)]}]" if id(o) in pos else src for o, src in zip(outs, out_src)]
    if any(n.startswith("v") for n in names):
        raise Unsupported("an output the kernel does not compute")

    def const(value: Any) -> str:
        name = f"_c{len(namespace)}"
        namespace[name] = value
        return name

    params = ", ".join(f"a{i}" for i in range(n_inputs))
    src = (f"def step({params}):\n    r = _kernel({', '.join(args)})\n    if r is None:\n"
           f"        r = _kernel({', '.join(f'_c({a})' for a in args)})\n    if r is None:\n"
           f"        return _numpy_step({params})\n"
           f"    return {structure_source(out_def, iter(names), const)}\n")
    exec(compile(src, "<rlgrad.jit native>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["step"]


def lower(compiled: Any, inputs: list[Tensor], tape: list, outs: list[Any], out_def: Any,
          out_src: list[str], consts: dict[str, Any], mode: str, pure: bool,
          structure_source: Callable) -> None:
    """Replace ``compiled.fn`` (jit's NumPy replay) by the native program when ``mode`` asks
    for it and every op lowers; say which runs in ``compiled.backend`` and in the log."""
    compiled.backend = "numpy"
    if mode == "numpy":
        return
    t0 = time.perf_counter()
    try:
        ctx, kernel, source = _kernel(inputs, tape, outs, pure)
        _verify(ctx, kernel, inputs, outs)
        fn = _wrapper(ctx, kernel, compiled.fn, len(inputs), outs, out_src, out_def, consts,
                      structure_source)
    except Unsupported as e:
        (LOG.warning if mode == "native" else LOG.debug)(
            "rlgrad.jit: the NumPy replay runs: %s", e)
        return
    except LoweringError as e:
        if os.environ.get("RLGRAD_NATIVE_STRICT") == "1":
            raise
        LOG.warning("rlgrad.jit: the NumPy replay runs: native lowering failed: %s", e)
        return
    compiled.fn, compiled.backend, compiled.native_source = fn, "native", source
    LOG.debug("rlgrad.jit: native code runs (%d ops, %s in %.2f s)", compiled.n_ops,
              "loaded from the cache" if build.last_was_cached() else "built", time.perf_counter() - t0)

