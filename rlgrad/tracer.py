"""Recording the forward pass: grad mode, primitives and how a call to one is traced.

A *primitive* is a NumPy-level function together with one vector-Jacobian product (VJP) rule per
differentiable argument.  Calling a primitive:

* with no Tensor among its arguments runs the NumPy function and returns its plain result: this
  is what makes ``rlgrad.numpy`` free to use on arrays, and what makes the fast backward pass fast
  (rules are written with these same functions and receive plain arrays there);
* with Tensors that need no gradient (or under ``no_grad``) returns a constant Tensor;
* otherwise returns a Tensor that remembers the primitive and its arguments (``_op``, ``_args``,
  ``_kw``).  That is the whole tape: the backward pass in ``core.py`` walks these links.

VJP rules have the signature ``rule(g, ans, *args, **kwargs) -> gradient for that argument`` and
are written with differentiable operations, so that when ``create_graph=True`` the backward pass,
run on Tensors, is itself recorded and can be differentiated again.

JVP rules (forward mode, ``forward.py``) sit beside them: ``defjvp(fn, *rules)`` with
``rule(t, ans, *args, **kwargs) -> the output's tangent from argument's tangent t``, written the
same way (so forward mode nests with itself and with reverse mode); ``defjvp_is_linear`` for
primitives linear in their arguments; ``defjvp_elementwise`` for elementwise ones.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from typing import Any, Protocol, cast

import numpy as np

from rlgrad.tensor import (
    Tensor,
    TraceError,
    _new,
    _next_seq,
    _Trace,
    born_in_trace,
    constant,
    user_line,
)

try:  # optional C module (setup.py): a graph node made in one call; RLGRAD_ENGINE=0: Python's
    from rlgrad import _engine
except ImportError:
    _engine = None
if os.environ.get("RLGRAD_ENGINE", "1") == "0":
    _engine = None
if _engine is not None and getattr(_engine, "API", 0) != 2:  # built from an older _engine.c
    warnings.warn("rlgrad._engine is out of date with its source: the engine runs its Python "
                  "code until it is rebuilt (pip install -e . or python setup.py build_ext "
                  "--inplace)", RuntimeWarning, stacklevel=2)
    _engine = None
if _engine is not None:
    _engine.init_tensor(Tensor, _next_seq)
_c_node = None if _engine is None else _engine.node


class _GradMode:
    """Global switch for recording. Not thread-local: rlgrad's RL code runs one learner thread."""

    enabled = True


def is_grad_enabled() -> bool:
    return _GradMode.enabled


class _GradModeContext:
    _target = True

    def __new__(cls, *args: Any) -> Any:
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]):
            return cls()(args[0])  # bare ``@no_grad`` (torch allows it too)
        return super().__new__(cls)

    def __enter__(self) -> None:
        self._prev = _GradMode.enabled
        _GradMode.enabled = self._target

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:  # usable as a decorator, like torch's
        target = self._target
        if inspect.isgeneratorfunction(fn):
            return _generator_in_mode(fn, target)

        wrapper = _in_mode(fn, target)
        wrapper.__name__ = getattr(fn, "__name__", "wrapped")
        wrapper.__doc__ = fn.__doc__
        return wrapper


def _in_mode(fn: Callable, enabled: bool) -> Callable:
    """``fn`` called with gradient recording set to ``enabled``, the mode restored after."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        prev = _GradMode.enabled
        _GradMode.enabled = enabled
        try:
            return fn(*args, **kwargs)
        finally:
            _GradMode.enabled = prev

    return wrapper


def _generator_in_mode(fn: Callable, target: bool) -> Callable:
    """A decorated generator function: the mode holds while its body runs, from each resumption
    to the next yield (the caller's mode in between), as torch's decorators do."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gen = fn(*args, **kwargs)
        step, arg = gen.send, None  # what resumes the body next: a sent value or a thrown error
        while True:
            prev = _GradMode.enabled
            _GradMode.enabled = target
            try:
                item = step(arg)
            except StopIteration as stop:
                return stop.value
            finally:
                _GradMode.enabled = prev
            try:
                arg, step = (yield item), gen.send
            except GeneratorExit:
                gen.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the body, as torch's
                arg, step = exc, gen.throw

    wrapper.__name__ = getattr(fn, "__name__", "wrapped")
    wrapper.__doc__ = fn.__doc__
    return wrapper


class no_grad(_GradModeContext):
    """Context manager / decorator: operations inside record nothing (as ``torch.no_grad``)."""

    _target = False


class enable_grad(_GradModeContext):
    """Context manager / decorator: turn recording back on inside a ``no_grad`` block."""

    _target = True


class _InferenceMode:
    enabled = False


def is_inference_mode_enabled() -> bool:
    return _InferenceMode.enabled


class inference_mode(_GradModeContext):
    """``torch.inference_mode(mode=True)``: a context manager / decorator in which nothing is
    recorded, as ``no_grad`` (rlgrad has no separate inference tensors: tensors made inside are
    ordinary constants, usable in a graph afterwards); ``mode=False`` leaves recording as it
    is. ``is_inference_mode_enabled()`` says whether one is active."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self._prev = (_GradMode.enabled, _InferenceMode.enabled)
        if self.mode:
            _GradMode.enabled = False
        _InferenceMode.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled, _InferenceMode.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:
        mode = self.mode

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(mode):
                return fn(*args, **kwargs)

        wrapper.__name__ = getattr(fn, "__name__", "wrapped")
        wrapper.__doc__ = fn.__doc__
        return wrapper


class set_grad_enabled(_GradModeContext):
    """As torch's: called on its own it sets the mode; as a context manager or decorator it
    sets it inside and restores the previous mode after."""

    def __init__(self, mode: bool) -> None:
        self._target = bool(mode)
        self._prev = _GradMode.enabled
        _GradMode.enabled = self._target

    def __enter__(self) -> None:  # the previous mode was saved by __init__
        _GradMode.enabled = self._target

    def __call__(self, fn: Callable) -> Callable:
        _GradMode.enabled = self._prev  # decorating changes nothing outside the function
        return super().__call__(fn)


class Primitive:
    """One differentiable operation: its NumPy forward and its VJP rules, side by side."""

    __slots__ = ("name", "fwd", "writes_out", "fresh", "vjps", "vjp_argnum", "nondiff",
                 "cut_reason", "jvps", "jvp_argnum", "jvp_linear", "call", "batch")

    def __init__(self, fwd: Callable, name: str, nondiff: bool = False,
                 writes_out: bool = False, fresh: bool = False) -> None:
        self.fwd = fwd
        # Whether ``fwd(*args, out=buf, **kwargs)`` writes its result into ``buf`` (a ufunc does),
        # for ``rlgrad.jit``'s reused buffers; False: the op may return a view.
        self.writes_out = writes_out or isinstance(fwd, np.ufunc)
        # Whether the result is always a new array, never a view of an argument (so a compiled
        # step's output made by it does not keep its arguments' buffers from being reused)
        self.fresh = fresh or self.writes_out
        self.name = name
        self.vjps: tuple[Callable | None, ...] | None = None
        self.vjp_argnum: Callable | None = None  # rule(i, g, ans, *args) for variadic primitives
        # Forward mode (forward.py): one JVP rule per argument, or one for all (variadic), or
        # the argument positions in which the primitive is linear (None: all of them).
        self.jvps: tuple[Callable | None, ...] | None = None
        self.jvp_argnum: Callable | None = None
        self.jvp_linear: tuple[int, ...] | bool = False
        self.call: Callable | None = None  # the traced callable primitive() returns
        # vmap (batching.py): a rule ``rule(p, args, dims, level, **kwargs)``, the name of one of
        # batching.RULES ("elementwise", "reduce" ...), NotBatchable(reason), or None (no rule yet)
        self.batch: Callable | str | NotBatchable | None = None
        self.nondiff = nondiff  # output never carries a gradient (comparisons, argmax, ...)
        # Why an output carries no gradient although an input required one (for explain).
        if nondiff:
            self.cut_reason = "stop_gradient" if name == "stop_gradient" else "non-differentiable op"
        else:
            self.cut_reason = "no_grad"

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


class NotBatchable:
    """A primitive's batching slot when vmap cannot batch it: ``reason`` says what to do instead."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


#: the open vmap levels (``rlgrad/batching.py`` pushes and pops them): while one is open, every
#: primitive call goes through ``_batched`` first, which applies the primitive's batching rule
#: when an argument is a batched tensor (and the plain path otherwise)
VMAP_LEVELS: list = []
_batched: list[Callable] = []  # [batching.dispatch], set when rlgrad.batching is imported


def apply(p: Primitive, args: tuple, kwargs: dict) -> Any:
    """Run primitive ``p`` on ``args`` and record it when an argument requires grad."""
    if VMAP_LEVELS:
        return _batched[0](p, args, kwargs)
    return apply_plain(p, args, kwargs)


def apply_plain(p: Primitive, args: tuple, kwargs: dict) -> Any:
    """``apply`` without vmap's dispatch: what a batching rule's inner calls end in."""
    raw = None
    needs_grad = False
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            if raw is None:
                raw = list(args)
            raw[i] = a._value
            if a.requires_grad:
                needs_grad = True
    if raw is None:  # no Tensor at all: plain NumPy in, plain NumPy out
        return p.fwd(*args, **kwargs)
    return _record(p, p.fwd(*raw, **kwargs), args, kwargs, needs_grad)


def _record(p: Primitive, out: Any, args: tuple, kwargs: dict, needs_grad: bool) -> Tensor:
    """The Tensor a call of ``p`` on Tensors returns, and the one place a call is recorded: a
    node of the graph when an argument requires grad (and recording is on), else a constant that
    remembers where a gradient path was cut (for ``explain``); on a trace's tape either way."""
    if needs_grad and _GradMode.enabled and not p.nondiff:
        if _c_node is not None:  # the same node, made in C
            res = _c_node(p, out, args, kwargs)
            if _Trace.tape is not None:
                _Trace.tape.append((p, args, kwargs, res))
            return res
        res = _new(Tensor)  # Tensor.__init__'s checks skipped: out is NumPy's result
        res._value = out
        res.requires_grad = True
        res.grad = None
        res._op = p
        res._args = args
        res._kw = kwargs
        res._retain = False
        res._seq = _next_seq()  # no _cut: a node requires grad, so _record never reads it
        res._written = 0
    else:
        res = constant(out)
        if needs_grad:
            res._cut = (p.name, p.cut_reason, args)
        else:
            for a in args:
                if isinstance(a, Tensor) and getattr(a, "_cut", None) is not None:
                    res._cut = (p.name, "via", args)  # keeps the way back to a cut (for explain)
                    break
    if _Trace.tape is not None:
        _Trace.tape.append((p, args, kwargs, res))
    return res


_NO_KW: dict = {}


class _CutMark:
    """Stands on a trace tape for a value made outside every primitive (a ``sample()``)."""

    nondiff = True
    fwd = None

    def __init__(self, name: str) -> None:
        self.name = name


def mark_cut(t: Tensor, reason: str, sources: tuple) -> Tensor:
    """Record on ``t`` that it was made from ``sources`` without a gradient path (e.g. a
    distribution's ``sample()``), so ``rlgrad.explain`` can say which op cut the path."""
    t._cut = (reason, reason, sources)
    if _Trace.tape is not None:
        if _Trace.compiling:
            raise RuntimeError(
                f"rlgrad.jit: a {reason}() inside the traced function would be frozen into the "
                "compiled step (the same draw at every call); draw the noise outside and pass it "
                "as an argument (e.g. rsample's standard-normal noise)"
            )
        _Trace.tape.append((_CutMark(reason), sources, _NO_KW, t))
    return t


def _unary(p: Primitive) -> Callable:
    """The call path of a primitive with one tensor argument, then static ones (axes, shapes,
    indices): ``apply`` specialised, with no list building."""

    def call(x: Any, *static: Any, **kwargs: Any) -> Any:
        if VMAP_LEVELS:
            return _batched[0](p, (x, *static), kwargs)
        if not isinstance(x, Tensor):
            return p.fwd(x, *static, **kwargs)
        out = p.fwd(x._value, *static, **kwargs)
        args = (x, *static) if static else (x,)
        if x.requires_grad and _c_node is not None and _GradMode.enabled and not p.nondiff \
                and _Trace.tape is None:  # _record's node, made in C without _record's frame
            return _c_node(p, out, args, kwargs)
        return _record(p, out, args, kwargs, x.requires_grad)

    return call


def _binary(p: Primitive) -> Callable:
    """The call path of a two-argument primitive without keywords: the arithmetic operators."""

    def call(a: Any, b: Any) -> Any:
        if VMAP_LEVELS:
            return _batched[0](p, (a, b), _NO_KW)
        if isinstance(a, Tensor):
            rg = a.requires_grad
            if isinstance(b, Tensor):
                out = p.fwd(a._value, b._value)
                rg = rg or b.requires_grad
            else:
                out = p.fwd(a._value, b)
        elif isinstance(b, Tensor):
            out = p.fwd(a, b._value)
            rg = b.requires_grad
        else:
            return p.fwd(a, b)
        if rg and _c_node is not None and _GradMode.enabled and not p.nondiff \
                and _Trace.tape is None:  # _record's node, made in C without _record's frame
            return _c_node(p, out, (a, b), _NO_KW)
        return _record(p, out, (a, b), _NO_KW, rg)

    return call


#: ``{(first, second): fn}``: a compiled step (``rlgrad.jit``) runs primitive ``first`` and then
#: ``second`` on its result as the one call ``fn(*first's arguments, out=...)`` when nothing else
#: reads the first's result (e.g. a linear layer and its ReLU: one pass over the output less).
#: ``fn`` must give the bits of the two calls.
FUSED_PAIRS: dict[tuple[str, str], Callable] = {}


class PrimitiveFunction(Protocol):
    """What ``primitive`` returns: the traced function, its ``Primitive`` (the rules) attached."""

    primitive: Primitive
    __name__: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def primitive(fwd: Callable, name: str | None = None, nondiff: bool = False,
              arity: int | None = None, writes_out: bool = False,
              fresh: bool = False) -> PrimitiveFunction:
    """Wrap NumPy function ``fwd`` as a traced primitive; attach its rules with ``defvjp``.

    ``arity=1``: one tensor argument first, any further arguments static (never Tensors: axes,
    shapes, indices); ``arity=2``: two arguments, no keywords. Both pick a faster call path.
    ``writes_out=True``: ``fwd`` also takes ``out=`` and writes the same bits there, which lets
    compiled steps reuse one buffer per intermediate value (a NumPy ufunc always does).
    ``fresh=True`` (implied by ``writes_out``): ``fwd`` returns a new array, never a view of an
    argument, so the arguments of a compiled step's output made by it may live in reused buffers.
    """
    p = Primitive(fwd, name or getattr(fwd, "__name__", "op"), nondiff, writes_out, fresh)
    if arity == 1:
        call = _unary(p)
    elif arity == 2:
        call = _binary(p)
    else:
        def call(*args: Any, **kwargs: Any) -> Any:
            return apply(p, args, kwargs)
    call.__name__ = call.__qualname__ = p.name
    call.__doc__ = getattr(fwd, "__doc__", None)
    call.primitive = p  # type: ignore[attr-defined]  # a function object takes attributes
    p.call = call
    return cast(PrimitiveFunction, call)


def pass_through(g: Any, ans: Any, *args: Any, **kwargs: Any) -> Any:
    """The VJP rule of an argument that reaches the output unchanged (``a + b``, clone): ``g``
    itself. The backward loop recognises it and hands ``g`` on without calling it."""
    return g


def defvjp(fn: Callable, *rules: Callable | None) -> None:
    """Register one VJP rule per positional argument of primitive ``fn`` (None: not differentiable)."""
    fn.primitive.vjps = rules  # type: ignore[attr-defined]


def defvjp_argnum(fn: Callable, rule: Callable) -> None:
    """Register one rule ``rule(argnum, g, ans, *args, **kwargs)`` for a variadic primitive."""
    fn.primitive.vjp_argnum = rule  # type: ignore[attr-defined]


def defjvp(fn: Callable, *rules: Callable | None) -> None:
    """Register one JVP rule per positional argument of primitive ``fn``: ``rule(t, ans, *args,
    **kwargs)`` is the output's tangent due to that argument's tangent ``t`` (None: the argument
    carries no derivative, as a None VJP rule). The forward pass adds the rules' results and
    broadcasts them to the output's shape; rules are written with rlgrad's functions, as VJP
    rules are, so forward mode can itself be differentiated."""
    fn.primitive.jvps = rules  # type: ignore[attr-defined]


def defjvp_argnum(fn: Callable, rule: Callable) -> None:
    """One JVP rule ``rule(argnum, t, ans, *args, **kwargs)`` for a variadic primitive."""
    fn.primitive.jvp_argnum = rule  # type: ignore[attr-defined]


def defjvp_is_linear(fn: Callable, argnums: tuple[int, ...] | None = (0,)) -> None:
    """``fn`` is linear in the arguments at ``argnums`` together (None: all its positional
    arguments; the others are static: axes, shapes, indices, a condition): the output's tangent
    is ``fn`` itself applied to their tangents (zeros where an argument has none)."""
    fn.primitive.jvp_linear = True if argnums is None else tuple(argnums)  # type: ignore[attr-defined]


def defjvp_elementwise(fn: Callable) -> None:
    """An elementwise primitive's Jacobian is diagonal, so its own transpose: its VJP rules
    (the incoming value times the partial derivative, broadcasting) are its JVP rules."""
    p = fn.primitive  # type: ignore[attr-defined]
    if p.vjps is None:
        raise TypeError(f"defjvp_elementwise({p.name}): register its VJP rules first")
    p.jvps = p.vjps  # pass_through (the argument reaches the output unchanged) works both ways
    if p.batch is None:
        p.batch = "elementwise"  # and vmap batches it by broadcasting, as every elementwise op


def defbatch(fn: Callable, rule: Callable | str) -> None:
    """Register how ``vmap`` batches primitive ``fn``: ``rule(p, args, dims, level, **kwargs)``
    gets the arguments with the vmapped dimension (of length ``level.size``) at the front of
    those whose ``dims`` entry is 0 (None: not batched) and returns the result with it at the
    front (written with primitive calls, so it is recorded and differentiable); or the name of a
    generic rule in ``rlgrad.batching.RULES`` ("elementwise", "reduce", "shape" ...)."""
    fn.primitive.batch = rule  # type: ignore[attr-defined]


def nobatch(fn: Callable, reason: str) -> None:
    """``vmap`` refuses primitive ``fn`` with one line: ``reason`` says what to use instead."""
    fn.primitive.batch = NotBatchable(reason)  # type: ignore[attr-defined]


# ---- calls that change state, under rlgrad.jit -----------------------------------------------
class _Effect:
    """Stands on a jit tape for a call that changes state instead of computing a value (an
    in-place write, an optimizer's step, a target network's update): the compiled step makes
    the same call, at the same place, on that call's values. ``before``/``after``: the traced
    tensors' ``.grad`` around the call (the step sets them as the trace saw them)."""

    nondiff = True
    writes_out = False
    effect = True

    def __init__(self, fn: Callable, before: list, after: list) -> None:
        self.fwd = _in_mode(fn, _GradMode.enabled)  # made again under the grad mode it had
        self.name = getattr(fn, "__qualname__", "effect")
        self.before = before
        self.after = after


def note_grads(objs: Any, seen: set[int] | None = None) -> set[int]:
    """Remember the ``.grad`` of the Tensors in ``objs`` (lists, optimizers' parameters), before
    a call changes it, while jit traces; their ids."""
    seen = set() if seen is None else seen
    for o in objs:
        if isinstance(o, Tensor):
            seen.add(id(o))
            if id(o) not in _Trace.grads:
                _Trace.grads[id(o)] = [o, o.grad]
        elif isinstance(o, list | tuple):
            note_grads(o, seen)
        elif hasattr(o, "param_groups"):  # an optimizer
            note_grads([p for g in o.param_groups for p in g["params"]], seen)
        elif hasattr(o, "parameters") and callable(o.parameters):  # a module
            note_grads(list(o.parameters()), seen)
    return seen


def _grads_now() -> list:
    return [(t, t.grad) for t, _ in _Trace.grads.values()]


def replayed(fn: Callable, check: Callable | None = None) -> Callable:
    """``fn`` changes state (arrays in place, ``.grad``, an optimizer's counters): called while
    jit traces, it runs once as usual and is recorded as one call that the compiled step makes
    again, in order, with that call's values. Its inner operations are not traced. ``check``
    (called with the same arguments, while tracing only) raises for a call that cannot be
    replayed so."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _Trace.compiling:
            return fn(*args, **kwargs)
        if check is not None:
            check(*args, **kwargs)
        born = born_in_trace(args[0]) if args else None
        if born is not None:  # the compiled step makes the buffer again at every call
            if born[1].requires_grad:
                raise TraceError(
                    f"rlgrad.jit: {getattr(fn, '__name__', 'an in-place write')} at "
                    f"{user_line()} writes into a tensor made inside the jitted function with "
                    "requires_grad=True, whose gradient the compiled step cannot keep apart from "
                    "call to call; make it outside and pass it in, or make it without "
                    "requires_grad")
            _Trace.fresh[id(born[1])] = (born[1], born[2])
        args = tuple(a if isinstance(a, Tensor | list | tuple | dict) or not hasattr(a, "__next__")
                     else list(a) for a in args)  # a generator (parameters()) is read once
        ids = note_grads((args, list(kwargs.values())))
        before = _grads_now()
        tape = _Trace.tape
        _Trace.tape, _Trace.compiling = None, False
        try:
            out = fn(*args, **kwargs)
        finally:
            _Trace.tape, _Trace.compiling = tape, True
        _Trace.touched.update(ids)
        if tape is not None:
            tape.append((_Effect(fn, before, _grads_now()), args, kwargs, out))
        if out is not None and not isinstance(out, Tensor):
            raise TraceError(f"rlgrad.jit: {wrapper.__qualname__}() at {user_line()} returned a "
                             f"{type(out).__name__}, which the compiled step would freeze; call "
                             "it outside the jitted function")
        return out

    wrapper.__name__ = getattr(fn, "__name__", "replayed")
    wrapper.__qualname__ = getattr(fn, "__qualname__", "replayed")
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


@replayed
def _grad_attr(t: Tensor) -> Tensor:
    if t.grad is None:
        raise RuntimeError("rlgrad.jit: the compiled step reads a .grad that is None at this call")
    return t.grad


def read_grad(t: Tensor) -> None:
    """While jit traces, the backward pass is about to add into ``t.grad``: the compiled step
    reads that ``.grad`` when it runs (not the one seen now), and if it is the caller's (this
    step has not set it yet), whether it is None is a condition of the step."""
    note_grads([t])
    if id(t) not in _Trace.touched:
        seen = _Trace.entry.get(id(t))
        entry = seen[1] if seen is not None and seen[0] is t else t.grad
        if t.grad is entry:  # the caller's .grad: the step is for calls that find it as it is
            _Trace.guards.append((t, t.grad is None))
        elif t.grad is not None:  # assigned by the step's code, which the step cannot repeat
            raise TraceError(
                f"rlgrad.jit: backward() at {user_line()} adds into a .grad that the jitted "
                "function assigned itself (p.grad = ...), which the compiled step cannot repeat; "
                "use optimizer.zero_grad() or p.grad.zero_() instead")
        _Trace.touched.add(id(t))
    if t.grad is not None:
        _grad_attr(t)
