"""``rlgrad.lax``: JAX's structured control flow (``scan``, ``fori_loop``, ``while_loop``, ``cond``,
``switch``, ``map``) under JAX's names and signatures.

Eagerly they are Python loops and branches over rlgrad's operations, so every transform (reverse,
forward, higher order) goes through them as through any other code, except ``while_loop``, which
refuses reverse mode as JAX does (its trip count is not known in advance).

While ``rlgrad.jit`` traces, a loop is one node of the step: its body is traced ONCE on the first
step's values into a tape of its own (JAX's jaxpr), which ``jit`` compiles into a NumPy function
that the node calls once per step; the step's program therefore has the same size for every trip
count, and a body function seen before (the same function object and closure, the same shapes) is
not traced again for a new trip count. The node's derivatives are loops too (JAX's rules): the VJP
of ``scan`` is a reverse ``scan`` over the carries saved by the forward one, re-running the body's
tape on them under ``vjp``; its JVP is a ``scan`` of the body's ``jvp``; ``cond``/``switch``
differentiate the branch taken. A body may not update state in place (the loop runs it many times
per call): it returns what changes in its carry.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from rlgrad import func
from rlgrad.jit import TRACE_INPUTS, _compile
from rlgrad.ops import astype, concatenate, getitem, identity, ravel, reshape, stack, stop_gradient
from rlgrad.tensor import Tensor, _Depth, _Trace, constant
from rlgrad.tracer import (
    VMAP_LEVELS,
    NotBatchable,
    Primitive,
    PrimitiveFunction,
    defjvp_argnum,
    defjvp_is_linear,
    defvjp,
    defvjp_argnum,
    is_grad_enabled,
    nobatch,
    primitive,
)
from rlgrad.transforms import jvp, tree_flatten, tree_unflatten, vjp

__all__ = ["scan", "fori_loop", "while_loop", "cond", "switch", "map", "stop_gradient"]


# ---- values and their types ------------------------------------------------------------------
def _value(x: Any) -> np.ndarray:
    return x._value if isinstance(x, Tensor) else np.asarray(x)


def _aval(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    v = _value(x)
    return v.shape, v.dtype


def _type_str(aval: tuple[tuple[int, ...], np.dtype]) -> str:
    shape, dtype = aval
    return f"{dtype.name}[{','.join(builtins.map(str, shape))}]"


def _leaf(x: Any) -> Any:
    """A pytree leaf as a loop carries it: a Tensor as it is, anything else as an array."""
    return x if isinstance(x, Tensor) else np.asarray(x)


def _flatten(tree: Any) -> tuple[list[Any], Any]:
    """``tree_flatten`` with None as an empty subtree (JAX's): no leaf."""
    leaves, tdef = tree_flatten(tree)
    return [x for x in leaves if x is not None], (tdef, tuple(x is None for x in leaves))


def _unflatten(tdef: Any, leaves: Sequence[Any]) -> Any:
    it = iter(leaves)
    return tree_unflatten(tdef[0], [None if empty else next(it) for empty in tdef[1]])


class _Eager:
    """``nodes`` > 0: the nodes rlgrad.jit records are made eagerly too (``nodes_eagerly``)."""

    nodes = 0


@contextlib.contextmanager
def nodes_eagerly() -> Iterator[None]:
    """Inside, loops and branches are made as the nodes ``rlgrad.jit`` records (traced once,
    compiled, one node each) without jit: to test those nodes' rules, eagerly and by finite
    differences. Python control flow on values inside a body is not refused here, as under jit."""
    _Eager.nodes += 1
    try:
        yield
    finally:
        _Eager.nodes -= 1


def _tracing() -> bool:
    """rlgrad.jit is tracing: loops become one node calling a compiled body. Not inside vmap:
    the nodes have no batching rule, so there a loop runs as eagerly (each op batched, the
    trace then holds every step, as for a Python loop)."""
    return not VMAP_LEVELS and (_Eager.nodes > 0 or (_Trace.compiling and _Trace.tape is not None))


def _as_given(like: Any, out: Any) -> Any:
    """A rule's result as the engine passed ``like``: an array on a plain (first-order) pass."""
    return out if isinstance(like, Tensor) or not isinstance(out, Tensor) else out._value


def _check_carry(where: str, in_def: Any, out_def: Any, ins: list, outs: list) -> None:
    """The body's new carry must have the initial carry's structure, shapes and dtypes (JAX's
    rule: the compiled loop keeps one type per carry component)."""
    if in_def != out_def or len(ins) != len(outs):
        raise TypeError(f"{where}: the body function's carry output must have the structure of its "
                        f"carry input, but it returned {len(outs)} arrays in another structure than "
                        f"the {len(ins)} it was given; return the carry as it came in")
    for k, (a, b) in enumerate(zip(ins, outs)):
        ta, tb = _aval(a), _aval(b)
        if ta != tb:
            raise TypeError(
                f"{where}: the body function's carry input and output must have equal types "
                f"(shapes and dtypes), but carry component {k} is {_type_str(ta)} in and "
                f"{_type_str(tb)} out; cast the new value (.astype) or give the initial value "
                "the type the body computes")


# ---- a function traced once (under rlgrad.jit) -------------------------------------------------
def _outer_values() -> dict[int, Tensor]:
    """The arrays of the values the enclosing trace computed: a body reading one unwrapped (an
    index) reads it as an input, never as a frozen constant."""
    outer = [e[3] for e in _Trace.tape or []] + TRACE_INPUTS
    return {id(t._value): t for t in outer if isinstance(t, Tensor)}


class _Body:
    """``fn`` (flat input leaves -> flat output leaves) traced once on ``values``: its tape, the
    tensors it reads from outside (``captured``, which become inputs of the loop's node), and the
    tape compiled to one NumPy function ``run(*inputs, *captured) -> list of arrays``."""

    def __init__(self, fn: Callable, values: list[Any], where: str) -> None:
        inputs = [constant(np.array(_value(v))) for v in values]
        outer_vals = _outer_values()
        outer_ids = {id(e[3]) for e in (_Trace.tape or [])} | {id(t) for t in TRACE_INPUTS}
        tape: list = []
        saved = _Trace.tape
        _Trace.tape = tape
        # a transform inside records its backward on the tape (nested), at the top level too
        _Depth.value += 1
        try:
            with np.errstate(all="ignore"):  # first-step values: a branch not taken may overflow
                outs = [_leaf(o) for o in fn(list(inputs))]
        finally:
            _Trace.tape = saved
            _Depth.value -= 1
        for p, *_ in tape:
            if getattr(p, "effect", False) or p.fwd is None:
                raise TypeError(f"{where}: the body calls {p.name}, which changes state or draws "
                                "randomness; a loop body must be a pure function of its "
                                "arguments: return the new values in the carry")
        captured = _captured(tape, inputs, outs, outer_vals)
        # cacheable: nothing captured was computed by this trace (a later one would not see it)
        self._setup(where, inputs, tape, outs, captured,
                    not any(id(t) in outer_ids for t in captured))

    @classmethod
    def of_tape(cls, where: str, inputs: list[Tensor], tape: list, outs: list[Any],
                captured: list[Tensor]) -> _Body:
        """A body made of part of another's tape (``_Lin``): compiled, not traced."""
        self = cls.__new__(cls)
        self._setup(where, inputs, tape, outs, captured, True)
        return self

    def _setup(self, where: str, inputs: list[Tensor], tape: list, outs: list[Any],
               captured: list[Tensor], cacheable: bool) -> None:
        self.where, self.inputs, self.tape, self.outs = where, inputs, tape, outs
        self.captured, self.cacheable = captured, cacheable
        self.y_def: Any = None  # the structure of the outputs after the carry (scan's ys)
        self.avals = [_aval(o) for o in outs]
        self.lins: dict[int, _Lin | None] = {}  # n_carry -> the body split for its VJP
        self.hoists: dict[int, _Hoist | None] = {}  # n_carry -> the body split before the loop
        self.fusions: dict[int, _Fused | None] = {}  # n_carry -> its sequence rule (defsequence)
        compiled = _compile(inputs + captured, tape, outs, tree_flatten(list(outs))[1])
        self.run, self.source = compiled.fn, compiled.source

    def eval(self, inputs: Sequence[Any], captured: Sequence[Any]) -> list[Any]:
        """The tape run again on other values (Tensors: recorded, so differentiable), as JAX
        evaluates a jaxpr."""
        env: dict[int, Any] = {}
        arrays: dict[int, Any] = {}
        for old, new in zip(self.inputs + self.captured, [*inputs, *captured]):
            env[id(old)] = new
            arrays[id(old._value)] = new
        for p, args, kwargs, res in self.tape:
            # a transform's fresh leaf (stop_gradient, then requires_grad) was cut from its input
            # for that transform only: run again, the value is the input's, derivatives included
            call = identity if p.name == "stop_gradient" and res.requires_grad else p.call
            new = call(*_sub(args, env, arrays), **{k: _sub(v, env, arrays) for k, v in kwargs.items()})
            env[id(res)] = new
            if type(res._value) is np.ndarray:
                arrays[id(res._value)] = new
        return [_sub(o, env, arrays) for o in self.outs]


def _sub(a: Any, env: dict[int, Any], arrays: dict[int, Any]) -> Any:
    if isinstance(a, Tensor):
        return env.get(id(a), a)
    if type(a) is np.ndarray and id(a) in arrays:  # an input's array, used as an index
        return _value(arrays[id(a)])
    if isinstance(a, tuple):
        return tuple(_sub(x, env, arrays) for x in a)
    if isinstance(a, list):
        return [_sub(x, env, arrays) for x in a]
    return a


def _captured(tape: list, inputs: list[Tensor], outs: list[Any],
              outer_vals: dict[int, Tensor]) -> list[Tensor]:
    """The tensors the tape reads that it did not make: parameters, values of the enclosing
    trace (also when reached as a bare array), in order of first use."""
    made = {id(t) for t in inputs} | {id(e[3]) for e in tape}
    found: dict[int, Tensor] = {}

    def visit(a: Any) -> None:
        if isinstance(a, Tensor):
            if id(a) not in made:
                found.setdefault(id(a), a)
        elif type(a) is np.ndarray and id(a) in outer_vals:
            t = outer_vals[id(a)]
            found.setdefault(id(t), t)
        elif isinstance(a, list | tuple):
            for x in a:
                visit(x)

    for _p, args, kwargs, _res in tape:
        visit(args)
        visit(list(kwargs.values()))
    visit(outs)
    return list(found.values())


_BODIES: dict[tuple, tuple[_Body, tuple]] = {}
_MAX_BODIES = 128


def _fn_key(fn: Callable) -> tuple[tuple, tuple]:
    """(key, the objects it names by id, which the cache keeps alive): the function's code, its
    bound object, its closure's contents and its defaults; two function objects made by the same
    ``def`` over the same objects compute the same thing."""
    if isinstance(fn, _Keyed):
        return tuple(id(o) for o in fn.key), fn.key
    if isinstance(fn, _Fori):  # a wrapper of the user's function: keyed by it
        ids, objs = _fn_key(fn.body_fun)
        extra = (fn.k, fn.reverse) if isinstance(fn, _Unrolled) else ()
        return (id(type(fn)), *extra, *ids), (type(fn), *objs)
    func, owner = getattr(fn, "__func__", fn), getattr(fn, "__self__", None)
    cells = []
    for c in getattr(func, "__closure__", None) or ():
        try:
            cells.append(c.cell_contents)
        except ValueError:  # an empty cell
            cells.append(None)
    objs = (getattr(func, "__code__", func), owner, *cells, *(getattr(func, "__defaults__", None) or ()))
    return tuple(id(o) for o in objs), objs


class _Keyed:
    """A body made by a derivative rule, with the cache key of what it computes (the rule and
    the traced body it differentiates): a new trip count finds it traced."""

    def __init__(self, fn: Callable, key: tuple) -> None:
        self.fn, self.key = fn, key

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def _body_for(user_fns: tuple, fn: Callable, values: list[Any], where: str) -> _Body:
    """The traced body of ``fn``, from the cache when the user's functions, their closures and
    the input types are the ones of an earlier trace (a new trip count does not retrace it)."""
    ids, objs = zip(*(_fn_key(f) for f in user_fns))
    key = (where, ids, tuple(_aval(v) for v in values), _Depth.numpy > 0)
    hit = _BODIES.get(key)
    if hit is not None:
        return hit[0]
    body = _Body(fn, values, where)
    if body.cacheable:
        if len(_BODIES) >= _MAX_BODIES:
            _BODIES.pop(next(iter(_BODIES)))
        _BODIES[key] = (body, objs)
    return body


# ---- the nodes' packed outputs ------------------------------------------------------------------
class _Node:
    """What a loop's node keeps: its outputs' types and where each lies in the node's one array
    (the engine's nodes have one output). The layout, which rlgrad.native's lowerings read too:

    * ``dtype``, the carrier: the common type of the floating outputs (float32 beside float64:
      float64), or with none the first output's dtype; the node's value is a 1-D array of it,
      ``size`` elements long;
    * ``layout[k] = (offset, count, bits)`` for output ``k`` of ``avals``: it fills ``count``
      carrier elements from element ``offset``. ``bits=False`` when the carrier holds every
      value of the output's dtype exactly (``_exact_in``: float32, int32 or bool in float64):
      its values in C order, cast to the carrier, read back by
      ``getitem``/``reshape``/``astype``. ``bits=True`` otherwise (int64 or uint64 beside
      float64, int32 beside float32): its raw bytes in C order from the carrier's byte
      ``offset * carrier.itemsize`` (a multiple of the output's item size), the rest of its
      last carrier element zero; read back by the primitive ``lax_bits`` (not differentiable,
      as integers are not). So every output comes back with its dtype and all its bits: a
      uint64 key beside float64 state keeps its 64 bits."""

    def __init__(self, avals: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        self.avals = avals
        floats = [d for _, d in avals if d.kind in "fc"]
        self.dtype = (np.result_type(*floats) if floats else avals[0][1] if avals
                      else np.dtype(np.float64))
        self.layout: list[tuple[int, int, bool]] = []
        off, size = 0, self.dtype.itemsize
        for shape, dtype in avals:
            n = math.prod(shape)
            bits = not _exact_in(dtype, self.dtype)
            if bits:
                step = -(-dtype.itemsize // size)  # the carrier elements of one item's alignment
                off = -(-off // step) * step
                n = -(-n * dtype.itemsize // size)
            self.layout.append((off, n, bits))
            off += n
        self.size = off
        self.has_bits = any(b for _, _, b in self.layout)
        self.memo: tuple[Any, list[Any]] | None = None

    def pack(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        out, views = self.buffers()
        for v, a in zip(views, arrays):
            v[...] = a
        return self.finish(out, views)

    def buffers(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """The packed output, allocated once, and one array per output to write into: a view of
        it (no copy when packing), or for a floating output narrower than the carrier an array
        cast in by ``finish``."""
        out = (np.zeros if self.has_bits else np.empty)(self.size, self.dtype)  # (zero padding)
        views = []
        for (shape, dtype), (off, n, bits) in zip(self.avals, self.layout):
            if bits:
                views.append(_bits_view(out, off, n, dtype, shape))
            else:
                views.append(out[off:off + n].reshape(shape) if dtype == self.dtype
                             else np.empty(shape, dtype))
        return out, views

    def finish(self, out: np.ndarray, views: list[np.ndarray]) -> np.ndarray:
        for (_, dtype), (off, n, bits), v in zip(self.avals, self.layout, views):
            if not bits and dtype != self.dtype:
                out[off:off + n] = v.ravel()
        return out

    def unpack(self, node: Any, cotangent: bool = False, count: int | None = None,
               start: int = 0) -> list[Any]:
        """The outputs ``start:count`` of the node's value ``node`` (recorded: differentiable
        where floating); ``cotangent``: ``node`` is a gradient of the node, whose integer parts
        are zeros."""
        out = []
        for (shape, dtype), (off, n, bits) in list(zip(self.avals, self.layout))[start:count]:
            if bits:
                out.append(constant(np.zeros(shape, dtype)) if cotangent
                           else _bits_p(node, off, n, dtype.str, shape))
                continue
            piece = reshape(getitem(node, slice(off, off + n)), shape)
            out.append(piece if dtype == self.dtype else astype(piece, dtype))
        return out

    def grads(self, g: Any, compute: Callable[[Any], list[Any]]) -> list[Any]:
        """The arguments' gradients for the node's gradient ``g``, computed once for all the
        rules the engine calls with it (one per argument)."""
        if self.memo is None or self.memo[0] is not g:
            self.memo = (g, compute(g if isinstance(g, Tensor) else constant(np.asarray(g))))
        return self.memo[1]


def _exact_in(dtype: np.dtype, carrier: np.dtype) -> bool:
    """Every value of ``dtype`` is one of ``carrier`` (NumPy's "safe" casts include int64 to
    float64, which rounds above 2**53: integers are counted in bits against the mantissa)."""
    if carrier.kind not in "fc" or dtype.kind in "fc":
        return bool(np.can_cast(dtype, carrier))
    bits = 1 if dtype.kind == "b" else dtype.itemsize * 8 - (dtype.kind == "i")
    return bits <= np.finfo(carrier).nmant + 1


def _bits_view(packed: np.ndarray, off: int, n: int, dtype: np.dtype,
               shape: tuple[int, ...]) -> np.ndarray:
    """The output stored as bits at carrier elements ``off:off + n``: a view of its bytes."""
    nbytes = math.prod(shape) * dtype.itemsize
    return packed[off:off + n].view(np.uint8)[:nbytes].view(dtype).reshape(shape)


def _bits_fwd(packed: np.ndarray, off: int, n: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return _bits_view(packed, off, n, np.dtype(dtype), shape).copy()


#: an integer output of a loop node, read from its bytes in the node's array (``_Node.layout``)
_bits_p = primitive(_bits_fwd, "lax_bits", nondiff=True, arity=1)
nobatch(_bits_p, "vmap of a compiled lax loop is not supported yet: vmap the loop's body "
        "inside it, or call vmap outside rlgrad.jit (eager loops batch)")


def _is_float(x: Any) -> bool:
    return _value(x).dtype.kind in "fc"


def _floats(xs: Sequence[Any]) -> list[Any]:
    return [x for x in xs if _is_float(x)]


def _splice(xs: Sequence[Any], floats: Sequence[Any]) -> list[Any]:
    """``xs`` with its floating leaves replaced by ``floats`` (in order)."""
    it = iter(floats)
    return [next(it) if _is_float(x) else x for x in xs]


def _zeros(x: Any) -> Any:
    return constant(np.zeros_like(_value(x)))


# ---- scan --------------------------------------------------------------------------------------
def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1) -> tuple[Any, Any]:
    """JAX's ``lax.scan``: ``carry, y = f(carry, x)`` over the leading axis of ``xs`` (pytrees),
    returning the last carry and the ``y``s stacked. ``reverse`` runs from the last element to
    the first (``ys`` keep ``xs``' order). ``unroll`` (an int >= 1, or True: all, False: 1) is
    how many steps one call of the compiled body makes under ``rlgrad.jit`` (JAX's meaning; the
    ``n % unroll`` left over are a loop of their own); the values are the same whatever it is."""
    init_leaves, init_def = _flatten(init)
    init_leaves = [_leaf(x) for x in init_leaves]
    xs_leaves, xs_def = _flatten(xs)
    xs_leaves = [_leaf(x) for x in xs_leaves]
    n = _scan_length(xs_leaves, length)
    k = _unroll_count(unroll, n)
    if _tracing() and k > 1:
        return _scan_unrolled(f, init, xs, n, reverse, k)
    if _tracing():
        carry, ys, y_def = _scan_traced(f, init_leaves, init_def, xs_leaves, xs_def, n, reverse)
    else:
        carry, ys, y_def = _scan_eager(f, init_leaves, init_def, xs_leaves, xs_def, n, reverse)
    return _unflatten(init_def, carry), _unflatten(y_def, ys)


def _unroll_count(unroll: Any, n: int) -> int:
    """Steps per call of the body for scan's ``unroll`` (JAX's rule)."""
    if isinstance(unroll, bool | np.bool_):
        return max(n, 1) if unroll else 1
    if not isinstance(unroll, int | np.integer) or unroll < 1:
        raise ValueError("`unroll` must be a `bool` or a positive `int`.")
    return int(unroll)


def _scan_unrolled(f: Callable, init: Any, xs: Any, n: int, reverse: bool,
                   k: int) -> tuple[Any, Any]:
    """``scan`` with ``k`` steps per call of the body (``_Unrolled``) over the ``n // k`` whole
    blocks, and the ``n % k`` left over (JAX's split: the last ones, the first when reverse) as a
    scan of their own; the ys put back in order."""
    blocks, rem = divmod(n, k)
    leaves, tdef = _flatten(xs)
    cut = rem if reverse else blocks * k
    main = [reshape(getitem(x, slice(cut, None) if reverse else slice(0, cut)),
                    (blocks, k) + _value(x).shape[1:]) for x in leaves]
    tail = [getitem(x, slice(0, cut) if reverse else slice(cut, None)) for x in leaves]
    parts: list[tuple[list[Any], Any]] = []  # (ys' leaves, their structure), in run order
    carry = init
    if blocks:
        carry, ys = scan(_Unrolled(f, k, reverse), carry, _unflatten(tdef, main), length=blocks,
                         reverse=reverse)
        y_leaves, y_def = _flatten(ys)
        parts.append(([reshape(y, (blocks * k,) + _value(y).shape[2:]) for y in y_leaves], y_def))
    if rem:
        carry, ys = scan(f, carry, _unflatten(tdef, tail), length=rem, reverse=reverse)
        parts.append(_flatten(ys))
    if reverse:
        parts.reverse()  # the ys in the order of xs: the left-over first
    cols = zip(*[leaves for leaves, _ in parts])
    return carry, _unflatten(parts[0][1], [concatenate(list(c)) if len(c) > 1 else c[0]
                                           for c in cols])


def _scan_length(xs_leaves: list[Any], length: int | None) -> int:
    sizes = [_value(x).shape[0] if _value(x).ndim else None for x in xs_leaves]
    if any(s is None for s in sizes):
        raise ValueError("rlgrad.lax.scan: every leaf of xs needs a leading axis to scan over, "
                         "but one is a scalar; give it a leading axis (x[None]) or close over it")
    if len(set(sizes)) > 1:
        raise ValueError("rlgrad.lax.scan got values with different leading axis sizes: "
                         f"{', '.join(builtins.map(str, sizes))}; every leaf of xs must have the same length")
    if length is not None:
        if sizes and int(length) != sizes[0]:
            raise ValueError(f"rlgrad.lax.scan got `length` argument of {length} which disagrees "
                             f"with leading axis sizes {sizes}")
        return int(length)
    if not sizes:
        raise ValueError("rlgrad.lax.scan got no values to scan over and `length` not provided")
    first = sizes[0]
    assert first is not None  # a scalar leaf raised above
    return first


def _call_body(f: Callable, carry_def: Any, carry: list[Any], x: Any,
               where: str = "rlgrad.lax.scan") -> tuple[list[Any], list[Any], Any]:
    """``f(carry, x)`` on flat carry leaves: (new carry leaves, y leaves, y's structure)."""
    res = f(_unflatten(carry_def, carry), x)
    if not isinstance(res, tuple | list) or len(res) != 2:
        raise TypeError(f"{where}: the body function must return a pair (new carry, y), got a "
                        f"{type(res).__name__}")
    new, new_def = _flatten(res[0])
    new = [_leaf(v) for v in new]
    _check_carry(where, carry_def, new_def, carry, new)
    ys, y_def = _flatten(res[1])
    return new, [_leaf(y) for y in ys], y_def


def _scan_eager(f: Callable, init: list[Any], init_def: Any, xs: list[Any], xs_def: Any, n: int,
                reverse: bool) -> tuple[list[Any], list[Any], Any]:
    """The loop in Python: every transform sees the body's operations themselves."""
    carry, steps, y_def = list(init), [], None
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        x = _unflatten(xs_def, [leaf[t] for leaf in xs])
        carry, ys, y_def = _call_body(f, init_def, carry, x)
        steps.append(ys)
    if reverse:
        steps.reverse()
    if n == 0:  # the ys' types: the body run once on zeros, unrecorded (JAX traces it too)
        x = _unflatten(xs_def, [np.zeros(_value(v).shape[1:], _value(v).dtype) for v in xs])
        _, ys, y_def = _call_body(f, init_def, [stop_gradient(c) for c in init], x)
        return carry, [np.zeros((0, *_value(y).shape), _value(y).dtype) for y in ys], y_def
    return carry, [stack(list(col)) for col in zip(*steps)], y_def


class _ScanCtx(_Node):
    """A scan node: its body, trip count, direction and layout. ``save``: the carries entering
    each step are packed after the outputs (the VJP runs the body again on them). ``lin``: the
    body is ``lin.fwd``, whose last ``n_res`` ys are the residuals ``lin.bwd`` reads."""

    def __init__(self, body: _Body, n_carry: int, n_x: int, length: int, reverse: bool,
                 save: bool, lin: _Lin | None = None) -> None:
        self.body, self.n_carry, self.n_x = body, n_carry, n_x
        self.length, self.reverse, self.save = length, reverse, save
        self.lin, self.n_res = lin, lin.n_res if lin is not None else 0
        # the values of the nodes (made with this ctx) whose residuals a recorded VJP read: they
        # may get gradients of their own (``_scan_grads``); weak, so a dead node's id is free
        self.res_read: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
        carry_avals = body.avals[:n_carry]
        self.y_avals = body.avals[n_carry:]
        stacked = [((length, *s), d) for s, d in self.y_avals]
        saved = [((length, *s), d) for s, d in carry_avals] if save else []
        super().__init__(carry_avals + stacked + saved)

    def split(self, args: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """(captured, init, xs) of the node's arguments."""
        nk = len(self.body.captured)
        return list(args[:nk]), list(args[nk:nk + self.n_carry]), list(args[nk + self.n_carry:])

    def ext(self, consts: Sequence[Any], carry: Sequence[Any], x: Sequence[Any]) -> list[Any]:
        """One step as the node computes it, on Tensors: new carry, ys (and the carry in)."""
        out = self.body.eval([*carry, *x], consts)
        return out + list(carry) if self.save else out


def _scan_fwd(*arrays: np.ndarray, ctx: _ScanCtx) -> np.ndarray:
    """The node's forward: the compiled body called once per element, its outputs written
    straight into the packed result."""
    consts, carry, xs = ctx.split(arrays)
    run, n, nc = ctx.body.run, ctx.length, ctx.n_carry
    out, views = ctx.buffers()
    ny = len(ctx.y_avals)
    ys, saved = views[nc:nc + ny], views[nc + ny:]
    rows = list(zip(*xs)) if xs else [()] * n  # each step's slices, made in one go
    for t in (range(n - 1, -1, -1) if ctx.reverse else range(n)):
        for s, c in zip(saved, carry):
            s[t] = c
        step = run(*carry, *rows[t], *consts)
        carry = step[:nc]
        for y, v in zip(ys, step[nc:]):
            y[t] = v
    for v, c in zip(views[:nc], carry):
        v[...] = c
    return ctx.finish(out, views)


def _scan_traced(f: Callable, init: list[Any], init_def: Any, xs: list[Any], xs_def: Any, n: int,
                 reverse: bool) -> tuple[list[Any], list[Any], Any]:
    """One node for the whole loop, its body traced once (or found traced) on the first step."""
    traced: dict[str, Any] = {}

    def flat(leaves: list[Any]) -> list[Any]:
        carry, x = leaves[:len(init)], leaves[len(init):]
        new, ys, traced["y_def"] = _call_body(f, init_def, carry, _unflatten(xs_def, x))
        return new + ys

    first = [_value(x)[-1 if reverse else 0] if n else np.zeros(_value(x).shape[1:], _value(x).dtype)
             for x in xs]
    body = _body_for((f,), flat, [*init, *first], "rlgrad.lax.scan")
    if "y_def" in traced:  # (else found in the cache: the ys' structure is the one traced then)
        body.y_def = traced["y_def"]
    parts = _scan_node(body, body.captured, init, xs, n, reverse)
    return parts[:len(init)], parts[len(init):], body.y_def


def _scan_node(body: _Body, consts: list[Any], init: list[Any], xs: list[Any], n: int,
               reverse: bool, may_save: bool = True) -> list[Any]:
    """The node of a scan of ``body`` (``consts``: its captured): the final carries, then the
    stacked ys. While a gradient may be asked for (and ``may_save``) it saves what its VJP
    reads: the body's residuals (``_Lin``), or under ``scan_residuals(False)`` the carries
    entering each step."""
    hoist = _hoist_of(body, len(init)) if _Fast.hoist and n else None
    if hoist is not None:
        consts, xs = _hoisted(hoist, consts, xs)
        body = hoist.rest
    fused = _fused_of(body, len(init)) if _Fast.fuse and n else None
    if fused is not None:
        return fused.run(consts, init, xs, len(body.outs) - len(init), reverse)
    args = [*consts, *init, *xs]
    save = may_save and is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                                  for a in args)
    lin = _lin_of(body, len(init)) if save and _Fast.residuals else None
    if lin is None:
        ctx = _ScanCtx(body, len(init), len(xs), n, reverse, save)
    else:
        ctx = _ScanCtx(lin.fwd, len(init), len(xs), n, reverse, False, lin)
        args = [*lin.binds(lin.fwd, consts), *init, *xs]
    return ctx.unpack(_scan_p(*args, ctx=ctx), count=len(init) + len(ctx.y_avals) - ctx.n_res)


def _scan_vjp(i: int, g: Any, ans: Any, *args: Any, ctx: _ScanCtx) -> Any:
    return _as_given(g, ctx.grads(g, lambda gt: _scan_grads(ctx, gt, ans, args))[i])


def _saved_carries(ctx: _ScanCtx, ans: Any, args: Sequence[Any]) -> list[Any]:
    """The carries entering each step: packed in ``ans``, or (a node made without them, e.g.
    re-run from a tape) computed by the loop again."""
    if not ctx.save:
        ctx = _ScanCtx(ctx.body, ctx.n_carry, ctx.n_x, ctx.length, ctx.reverse, True)
        ans = _scan_p(*args, ctx=ctx)
    nc, ny = ctx.n_carry, len(ctx.y_avals)
    return ctx.unpack(ans)[nc + ny:]


def _scan_grads(ctx: _ScanCtx, g: Tensor, ans: Any, args: Sequence[Any]) -> list[Any]:
    """JAX's transpose of scan: a scan the other way over the saved carries, whose body is the
    VJP of the step (the body's tape run again), the captured tensors' gradients summed in its
    carry. With residuals saved, ``_scan_grads_saved``, unless a recorded VJP read this node's
    residuals before (grad of grad): then they may have gradients of their own, which this path
    gives. The choice is the node's (its value ``ans``), not its ctx's: other nodes made with the
    same ctx (a tape run again) keep the saved path."""
    node = _value(ans)
    if ctx.lin is not None and ctx.res_read.get(id(node)) is not node:
        if is_grad_enabled():
            ctx.res_read[id(node)] = node
        return _scan_grads_saved(ctx, ctx.lin, g, ans, args)
    consts, init, xs = ctx.split(args)
    nc, ny = ctx.n_carry, len(ctx.y_avals)
    cts = ctx.unpack(g, cotangent=True)
    ct_carry, ct_ys, ct_saved = cts[:nc], cts[nc:nc + ny], cts[nc + ny:]
    saved = _saved_carries(ctx, ans, args)
    kf = _floats(consts)

    def step(carry: Any, inp: Any) -> Any:
        ct_c, acc = carry
        c_t, x_t, ct_y, ct_s = inp

        def one(k: list[Any], c: list[Any], x: list[Any]) -> list[Any]:
            out = ctx.ext(_splice(consts, k), _splice(c_t, c), _splice(x_t, x))
            return _floats(out)

        ct = _floats([*ct_c, *ct_y, *ct_s])  # as ctx.ext's outputs: carry, ys (, saved carry)
        _, back = vjp(one, _floats(kf), _floats(c_t), _floats(x_t))
        dk, dc, dx = back(ct)
        return (_splice(ct_c, dc), [a + d for a, d in zip(acc, dk)]), dx

    ct_s = ct_saved if ctx.save else []
    (d_init, d_k), d_xs = scan(_Keyed(step, ("scan vjp", ctx.body, ctx.save, ctx.reverse)),
                               (ct_carry, [_zeros(k) for k in kf]),
                               (saved, xs, ct_ys, ct_s), reverse=not ctx.reverse)
    return _grads_list(args, [*_splice(consts, d_k), *d_init, *_splice(xs, d_xs)])


def _scan_grads_saved(ctx: _ScanCtx, lin: _Lin, g: Tensor, ans: Any,
                      args: Sequence[Any]) -> list[Any]:
    """The transpose of scan over its residuals: a scan the other way of ``lin.bwd``, which
    reads each step's residuals (the forward's outputs, or the scanned arrays) and the ys'
    cotangents, carrying the carry's cotangent and the captured tensors' summed gradients."""
    consts, init, xs = ctx.split(args)
    nc, ny = ctx.n_carry, len(ctx.y_avals) - ctx.n_res
    cts = ctx.unpack(g, cotangent=True, count=nc + ny)
    emitted = iter(ctx.unpack(ans, start=nc + ny))
    res = [xs[k] if src == "x" else next(emitted) for src, k in lin.res_src]
    ks = consts[:lin.nk]
    kd = _take(ks, lin.k_diff)
    init_b = [*_take(cts[:nc], lin.c_diff), *[_zeros(k) for k in kd]]
    # saving nothing: only grad of grad differentiates it, and then its VJP runs it again
    parts = _scan_node(lin.bwd, lin.binds(lin.bwd, ks), init_b, [*res, *_floats(cts[nc:])],
                       ctx.length, not ctx.reverse, may_save=False)
    ncd, nkd = sum(lin.c_diff), len(kd)
    none = [None] * len(args)  # no gradient where the body does not read the input
    d_k = [*_put(none[:lin.nk], lin.k_diff, parts[ncd:ncd + nkd]), *none[lin.nk:len(consts)]]
    d_x = _put(none[:len(xs)], lin.x_diff, parts[ncd + nkd:])
    return _grads_list(args, [*d_k, *_put(none[:nc], lin.c_diff, parts[:ncd]), *d_x])


def _grads_list(args: Sequence[Any], grads: Sequence[Any]) -> list[Any]:
    """One gradient per node argument; None for the integer ones."""
    return [gr if _is_float(a) else None for a, gr in zip(args, grads)]


def _scan_jvp(i: int, t: Any, ans: Any, *args: Any, ctx: _ScanCtx) -> Any:
    """Forward mode: the tangent of the node's packed value due to argument ``i``'s tangent,
    by a scan of the step's ``jvp`` carrying (carry, its tangent)."""
    consts, init, xs = ctx.split(args)
    tk, tinit, txs = ctx.split([t if j == i else _zeros(a) for j, a in enumerate(args)])
    kf, tkf = _floats(consts), _pick(tk, consts)
    nc = ctx.n_carry

    def step(carry: Any, inp: Any) -> Any:
        (c, tc, tk), (x, tx) = carry, inp

        def one(k: list[Any], cf: list[Any], xf: list[Any]) -> list[Any]:
            return ctx.ext(_splice(consts, k), _splice(c, cf), _splice(x, xf))

        out, tout = jvp(one, (kf, _floats(c), _floats(x)), (tk, _pick(tc, c), _pick(tx, x)))
        return (out[:nc], tout[:nc], tk), (out[nc:], tout[nc:])

    # the captured tensors' tangents ride in the carry (unchanged), not in the closure: the body
    # then reads only what the forward body reads, and is found traced for a new trip count
    (_, tlast, _), (_, touts) = scan(_Keyed(step, ("scan jvp", ctx.body, ctx.save, ctx.reverse)),
                                     (init, tinit, tkf), (xs, txs), reverse=ctx.reverse)
    return _as_given(t, _pack_tensors(ctx, [*tlast, *touts]))


# ---- residuals: the scan's VJP reads what the forward saved (JAX's partial evaluation) --------
class _Fast:
    """``residuals``: scans made while a gradient may be asked for save their body's residuals
    (``_Lin``); False: the VJP runs the body again on the saved carries (the plain reference,
    as ``jax.checkpoint`` of the body). ``hoist``: what a body computes from the scanned inputs
    alone runs once before the loop (``_Hoist``); False: at every step (the reference).
    ``fuse``: a body that is one cell step runs as the cell's sequence node (``defsequence``)."""

    residuals = True
    hoist = True
    fuse = True


@contextlib.contextmanager
def _fast_switch(attr: str, value: bool) -> Iterator[None]:
    """``_Fast.<attr>`` set to ``value`` inside, restored after (the three switches below)."""
    before = getattr(_Fast, attr)
    setattr(_Fast, attr, bool(value))
    try:
        yield
    finally:
        setattr(_Fast, attr, before)


def scan_residuals(save: bool) -> contextlib.AbstractContextManager[None]:
    """Inside, scans made for differentiation save their body's residuals (``save=True``, the
    default) or recompute them in the backward scan (``save=False``, the reference): the same
    gradients, bit for bit."""
    return _fast_switch("residuals", save)


def scan_hoisting(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Inside, scans run what their body computes from the scanned inputs alone once before
    the loop, for all the steps (``True``, the default), or at every step (the reference)."""
    return _fast_switch("hoist", enabled)


def scan_fusion(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Inside, a scan whose body is one step of a cell with a sequence rule (``defsequence``:
    ``gru_cell``) runs as that sequence's node (``True``, the default), or as the loop of
    cells (the reference): the same values, but for rounding in the gradients' sums."""
    return _fast_switch("fuse", enabled)


#: what a value of the joint step depends on: the captured alone, a step's input, a cotangent
_INV, _KNOWN, _UNKNOWN = 0, 1, 2


class _Lin:
    """A scan body's step and its VJP traced once together (the joint step: ``body`` under
    ``vjp``, then its backward on the cotangents), its tape split as JAX's partial evaluation
    splits a linearized jaxpr: ``fwd`` (carry, x -> new carry, ys, residuals) is what does not
    depend on the cotangents, ``bwd`` ((carry cotangent, summed gradients of the captured),
    (residuals, ys' cotangents) -> the new pair, xs' gradients) is the rest, reading the
    residuals (the values of ``fwd`` it needs) instead of running the body again. Values of the
    captured alone are made again where needed, not stacked. ``res_src[j]``: residual ``j`` is
    ``("out", k)``, fwd's residual output ``k``, or ``("x", k)``, the scanned array ``k`` itself.
    Both bodies capture the body's captured first (``nk`` of them), then constants of the trace."""

    def __init__(self, body: _Body, nc: int) -> None:
        nk, nx = len(body.captured), len(body.inputs) - nc
        self.nk, self.nc = nk, nc
        # what gets a gradient: floating inputs the body reads (a captured tensor it does not
        # read would only add zeros into its sum at every step)
        used = {id(t) for t in _reads_of(body.tape, body.outs, body)}
        self.k_diff = [_is_float(k) and id(k) in used for k in body.captured]
        self.c_diff = [_is_float(c) for c in body.inputs[:nc]]
        self.x_diff = [_is_float(x) and id(x) in used for x in body.inputs[nc:]]
        joint = _Body(self._joint_fn(body), self._values(body), "rlgrad.lax.scan")
        ks, steps = joint.inputs[:nk], joint.inputs[nk:nk + nc + nx]
        cts = joint.inputs[nk + nc + nx:]
        n_out = len(body.outs)
        kind = _kinds(joint, ks, steps, cts)
        fwd_outs, bwd_outs = joint.outs[:n_out], joint.outs[n_out:]
        bwd_tape = _live(joint.tape, bwd_outs, lambda e: kind[id(e[3])] != _KNOWN)
        read = _reads_of(bwd_tape, bwd_outs, joint)
        res = [t for t in read if kind.get(id(t)) == _KNOWN]
        self.res_src = [_res_source(t, steps[nc:], joint.tape) for t in res]
        emitted = [t for t, s in zip(res, self.res_src) if s[0] == "out"]
        self.fwd = _part(joint, steps, fwd_outs + emitted, ks, kind, _UNKNOWN)
        nct = sum(self.c_diff) + sum(self.k_diff)
        self.bwd = _part(joint, [*cts[:nct], *res, *cts[nct:]], bwd_outs, ks, kind, _KNOWN)
        self.n_res = len(emitted)

    def _values(self, body: _Body) -> list[Any]:
        """The joint step's inputs to trace it on: the body's own, cotangents of ones."""
        outs = body.outs
        ones = [np.ones(*_aval(o)) for o in _floats(outs[:self.nc])]
        zeros = [np.zeros(*_aval(k)) for k in _take(body.captured, self.k_diff)]
        return [*builtins.map(_value, body.captured), *builtins.map(_value, body.inputs), *ones,
                *zeros, *[np.ones(*_aval(o)) for o in _floats(outs[self.nc:])]]

    def _joint_fn(self, body: _Body) -> Callable[[list[Any]], list[Any]]:
        nk, nc, nx = self.nk, self.nc, len(self.x_diff)
        ncf, nkf = sum(self.c_diff), sum(self.k_diff)

        def joint(leaves: list[Any]) -> list[Any]:
            ks, c, x = leaves[:nk], leaves[nk:nk + nc], leaves[nk + nc:nk + nc + nx]
            rest = leaves[nk + nc + nx:]
            ct_c, acc, ct_y = rest[:ncf], rest[ncf:ncf + nkf], rest[ncf + nkf:]
            full: list[Any] = []

            def one(kd: list[Any], cd: list[Any], xd: list[Any]) -> list[Any]:
                full[:] = body.eval([*_put(c, self.c_diff, cd), *_put(x, self.x_diff, xd)],
                                    _put(ks, self.k_diff, kd))
                return _floats(full)

            _, back = vjp(one, _take(ks, self.k_diff), _take(c, self.c_diff), _take(x, self.x_diff))
            dk, dc, dx = back([*ct_c, *ct_y])
            return [*full, *dc, *[a + d for a, d in zip(acc, dk)], *dx]
        return joint

    def binds(self, body: _Body, consts: Sequence[Any]) -> list[Any]:
        """``body``'s captured as a node's arguments: the scan's captured, then the constants."""
        return [*consts[:self.nk], *body.captured[self.nk:]]


def _take(xs: Sequence[Any], mask: Sequence[bool]) -> list[Any]:
    return [x for x, m in zip(xs, mask) if m]


def _put(xs: Sequence[Any], mask: Sequence[bool], vals: Sequence[Any]) -> list[Any]:
    """``xs`` with the entries where ``mask`` holds replaced by ``vals`` (in order)."""
    it = iter(vals)
    return [next(it) if m else x for x, m in zip(xs, mask)]


def _lin_of(body: _Body, nc: int) -> _Lin | None:
    """``body``'s split for its VJP, made once per body; None when there is nothing to save."""
    if nc not in body.lins:
        body.lins[nc] = _Lin(body, nc) if _floats(body.outs) else None
    return body.lins[nc]


def _tensors(a: Any, arrays: dict[int, Tensor], found: list[Tensor]) -> list[Tensor]:
    """The Tensors an entry's arguments read (also as a bare array of one: an index)."""
    if isinstance(a, Tensor):
        found.append(a)
    elif type(a) is np.ndarray and id(a) in arrays:
        found.append(arrays[id(a)])
    elif isinstance(a, list | tuple):
        for x in a:
            _tensors(x, arrays, found)
    elif isinstance(a, dict):
        _tensors(list(a.values()), arrays, found)
    return found


def _arrays(joint: _Body) -> dict[int, Tensor]:
    made = [*joint.inputs, *joint.captured, *[e[3] for e in joint.tape]]
    return {id(t._value): t for t in made if isinstance(t, Tensor) and type(t._value) is np.ndarray}


def _kinds(joint: _Body, ks: list[Tensor], steps: list[Tensor], cts: list[Tensor]) -> dict[int, int]:
    """Each value's kind: made of the captured alone, of a step's inputs, of a cotangent."""
    kind = {id(t): k for k, ts in ((_INV, ks), (_KNOWN, steps), (_UNKNOWN, cts)) for t in ts}
    arrays = _arrays(joint)
    for _p, args, kwargs, res in joint.tape:
        reads = _tensors([args, kwargs], arrays, [])
        kind[id(res)] = builtins.max([kind.get(id(t), _INV) for t in reads], default=_INV)
    return kind


def _live(tape: list, outs: list[Any], keep: Callable[[tuple], bool]) -> list:
    """The entries of ``tape`` (those ``keep`` allows) that ``outs`` need, in order."""
    arrays = {id(e[3]._value): e[3] for e in tape if type(e[3]._value) is np.ndarray}
    need = {id(t) for t in _tensors(outs, arrays, [])}
    out = []
    for e in reversed(tape):
        if id(e[3]) in need and keep(e):
            out.append(e)
            need.update(id(t) for t in _tensors([e[1], e[2]], arrays, []))
    return out[::-1]


def _reads_of(tape: list, outs: list[Any], joint: _Body) -> list[Tensor]:
    """The tensors ``tape`` and ``outs`` read that ``tape`` does not make, in order of use."""
    arrays = _arrays(joint)
    made = {id(e[3]) for e in tape}
    found: dict[int, Tensor] = {}
    for t in _tensors([[e[1], e[2]] for e in tape] + [outs], arrays, []):
        if id(t) not in made:
            found.setdefault(id(t), t)
    return list(found.values())


def _res_source(t: Tensor, xs: list[Tensor], tape: list) -> tuple[str, int]:
    """A residual that is a scanned input (or the leaf vjp made of one) is read from xs."""
    for e in tape:
        if e[3] is t and e[0].name == "stop_gradient" and isinstance(e[1][0], Tensor):
            t = e[1][0]
            break
    for k, x in enumerate(xs):
        if x is t:
            return "x", k
    return "out", -1


def _part(joint: _Body, inputs: list[Tensor], outs: list[Any], ks: list[Tensor],
          kind: dict[int, int], drop: int) -> _Body:
    """The body of ``joint``'s entries that ``outs`` need, without those of kind ``drop``:
    its inputs ``inputs``, its captured the scan's captured then any constant of the trace."""
    tape = _live(joint.tape, outs, lambda e: kind[id(e[3])] != drop)
    given = {id(t) for t in [*inputs, *ks]}
    extra = [t for t in _reads_of(tape, outs, joint) if id(t) not in given]
    inputs_ids = {id(t) for t in joint.inputs}
    if any(kind.get(id(t), _INV) != _INV or id(t) in inputs_ids for t in extra):
        raise AssertionError("rlgrad.lax.scan: a residual was missed (a bug of rlgrad)")
    return _Body.of_tape("rlgrad.lax.scan", inputs, tape, outs, [*ks, *extra])


# ---- hoisting: what reads no carry runs once over all the steps, before the loop --------------
class _Hoist:
    """``body`` split where its values stop depending on the carry: ``pre`` (the scanned
    inputs -> the values the rest reads that depend on them alone, an input projection) runs
    once for all the steps under ``vmap`` before the loop (one GEMM where the loop made T);
    ``rest`` is the body reading them as scanned inputs after its own."""

    def __init__(self, body: _Body, nc: int) -> None:
        carry, xs = body.inputs[:nc], body.inputs[nc:]
        kind = _kinds(body, body.captured, xs, carry)
        rest_tape = _live(body.tape, body.outs, lambda e: kind[id(e[3])] != _KNOWN)
        x_ids = {id(x) for x in xs}
        self.outs = [t for t in _reads_of(rest_tape, body.outs, body)
                     if kind.get(id(t)) == _KNOWN and id(t) not in x_ids]
        self.pre = _part(body, xs, self.outs, body.captured, kind, _UNKNOWN)
        self.rest = _part(body, [*carry, *xs, *self.outs], body.outs, body.captured, kind, _KNOWN)
        self.rest.y_def = body.y_def


def _hoist_of(body: _Body, nc: int) -> _Hoist | None:
    """``body``'s split before the loop, made once per body; None with nothing to hoist."""
    if nc not in body.hoists:
        hoist = _Hoist(body, nc)
        useful = any(e[0].name not in _VIEWS for e in hoist.pre.tape)
        batchable = all(e[0].batch is not None and not isinstance(e[0].batch, NotBatchable)
                        for e in hoist.pre.tape) and not _bare_reads(hoist.pre)
        body.hoists[nc] = hoist if hoist.outs and useful and batchable else None
    return body.hoists[nc]


def _bare_reads(body: _Body) -> bool:
    """An entry reads a value as a bare array (an index): vmap cannot batch that read."""
    arrays = _arrays(body)
    return any(_bare([e[1], list(e[2].values())], arrays, []) for e in body.tape)


def _bare(a: Any, arrays: dict[int, Tensor], found: list[Any]) -> list[Any]:
    if type(a) is np.ndarray and id(a) in arrays:
        found.append(a)
    elif isinstance(a, list | tuple):
        for x in a:
            _bare(x, arrays, found)
    return found


#: operations that only look at their input again: hoisting them alone gains nothing
_VIEWS = frozenset({"getitem", "reshape", "stop_gradient", "identity", "transpose", "squeeze",
                    "expand_dims", "broadcast_to"})


def _hoisted(h: _Hoist, consts: list[Any], xs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the rest's captured, its scanned inputs): ``h.pre`` over every step at once, by vmap."""
    nk = len(consts)

    def pre(*x: Any) -> list[Any]:
        return h.pre.eval(list(x), [*consts, *h.pre.captured[nk:]])

    return [*consts, *h.rest.captured[nk:]], [*xs, *func.vmap(pre)(*xs)]


# ---- sequence rules: a body that is one cell step runs as the cell's sequence node ------------
#: a cell primitive -> ``rule(xp, h0, *others, reverse=...)``: the states after every step,
#: stacked (T, *rows, H), as one node (``defsequence``)
_SEQUENCES: dict[Primitive, Callable[..., Any]] = {}


def defsequence(cell: PrimitiveFunction, rule: Callable[..., Any]) -> None:
    """Declare that a ``scan`` whose body is ``h' = cell(x_t, h, *others)[..., :H]`` (the carry
    ``h``, a scanned ``x_t``, ``others`` captured; ys: ``h'``) is ``rule(xs, h0, *others,
    reverse=...)``, the states stacked, one node whose derivatives are its own (the cell's
    sequence primitive: ``nn/cells.py`` declares ``gru_cell``'s). ``scan_fusion(False)`` keeps
    the loop of cells (the reference)."""
    _SEQUENCES[cell.primitive] = rule


class _Fused:
    """A body matching a ``defsequence`` rule: the scanned input the cell reads (``x``) and
    the cell's other arguments as indices of the body's captured (None: None)."""

    def __init__(self, rule: Callable[..., Any], x: int, others: list[int | None]) -> None:
        self.rule, self.x, self.others = rule, x, others

    def run(self, consts: list[Any], init: list[Any], xs: list[Any], n_y: int,
            reverse: bool) -> list[Any]:
        args = [None if k is None else consts[k] for k in self.others]
        states = self.rule(xs[self.x], init[0], *args, reverse=reverse)
        return [getitem(states, 0 if reverse else -1), *[states] * n_y]


def _fused_of(body: _Body, nc: int) -> _Fused | None:
    """``body``'s sequence rule, matched once per body; None when it is not one cell step."""
    if nc not in body.fusions:
        body.fusions[nc] = _match_sequence(body, nc)
    return body.fusions[nc]


def _match_sequence(body: _Body, nc: int) -> _Fused | None:
    """The body is ``h' = cell(x_t, h, *captured)``, then a view of its first H columns, which
    is the new carry and every y (``defsequence``)."""
    if nc != 1 or len(body.tape) != 2 or not body.outs:
        return None
    (p, args, kwargs, res), view = body.tape
    rule = _SEQUENCES.get(p)
    xs, carry = body.inputs[nc:], body.inputs[0]
    if rule is None or kwargs or len(args) < 2 or args[1] is not carry or view[0].name != "getitem":
        return None
    new = view[3]
    if view[1][0] is not res or any(o is not new for o in body.outs) or _aval(new) != _aval(carry):
        return None
    H = _aval(carry)[0][-1]
    want, got = res._value[..., :H], new._value
    if (got.shape, got.strides) != (want.shape, want.strides) or not np.shares_memory(got, want) \
            or got.__array_interface__["data"][0] != want.__array_interface__["data"][0]:
        return None  # not the state's columns of the cell's output
    x = [k for k, t in enumerate(xs) if t is args[0]]
    ids = {id(t): k for k, t in enumerate(body.captured)}
    if not x or any(a is not None and id(a) not in ids for a in args[2:]):
        return None
    return _Fused(rule, x[0], [None if a is None else ids[id(a)] for a in args[2:]])


def _pick(ts: Sequence[Any], xs: Sequence[Any]) -> list[Any]:
    """The entries of ``ts`` beside the floating leaves of ``xs``."""
    return [t for t, x in zip(ts, xs) if _is_float(x)]


def _pack_tensors(node: _Node, parts: Sequence[Any]) -> Any:
    """``node.pack`` on Tensors (recorded): a tangent of the node's packed value."""
    pieces: list[Any] = []
    at = 0
    for p, (off, n, bits) in zip(parts, node.layout):
        if off > at:  # a bits output's alignment
            pieces.append(np.zeros(off - at, node.dtype))
        if bits:  # an integer output: no tangent
            pieces.append(np.zeros(n, node.dtype))
        else:
            pieces.append(ravel(astype(p, node.dtype) if _value(p).dtype != node.dtype else p))
        at = off + n
    if not pieces:
        return np.zeros(0, node.dtype)
    return concatenate(pieces) if len(pieces) > 1 else pieces[0]


_scan_p = primitive(_scan_fwd, "scan")
nobatch(_scan_p, "vmap of a compiled lax loop is not supported yet: vmap the loop's body "
        "inside it, or call vmap outside rlgrad.jit (eager loops batch)")
defvjp_argnum(_scan_p, _scan_vjp)
defjvp_argnum(_scan_p, _scan_jvp)


# ---- fori_loop, map -----------------------------------------------------------------------------
def _static_int(x: Any) -> int | None:
    """``x`` as a Python int when it is known now (not a value rlgrad.jit is tracing)."""
    if isinstance(x, Tensor):
        return None if _tracing() else int(x._value)
    return int(x)


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, *,
              unroll: int | bool | None = None) -> Any:
    """JAX's ``lax.fori_loop``: ``val = body_fun(i, val)`` for ``i`` from ``lower`` to ``upper``.
    With bounds known at trace time it is a ``scan`` over the indices (differentiable both
    ways, ``unroll`` as scan's); with traced bounds a ``while_loop`` (forward mode only), as in
    JAX."""
    lo, hi = _static_int(lower), _static_int(upper)
    if lo is not None and hi is not None:
        idx_dtype = np.result_type(_value(lower).dtype, _value(upper).dtype)
        if not _tracing():  # eagerly, a Python loop with Python ints
            val = init_val
            for i in range(lo, hi):
                val = body_fun(i, val)
            return val
        out, _ = scan(_Fori(body_fun), init_val, np.arange(lo, max(lo, hi), dtype=idx_dtype),
                      unroll=1 if unroll is None else unroll)
        return out
    (_, _, val) = while_loop(_fori_cond, _ForiWhile(body_fun), (lower, upper, init_val))
    return val


class _Fori:
    """fori_loop's body as scan's (a class, not a closure: the same body traces once)."""

    def __init__(self, body_fun: Callable) -> None:
        self.body_fun = body_fun

    def __call__(self, val: Any, i: Any) -> tuple[Any, None]:
        return self.body_fun(i, val), None


class _Unrolled(_Fori):
    """``k`` steps of scan's body in one call over a block of ``k`` elements (``unroll``)."""

    def __init__(self, body_fun: Callable, k: int, reverse: bool) -> None:
        super().__init__(body_fun)
        self.k, self.reverse = k, reverse

    def __call__(self, carry: Any, block: Any) -> tuple[Any, Any]:
        leaves, tdef = _flatten(block)
        ys: list[Any] = [None] * self.k
        for t in (range(self.k - 1, -1, -1) if self.reverse else range(self.k)):
            carry, ys[t] = self.body_fun(carry, _unflatten(tdef, [getitem(x, t) for x in leaves]))
        y_def = _flatten(ys[0])[1]
        cols = zip(*[_flatten(y)[0] for y in ys])
        return carry, _unflatten(y_def, [stack(list(c)) for c in cols])


class _ForiWhile(_Fori):
    def __call__(self, state: Any) -> Any:  # type: ignore[override]  # the while loop's step takes its state alone
        i, upper, val = state
        return i + 1, upper, self.body_fun(i, val)


def _fori_cond(state: Any) -> Any:
    return state[0] < state[1]


def map(f: Callable, xs: Any) -> Any:  # noqa: A001 - JAX's name
    """JAX's ``lax.map``: ``f`` applied to each element of ``xs`` along its leading axis, by scan."""
    _, ys = scan(_Map(f), None, xs)
    return ys


class _Map(_Fori):
    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        return None, self.body_fun(x)


# ---- while_loop ---------------------------------------------------------------------------------
_WHILE_VJP = ("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
              "dynamic start/stop values. Try using lax.scan, or using fori_loop with static "
              "start/stop.")


def _truth(x: Any, where: str) -> bool:
    v = _value(x)
    if v.shape != () or v.dtype != np.bool_:
        raise TypeError(f"{where}: cond_fun must return a boolean scalar, but got output type "
                        f"{_type_str(_aval(x))}")
    return bool(v)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """JAX's ``lax.while_loop``: ``while cond_fun(val): val = body_fun(val)``. Forward mode
    (``jvp``) goes through it; reverse mode raises, as JAX's does."""
    where = "rlgrad.lax.while_loop"
    leaves, tdef = _flatten(init_val)
    leaves = [_leaf(x) for x in leaves]
    if _tracing():
        return _unflatten(tdef, _while_traced(cond_fun, body_fun, leaves, tdef))
    val = leaves
    while _truth(cond_fun(_unflatten(tdef, val)), where):
        new, new_def = _flatten(body_fun(_unflatten(tdef, val)))
        new = [_leaf(v) for v in new]
        _check_carry(where, tdef, new_def, val, new)
        val = new
    return _unflatten(tdef, [_no_reverse(v) if isinstance(v, Tensor) and v.requires_grad
                                 else v for v in val])


def _refuse_reverse(g: Any, ans: Any, x: Any) -> Any:
    raise ValueError(_WHILE_VJP)


def _identity_fwd(x: np.ndarray) -> np.ndarray:
    return x


# what an eager while_loop's results pass through: forward mode goes on, reverse mode stops
_no_reverse = primitive(_identity_fwd, "while_loop_result", arity=1)
nobatch(_no_reverse, "vmap of while_loop is not supported yet: vmap the body, or loop in "
        "Python over the batch")
defvjp(_no_reverse, _refuse_reverse)
defjvp_is_linear(_no_reverse)


class _WhileCtx(_Node):
    def __init__(self, cond: _Body, body: _Body, avals: list) -> None:
        super().__init__(avals)
        self.cond, self.body = cond, body

    def split(self, args: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """(cond's captured, body's captured, init) of the node's arguments."""
        a, b = len(self.cond.captured), len(self.body.captured)
        return list(args[:a]), list(args[a:a + b]), list(args[a + b:])


def _while_fwd(*arrays: np.ndarray, ctx: _WhileCtx) -> np.ndarray:
    kc, kb, val = ctx.split(arrays)
    cond, body = ctx.cond.run, ctx.body.run
    while bool(cond(*val, *kc)[0]):
        val = body(*val, *kb)
    return ctx.pack(val)


def _while_traced(cond_fun: Callable, body_fun: Callable, leaves: list[Any], tdef: Any) -> list[Any]:
    where = "rlgrad.lax.while_loop"

    def cond_flat(v: list[Any]) -> list[Any]:
        out = _leaf(cond_fun(_unflatten(tdef, v)))
        _truth(out, where)
        return [out]

    def body_flat(v: list[Any]) -> list[Any]:
        new, new_def = _flatten(body_fun(_unflatten(tdef, v)))
        new = [_leaf(x) for x in new]
        _check_carry(where, tdef, new_def, v, new)
        return new

    cond = _body_for((cond_fun,), cond_flat, leaves, where + " cond")
    body = _body_for((body_fun,), body_flat, leaves, where)
    ctx = _WhileCtx(cond, body, [_aval(v) for v in leaves])
    return ctx.unpack(_while_p(*cond.captured, *body.captured, *leaves, ctx=ctx))


def _while_vjp(i: int, g: Any, ans: Any, *args: Any, ctx: _WhileCtx) -> Any:
    raise ValueError(_WHILE_VJP)


def _while_jvp(i: int, t: Any, ans: Any, *args: Any, ctx: _WhileCtx) -> Any:
    """Forward mode: a while_loop over (value, tangent), its body the step's ``jvp``."""
    kc, kb, val = ctx.split(args)
    tans = ctx.split([t if j == i else _zeros(a) for j, a in enumerate(args)])
    tkb, tval = tans[1], tans[2]
    kbf, tkbf = _floats(kb), _pick(tkb, kb)

    def cond_fn(state: Any) -> Any:
        return ctx.cond.eval(state[0], kc)[0]

    def body_fn(state: Any) -> Any:
        v, tv = state

        def one(k: list[Any], vf: list[Any]) -> list[Any]:
            return ctx.body.eval(_splice(v, vf), _splice(kb, k))

        out, tout = jvp(one, (kbf, _floats(v)), (tkbf, _pick(tv, v)))
        return out, tout

    _, tlast = while_loop(cond_fn, body_fn, (val, tval))
    return _as_given(t, _pack_tensors(ctx, tlast))


_while_p = primitive(_while_fwd, "while_loop")
nobatch(_while_p, "vmap of a compiled while_loop is not supported yet: vmap the body, or "
        "call vmap outside rlgrad.jit")
defvjp_argnum(_while_p, _while_vjp)
defjvp_argnum(_while_p, _while_jvp)


# ---- cond, switch -------------------------------------------------------------------------------
def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """JAX's ``lax.switch``: ``branches[index](*operands)``, ``index`` clamped into range. Under
    ``rlgrad.jit`` every branch is traced (their outputs must have one type) and the step picks
    one at each call; the gradient is the taken branch's."""
    branches = list(branches)
    if not branches:
        raise ValueError("rlgrad.lax.switch: branches must be a non-empty sequence of functions")
    iv = _value(index)
    if iv.shape != () or iv.dtype.kind not in "iub":
        raise TypeError(f"rlgrad.lax.switch: the index must be an integer scalar, got "
                        f"{_type_str(_aval(index))}")
    leaves, tdef = _flatten(list(operands))
    leaves = [_leaf(x) for x in leaves]
    if not (_tracing() and isinstance(index, Tensor)):  # the index is known: call that branch
        k = builtins.min(builtins.max(int(iv), 0), len(branches) - 1)
        return branches[k](*operands)
    return _switch_traced(index, branches, leaves, tdef)


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """JAX's ``lax.cond``: ``true_fun(*operands) if pred else false_fun(*operands)``."""
    pv = _value(pred)
    if pv.shape != ():
        raise TypeError(f"rlgrad.lax.cond: pred must be a scalar, got {_type_str(_aval(pred))}")
    if isinstance(pred, Tensor) and _tracing():
        index = astype(pred != 0, np.int32) if pv.dtype != np.bool_ else astype(pred, np.int32)
    else:
        index = np.int32(bool(pv))
    return switch(index, [false_fun, true_fun], *operands)


class _SwitchCtx(_Node):
    def __init__(self, branches: list[_Body], out_def: Any) -> None:
        super().__init__(branches[0].avals)
        self.branches, self.out_def = branches, out_def
        self.n_ops = len(branches[0].inputs)

    def split(self, args: Sequence[Any]) -> tuple[Any, list[Any], list[list[Any]]]:
        """(index, operands, each branch's captured) of the node's arguments."""
        ops_, rest, out = list(args[1:1 + self.n_ops]), list(args[1 + self.n_ops:]), []
        for b in self.branches:
            out.append(rest[:len(b.captured)])
            rest = rest[len(b.captured):]
        return args[0], ops_, out

    def pick(self, index: Any) -> int:
        return builtins.min(builtins.max(int(index), 0), len(self.branches) - 1)


def _switch_fwd(*arrays: np.ndarray, ctx: _SwitchCtx) -> np.ndarray:
    index, ops_, consts = ctx.split(arrays)
    k = ctx.pick(index)
    return ctx.pack(ctx.branches[k].run(*ops_, *consts[k]))


def _switch_traced(index: Tensor, branches: list[Callable], leaves: list[Any], tdef: Any) -> Any:
    defs: list[Any] = []

    def flat_of(fn: Callable) -> Callable:
        def flat(v: list[Any]) -> list[Any]:
            out, odef = _flatten(fn(*_unflatten(tdef, v)))
            defs.append(odef)
            return [_leaf(o) for o in out]
        return flat

    bodies = [_Body(flat_of(fn), leaves, "rlgrad.lax.switch") for fn in branches]
    for k, b in enumerate(bodies[1:], 1):
        if b.avals != bodies[0].avals or defs[k] != defs[0]:
            raise TypeError(
                "rlgrad.lax.switch: branch outputs must have the same types, but branch 0 returns "
                f"[{', '.join(builtins.map(_type_str, bodies[0].avals))}] and branch {k} "
                f"[{', '.join(builtins.map(_type_str, b.avals))}]; make them agree (cond: true_fun and "
                "false_fun)")
    ctx = _SwitchCtx(bodies, defs[0])
    consts = [t for b in bodies for t in b.captured]
    parts = ctx.unpack(_switch_p(index, *leaves, *consts, ctx=ctx))
    return _unflatten(defs[0], parts)


def _switch_vjp(i: int, g: Any, ans: Any, *args: Any, ctx: _SwitchCtx) -> Any:
    return _as_given(g, ctx.grads(g, lambda gt: _switch_grads(ctx, gt, args))[i])


def _switch_grads(ctx: _SwitchCtx, g: Tensor, args: Sequence[Any]) -> list[Any]:
    """The taken branch's VJP, chosen by a switch at each call; zeros for the other branches'
    captured tensors."""
    index, ops_, consts = ctx.split(args)
    cts = _floats(ctx.unpack(g, cotangent=True))
    flat_k = [k for ks in consts for k in ks]

    def branch_vjp(k: int) -> Callable:
        start = sum(len(c) for c in consts[:k])
        stop = start + len(consts[k])

        def back(ct: list[Any], o: list[Any], ks: list[Any]) -> list[Any]:
            mine = ks[start:stop]

            def one(of: list[Any], kf: list[Any]) -> list[Any]:
                return _floats(ctx.branches[k].eval(_splice(o, of), _splice(mine, kf)))

            _, fn = vjp(one, _floats(o), _floats(mine))
            d_o, d_k = fn(ct)
            d_mine = iter(d_k)
            return [*d_o, *[next(d_mine) if start <= j < stop else _zeros(kk)
                            for j, kk in enumerate(ks) if _is_float(kk)]]
        return back

    out = switch(index, [branch_vjp(k) for k in range(len(ctx.branches))], cts, ops_, flat_k)
    n_ops = len(_floats(ops_))
    d_ops, d_ks = _splice(ops_, out[:n_ops]), _splice(flat_k, out[n_ops:])
    return [None, *_grads_list(ops_, d_ops), *_grads_list(flat_k, d_ks)]


def _switch_jvp(i: int, t: Any, ans: Any, *args: Any, ctx: _SwitchCtx) -> Any:
    """Forward mode: the taken branch's ``jvp``, chosen by a switch at each call."""
    index, ops_, consts = ctx.split(args)
    _, tops, tks = ctx.split([t if j == i else _zeros(a) for j, a in enumerate(args)])
    flat_k, flat_tk = [k for ks in consts for k in ks], [k for ks in tks for k in ks]

    def branch_jvp(k: int) -> Callable:
        start = sum(len(c) for c in consts[:k])
        stop = start + len(consts[k])

        def fwd(o: list[Any], to: list[Any], ks: list[Any], tk: list[Any]) -> list[Any]:
            mine, tmine = ks[start:stop], tk[start:stop]

            def one(of: list[Any], kf: list[Any]) -> list[Any]:
                return ctx.branches[k].eval(_splice(o, of), _splice(mine, kf))

            _, tout = jvp(one, (_floats(o), _floats(mine)), (_pick(to, o), _pick(tmine, mine)))
            return tout
        return fwd

    tout = switch(index, [branch_jvp(k) for k in range(len(ctx.branches))],
                  ops_, tops, flat_k, flat_tk)
    return _as_given(t, _pack_tensors(ctx, tout))


_switch_p = primitive(_switch_fwd, "switch")
nobatch(_switch_p, "vmap of a compiled switch/cond is not supported yet: use "
        "rlgrad.numpy.where on both branches' results")
defvjp_argnum(_switch_p, _switch_vjp)
defjvp_argnum(_switch_p, _switch_jvp)
