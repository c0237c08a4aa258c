"""The backward pass: walk the recorded graph from the outputs to the leaves, applying each
primitive's VJP rule and adding up the gradients that meet at a tensor.

``reference_backward`` (first below) is what it computes, in its plainest form: read it to learn
the semantics. The engine runs optimized loops of the same pass: ``_propagate`` (Python) and its
C twin ``rlgrad/_engine.c``; ``use_reference()`` or ``RLGRAD_REFERENCE=1`` selects the reference
instead, and tests/engine/test_reference_paths.py holds both loops to its bits.

Two modes:
* fast (``create_graph=False``): rules receive plain ndarrays and compute with NumPy directly;
* differentiable (``create_graph=True``): rules receive the graph's own Tensors with recording on,
  so the gradients are themselves recorded and can be differentiated again (any order).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from typing import Any

from rlgrad import tracer
from rlgrad.inplace import node_reads, version_at
from rlgrad.ops import _sum_to, clone, sum_to
from rlgrad.tensor import HOOKED, Tensor, _Trace, constant
from rlgrad.tracer import Primitive, _GradMode, pass_through, read_grad

# the optional C loop of first-order passes (setup.py builds it); None: the Python loop
_engine = tracer._engine

NO_GRAD_HINT = (
    "Usual causes: the value was cut from the graph by .detach() / stop_gradient(), it came "
    "from a distribution's sample() (use rsample() or log_prob), it went through an integer "
    "cast, argmax or comparison, it was computed under no_grad(), or no input had "
    "requires_grad=True."
)


# ---- the reference backward pass -----------------------------------------------------------

def reference_backward(roots: Sequence[Tensor], root_grads: Sequence[Any], retain_graph: bool,
                       create_graph: bool, inputs: Sequence[Tensor] | None = None
                       ) -> dict[int, Any]:
    """``run_backward`` in its plainest form (HIPS autograd's ``backward_pass``): visit the
    recorded tensors in topological order, pop each one's gradient, call its VJP rules, add what
    they give to its arguments' gradients. ``inputs=None``: the leaves' ``.grad`` get theirs;
    else the gradients are returned keyed by ``id(input)`` and only tensors that lead to an input
    are visited."""
    wanted = None if inputs is None else {id(x) for x in inputs}
    order = toposort(roots)
    keep = None
    if wanted is not None:  # autograd.grad: only the tensors that lead to an input
        useful = reaching(roots, wanted) | wanted
        keep = lambda a: id(a) in useful  # noqa: E731
        order = [t for t in order if keep(t)]
    grads: dict[int, Any] = {}
    leaves: list[Tensor] = []  # leaves that got a gradient, for .grad
    for r, g in zip(roots, root_grads):
        _accumulate(grads, leaves, r, g)
    PASSES.append(grads)  # (a module's backward hook reads its other inputs' gradients here)
    try:
        with _grad_mode(create_graph):  # create_graph: the rules' own operations are recorded
            for t in order:
                key = id(t)  # an input of autograd.grad keeps its gradient; others use it up here
                g = grads.get(key) if wanted is not None and key in wanted else grads.pop(key, None)
                if g is None:
                    continue  # no gradient reached it
                if getattr(t, "_hooks", None):  # torch: hooks first, retain_grad's .grad last
                    g = run_hooks(t, g, create_graph)
                    if wanted is not None and key in wanted:
                        grads[key] = g
                if wanted is None and t._retain:
                    _add_to_grad(t, g)
                for a, ga in node_vjps(t, g, create_graph, keep):
                    _accumulate(grads, leaves, a, ga)
                if not retain_graph:
                    t._args = None  # free what the rules needed; a second pass raises
            for leaf in leaves:  # a leaf's hooks see its whole gradient, before .grad does
                if getattr(leaf, "_hooks", None) and id(leaf) in grads:
                    grads[id(leaf)] = run_hooks(leaf, grads[id(leaf)], create_graph)
    finally:
        PASSES.pop()
    if wanted is None:
        _write_leaf_grads(leaves, grads, create_graph)
    return grads


#: the gradients of the reference passes running now (innermost last), for hooks
PASSES: list[dict[int, Any]] = []


def run_hooks(t: Tensor, g: Any, create_graph: bool) -> Any:
    """``t``'s hooks on its gradient ``g``, in the order registered: each sees the gradient the
    previous one left (a Tensor; the recorded one under ``create_graph``), and a Tensor it
    returns replaces it (same shape, as torch requires)."""
    for hook in list(t._hooks.values()):
        arg = g if isinstance(g, Tensor) else constant(g)
        out = hook(arg)
        if out is None:
            continue
        if not isinstance(out, Tensor):
            raise TypeError(f"a tensor hook returned a {type(out).__name__}; return a Tensor "
                            "(the new gradient) or None")
        if out.shape != t.shape:
            raise RuntimeError(f"hook {getattr(hook, '__name__', hook)!r} has changed the size "
                               f"of value: the gradient has shape {tuple(t.shape)}, the hook "
                               f"returned {tuple(out.shape)}")
        g = out if create_graph else out._value
    return g


def toposort(roots: Sequence[Tensor]) -> list[Tensor]:
    """The recorded tensors under ``roots``, newest first: each comes after every tensor computed
    from it, since tensors are numbered in creation order (``_seq``) and an input is always older
    than its output. Tensors that do not require grad are not followed."""
    stack = [r for r in roots if r._op is not None]
    seen = {id(r) for r in stack}
    order = []
    while stack:
        t = stack.pop()
        order.append(t)
        for a in edges(t):  # a freed graph (no _args) ends here; node_vjps raises on it
            if isinstance(a, Tensor) and a._op is not None and a.requires_grad and id(a) not in seen:
                seen.add(id(a))
                stack.append(a)
    order.sort(key=_creation_order, reverse=True)
    return order


def node_vjps(t: Tensor, g: Any, create_graph: bool,
              keep: Callable[[Tensor], bool] | None = None) -> list[tuple[Tensor, Any]]:
    """``(argument, gradient)`` for each argument of ``t`` that requires grad (and passes
    ``keep``): its VJP rule applied to ``t``'s gradient ``g``, broadcasting undone. Refuses a
    freed graph and values written in place after ``t`` used them."""
    if t._args is None:
        raise _freed_error(t)
    if t._written > t._seq:
        _refuse_modified(t, t)
    g, ans, _, _, argv = _rule_inputs(t, g, create_graph)
    op, kw = t._op, t._kw or {}
    rules = op.vjps
    if rules is None:  # a variadic primitive (concatenate, einsum, ...): one rule for all
        rules = [partial(op.vjp_argnum, i) for i in range(len(t._args))]
    out = []
    for a, rule in zip(edges(t), rules):  # arguments past the last rule are static
        if rule is None or not isinstance(a, Tensor) or not a.requires_grad:
            continue
        if keep is not None and not keep(a):
            continue
        ga = rule(g, ans, *argv, **kw)
        if ga is not None:
            shape = a._value.shape
            out.append((a, ga if ga.shape == shape else unbroadcast(ga, shape, create_graph)))
    return out


def _accumulate(grads: dict[int, Any], leaves: list[Tensor], a: Tensor, ga: Any) -> None:
    key = id(a)
    if key in grads:
        grads[key] = grads[key] + ga
    else:
        grads[key] = ga
        if a._op is None:
            leaves.append(a)


@contextmanager
def _grad_mode(on: bool) -> Iterator[None]:
    prev = _GradMode.enabled
    _GradMode.enabled = on
    try:
        yield
    finally:
        _GradMode.enabled = prev


_reference = os.environ.get("RLGRAD_REFERENCE", "0") == "1"


@contextmanager
def use_reference(on: bool = True) -> Iterator[None]:
    """Run every backward pass inside through ``reference_backward`` (``on``) or the optimized
    loops (``not on``); ``RLGRAD_REFERENCE=1`` sets the default. For tests and for a reader who
    suspects an optimization."""
    global _reference
    prev, _reference = _reference, on
    try:
        yield
    finally:
        _reference = prev


# ---- the optimized backward pass ------------------------------------------------------------


def reaching(roots: Sequence[Tensor], wanted: set[int]) -> set[int]:
    """ids of the recorded tensors reachable from ``roots`` from which a ``wanted`` tensor can be
    reached: the part of the graph ``autograd.grad`` has to walk."""
    order = toposort(roots)[::-1]  # inputs before the tensors computed from them
    reaches: set[int] = set()
    for t in order:
        if t._args is None:  # freed by an earlier backward: where it led is unknown, so keep it
            reaches.add(id(t))  # and the loop raises the freed-graph error if a gradient gets here
            continue
        for a in edges(t):
            if isinstance(a, Tensor) and (id(a) in wanted or id(a) in reaches):
                reaches.add(id(t))
                break
    return reaches


_creation_order = operator.attrgetter("_seq")  # C-level key: no Python call per node


def unbroadcast(g: Any, shape: tuple[int, ...], create_graph: bool) -> Any:
    """Sum ``g`` down to ``shape``: the one place where broadcasting is undone."""
    if g.shape == shape:
        return g
    return sum_to(g, shape) if create_graph else _sum_to(g, shape)


def _freed_error(t: Tensor) -> RuntimeError:
    return RuntimeError(
        f"Trying to backward through the graph a second time (through {t._op.name}), but its "
        "saved values were freed by the first backward. Pass retain_graph=True to the first "
        "backward() or grad() call if you need to go through it again."
    )


def run_backward(
    roots: Sequence[Tensor],
    root_grads: Sequence[Any],
    retain_graph: bool,
    create_graph: bool,
    inputs: Sequence[Tensor] | None = None,
    prune: bool = True,
) -> dict[int, Any]:
    """Propagate ``root_grads`` from ``roots``.

    With ``inputs=None`` (``Tensor.backward``) gradients are added into the ``.grad`` of every leaf
    that requires grad (and of non-leaves that called ``retain_grad``); otherwise (``autograd.grad``)
    they are returned keyed by ``id(input)``, and (``prune``) only the part of the graph that
    reaches an input is visited; ``prune=False`` skips that pre-pass, for callers whose graphs have
    no other branches worth skipping (leaves that are not inputs are never given a gradient).

    Three phases: seed the roots' gradients, propagate them to the leaves, write the leaves'
    ``.grad`` (``Tensor.backward`` only).

    Order: a tensor is processed once every tensor computed from it has passed its gradient on.
    Tensors are numbered in creation order (``_seq``) and an input is always older than its
    output, so taking the newest tensor holding a gradient from a heap gives that order with no
    separate topological sort.

    ``reference_backward`` computes the same (``use_reference`` selects it); this is its
    optimized form.
    """
    if _Trace.tape is not None:
        create_graph = True  # rlgrad.jit captures the backward pass as ordinary recorded ops
    if _reference or HOOKED:  # hooks run in the reference loop only: the fast ones stay lean
        return reference_backward(roots, root_grads, retain_graph, create_graph, inputs)
    wanted: set[int] | None = None
    visit: set[int] | None = None  # None: every recorded tensor met; else only these ids
    if inputs is not None:
        wanted = {id(x) for x in inputs}
        if prune:
            visit = reaching(roots, wanted) | wanted
    grads, leaves, heap = _seed(roots, root_grads, visit)
    prev_mode = _GradMode.enabled  # inline, not _grad_mode: this is every loss.backward()
    _GradMode.enabled = create_graph
    try:
        if _engine is not None and not create_graph:
            _engine.propagate(heap, grads, leaves, wanted, visit, retain_graph)
        else:
            _propagate(heap, grads, leaves, wanted, visit, retain_graph, create_graph)
    finally:
        _GradMode.enabled = prev_mode
    if wanted is None:
        if _engine is not None and not create_graph:
            _engine.write_leaf_grads(leaves, grads)
        else:
            _write_leaf_grads(leaves, grads, create_graph)
    return grads


def _seed(roots: Sequence[Tensor], root_grads: Sequence[Any],
          visit: set[int] | None) -> tuple[dict[int, Any], list[Tensor], list[tuple[int, Tensor]]]:
    """The roots' gradients (a root given twice gets their sum), the roots that are leaves, and
    the heap of recorded roots to start from."""
    grads: dict[int, Any] = {}
    leaves: list[Tensor] = []  # leaves met on the way, for .grad
    heap: list[tuple[int, Tensor]] = []
    for r, g in zip(roots, root_grads):
        key = id(r)
        if key in grads:
            grads[key] = grads[key] + g
            continue
        grads[key] = g
        if r._op is None:
            leaves.append(r)
        elif visit is None or key in visit:
            _heappush(heap, (-r._seq, r))
    return grads, leaves, heap


def _refuse_modified(t: Tensor, a: Tensor) -> Tensor:
    """``a`` (an argument of ``t``'s op, or ``t`` itself) was written in place after ``t`` was
    computed: the version of ``a`` that ``t`` used (``inplace.version_at``; ``a`` itself if no
    in-place op rebased it), or torch's "modified by an inplace operation" error if a rule that
    will run reads that value (``inplace.node_reads``: reading its shape or dtype is fine)."""
    if node_reads(t, a):
        _raise_modified(t, a)
    return a if a is t else version_at(a, t._seq)


def _raise_modified(t: Tensor, a: Tensor) -> None:
    where = next((i for i, x in enumerate(t._args) if x is a), None)
    what = "its output" if a is t else f"argument {where}"
    raise RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: {what} of {t._op.name} (a {a.dtype} tensor of shape {a.shape}) was written "
        f"after {t._op.name} used it, so its gradient would be computed from the new values. "
        f"Write into a copy (x.clone()), or build the graph after the write")


def edges(t: Tensor) -> tuple:
    """``t``'s arguments, each the version ``t`` used: an argument written in place since is
    checked (``_refuse_modified``) and, if an in-place op rebased it, replaced by the node it
    replaced, so gradients flow to the graph as it was when ``t`` was computed."""
    args = t._args
    if not args:
        return ()
    seq = t._seq
    if not any(isinstance(a, Tensor) and a._written > seq for a in args):
        return args
    return tuple(_refuse_modified(t, a) if isinstance(a, Tensor) and a._written > seq else a
                 for a in args)


def _rule_inputs(t: Tensor, g: Any, create_graph: bool) -> tuple[Any, Any, Any, Any, Any]:
    """``(g, ans, d0, d1, argv)`` for ``t``'s rules off the hot path: with ``create_graph`` the
    graph's own Tensors (so the rules are recorded), else plain arrays in ``argv`` for a variadic
    op. Refuses an argument written in place after ``t`` was computed."""
    args = edges(t)  # checked: a rule reading a value written since refuses
    if create_graph:
        g = g if isinstance(g, Tensor) else constant(g)
        return g, t, args[0] if args else None, args[1] if len(args) == 2 else None, args
    return g, t._value, None, None, [a._value if isinstance(a, Tensor) else a for a in args]


def _skipped(a: Tensor, visit: set[int] | None, wanted: set[int]) -> bool:
    """autograd.grad: whether argument ``a`` gets no gradient (nothing asked for lies behind it,
    or it is a leaf nobody asked about)."""
    if visit is not None:
        return id(a) not in visit
    return a._op is None and id(a) not in wanted


def _propagate(heap: list[tuple[int, Tensor]], grads: dict[int, Any], leaves: list[Tensor],
               wanted: set[int] | None, visit: set[int] | None, retain_graph: bool,
               create_graph: bool) -> None:
    """``reference_backward``'s loop, optimized (its C twin, ``rlgrad/_engine.c``, runs the
    first-order passes when built). The same nodes in the same order with the same additions, so
    the same bits; what it adds is speed:

    * no toposort pass: a heap keyed by creation number holds only the tensors that got a
      gradient, newest first (the reference's order restricted to them);
    * pruning: ``visit`` (``run_backward``'s pre-pass) is the reference's ``keep``, or None when
      the caller asked for no pre-pass (``prune=False``: only unwanted leaves are skipped);
    * the one- and two-argument nodes of a first-order pass (nearly all) get plain locals and
      direct rule calls, no ``*argv``, no pair list, and ``pass_through`` rules are not called.
      Every other node goes through the reference's ``node_vjps``.
    """
    plain = wanted is None and visit is None  # Tensor.backward: every argument gets its share
    keep = None if plain else (lambda a: not _skipped(a, visit, wanted))  # noqa: E731
    fast = not create_graph  # plain arrays for the rules
    while heap:
        t = _heappop(heap)[1]
        key = id(t)
        if wanted is None:
            g = grads.pop(key)  # an intermediate: its gradient is used up here
            if t._retain:
                _add_to_grad(t, g)
        else:
            g = grads[key] if key in wanted else grads.pop(key)
        args, rules = t._args, t._op.vjps
        n = 0 if args is None else len(args)
        if not (fast and rules and (n == 1 or n == 2)):
            for a, ga in node_vjps(t, g, create_graph, keep):
                akey = id(a)  # the reference's _accumulate, and a first gradient queues a node
                prev = grads.get(akey)
                if prev is None:
                    grads[akey] = ga
                    if a._op is None:
                        leaves.append(a)
                    else:
                        _heappush(heap, (-a._seq, a))
                else:
                    grads[akey] = prev + ga
        else:
            if t._written > t._seq:  # the output itself was written in place after it was computed
                _refuse_modified(t, t)
            _simple_node(t, g, args, rules, n, grads, leaves, heap, plain, visit, wanted)
        if not retain_graph:
            t._args = None  # free what the rules needed; a second pass raises


def _simple_node(t: Tensor, g: Any, args: tuple, rules: tuple, n: int, grads: dict[int, Any],
                 leaves: list[Tensor], heap: list[tuple[int, Tensor]], plain: bool,
                 visit: set[int] | None, wanted: set[int] | None) -> None:
    """``node_vjps`` and the accumulation for a first-order node of one or two arguments,
    unrolled: plain locals, direct rule calls, ``pass_through`` not called."""
    tseq, ans = t._seq, t._value  # an argument written in place after t was computed is refused
    d0 = args[0]
    if isinstance(d0, Tensor):
        if d0._written > tseq:  # written in place since: the version t used, or an error
            args = edges(t)
            d0 = args[0]
        d0 = d0._value
    d1 = None
    if n == 2:
        d1 = args[1]
        if isinstance(d1, Tensor):
            if d1._written > tseq:
                args = edges(t)
                d1 = args[1]
            d1 = d1._value
    kw = t._kw
    for a, rule in ((args[0], rules[0]),) if n == 1 else zip(args, rules):
        if rule is None or not isinstance(a, Tensor) or not a.requires_grad:
            continue
        if not plain and _skipped(a, visit, wanted):
            continue
        if rule is pass_through:
            ga = g
        elif n == 2:
            ga = rule(g, ans, d0, d1, **kw) if kw else rule(g, ans, d0, d1)
        else:
            ga = rule(g, ans, d0, **kw) if kw else rule(g, ans, d0)
        if ga is None:
            continue
        shape = a._value.shape
        if ga.shape != shape:  # broadcasting undone (unbroadcast, without its frame)
            ga = _sum_to(ga, shape)
        akey = id(a)  # as in _propagate's general branch (a frame less per argument)
        prev = grads.get(akey)
        if prev is None:
            grads[akey] = ga
            if a._op is None:
                leaves.append(a)
            else:
                _heappush(heap, (-a._seq, a))
        else:
            grads[akey] = prev + ga


def _general_node(t: Tensor, g: Any, wanted: set[int] | None,
                  visit: set[int] | None) -> list[tuple[Tensor, Any]]:
    """The C loop's way through a node it does not take apart (a variadic primitive, or three or
    more arguments): the reference's ``node_vjps``, skipping what ``_propagate`` skips (the C
    loop adds the pairs up)."""
    plain = wanted is None and visit is None
    return node_vjps(t, g, False, None if plain else (lambda a: not _skipped(a, visit, wanted)))


def _write_leaf_grads(leaves: list[Tensor], grads: dict[int, Any], create_graph: bool) -> None:
    """``.backward()``: add each leaf's gradient into its ``.grad`` (a new ``.grad`` takes the
    array itself when no other leaf got the same one)."""
    given: set[int] = set()
    if _Trace.compiling:  # rlgrad.jit: the step adds into the .grad it finds when it runs
        seen: set[int] = set()
        for leaf in leaves:
            read_grad(leaf)
            g = grads[id(leaf)]
            if id(g) in seen:  # one gradient for two leaves (a + b): each its own, as below
                grads[id(leaf)] = clone(g)
            seen.add(id(g))
    for leaf in leaves:
        g = grads[id(leaf)]
        if leaf.grad is None and not create_graph and not isinstance(g, Tensor):
            if g.dtype != leaf._value.dtype:
                g = match_dtype(g, leaf)
            else:
                gid = id(g)
                if gid in given:
                    g = g.copy()  # rules may hand one array to several leaves (add's g, g):
                given.add(gid)  # each .grad gets its own, so an in-place edit touches one
            leaf.grad = constant(g)
        else:
            _add_to_grad(leaf, g)


def match_dtype(g: Any, like: Tensor) -> Any:
    """Gradients carry their tensor's dtype (a float32 parameter gets a float32 gradient)."""
    dt = like._value.dtype
    if g.dtype == dt:
        return g
    if g.dtype.kind == "c" and dt.kind != "c":  # the rules are for real numbers: never a wrong one
        raise TypeError(
            "the gradient reached a real input through complex values, which rlgrad does not "
            "differentiate; keep the real and imaginary parts as two real tensors")
    return g.astype(dt)  # ndarray and Tensor alike


def _add_to_grad(t: Tensor, g: Any) -> None:
    """Add ``g`` into ``t.grad``. A new ``.grad`` gets its own copy (the same gradient flows on
    to ``t``'s arguments: after ``y = x + 0; y.retain_grad()`` y's and x's must not share
    memory); an existing one is updated in the same Tensor, as torch accumulates in place (a
    reference kept to ``x.grad`` sees the next backward's sum). The sum is a new array, not an
    in-place add: two leaves' gradients may be views of one array (``reshape``'s rule)."""
    g = match_dtype(g, t)
    old = t.grad
    recorded = _Trace.compiling or (isinstance(g, Tensor) and g.requires_grad)  # (jit: replayed)
    if old is None:
        if isinstance(g, Tensor):
            t.grad = clone(g) if recorded else constant(g._value.copy())
        else:
            t.grad = constant(g.copy())
    elif recorded or old.requires_grad:
        t.grad = old + g  # create_graph, or a jit trace: the sum is recorded
    else:
        old._value = old._value + (g._value if isinstance(g, Tensor) else g)


if _engine is not None:
    _engine.setup(Tensor, Primitive, pass_through, _sum_to, _refuse_modified, _freed_error,
                  _add_to_grad, _general_node, match_dtype)
