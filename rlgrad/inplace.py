"""In-place operations on tensors in the graph, recorded as PyTorch records them.

``y.mul_(2)``, ``y += z``, ``logits[mask] = -inf`` on a computed tensor ``y`` (or on a constant,
with an operand that requires grad) keep ``y``'s memory (every alias sees the new values) and
*rebase* ``y`` as torch's ``rebase_history`` does: the Python object ``y`` becomes the in-place
op's node, whose input is a new object ``old`` holding ``y``'s previous node (and a copy of its
previous values when the in-place node's own rules read them: torch's ``original_self``).

Nodes recorded before the write still hold the object ``y`` among their arguments; the backward
pass sends their gradients to the version they used (``version_at``: the pre-mutation graph), and
refuses, with torch's "modified by an inplace operation" error, a rule that would read a value
written after it was saved (``node_reads``, called by ``core._refuse_modified``).

``t[i] = v`` records one ``index_put`` node, and an in-place op on ``v = base[i]`` (a NumPy view)
updates the base as torch's ``CopySlices``: ``base[i] = op(v)`` is recorded on ``base`` and ``v``
becomes ``base_new[i]``. Without recording (``no_grad``, or nothing requires grad) the write is
the plain NumPy one the callers do themselves (``needs_graph`` is False).
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.ops import astype, clone, getitem, reshape, where
from rlgrad.tensor import HOOKED, Tensor, TraceError, _new, _Trace, constant, mark_written, user_line
from rlgrad.tracer import _GradMode, defjvp_is_linear, defvjp, nobatch, pass_through, primitive

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."


def needs_graph(t: Tensor, name: str, *operands: Any, view: bool = False) -> bool:
    """Whether the in-place op ``name`` on ``t`` must be recorded (recording is on and ``t`` or
    an operand requires grad). Raises torch's error for a leaf that requires grad, and a
    TraceError under ``rlgrad.jit`` (the compiled step would replay the write but not the
    rebased graph)."""
    if not _GradMode.enabled:  # (the hot case: target updates under no_grad or through .data)
        return False
    if not t.requires_grad:
        for o in operands:
            if isinstance(o, Tensor) and o.requires_grad:
                break
        else:
            return False
    elif t._op is None:
        what = LEAF_ERROR.replace("a leaf", "a view of a leaf") if view else LEAF_ERROR
        raise RuntimeError(f"{what} ({name}: update parameters inside `with "
                           "rlgrad.no_grad():` or through .data, or write x = x op y)")
    if _Trace.compiling:
        raise TraceError(f"rlgrad.jit: in-place {name} on a tensor in the graph at {user_line()} "
                         "cannot be compiled; write the out-of-place form (x = x * 2, "
                         "rlgrad.where(mask, value, x)) inside the jitted function")
    return True


def refuse_in_jit(name: str) -> Callable[..., None]:
    """``tracer.replayed``'s check for the in-place method ``name``: a call that would rebase a
    tensor in the graph is refused at trace time (``replayed`` runs it untraced, so the compiled
    step would repeat the write but not the graph it records)."""
    def check(t: Tensor, *args: Any, **kwargs: Any) -> None:
        needs_graph(t, name, *args, *kwargs.values())

    return check


def version_at(a: Tensor, seq: int) -> Tensor:
    """The version of ``a`` that a node created at ``seq`` (its ``_seq``) used: ``a`` itself,
    unless in-place ops rebased ``a`` after that node was made (then the older node they
    replaced, found through ``_prev``)."""
    while a._op is not None and a._seq > seq:
        prev = getattr(a, "_prev", None)
        if prev is None:
            break
        a = prev
    return a


def node_reads(t: Tensor, a: Tensor) -> bool:
    """Whether a VJP rule of node ``t`` that will run (its argument requires grad) may read the
    value of ``a``: ``t``'s output (``a is t``) or one of its arguments."""
    if a is t:
        where = {1}  # a rule's parameters: (g, ans, d0, d1, ...)
    else:
        where = {2 + i for i, x in enumerate(t._args) if x is a}
    rules = t._op.vjps
    if rules is None:  # a variadic primitive: one rule for every argument
        rules = [t._op.vjp_argnum] * len(t._args)
        where = {p + 1 for p in where}  # vjp_argnum(i, g, ans, *args)
    for x, rule in zip(t._args, rules):
        if rule is None or rule is pass_through or not isinstance(x, Tensor):
            continue
        if not version_at(x, t._seq).requires_grad:
            continue  # its rule never runs
        if reads_any(rule, where):
            return True
    return False


_SHAPE_ATTRS = frozenset({"shape", "ndim", "dtype", "size"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE"})
_reads_cache: dict[Any, tuple[frozenset[int], int | None]] = {}


def reads_any(rule: Any, params: set[int]) -> bool:
    """Whether VJP rule ``rule`` may read the value of one of its positional parameters
    ``params`` (0: g, 1: ans, 2: the first argument ...): it loads the name other than for
    ``.shape`` / ``.ndim`` / ``.dtype`` / ``.size``, which an in-place write never changes
    (torch's rules save sizes, not tensors, for those). Unknown code (a builtin, a partial)
    reads everything."""
    code = getattr(rule, "__code__", None)
    if code is None:
        return True
    found = _reads_cache.get(code)
    if found is None:
        found = _reads_cache[code] = _read_params(code)
    read, star = found
    return any(p in read or (star is not None and p >= star) for p in params)


def _read_params(code: Any) -> tuple[frozenset[int], int | None]:
    """The positional parameters ``code`` reads (see ``reads_any``), and the position from which
    its ``*args`` starts if it reads that (else None)."""
    n = code.co_argcount
    names = list(code.co_varnames[:n])
    star = code.co_varnames[n + code.co_kwonlyargcount] if code.co_flags & 4 else None
    instrs = list(dis.get_instructions(code))
    read: set[int] = set()
    star_read = False
    for i, ins in enumerate(instrs):
        if ins.opname not in _LOADS:
            continue
        nxt = instrs[i + 1] if i + 1 < len(instrs) else None
        if nxt is not None and nxt.opname == "LOAD_ATTR" and nxt.argval in _SHAPE_ATTRS:
            continue
        if ins.argval in names:
            read.add(names.index(ins.argval))
        elif star is not None and ins.argval == star:
            star_read = True
    return frozenset(read), (n if star_read else None)


def rebase(t: Tensor, name: str, fn: Callable[[Tensor], Any], keep_old: bool = True) -> Tensor:
    """``t``'s values become ``fn(old)`` in place, and ``t`` becomes that node of the graph
    (``old``: ``t``'s previous version). ``fn`` computes out of place with primitives;
    ``old`` gets a copy of the values only if a rule of what ``fn`` records reads them;
    ``keep_old=False`` skips that search (index assignment: its rules never do)."""
    base = _view_base(t)
    if base is not None:  # a view of a graph tensor: the write goes into the base (CopySlices)
        return _write_through_view(t, base, name, fn)
    arr = t._value
    old = _split_off(t)
    res = fn(old)
    if not isinstance(res, Tensor):
        res = constant(np.asarray(res))
    if res._op is None:  # nothing recorded (a constant written): old gets zeros, as torch's
        res = where(constant(np.zeros(np.shape(arr), dtype=bool)), old, res)
    elif res._seq < old._written:  # an existing tensor: t gets a node of its own
        res = clone(res)
    _self_to_old(res, t, old)
    if keep_old and _reads_old(res, old):  # (before the write: arr still holds those values)
        old._value = np.array(arr, copy=True)
    if res.shape != np.shape(arr):
        raise RuntimeError(f"{name}: output with shape {list(np.shape(arr))} doesn't match the "
                           f"broadcast shape {list(res.shape)}")
    if res._value.dtype != np.result_type(arr):
        if not np.can_cast(res._value.dtype, np.result_type(arr), "same_kind"):
            raise RuntimeError(f"{name}: result type {res._value.dtype} can't be cast to the "
                               f"desired output type {np.result_type(arr)}")
        res = astype(res, np.result_type(arr))
    if isinstance(arr, np.ndarray) and arr.flags.writeable and arr.ndim:
        np.copyto(arr, res._value)
    else:  # a 0-d or read-only array: replaced, as the plain in-place operators do
        t._value = np.array(res._value, copy=True)
    _take_node(t, res)
    return t


def _split_off(t: Tensor) -> Tensor:
    """``old``: a new object holding ``t``'s node and its array (which the write changes:
    ``rebase`` gives it a copy if the in-place node's rules read it); ``t`` is marked written
    (nodes that saved it are checked), and so is ``old`` (its own node's saved output)."""
    old = _new(Tensor)
    for s in ("requires_grad", "_op", "_args", "_kw"):
        setattr(old, s, getattr(t, s))
    old._cut = getattr(t, "_cut", None)  # (unset on graph nodes)
    old._value = t._value
    old.grad, old._retain = None, False
    old._seq = getattr(t, "_seq", 0) if t._op is not None else 0
    old._prev = getattr(t, "_prev", None)
    old._hooks = getattr(t, "_hooks", None)  # hooks registered before the write: the old value's
    if old._hooks:
        t._hooks = None
        HOOKED[id(old)] = old
    mark_written(t)
    old._written = t._written
    t._prev = old
    return old


def _reads_old(res: Tensor, old: Tensor) -> bool:
    """Whether a rule of the nodes the in-place op made (newer than the write) reads ``old``'s
    values (torch saves ``original_self`` then: ``y.mul_(w)``'s gradient for ``w``)."""
    stack, seen = [res], {id(res)}
    while stack:
        n = stack.pop()
        if n._args is None or n._op is None or n._seq < old._written:
            continue
        if any(a is old for a in n._args) and node_reads(n, old):
            return True
        for a in n._args:
            if isinstance(a, Tensor) and a._op is not None and id(a) not in seen:
                seen.add(id(a))
                stack.append(a)
    return False


def _self_to_old(res: Tensor, t: Tensor, old: Tensor) -> None:
    """``t`` itself among the operands (``y.mul_(y)``): the nodes ``fn`` made read its value
    before the write, so they point at ``old`` (else ``t`` would feed itself)."""
    stack, seen = [res], {id(res)}
    while stack:
        n = stack.pop()
        if n._args is None or n._seq < old._written:
            continue
        if any(a is t for a in n._args):
            n._args = tuple(old if a is t else a for a in n._args)
        for a in n._args:
            if isinstance(a, Tensor) and a._op is not None and id(a) not in seen:
                seen.add(id(a))
                stack.append(a)


def _take_node(t: Tensor, res: Tensor) -> None:
    """``t`` becomes the node that computed ``res`` (its value is already in ``t``)."""
    if res._op is None:  # nothing required grad after all (fn dropped it): a plain write
        return
    t._op, t._args, t._kw, t._seq = res._op, res._args, res._kw, res._seq
    t.requires_grad = True
    t._cut = None


def _view_base(t: Tensor) -> Tensor | None:
    """The graph tensor ``t`` is a NumPy view of (``t = base[i]`` by basic indexing), else
    None. An identity node sharing its input's array gets its own copy (the write must not
    reach the input behind the graph's back); other view-making ops (reshape, transpose ...)
    are refused: rlgrad does not rebuild their inverse."""
    if t._op is None or not isinstance(t._value, np.ndarray):
        return None
    prev = getattr(t, "_prev", None)  # t's own previous version shares its array by design
    src = next((a for a in t._args if isinstance(a, Tensor) and a is not prev
                and isinstance(a._value, np.ndarray) and np.may_share_memory(t._value, a._value)),
               None)
    if src is None:
        return None
    if t._op.name == "getitem" and t._args[0] is src:
        return src
    if t._op.name in ("identity", "stop_gradient"):
        t._value = t._value.copy()
        return None
    raise RuntimeError(
        f"in-place operation on a view ({t._op.name}) of a tensor in the graph: rlgrad "
        "follows writes through indexing views (t[i].mul_(2)) only; write into the base, or "
        "into a .clone() of the view")


def _write_through_view(t: Tensor, base: Tensor, name: str, fn: Callable[[Tensor], Any]) -> Tensor:
    """``t = base[idx]`` changed in place: ``base[idx] = fn(t)`` (which rebases ``base``, and
    its own base in turn), then ``t`` becomes ``base_new[idx]``, still a view of its memory."""
    if base._op is None and base.requires_grad:
        raise RuntimeError(LEAF_ERROR.replace("a leaf", "a view of a leaf") + f" ({name})")
    idx = t._args[1]
    old = _split_off(t)
    new = fn(old)
    if isinstance(new, Tensor) and _reads_old(new, old):  # before the base is written
        old._value = np.array(old._value, copy=True)
    setitem(base, (idx,), new)
    _take_node(t, getitem(base, idx))
    return t


def recorded_operator(t: Tensor, other: Any, fn: Callable[[Any, Any], Any], sym: str
                      ) -> Tensor | None:
    """``t <sym>= other`` (``fn``: the out-of-place operator) when it must be recorded, else None
    (the caller writes the array). Under ``rlgrad.jit`` a computed ``t`` gets a new tensor, as
    before in-place ops were recorded (``loss += term`` in a jitted step): an alias of ``t``
    does not see that write there."""
    if _Trace.compiling and _GradMode.enabled and t._op is not None:
        return fn(t, other)
    if not needs_graph(t, f"{sym}=", other):
        return None
    return rebase(t, f"{sym}=", lambda old: fn(old, other))


def _index_put(x: Any, v: Any, flat: np.ndarray, sub_shape: tuple) -> np.ndarray:
    out = np.array(x, copy=True)  # C order: reshape(-1) is a view
    out.reshape(-1)[flat] = np.broadcast_to(v, sub_shape).reshape(-1)
    return out


# ``x`` with the elements at flat positions ``flat`` replaced by ``v`` (broadcast to
# ``sub_shape``, the shape the index selects): what ``t[key] = v`` records. Its rules read only
# ``g`` and the index, so neither the old values nor a full-size mask are kept per write.
index_put = primitive(_index_put, "index_put")
nobatch(index_put, "vmap of an in-place write into a tensor in the graph is not supported: "
        "write the out-of-place form (rlgrad.where(mask, value, x))")
defvjp(index_put,
       lambda g, ans, x, v, flat, sub_shape: index_put(g, 0.0, flat, sub_shape),
       lambda g, ans, x, v, flat, sub_shape: reshape(getitem(reshape(g, (-1,)), flat), sub_shape))
defjvp_is_linear(index_put, (0, 1))


def setitem(t: Tensor, keys: tuple, value: Any) -> None:
    """``t[key] = value`` recorded (``keys``: the index, or torch's two steps of it, applied one
    after the other) as ``index_put`` at the flat positions the index selects (duplicates, which
    NumPy resolves by order, are refused)."""
    shape = np.shape(t._value)
    positions = np.arange(int(np.prod(shape)), dtype=np.intp).reshape(shape)
    for key in keys:
        positions = positions[key]
    flat = np.ravel(positions)
    if flat.size != np.unique(flat).size:
        raise RuntimeError("index assignment with repeated indices into a tensor in the graph: "
                           "which write wins is undefined; index each element once, or use "
                           "index_add_ / scatter_add to add them up")
    sub = np.shape(positions)

    def write(old: Tensor) -> Any:
        v = value if isinstance(value, Tensor) else constant(np.asarray(value, dtype=old.dtype))
        if v.dtype != old.dtype:
            v = astype(v, old.dtype)
        return index_put(old, v, flat, sub)

    rebase(t, "index assignment", write, keep_old=False)


def reshape_in_place(t: Tensor, name: str, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """A shape-changing in-place op (``unsqueeze_``, ``t_``, ``transpose_`` ...): ``t`` becomes
    ``fn(t)``, a view of the same memory with a new shape; on a tensor in the graph ``t`` becomes
    that op's node and its version is bumped, as torch's (a node that saved it then raises)."""
    if not needs_graph(t, name):
        res = fn(t)
        mark_written(t)
        t._value = res._value
        return t
    old = _split_off(t)
    res = fn(old)
    t._value = res._value
    _take_node(t, res)
    return t
