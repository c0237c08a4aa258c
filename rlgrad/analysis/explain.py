"""``rlgrad.explain(loss, params)``: which parameters get a gradient from ``loss``, how large it
is, and for those that get none, why: the op that cut the path (``detach``/``stop_gradient``, a
distribution's ``sample()``, ``argmax`` or an integer cast, ``no_grad``), or that the parameter
is not used at all. The graph can be written as Graphviz DOT with the cut edges dashed and named.

How the engine records this: a recorded tensor has ``_op`` (its primitive) and ``_args``; where a
gradient path was cut the output gets ``_cut = (op_name, reason, sources)`` (see
``rlgrad.tracer``). Ops applied later to that constant record nothing, so a loss that is a
constant all the way down has no links left to follow; for that case pass a function instead of
the loss, ``explain(lambda: compute_loss(), params)``: it is run with every op traced (the same
hook ``rlgrad.jit`` uses), so paths through constants are followed too.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlgrad import autograd
from rlgrad.analysis._common import named_params
from rlgrad.tensor import Tensor, _Trace

__all__ = ["explain", "GradientReport", "ParamRecord", "Cut"]

_ARG_OPS = ("argmax", "argmin", "argsort")
_COMPARISONS = ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
                "logical_and", "logical_or", "logical_not", "isfinite", "isnan", "isinf")


@dataclass
class Cut:
    """One place where a path from a parameter to the loss was cut.

    ``op``: the primitive (``stop_gradient``, ``argmax``, ``astype``, ``sample``, or the op run
    under ``no_grad``); ``reason``: the engine's reason (``"stop_gradient"``, ``"no_grad"``,
    ``"non-differentiable op"``, ``"sample"``); ``kind``: a short category (``"detach"``,
    ``"no_grad"``, ``"sample"``, ``"argmax"``, ``"integer cast"``, ``"comparison"``,
    ``"non-differentiable"``); ``path``: the ops from the parameter to the cut.
    """

    op: str
    reason: str
    kind: str
    path: list[str] = field(default_factory=list)

    def describe(self) -> str:
        op = self.op
        if self.kind == "detach":
            why = "cut by detach()/stop_gradient(): the value is used as a constant"
        elif self.kind == "no_grad":
            why = f"cut by no_grad(): '{op}' ran with recording off"
        elif self.kind == "sample":
            why = ("cut by sample(): a draw is not a differentiable function of the distribution's "
                   "parameters; use rsample() (reparameterization) or the score function "
                   "-log_prob(sample) * advantage")
        elif self.kind == "argmax":
            why = f"cut by {op}: it returns integer indices (piecewise constant, no gradient)"
        elif self.kind == "integer cast":
            why = ("cut by a cast to an integer/boolean dtype (e.g. to use the value as an "
                   "index): integers are never differentiable")
        elif self.kind == "comparison":
            why = f"cut by {op}: a comparison returns booleans (no gradient)"
        else:
            why = f"cut by {op}: {self.reason}"
        if self.path:
            why += " [path: " + " -> ".join(self.path) + "]"
        return why


def _kind(op: str, reason: str, out: Any) -> str:
    if reason == "stop_gradient":
        return "detach"
    if reason == "no_grad":
        return "no_grad"
    if reason == "sample":
        return "sample"
    if op in _ARG_OPS:
        return "argmax"
    if op == "astype" or (isinstance(out, Tensor) and out._value.dtype.kind in "iub"
                          and op not in _COMPARISONS):
        return "integer cast"
    if op in _COMPARISONS:
        return "comparison"
    return "non-differentiable"


@dataclass
class ParamRecord:
    """What reaches one parameter. ``status``: ``"grad"`` (``grad_norm`` is set), ``"cut"``
    (``cuts`` says where), ``"unused"``, ``"frozen"`` (requires_grad=False) or ``"integer"``
    (an integer tensor such as actions/indices: never differentiable)."""

    name: str
    shape: tuple[int, ...]
    status: str
    grad_norm: float | None = None
    cuts: list[Cut] = field(default_factory=list)
    note: str = ""

    @property
    def has_grad(self) -> bool:
        return self.status == "grad"

    @property
    def reason(self) -> str | None:
        """None if the parameter gets a gradient, else a short reason: the first cut's kind
        (``"detach"``, ``"no_grad"``, ``"sample"``, ``"argmax"``, ``"integer cast"``, ...),
        ``"unused"``, ``"frozen"`` or ``"integer"``."""
        if self.status == "grad":
            return None
        if self.status == "cut":
            return self.cuts[0].kind if self.cuts else "cut"
        return self.status

    def describe(self) -> str:
        if self.status == "grad":
            text = f"|grad| = {self.grad_norm:.6g}"
            if self.grad_norm == 0:
                text += " (exactly zero at this point: e.g. inactive ReLUs, an entry nothing selects)"
            if self.cuts:
                text += "; another path is " + "; ".join(c.describe() for c in self.cuts)
            return text
        if self.status == "cut":
            return "NO GRADIENT: " + "; and ".join(c.describe() for c in self.cuts)
        return "NO GRADIENT: " + self.note


@dataclass
class _Edge:
    src: int
    dst: int
    kind: str  # "grad" (differentiable), "cut" (a gradient path was cut), "const" (no grad needed)
    label: str
    reason: str = ""
    cut_kind: str = ""


class GradientReport:
    """The result of :func:`explain`: one :class:`ParamRecord` per parameter (iterate, index by
    position or name), a readable ``str()``, and the graph as DOT (:meth:`to_dot`,
    :meth:`write`)."""

    def __init__(self, records: list[ParamRecord], loss: Tensor, nodes: dict[int, Tensor],
                 edges: list[_Edge], names: dict[int, str], traced: bool,
                 warnings: list[str]) -> None:
        self.records = records
        self.loss = loss
        self._nodes = nodes
        self._edges = edges
        self._names = names
        self.traced = traced
        self.warnings = warnings

    # ---- records -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[ParamRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, key: int | str) -> ParamRecord:
        if isinstance(key, str):
            for r in self.records:
                if r.name == key:
                    return r
            raise KeyError(f"no parameter named {key!r}; names: {[r.name for r in self.records]}")
        return self.records[key]

    @property
    def cuts(self) -> list[_Edge]:
        return [e for e in self._edges if e.kind == "cut"]

    def without_grad(self) -> list[ParamRecord]:
        return [r for r in self.records if r.status != "grad"]

    def __str__(self) -> str:
        n_ops = sum(1 for t in self._nodes.values() if t._op is not None)
        val = self.loss._value
        head = (f"Gradient flow to the loss (shape {tuple(self.loss.shape)}"
                + (f", value {float(val):.6g}" if val.size == 1 else "")
                + f"): {n_ops} recorded ops, {len(self.cuts)} cut edge(s)")
        width = max([len(r.name) for r in self.records] + [4])
        lines = [head]
        for r in self.records:
            shape = "x".join(map(str, r.shape)) or "scalar"
            lines.append(f"  {r.name:<{width}}  {shape:<10}  {r.describe()}")
        lines += [f"  note: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        ok = sum(r.has_grad for r in self.records)
        return f"<GradientReport: {ok}/{len(self.records)} parameters get a gradient>"

    # ---- Graphviz --------------------------------------------------------------------------
    def to_dot(self) -> str:
        """The graph in Graphviz DOT: data flows top to bottom into the loss; parameters are
        boxes (green: gets a gradient, red: does not), cut edges are dashed red and labelled
        with the cutting op, edges that carry constants are dotted grey."""
        ids: dict[int, str] = {}

        def nid(k: int) -> str:
            if k not in ids:
                ids[k] = f"n{len(ids)}"
            return ids[k]

        status = {id(p): r for r, p in zip(self.records, self._param_tensors)}
        out = ["digraph rlgrad {", '  node [fontname="Helvetica", fontsize=10];',
               '  edge [fontname="Helvetica", fontsize=9];']
        for k, t in self._nodes.items():
            shape = "x".join(map(str, t.shape)) or "scalar"
            if k in status:
                r = status[k]
                text = f"{r.name}\\n{shape}\\n" + (
                    f"|grad|={r.grad_norm:.3g}" if r.has_grad else f"no grad: {r.reason}")
                color = "#c8f0c8" if r.has_grad else "#f6c6c6"
                attrs = f'shape=box, style=filled, fillcolor="{color}"'
            elif t is self.loss:
                text = f"loss\\n{shape}"
                attrs = "shape=doubleoctagon"
            else:
                text = f"{_op_name(t, self)}\\n{shape}"
                attrs = "shape=ellipse" if t.requires_grad else 'shape=ellipse, color="grey50"'
            out.append(f'  {nid(k)} [label="{_esc(text)}", {attrs}];')
        for r, p in zip(self.records, self._param_tensors):  # unused parameters: alone
            if id(p) not in self._nodes:
                shape = "x".join(map(str, r.shape)) or "scalar"
                out.append(f'  {nid(id(p))} [label="{_esc(r.name)}\\n{shape}\\nno grad: '
                           f'{r.reason}", shape=box, style="filled,dashed", fillcolor="#f6c6c6"];')
        for e in self._edges:
            if e.kind == "grad":
                attrs = f'label="{_esc(e.label)}"'
            elif e.kind == "cut":
                attrs = (f'style=dashed, color=red, fontcolor=red, penwidth=1.5, '
                         f'label="cut: {_esc(e.label)}'
                         + (f" ({_esc(e.cut_kind)})" if e.cut_kind not in (e.label, "") else "")
                         + '"')
            else:
                attrs = f'style=dotted, color="grey50", fontcolor="grey40", label="{_esc(e.label)}"'
            out.append(f"  {nid(e.src)} -> {nid(e.dst)} [{attrs}];")
        out.append("}")
        return "\n".join(out) + "\n"

    def write(self, path: str | Path, format: str | None = None) -> Path:  # noqa: A002
        """Write the graph. ``path`` ending in ``.svg``/``.png``/``.pdf`` (or ``format=``) is
        rendered with Graphviz's ``dot`` program when it is installed, next to the ``.dot``
        source; without ``dot`` only the ``.dot`` file is written. Returns the file written
        last (the picture, or the ``.dot`` file)."""
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        fmt = format or (suffix if suffix in ("svg", "png", "pdf") else None)
        dot_path = path if suffix == "dot" or fmt is None else path.with_suffix(".dot")
        if dot_path.suffix == "":
            dot_path = dot_path.with_suffix(".dot")
        dot_path.parent.mkdir(parents=True, exist_ok=True)
        dot_path.write_text(self.to_dot(), encoding="utf-8")
        if fmt is None:
            return dot_path
        exe = shutil.which("dot")
        if exe is None:
            return dot_path  # Graphviz is not installed: the .dot source is what we can give
        target = path if suffix == fmt else path.with_suffix("." + fmt)
        subprocess.run([exe, f"-T{fmt}", str(dot_path), "-o", str(target)], check=True,
                       capture_output=True, timeout=60)
        return target


def _esc(s: str) -> str:
    return s.replace('"', '\\"')


def _op_name(t: Tensor, report: GradientReport) -> str:
    if t._op is not None:
        return t._op.name
    cut = getattr(t, "_cut", None)
    if cut is not None:
        return cut[0]
    return report._names.get(id(t), "tensor")


def _trace_call(fn: Callable[[], Any]) -> tuple[Any, dict[int, tuple[str, tuple]]]:
    """Run ``fn()`` with every primitive call appended to a tape (rlgrad.jit's hook), reading
    values allowed: returns its result and, per output tensor, the op and arguments."""
    if _Trace.tape is not None:
        raise RuntimeError("explain(fn) cannot run while rlgrad.jit is tracing")
    tape: list = []  # primitive calls, and a marker for each sample() (tracer.mark_cut)
    _Trace.tape = tape  # not compiling: reading values (.item() ...) stays allowed
    try:
        out = fn()
    finally:
        _Trace.tape = None
    producer: dict[int, tuple[str, tuple]] = {}
    keep = []
    for p, args, _kw, res in tape:
        if isinstance(res, Tensor):
            producer[id(res)] = (p.name, tuple(args))
            keep.append(res)
    producer[-1] = ("", tuple(keep))  # keeps every traced tensor (and its id) alive
    return out, producer


def _index_owners(producer: dict[int, tuple[str, tuple]]) -> dict[int, Tensor]:
    """Integer/boolean traced tensors by the id of their array: an index Tensor is unwrapped to
    its array before the indexing primitive is called, so this is how an index is traced back to
    the argmax or cast that made it."""
    return {id(t._value): t for t in producer.get(-1, ("", ()))[1]
            if t._value.dtype.kind in "iub" and t._value.ndim > 0}


def _index_tensors(args: tuple, owners: dict[int, Tensor]) -> list[Tensor]:
    found = []
    for a in args:
        items = a if isinstance(a, tuple | list) else (a,)
        for arr in items:
            if isinstance(arr, np.ndarray):
                t = owners.get(id(arr))
                if t is None and arr.base is not None:
                    t = owners.get(id(arr.base))
                if t is not None and t not in found:
                    found.append(t)
    return found


def explain(loss: Tensor | Callable[[], Any], params: Any = None) -> GradientReport:
    """Explain the gradient flow from ``loss`` to ``params``.

    ``loss``: a Tensor (call ``explain`` before ``loss.backward()``, which frees the graph, or
    backward with ``retain_graph=True``), or a function of no arguments returning it, which is
    run with every op traced, so cuts followed by more ops on constants are found too.
    ``params``: a Module (its named_parameters), a dict name -> tensor, or a list of tensors
    (named p0, p1, ...); None lists the leaves found in the graph.

    Returns a :class:`GradientReport`: per parameter its gradient norm, or why it gets none. The
    gradients are computed with ``rlgrad.autograd.grad(..., retain_graph=True)``: nothing is
    written to ``.grad`` and the graph stays usable.
    """
    producer: dict[int, tuple[str, tuple]] = {}
    traced = False
    if callable(loss) and not isinstance(loss, Tensor):
        loss, producer = _trace_call(loss)
        traced = True
        if isinstance(loss, tuple | list):
            loss = loss[0]
    if not isinstance(loss, Tensor):
        raise TypeError(f"explain needs a loss Tensor (or a function returning one), not "
                        f"{type(loss).__name__}")
    if loss._op is not None and loss._args is None:
        raise RuntimeError(
            "the loss's graph was freed by backward(): call rlgrad.explain before "
            "loss.backward(), or pass retain_graph=True to backward()"
        )
    named = named_params(params)
    names = {id(p): n for n, p in named}
    warnings: list[str] = []

    nodes, edges, freed = _walk(loss, names, producer)
    if freed:
        warnings.append(f"{len(freed)} op(s) below the loss had their graph freed by an earlier "
                        "backward(); paths through them are not shown")
    if not named:  # no params given: the leaves that require grad, in graph order
        leaves = [t for t in nodes.values() if t._op is None and t.requires_grad]
        named = [(f"leaf{i}", t) for i, t in enumerate(leaves)]
        names = {id(p): n for n, p in named}

    # gradients, without touching .grad and without freeing the graph
    wanted = [p for _, p in named if p.requires_grad and p._value.dtype.kind in "fc"]
    grads: dict[int, Any] = {}
    if wanted and loss.requires_grad and not freed:
        go = None if loss._value.size == 1 else np.ones_like(loss._value)
        if go is not None:
            warnings.append("the loss is not a scalar: gradients are those of its sum")
        gs = autograd.grad(loss, wanted, grad_outputs=go, allow_unused=True, retain_graph=True)
        grads = {id(p): g for p, g in zip(wanted, gs)}

    children: dict[int, list[_Edge]] = {}
    for e in edges:
        children.setdefault(e.src, []).append(e)

    records = []
    for name, p in named:
        records.append(_record(name, p, grads.get(id(p)), nodes, children, loss, traced))
    if not traced and any(r.status == "unused" for r in records):
        warnings.append(
            ("the loss is a constant: every path was cut. " if not loss.requires_grad else "(*) ")
            + "A recorded graph shows a cut (detach, sample, argmax, no_grad) only where its "
            "result meets a tensor that requires grad; ops on constants after it record nothing. "
            "explain(lambda: <compute the loss>, params) traces every op and names the cut"
        )
    labels = {k: op for k, (op, _) in producer.items() if k != -1}  # ops on constants
    labels.update(names)
    report = GradientReport(records, loss, nodes, edges, labels, traced, warnings)
    report._param_tensors = [p for _, p in named]
    return report


def _walk(loss: Tensor, names: dict[int, str],
          producer: dict[int, tuple[str, tuple]]) -> tuple[dict[int, Tensor], list[_Edge], set[int]]:
    """Every tensor the loss was computed from, as far as links were kept, and the edges."""
    nodes: dict[int, Tensor] = {}
    edges: list[_Edge] = []
    freed: set[int] = set()

    def relevant(a: Tensor) -> bool:
        return (a.requires_grad or id(a) in names or getattr(a, "_cut", None) is not None
                or id(a) in producer)

    owners = _index_owners(producer)

    def indices(args: tuple, k: int, op: str) -> None:
        for a in _index_tensors(args, owners):
            if relevant(a):
                edges.append(_Edge(id(a), k, "const", f"{op} index"))
                stack.append(a)

    # the conditions of where(): masks, which choose between two values the gradient flows
    # through (softplus's threshold, leaky_relu's sign), not a path that a comparison cuts
    masks: set[int] = set()
    stack = [loss]
    while stack:
        t = stack.pop()
        k = id(t)
        if k in nodes:
            continue
        nodes[k] = t
        if t._op is not None:
            if t._args is None:
                freed.add(k)
                continue
            if t._op.name == "where" and t._args and isinstance(t._args[0], Tensor):
                masks.add(id(t._args[0]))
            for a in t._args:
                if isinstance(a, Tensor) and relevant(a):
                    edges.append(_Edge(id(a), k, "grad" if a.requires_grad else "const", t._op.name))
                    stack.append(a)
            if owners:
                indices(t._args, k, t._op.name)
            continue
        cut = getattr(t, "_cut", None)
        if cut is not None:
            op, reason, sources = cut
            kind = _kind(op, reason, t)
            for a in sources:
                if isinstance(a, Tensor) and relevant(a):
                    if a.requires_grad and not (kind == "comparison" and k in masks):
                        edges.append(_Edge(id(a), k, "cut", op, reason, kind))
                    else:
                        edges.append(_Edge(id(a), k, "const", op))
                    stack.append(a)
            continue
        if k in producer:
            op, args = producer[k]
            for a in args:
                if isinstance(a, Tensor) and relevant(a):
                    edges.append(_Edge(id(a), k, "const", op))
                    stack.append(a)
            indices(args, k, op)
    return nodes, edges, freed


def _record(name: str, p: Tensor, g: Any, nodes: dict[int, Tensor],
            children: dict[int, list[_Edge]], loss: Tensor, traced: bool) -> ParamRecord:
    shape = tuple(p.shape)
    used = id(p) in nodes
    if p._value.dtype.kind not in "fc":
        return ParamRecord(name, shape, "integer", note=(
            f"an integer tensor ({p.dtype}): indices and actions are never differentiable; "
            "the gradient flows to the values they select (gather/gather_nd/indexing), not to "
            "the indices"))
    if not p.requires_grad:
        return ParamRecord(name, shape, "frozen", note=(
            "requires_grad is False (frozen)" + ("" if used else ", and it is not used by the loss")))
    cuts = _cuts_from(name, p, children) if used else []
    if g is not None:
        gd = np.asarray(g._value, dtype=np.float64)
        # cuts on other paths are worth knowing (a target computed under no_grad, ...); masks
        # made by comparisons inside ops (relu, softplus, clip) are not
        cuts = [c for c in cuts if c.kind != "comparison"]
        return ParamRecord(name, shape, "grad", float(np.sqrt(np.sum(gd * gd))), cuts)
    if cuts:
        return ParamRecord(name, shape, "cut", cuts=cuts)
    if used:
        return ParamRecord(name, shape, "cut", cuts=[Cut("?", "non-differentiable argument",
                                                         "non-differentiable")])
    note = "unused: there is no path from it to the loss"
    if not traced:
        note += " in the recorded graph (*)"
    return ParamRecord(name, shape, "unused", note=note)


def _cuts_from(name: str, p: Tensor, children: dict[int, list[_Edge]]) -> list[Cut]:
    """The first cut on each differentiable path leaving ``p``, with the path to it."""
    start = id(p)
    parent: dict[int, _Edge | None] = {start: None}
    queue = deque([start])
    found: list[Cut] = []
    seen_cuts: set[tuple[int, int]] = set()
    while queue:
        k = queue.popleft()
        for e in children.get(k, ()):
            if e.kind == "cut":
                if (e.src, e.dst) not in seen_cuts:
                    seen_cuts.add((e.src, e.dst))
                    path = [name] + _path(parent, k)
                    found.append(Cut(e.label, e.reason, e.cut_kind, path + [e.label]))
            elif e.kind == "grad" and e.dst not in parent:
                parent[e.dst] = e
                queue.append(e.dst)
    # one entry per distinct cutting op and reason is enough to explain
    uniq: dict[tuple[str, str], Cut] = {}
    for c in found:
        uniq.setdefault((c.op, c.reason), c)
    return list(uniq.values())


def _path(parent: dict[int, _Edge | None], k: int) -> list[str]:
    ops: list[str] = []
    while parent.get(k) is not None:
        e = parent[k]
        ops.append(e.label)
        k = e.src
    return ops[::-1]
