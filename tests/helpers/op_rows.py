"""The gradient-check table of the engine's operations: ``ROWS`` has one row per operation, a name
and a hypothesis strategy drawing a ``Case(fn, args)``: ``fn`` is called on float64 arrays
``args`` (its non-differentiable parameters, such as an axis or indices, are drawn too and closed
over). For a primitive the row's name is the primitive's ``name``. tests/engine/test_ops_gradcheck.py
checks every row at first, second and third order; tests/engine/test_forward_mode.py uses the
primitive rows for the JVP rules.

Adding a primitive to ops.py?  Add one row here, e.g.::

    Row("softsign", unary(ops.softsign, reals(-3, 3))),

Inputs stay inside each function's domain and at least ~1e-2 away from kinks and ties (max/min,
abs, relu, floor, ...), where a derivative does not exist and finite differences mean nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

import rlgrad.numpy as rnp
from rlgrad import indexing, ops
from rlgrad.tensor import Tensor

F64 = np.float64
MAX_EXAMPLES = int(os.environ.get("RLGRAD_GRADCHECK_EXAMPLES", "25"))  # raise it for a deep run
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Case:
    fn: Callable[..., Any]
    args: tuple[np.ndarray, ...]

    def __repr__(self) -> str:  # shows up in hypothesis' falsifying example
        name = getattr(self.fn, "__name__", "fn")
        shapes = [np.shape(a) for a in self.args]
        return f"Case({name}, shapes={shapes}, args={[np.round(a, 4).tolist() for a in self.args]})"


@dataclass(frozen=True)
class Row:
    name: str  # the primitive's name (ops rows) or a descriptive name (compositions)
    cases: st.SearchStrategy[Case]
    primitive: bool = True  # False for compositions of primitives (rlgrad.numpy, indexing)
    order: int = 2


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)
NONEMPTY_SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)


def reals(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def nonzero(lo: float = 0.3, hi: float = 2.0) -> st.SearchStrategy[float]:
    """Values with lo <= |v| <= hi, of either sign: away from the kink at 0."""
    return st.tuples(st.sampled_from([-1.0, 1.0]), reals(lo, hi)).map(lambda t: t[0] * t[1])


def off_integers() -> st.SearchStrategy[float]:
    """k + f with f in [0.1, 0.4]: away from the jumps of floor, ceil, trunc and round."""
    return st.tuples(st.integers(-3, 3), reals(0.1, 0.4)).map(lambda t: t[0] + t[1])


def grid(offset: float) -> st.SearchStrategy[float]:
    """Multiples of 0.1 plus ``offset``: grid(0.03) and grid(0.08) never come within 0.05."""
    return st.integers(-15, 15).map(lambda i: 0.1 * i + offset)


def arrays(elements: st.SearchStrategy[float], shape: Any = SHAPES) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(F64, shape, elements=elements)


@st.composite
def distinct(draw: Any, shape: tuple[int, ...], positive: bool = False) -> np.ndarray:
    """Values at least 0.05 apart (no ties for max, min, sort); ``positive``: |values| too."""
    n = math.prod(shape)
    perm = np.array(draw(st.permutations(range(n))), dtype=F64)
    noise = draw(hnp.arrays(F64, (n,), elements=reals(0.0, 0.05)))
    if positive:
        signs = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n)))
        return (signs * (0.3 + 0.1 * perm + noise)).reshape(shape)
    return (0.1 * perm + noise - 0.05 * n).reshape(shape)


@st.composite
def axes(draw: Any, ndim: int, tuples: bool = True) -> Any:
    choices: list[st.SearchStrategy[Any]] = [st.none()]
    if ndim:
        choices.append(st.integers(-ndim, ndim - 1))
        if tuples:
            choices.append(hnp.valid_tuple_axes(ndim))
    return draw(st.one_of(choices))


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = name
    return fn


def unary(fn: Callable, elements: st.SearchStrategy[float], shapes: Any = SHAPES) -> st.SearchStrategy[Case]:
    return arrays(elements, shapes).map(lambda x: Case(fn, (x,)))


@st.composite
def broadcast(draw: Any, fn: Callable, *elements: st.SearchStrategy[float]) -> Case:
    """Arguments of mutually broadcastable shapes (0-d included), one element strategy each."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=len(elements), max_dims=3, max_side=3))
    return Case(fn, tuple(draw(arrays(e, s)) for e, s in zip(elements, shapes.input_shapes)))


@st.composite
def reduction(draw: Any, fn: Callable, values: str = "any", tuples: bool = True) -> Case:
    shape = draw(SHAPES)
    if values == "distinct":
        x = draw(distinct(shape))
    elif values == "prod":
        x = draw(arrays(nonzero(0.6, 1.4), shape))
    else:
        x = draw(arrays(reals(-3, 3), shape))
    axis = draw(axes(len(shape), tuples))
    keepdims = draw(st.booleans())
    return Case(
        _named(
            lambda x: fn(x, axis=axis, keepdims=keepdims),
            f"{fn.__name__}(axis={axis}, keepdims={keepdims})",
        ),
        (x,),
    )


@st.composite
def along_axis(draw: Any, fn: Callable, allow_none: bool = True) -> Case:
    """Functions taking one ``axis`` (cumsum, softmax, ...)."""
    shape = draw(NONEMPTY_SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    nd = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)) if allow_none else st.integers(-nd, nd - 1))
    return Case(_named(lambda x: fn(x, axis=axis), f"{fn.__name__}(axis={axis})"), (x,))


def matrices(n: int, batch: tuple[int, ...] = (), scale: float = 0.4) -> st.SearchStrategy[np.ndarray]:
    """Well-conditioned (batches of) n x n matrices: a random part plus +-3 on the diagonal."""

    @st.composite
    def build(draw: Any) -> np.ndarray:
        m = draw(arrays(reals(-scale, scale), batch + (n, n)))
        signs = draw(arrays(st.sampled_from([-3.0, 3.0]), batch + (n,)))
        return m + signs[..., None] * np.eye(n)

    return build()


# ---- elementwise ------------------------------------------------------------------------------
@st.composite
def clip_case(draw: Any, which: str) -> Case:
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    sx, slo, shi = shapes.input_shapes
    x = draw(arrays(grid(0.03), sx))
    lo = draw(arrays(st.integers(0, 10).map(lambda j: -0.1 * j - 0.02), slo))  # <= -0.02
    hi = draw(arrays(st.integers(0, 10).map(lambda k: 0.1 * k + 0.08), shi))  # >= 0.08
    if which == "both":
        style = draw(st.sampled_from(["positional", "a_min", "min"]))  # NumPy's spellings
        fns = {
            "positional": lambda x, lo, hi: ops.clip(x, lo, hi),
            "a_min": lambda x, lo, hi: rnp.clip(x, a_min=lo, a_max=hi),
            "min": lambda x, lo, hi: rnp.clip(x, min=lo, max=hi),
        }
        return Case(_named(fns[style], f"clip({style})"), (x, lo, hi))
    if which == "lo":
        return Case(_named(lambda x, lo: ops.clip(x, lo, None), "clip(hi=None)"), (x, lo))
    return Case(_named(lambda x, hi: ops.clip(x, None, hi), "clip(lo=None)"), (x, hi))


@st.composite
def where_case(draw: Any) -> Case:
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    sc, sx, sy = shapes.input_shapes
    cond = draw(hnp.arrays(np.bool_, sc))
    x = draw(arrays(reals(-3, 3), sx))
    y = draw(arrays(reals(-3, 3), sy))
    return Case(_named(lambda x, y: ops.where(cond, x, y), "where"), (x, y))


# ---- shape ------------------------------------------------------------------------------------
@st.composite
def reshape_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    target = draw(st.sampled_from([tuple(reversed(shape)), (-1,), (1,) + shape + (1,)]))
    return Case(_named(lambda x: ops.reshape(x, target), f"reshape({target})"), (x,))


@st.composite
def transpose_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    perm = draw(st.one_of(st.none(), st.permutations(range(len(shape))).map(tuple)))
    if perm is not None and draw(st.booleans()):
        perm = tuple(p - len(shape) for p in perm)  # negative axes
    return Case(_named(lambda x: ops.transpose(x, perm), f"transpose({perm})"), (x,))


@st.composite
def broadcast_to_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    other = draw(hnp.broadcastable_shapes(shape, max_dims=4, max_side=3))
    target = np.broadcast_shapes(shape, other)
    x = draw(arrays(reals(-3, 3), shape))
    return Case(_named(lambda x: ops.broadcast_to(x, target), f"broadcast_to({target})"), (x,))


@st.composite
def sum_to_case(draw: Any) -> Case:
    small = draw(SHAPES)
    other = draw(hnp.broadcastable_shapes(small, max_dims=4, max_side=3))
    big = np.broadcast_shapes(small, other)
    x = draw(arrays(reals(-3, 3), big))
    return Case(_named(lambda x: ops.sum_to(x, small), f"sum_to({small})"), (x,))


@st.composite
def concatenate_case(draw: Any, module: Any = ops) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd, nd - 1))
    k = draw(st.integers(1, 3))
    xs = []
    for _ in range(k):
        s = list(shape)
        s[axis] = draw(st.integers(1, 3))
        xs.append(draw(arrays(reals(-3, 3), tuple(s))))
    return Case(
        _named(lambda *xs: module.concatenate(list(xs), axis=axis), f"concatenate(axis={axis})"),
        tuple(xs),
    )


@st.composite
def stack_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd - 1, nd))
    k = draw(st.integers(1, 3))
    xs = tuple(draw(arrays(reals(-3, 3), shape)) for _ in range(k))
    return Case(_named(lambda *xs: ops.stack(list(xs), axis=axis), f"stack(axis={axis})"), xs)


@st.composite
def flip_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    axis = draw(axes(len(shape)))
    return Case(_named(lambda x: ops.flip(x, axis), f"flip({axis})"), (x,))


@st.composite
def roll_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    x = draw(arrays(reals(-3, 3), shape))
    kind = draw(st.sampled_from(["flat", "int", "tuple"]))
    if kind == "flat":
        shift, axis = draw(st.integers(-5, 5)), None
    elif kind == "int":
        shift, axis = draw(st.integers(-5, 5)), draw(st.integers(-nd, nd - 1))
    else:
        axis = draw(hnp.valid_tuple_axes(nd, min_size=1))
        shift = tuple(draw(st.integers(-5, 5)) for _ in axis)
    return Case(_named(lambda x: ops.roll(x, shift, axis), f"roll({shift}, {axis})"), (x,))


@st.composite
def tile_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    reps = draw(st.one_of(st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple)))
    return Case(_named(lambda x: ops.tile(x, reps), f"tile({reps})"), (x,))


@st.composite
def repeat_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    nd = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)) if nd else st.none())
    n = x.size if axis is None else shape[axis]
    repeats: Any = draw(
        st.one_of(  # one count, or one per element (zeros included)
            st.integers(1, 3), st.lists(st.integers(0, 2), min_size=n, max_size=n)
        )
    )
    return Case(_named(lambda x: ops.repeat(x, repeats, axis), f"repeat({repeats}, {axis})"), (x,))


@st.composite
def pad_case(draw: Any, module: Any = ops) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    kind = draw(st.sampled_from(["int", "pair", "per_axis"]))
    if kind == "int":
        width: Any = draw(st.integers(0, 2))
    elif kind == "pair":
        width = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    else:
        width = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    value = draw(reals(-1, 1))
    if module is ops:
        return Case(_named(lambda x: module.pad(x, width, constant_values=value), f"pad({width})"), (x,))
    mode = draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    kw = {"constant_values": value} if mode == "constant" else {}
    return Case(_named(lambda x: module.pad(x, width, mode=mode, **kw), f"pad({width}, {mode})"), (x,))


@st.composite
def diagonal_case(draw: Any, fn: Callable) -> Case:
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=3, max_side=4))
    nd = len(shape)
    axis1, axis2 = draw(st.permutations(range(nd)))[:2]
    if draw(st.booleans()):
        axis1 -= nd
    offset = draw(st.integers(-3, 3))
    x = draw(arrays(reals(-3, 3), shape))
    return Case(
        _named(lambda x: fn(x, offset, axis1, axis2), f"{fn.__name__}({offset}, {axis1}, {axis2})"), (x,)
    )


@st.composite
def diag_case(draw: Any) -> Case:
    k = draw(st.integers(-2, 2))
    if draw(st.booleans()):
        x = draw(arrays(reals(-3, 3), st.tuples(st.integers(1, 4))))
    else:
        x = draw(arrays(reals(-3, 3), st.tuples(st.integers(1, 4), st.integers(1, 4))))
    return Case(_named(lambda x: ops.diag(x, k), f"diag(ndim={x.ndim}, k={k})"), (x,))


@st.composite
def tri_case(draw: Any, fn: Callable) -> Case:
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=3, max_side=4))
    x = draw(arrays(reals(-3, 3), shape))
    k = draw(st.integers(-2, 2))
    return Case(_named(lambda x: fn(x, k), f"{fn.__name__}(k={k})"), (x,))


# ---- indexing ---------------------------------------------------------------------------------
@st.composite
def index_for(draw: Any, shape: tuple[int, ...]) -> Any:
    kind = draw(st.sampled_from(["basic", "fancy", "mask", "mixed"]))
    if kind == "basic" or not shape:
        return draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    if kind == "fancy":  # integer arrays, repeated and negative indices included
        return draw(hnp.integer_array_indices(shape, result_shape=hnp.array_shapes(max_dims=2, max_side=4)))
    if kind == "mask":
        return draw(hnp.arrays(np.bool_, shape))
    idx = draw(hnp.arrays(np.int64, st.integers(1, 4), elements=st.integers(-shape[-1], shape[-1] - 1)))
    return (Ellipsis, idx) if draw(st.booleans()) else (slice(None, None, -1),) * (len(shape) - 1) + (idx,)


@st.composite
def getitem_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    idx = draw(index_for(shape))
    return Case(_named(lambda x: ops.getitem(x, idx), f"getitem[{idx!r:.80}]"), (x,))


@st.composite
def untake_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    idx = draw(index_for(shape))
    g = draw(arrays(reals(-3, 3), np.empty(shape)[idx].shape))
    return Case(_named(lambda g: ops.untake(g, idx, shape), f"untake[{idx!r:.80}]"), (g,))


@st.composite
def along_axis_indices(draw: Any) -> tuple[tuple[int, ...], np.ndarray, int]:
    """(shape, indices, axis) for take_along_axis: repeated and negative indices, and index
    arrays whose other axes have size 1 (NumPy broadcasts them)."""
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd, nd - 1))
    ax = axis % nd
    ishape = tuple(
        draw(st.integers(1, 4)) if k == ax else draw(st.sampled_from([1, s])) for k, s in enumerate(shape)
    )
    idx = draw(hnp.arrays(np.int64, ishape, elements=st.integers(-shape[ax], shape[ax] - 1)))
    return shape, idx, axis


def _lane_indices(draw: Any, shape: tuple[int, ...], ax: int) -> tuple[tuple[int, ...], np.ndarray]:
    """In-range indices along ``ax`` (1 to 4 per lane, repeats allowed) covering at most the
    lanes of ``shape``: the index argument of scatters and gathers."""
    ishape = tuple(
        draw(st.integers(1, 4)) if k == ax else draw(st.integers(1, s)) for k, s in enumerate(shape)
    )
    return ishape, draw(hnp.arrays(np.int64, ishape, elements=st.integers(0, shape[ax] - 1)))


@st.composite
def take_along_axis_case(draw: Any) -> Case:
    shape, idx, axis = draw(along_axis_indices())
    x = draw(arrays(reals(-3, 3), shape))
    return Case(_named(lambda x: ops.take_along_axis(x, idx, axis), f"take_along_axis(axis={axis})"), (x,))


@st.composite
def scatter_along_axis_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd, nd - 1))
    ax = axis % nd
    ishape, idx = _lane_indices(draw, shape, ax)
    g = draw(arrays(reals(-3, 3), ishape))
    return Case(_named(lambda g: ops.scatter_along_axis(g, idx, axis, shape), f"scatter(axis={axis})"), (g,))


# ---- linear algebra ---------------------------------------------------------------------------
@st.composite
def matmul_case(draw: Any) -> Case:
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    kind = draw(st.sampled_from(["vv", "mv", "vm", "mm", "batched", "bv", "vb"]))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3)).input_shapes
    sa, sb = {
        "vv": ((k,), (k,)),
        "mv": ((n, k), (k,)),
        "vm": ((k,), (k, m)),
        "mm": ((n, k), (k, m)),
        "batched": (batch[0] + (n, k), batch[1] + (k, m)),
        "bv": (batch[0] + (n, k), (k,)),
        "vb": ((k,), batch[1] + (k, m)),
    }[kind]
    a = draw(arrays(reals(-2, 2), sa))
    b = draw(arrays(reals(-2, 2), sb))
    return Case(ops.matmul, (a, b))


EINSUMS = [
    ("ij,jk->ik", "ij", "jk"),
    ("ij,jk", "ij", "jk"),
    ("i,i->", "i", "i"),
    ("i,j->ij", "i", "j"),
    ("ij->", "ij"),
    ("ij->ji", "ij"),
    ("ijk->ik", "ijk"),
    ("ij,ij->ij", "ij", "ij"),
    ("ij,j", "ij", "j"),
    ("bij,bjk->bik", "bij", "bjk"),
    ("ij,jk,kl->il", "ij", "jk", "kl"),
    ("bi,bi->b", "bi", "bi"),
    ("...ij,...jk->...ik", "...ij", "...jk"),
    ("...i,...i->...", "...i", "...i"),
    # repeated indices: diagonals and traces
    ("ii->i", "ii"),
    ("ii", "ii"),
    ("...ii->...i", "...ii"),
    ("ij,jj->i", "ij", "jj"),
    ("iij->ij", "iij"),
]


@st.composite
def einsum_case(draw: Any) -> Case:
    subscripts, *ops_letters = draw(st.sampled_from(EINSUMS))
    sizes = {c: draw(st.integers(1, 3)) for c in "bijkl"}
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=len(ops_letters), max_dims=2, max_side=3))
    operands = []
    for letters, bshape in zip(ops_letters, batch.input_shapes):
        core = tuple(sizes[c] for c in letters.replace("...", ""))
        shape = (bshape if "..." in letters else ()) + core
        operands.append(draw(arrays(reals(-2, 2), shape)))
    return Case(_named(lambda *xs: ops.einsum(subscripts, *xs), f"einsum({subscripts!r})"), tuple(operands))


@st.composite
def square_case(draw: Any, fn: Callable) -> Case:
    n = draw(st.integers(1, 3))
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=2))
    return Case(fn, (draw(matrices(n, batch)),))


@st.composite
def solve_case(draw: Any) -> Case:
    n = draw(st.integers(1, 3))
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=2))
    a = draw(matrices(n, batch))
    kind = draw(st.sampled_from(["vector", "matrix", "batched_vector"]))
    if kind == "vector" and batch:
        kind = "batched_vector"
    if kind == "matrix":
        b = draw(arrays(reals(-2, 2), batch + (n, draw(st.integers(1, 3)))))
    else:
        b = draw(arrays(reals(-2, 2), (n,)))  # NumPy 2: a 1-D b is one vector for every matrix
    return Case(ops.solve, (a, b))


@st.composite
def cholesky_case(draw: Any) -> Case:
    n = draw(st.integers(1, 3))
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=1, max_side=2))
    m = draw(arrays(reals(-1, 1), batch + (n, n)))
    spd = m @ np.swapaxes(m, -1, -2) + n * np.eye(n)

    def chol_of_sym(a: Any) -> Any:  # cholesky reads one triangle: check it on symmetric input
        return ops.cholesky((a + ops.swapaxes(a, -1, -2)) * 0.5)

    return Case(_named(chol_of_sym, "cholesky"), (spd,))


# ---- compositions in rlgrad.numpy --------------------------------------------------------------
@st.composite
def var_case(draw: Any, fn: Callable) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(distinct(shape))
    axis = draw(axes(len(shape)))
    n = x.size // np.sum(x, axis=axis).size
    if fn is rnp.std:  # std of a single value is 0: sqrt's kink, no derivative there
        assume(n > 1)
    ddof = draw(st.sampled_from([0, 1] if n > 1 else [0]))
    keepdims = draw(st.booleans())
    return Case(
        _named(
            lambda x: fn(x, axis=axis, ddof=ddof, keepdims=keepdims),
            f"{fn.__name__}(axis={axis}, ddof={ddof})",
        ),
        (x,),
    )


@st.composite
def dot_case(draw: Any) -> Case:
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    sa, sb = draw(
        st.sampled_from(
            [
                ((), (k,)),
                ((k,), ()),
                ((k,), (k,)),
                ((n, k), (k,)),
                ((k,), (k, m)),
                ((n, k), (k, m)),
                ((2, n, k), (k, m)),
                ((n, k), (2, k, m)),
                ((2, n, k), (3, k, m)),
            ]
        )
    )
    return Case(rnp.dot, (draw(arrays(reals(-2, 2), sa)), draw(arrays(reals(-2, 2), sb))))


@st.composite
def tensordot_case(draw: Any) -> Case:
    s = [draw(st.integers(1, 3)) for _ in range(4)]
    spec = draw(st.sampled_from(["int0", "int1", "int2", "pairs"]))
    if spec == "int0":
        sa, sb, ax = (s[0], s[1]), (s[2],), 0
    elif spec == "int1":
        sa, sb, ax = (s[0], s[1]), (s[1], s[2]), 1
    elif spec == "int2":
        sa, sb, ax = (s[0], s[1], s[2]), (s[1], s[2], s[3]), 2
    else:
        sa, sb, ax = (s[0], s[1], s[2]), (s[2], s[3], s[0]), ([0, -1], [2, 0])
    a = draw(arrays(reals(-2, 2), sa))
    b = draw(arrays(reals(-2, 2), sb))
    return Case(_named(lambda a, b: rnp.tensordot(a, b, axes=ax), f"tensordot(axes={ax})"), (a, b))


@st.composite
def pair_case(draw: Any, fn: Callable, same_last: bool) -> Case:
    sa = draw(NONEMPTY_SHAPES)
    sb = draw(NONEMPTY_SHAPES)
    if same_last:
        sb = sb[:-1] + sa[-1:]
    return Case(fn, (draw(arrays(reals(-2, 2), sa)), draw(arrays(reals(-2, 2), sb))))


@st.composite
def vdot_case(draw: Any) -> Case:
    shape = draw(SHAPES)
    return Case(rnp.vdot, (draw(arrays(reals(-2, 2), shape)), draw(arrays(reals(-2, 2), shape))))


def _weighted(pieces: list[Any], axis: int) -> Any:
    """One output from the pieces of a split, each scaled differently so mixing them up shows."""
    return rnp.concatenate([p * (i + 1.0) for i, p in enumerate(pieces)], axis=axis)


@st.composite
def split_case(draw: Any, fn: Callable) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd, nd - 1))
    n = shape[axis]
    x = draw(arrays(reals(-3, 3), shape))
    if fn is rnp.array_split:
        sections: Any = draw(st.integers(1, n))
    elif draw(st.booleans()):
        sections = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    else:
        sections = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    return Case(
        _named(lambda x: _weighted(fn(x, sections, axis=axis), axis), f"{fn.__name__}({sections})"),
        (x,),
    )


@st.composite
def take_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    nd = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
    n = x.size if axis is None else shape[axis]
    idx = draw(
        hnp.arrays(
            np.int64,
            hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
            elements=st.integers(-n, n - 1),
        )
    )
    return Case(_named(lambda x: rnp.take(x, idx, axis=axis), f"take(axis={axis})"), (x,))


@st.composite
def rows_case(draw: Any, adjoint: bool) -> Case:
    """A ring's write (``ops.write_rows``) or its adjoint (``ops.written_rows``): indices out of
    range are skipped, a later row wins over an earlier one at the same index."""
    n, k, r = draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    lead = draw(st.sampled_from([(), (2,)]))  # unbatched, or a lead dimension (seeds)
    idx = np.array(draw(st.lists(st.integers(-1, n), min_size=r * math.prod(lead),
                                 max_size=r * math.prod(lead))), np.int64).reshape(lead + (r,))
    x = draw(arrays(reals(-3, 3), lead + (n, k)))
    if adjoint:
        return Case(_named(lambda g: ops.written_rows(g, idx), f"written_rows({idx.tolist()})"), (x,))
    rows = draw(arrays(reals(-3, 3), lead + (r, k)))
    return Case(_named(lambda x, rows: ops.write_rows(x, idx, rows), f"write_rows({idx.tolist()})"),
                (x, rows))


@st.composite
def sort_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(distinct(shape))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return Case(_named(lambda x: rnp.sort(x, axis=axis), f"sort(axis={axis})"), (x,))


@st.composite
def cumprod_case(draw: Any, positive: bool) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    elements = reals(0.3, 1.7) if positive else st.one_of(st.just(0.0), nonzero(0.3, 1.7))
    x = draw(arrays(elements, shape))
    if not positive:
        x.flat[0] = -1.0  # takes the general path
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    return Case(_named(lambda x: rnp.cumprod(x, axis=axis), f"cumprod(axis={axis})"), (x,))


@st.composite
def norm_case(draw: Any) -> Case:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3))
    nd = len(shape)
    x = draw(distinct(shape, positive=True))  # |x| distinct and >= 0.3: no kinks, no ties
    kind = draw(st.sampled_from(["default", "fro", "vector"]))
    if kind == "default":
        ord_, axis = None, draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
    elif kind == "fro" and nd >= 2:
        ord_, axis = (
            "fro",
            draw(st.one_of(st.none(), hnp.valid_tuple_axes(nd, min_size=2, max_size=2))),
        )
        if axis is None and nd != 2:
            axis = (0, 1)
    else:
        ord_ = draw(st.sampled_from([1, 2, 3, 0.5, np.inf, -np.inf]))
        axis = draw(st.integers(-nd, nd - 1)) if nd > 1 else draw(st.one_of(st.none(), st.just(0)))
    keepdims = draw(st.booleans())
    return Case(
        _named(
            lambda x: rnp.linalg.norm(x, ord=ord_, axis=axis, keepdims=keepdims),
            f"norm(ord={ord_}, axis={axis})",
        ),
        (x,),
    )


@st.composite
def diff_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    n = draw(st.integers(0, 3))
    x = draw(arrays(reals(-3, 3), shape))
    return Case(_named(lambda x: rnp.diff(x, n, axis=axis), f"diff({n}, axis={axis})"), (x,))


@st.composite
def moveaxis_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    src = draw(hnp.valid_tuple_axes(nd, min_size=1))
    dst = tuple(draw(st.permutations(range(nd)))[: len(src)])
    return Case(
        _named(lambda x: rnp.moveaxis(x, src, dst), f"moveaxis({src}, {dst})"),
        (draw(arrays(reals(-3, 3), shape)),),
    )


@st.composite
def swapaxes_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    a1, a2 = draw(st.integers(-nd, nd - 1)), draw(st.integers(-nd, nd - 1))
    return Case(
        _named(lambda x: rnp.swapaxes(x, a1, a2), f"swapaxes({a1}, {a2})"),
        (draw(arrays(reals(-3, 3), shape)),),
    )


@st.composite
def expand_squeeze_case(draw: Any, which: str) -> Case:
    shape = draw(SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    nd = len(shape)
    if which == "expand_dims":
        k = draw(st.integers(1, 2))
        axis: Any = draw(
            st.one_of(
                st.integers(-nd - 1, nd),
                st.permutations(range(-nd - k, 0)).map(lambda p: tuple(p[:k])),
            )
        )
        return Case(_named(lambda x: rnp.expand_dims(x, axis), f"expand_dims({axis})"), (x,))
    ones = [i for i, s in enumerate(shape) if s == 1]
    axis = draw(st.one_of(st.none(), st.sampled_from(ones))) if ones else None
    return Case(_named(lambda x: rnp.squeeze(x, axis), f"squeeze({axis})"), (x,))


@st.composite
def average_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    x = draw(arrays(reals(-3, 3), shape))
    w = draw(arrays(reals(0.5, 2), shape))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    return Case(_named(lambda x, w: rnp.average(x, axis=axis, weights=w), f"average(axis={axis})"), (x, w))


@st.composite
def stack_like_case(draw: Any, fn: Callable) -> Case:
    one_d = draw(st.booleans())
    n = draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    if fn is rnp.vstack:
        shapes = [(n,)] * k if one_d else [(draw(st.integers(1, 3)), n) for _ in range(k)]
    else:
        shapes = (
            [(draw(st.integers(1, 3)),) for _ in range(k)]
            if one_d
            else [(n, draw(st.integers(1, 3))) for _ in range(k)]
        )
    xs = tuple(draw(arrays(reals(-3, 3), s)) for s in shapes)
    return Case(_named(lambda *xs: fn(list(xs)), fn.__name__), xs)


@st.composite
def gather_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    d = dim % nd
    ishape, idx = _lane_indices(draw, shape, d)
    x = draw(arrays(reals(-3, 3), shape))
    return Case(_named(lambda x: indexing.gather(x, dim, idx), f"gather(dim={dim})"), (x,))


@st.composite
def scatter_add_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    d = dim % nd
    ishape, idx = _lane_indices(draw, shape, d)
    x = draw(arrays(reals(-3, 3), shape))
    src = draw(arrays(reals(-3, 3), ishape))
    return Case(
        _named(lambda x, s: indexing.scatter_add(x, dim, idx, s), f"scatter_add(dim={dim})"),
        (x, src),
    )


@st.composite
def gather_nd_case(draw: Any) -> Case:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3))
    k = draw(st.integers(1, len(shape)))
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    cols = [draw(hnp.arrays(np.int64, lead, elements=st.integers(0, shape[c] - 1))) for c in range(k)]
    idx = np.stack(cols, axis=-1)
    x = draw(arrays(reals(-3, 3), shape))
    return Case(_named(lambda x: indexing.gather_nd(x, idx), "gather_nd"), (x,))


@st.composite
def put_along_axis_case(draw: Any) -> Case:
    shape = draw(NONEMPTY_SHAPES)
    nd = len(shape)
    axis = draw(st.integers(-nd, nd - 1))
    ax = axis % nd
    ishape = tuple(1 if k == ax else s for k, s in enumerate(shape))
    idx = draw(hnp.arrays(np.int64, ishape, elements=st.integers(0, shape[ax] - 1)))
    x = draw(arrays(reals(-3, 3), shape))
    v = draw(arrays(reals(-3, 3), ishape))
    return Case(
        _named(lambda x, v: indexing.put_along_axis(x, idx, v, axis), f"put_along_axis({axis})"),
        (x, v),
    )


def _slogdet_logabs(a: Any) -> Any:
    return rnp.linalg.slogdet(a)[1]


# ---------------------------------------------------------------------------------------------
# The table: one row per operation
# ---------------------------------------------------------------------------------------------
ROWS: list[Row] = [
    # elementwise binary, broadcasting
    Row("add", broadcast(ops.add, reals(-3, 3), reals(-3, 3))),
    Row("subtract", broadcast(ops.subtract, reals(-3, 3), reals(-3, 3))),
    Row("multiply", broadcast(ops.multiply, reals(-3, 3), reals(-3, 3))),
    Row("divide", broadcast(ops.divide, reals(-3, 3), nonzero(0.5, 2))),
    Row("power", broadcast(ops.power, reals(0.2, 3), reals(-2, 2))),
    Row("maximum", broadcast(ops.maximum, grid(0.03), grid(0.08))),
    Row("minimum", broadcast(ops.minimum, grid(0.03), grid(0.08))),
    Row("logaddexp", broadcast(ops.logaddexp, reals(-3, 3), reals(-3, 3))),
    Row("logaddexp2", broadcast(ops.logaddexp2, reals(-3, 3), reals(-3, 3))),
    Row("hypot", broadcast(ops.hypot, nonzero(0.3, 3), nonzero(0.3, 3))),
    Row("arctan2", broadcast(ops.arctan2, nonzero(0.2, 2), reals(-2, 2))),
    # elementwise unary
    Row("negative", unary(ops.negative, reals(-3, 3))),
    Row("exp", unary(ops.exp, reals(-3, 3))),
    Row("log", unary(ops.log, reals(0.1, 5))),
    Row("log1p", unary(ops.log1p, reals(-0.8, 3))),
    Row("expm1", unary(ops.expm1, reals(-3, 3))),
    Row("sqrt", unary(ops.sqrt, reals(0.1, 5))),
    Row("square", unary(ops.square, reals(-3, 3))),
    Row("reciprocal", unary(ops.reciprocal, nonzero(0.3, 3))),
    Row("absolute", unary(ops.absolute, nonzero(0.01, 3))),
    Row("sign", unary(ops.sign, nonzero(0.01, 3))),
    Row("floor", unary(ops.floor, off_integers())),
    # x / y stays off the integers (the jumps): x = k + f, f in [0.1, 0.4], |y| in {0.5, 1}
    Row("remainder", broadcast(ops.remainder, off_integers(), st.sampled_from([0.5, -0.5, 1.0, -1.0]))),
    Row("fmod", broadcast(ops.fmod, off_integers(), st.sampled_from([0.5, -0.5, 1.0, -1.0]))),
    Row("ceil", unary(ops.ceil, off_integers())),
    Row("round", unary(ops.round, off_integers())),
    Row("trunc", unary(ops.trunc, off_integers())),
    Row("tanh", unary(ops.tanh, reals(-3, 3))),
    Row("tanh_grad", broadcast(ops.tanh_grad, reals(-3, 3), reals(-0.99, 0.99))),
    Row("sin", unary(ops.sin, reals(-4, 4))),
    Row("cos", unary(ops.cos, reals(-4, 4))),
    Row("tan", unary(ops.tan, reals(-1.2, 1.2))),
    Row("arcsin", unary(ops.arcsin, reals(-0.9, 0.9))),
    Row("arccos", unary(ops.arccos, reals(-0.9, 0.9))),
    Row("arctan", unary(ops.arctan, reals(-3, 3))),
    Row("sinh", unary(ops.sinh, reals(-3, 3))),
    Row("cosh", unary(ops.cosh, reals(-3, 3))),
    Row("arcsinh", unary(ops.arcsinh, reals(-3, 3))),
    Row("arctanh", unary(ops.arctanh, reals(-0.9, 0.9))),
    Row("arccosh", unary(ops.arccosh, reals(1.2, 4))),
    Row("sigmoid", unary(ops.sigmoid, reals(-6, 6))),
    Row("softplus", unary(ops.softplus, reals(-6, 6))),
    Row("relu", unary(ops.relu, nonzero(0.01, 3))),
    Row("relu_grad", broadcast(ops.relu_grad, reals(-3, 3), nonzero(0.01, 3))),
    Row("leaky_relu", unary(_named(lambda x: ops.leaky_relu(x, 0.1), "leaky_relu"),
                            nonzero(0.01, 3))),
    Row("leaky_relu_grad", broadcast(_named(lambda g, x: ops.leaky_relu_grad(g, x, 0.1),
                                            "leaky_relu_grad"), reals(-3, 3), nonzero(0.01, 3))),
    Row("identity", unary(ops.identity, reals(-3, 3))),
    Row("clone", unary(ops.clone, reals(-3, 3))),
    Row(
        "astype",
        unary(_named(lambda x: ops.astype(x, np.float64), "astype(float64)"), reals(-3, 3)),
    ),
    Row("clip", st.one_of(clip_case("both"), clip_case("lo"), clip_case("hi"))),
    Row("where", where_case()),
    # reductions
    Row("sum", reduction(ops.sum)),
    Row("mean", reduction(ops.mean)),
    Row("prod", reduction(ops.prod, "prod")),
    Row("max", reduction(ops.max, "distinct")),
    Row("min", reduction(ops.min, "distinct")),
    Row("logsumexp", reduction(ops.logsumexp)),
    Row("cumsum", along_axis(ops.cumsum)),
    Row("logcumsumexp", along_axis(ops.logcumsumexp)),
    Row("softmax", along_axis(ops.softmax, allow_none=False)),
    Row("log_softmax", along_axis(ops.log_softmax, allow_none=False)),
    # shape
    Row("reshape", reshape_case()),
    Row("transpose", transpose_case()),
    Row("broadcast_to", broadcast_to_case()),
    Row("sum_to", sum_to_case()),
    Row("concatenate", concatenate_case()),
    Row("stack", stack_case()),
    Row("flip", flip_case()),
    Row("roll", roll_case()),
    Row("tile", tile_case()),
    Row("repeat", repeat_case()),
    Row("pad", pad_case()),
    Row("diag", diag_case()),
    Row("triu", tri_case(ops.triu)),
    Row("tril", tri_case(ops.tril)),
    # indexing
    Row("getitem", getitem_case()),
    Row("untake", untake_case()),
    Row("take_along_axis", take_along_axis_case()),
    Row("scatter_along_axis", scatter_along_axis_case()),
    Row("write_rows", rows_case(adjoint=False)),
    Row("written_rows", rows_case(adjoint=True)),
    # linear algebra
    Row("matmul", matmul_case()),
    Row("einsum", einsum_case()),
    Row("inv", square_case(ops.inv)),
    Row("det", square_case(ops.det)),
    Row("logabsdet", square_case(ops.logabsdet)),
    Row("solve", solve_case()),
    Row("cholesky", cholesky_case()),
    # ---- compositions (rlgrad.numpy, rlgrad.numpy.linalg, rlgrad.indexing) ----
    Row("power(x, const)", unary(_named(lambda x: rnp.power(x, 3.0), "x**3"), reals(-3, 3)), False),
    Row("power(const, x)", unary(_named(lambda x: rnp.power(2.0, x), "2**x"), reals(-3, 3)), False),
    Row("x ** 2 (operator)", unary(_named(lambda x: x**2, "x**2"), reals(-3, 3)), False),
    Row("var", var_case(rnp.var), False),
    Row("std", var_case(rnp.std), False),
    Row("dot", dot_case(), False),
    Row("tensordot", tensordot_case(), False),
    Row("outer", pair_case(rnp.outer, same_last=False), False),
    Row("inner", pair_case(rnp.inner, same_last=True), False),
    Row("vdot", vdot_case(), False),
    Row("split", split_case(rnp.split), False),
    Row("array_split", split_case(rnp.array_split), False),
    Row("take", take_case(), False),
    Row("sort", sort_case(), False),
    Row("cumprod(positive)", cumprod_case(positive=True), False),
    Row("cumprod(general)", cumprod_case(positive=False), False),
    Row("linalg.norm", norm_case(), False),
    Row("linalg.slogdet", square_case(_slogdet_logabs), False),
    Row("linalg.det", square_case(rnp.linalg.det), False),
    Row("trace", diagonal_case(rnp.trace), False),
    Row("diagonal", diagonal_case(rnp.diagonal), False),
    Row("swapaxes", swapaxes_case(), False),
    Row("moveaxis", moveaxis_case(), False),
    Row("expand_dims", expand_squeeze_case("expand_dims"), False),
    Row("squeeze", expand_squeeze_case("squeeze"), False),
    Row("ravel", unary(rnp.ravel, reals(-3, 3)), False),
    Row("diff", diff_case(), False),
    Row("log2", unary(rnp.log2, reals(0.1, 5)), False),
    Row("log10", unary(rnp.log10, reals(0.1, 5)), False),
    Row("exp2", unary(rnp.exp2, reals(-3, 3)), False),
    Row("fabs", unary(rnp.fabs, nonzero(0.01, 3)), False),
    Row("sinc", unary(rnp.sinc, nonzero(0.05, 3)), False),
    Row("expit", unary(rnp.expit, reals(-6, 6)), False),
    Row(
        "heaviside",
        unary(_named(lambda x: rnp.heaviside(x, 0.5), "heaviside"), nonzero(0.01, 3)),
        False,
    ),
    Row("nan_to_num", unary(rnp.nan_to_num, reals(-3, 3)), False),
    Row("average", average_case(), False),
    Row("hstack", stack_like_case(rnp.hstack), False),
    Row("vstack", stack_like_case(rnp.vstack), False),
    Row("atleast_2d", unary(rnp.atleast_2d, reals(-3, 3)), False),
    Row("rnp.pad", pad_case(rnp), False),
    Row("rnp.concatenate", concatenate_case(rnp), False),
    Row("gather", gather_case(), False),
    Row("gather_nd", gather_nd_case(), False),
    Row("scatter_add", scatter_add_case(), False),
    Row("put_along_axis", put_along_axis_case(), False),
]


def recorded(out: Any) -> set[str]:
    """Names of the primitives recorded in the graph that produced ``out``."""
    names: set[str] = set()
    stack = [out]
    seen: set[int] = set()
    while stack:
        t = stack.pop()
        if not isinstance(t, Tensor) or id(t) in seen:
            continue
        seen.add(id(t))
        if t._op is not None:
            names.add(t._op.name)
            stack.extend(t._args or ())
    return names
