"""Issue 29 §2's Tensor methods and top-level names that are compositions of primitives (sort,
topk, split, index_add, scatter ...), their in-place forms, torch's legacy tensor types and
``rlgrad.linalg``: each snippet runs under torch 2.13 and under rlgrad, comparing values, dtypes,
shapes, gradients and the exceptions torch raises; the gradients of the compositions and of the
new linear-algebra primitives also against finite differences in float64 (``check_grads``: 1st
and 2nd order, reverse and forward mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import check_grads

torch = pytest.importorskip("torch")


def _np(x: Any) -> np.ndarray:
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _dtype(x: Any) -> np.dtype:
    return np.dtype(str(x.dtype).removeprefix("torch."))


def _flat(out: Any) -> list[Any]:
    return [o for x in out for o in _flat(x)] if isinstance(out, tuple | list) else [out]


def _same(got: Any, want: Any, rtol: float = 1e-12, atol: float = 1e-14) -> None:
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert tuple(a.shape) == tuple(b.shape)
        assert _dtype(a) == _dtype(b), (a.dtype, b.dtype)
        np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)


def both(f: Callable, *arrays: np.ndarray, grad: bool = True, rtol: float = 1e-12) -> None:
    """``f(lib, *tensors)`` under torch and rlgrad: the same values, dtypes and shapes and, for
    the float inputs, the same gradients of a weighted sum of the outputs."""
    floats = [a.dtype.kind == "f" and grad for a in arrays]
    tt = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, floats)]
    rt = [rlgrad.tensor(a, requires_grad=r) for a, r in zip(arrays, floats)]
    want, got = f(torch, *tt), f(rlgrad, *rt)
    _same(got, want, rtol)
    if not any(floats):
        return
    rng = np.random.default_rng(5)
    outs = [(w, g) for w, g in zip(_flat(want), _flat(got)) if w.requires_grad]
    if not outs:
        return
    ws = [rng.normal(size=tuple(w.shape)) for w, _ in outs]
    sum((w * torch.tensor(c)).sum() for (w, _), c in zip(outs, ws)).backward()
    sum((g * rlgrad.tensor(c)).sum() for (_, g), c in zip(outs, ws)).backward()
    for a, b in zip(rt, tt):
        if b.requires_grad:
            gb = np.zeros(b.shape) if b.grad is None else b.grad.numpy()
            ga = np.zeros(b.shape) if a.grad is None else a.grad.numpy()
            np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-12)


def raises_like_torch(f: Callable, *arrays: np.ndarray, match: str | None = None) -> None:
    """torch raises on ``f``: rlgrad raises too (one of the errors torch's users catch)."""
    with pytest.raises((RuntimeError, IndexError, TypeError, ValueError)):
        f(torch, *[torch.tensor(a) for a in arrays])
    with pytest.raises((RuntimeError, IndexError, TypeError, ValueError), match=match):
        f(rlgrad, *[rlgrad.tensor(a) for a in arrays])


RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 5))  # no ties
TIES = np.array([[3.0, 1.0, 3.0, 2.0, 1.0], [0.0, 0.0, -1.0, 5.0, 5.0]])
NANS = np.array([[1.0, np.nan, 0.5, 2.0], [3.0, 1.0, 2.0, 0.0]])
IDX = np.array([2, 0, 2])


# ---- sort, argsort, topk, median --------------------------------------------------------------
@pytest.mark.parametrize("x", [X, TIES, NANS], ids=["distinct", "ties", "nan"])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_with_ties_and_nans(x: np.ndarray, descending: bool) -> None:
    both(lambda L, t: t.sort(dim=1, descending=descending, stable=True), x)
    both(lambda L, t: L.sort(t, 0, descending), x)
    both(lambda L, t: t.argsort(dim=1, descending=descending, stable=True), x)
    both(lambda L, t: L.argsort(t, dim=0, descending=descending, stable=True), x)


def test_sort_of_integers_and_named_fields() -> None:
    ints = np.array([[5, 1, 3], [2, 2, 0]])
    both(lambda L, t: t.sort(), ints)
    got = rlgrad.tensor(X).sort(1)
    np.testing.assert_array_equal(got.values.numpy(), got[0].numpy())
    np.testing.assert_array_equal(got.indices.numpy(), np.argsort(X, 1))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(largest: bool) -> None:
    both(lambda L, t: t.topk(3, dim=1, largest=largest), X)
    both(lambda L, t: L.topk(t, 2, 0, largest), X)
    both(lambda L, t: t.topk(1), X[0])
    raises_like_torch(lambda L, t: t.topk(6), X)


def test_median_is_torchs_lower_median_and_first_nan() -> None:
    both(lambda L, t: t.median(), X)  # 15 elements
    both(lambda L, t: t.median(), X[:, :4])  # 12: the lower of the two middle ones
    both(lambda L, t: t.median(dim=1), X[:, :4])
    both(lambda L, t: t.median(0, keepdim=True), X)
    both(lambda L, t: L.median(t, 1), NANS)
    both(lambda L, t: t.median(), NANS)
    _same(rlgrad.tensor(np.zeros(0)).median(), torch.tensor(np.zeros(0)).median(), atol=0)  # NaN


# ---- split, chunk, unbind, narrow -------------------------------------------------------------
def test_split_chunk_unbind_narrow_match_torch() -> None:
    x = RNG.normal(size=(4, 7))
    both(lambda L, t: t.split(3, dim=1), x)
    both(lambda L, t: t.split([1, 4, 2], 1), x)
    both(lambda L, t: L.split(t, 2), x)
    both(lambda L, t: t.chunk(3, dim=1), x)
    both(lambda L, t: t.chunk(5), x)  # torch gives 4 pieces of 1
    both(lambda L, t: L.chunk(t, 2, -1), x)
    both(lambda L, t: t.unbind(1), x)
    both(lambda L, t: L.unbind(t), x)
    both(lambda L, t: t.narrow(1, 2, 3), x)
    both(lambda L, t: t.narrow(-1, -3, 2), x)
    both(lambda L, t: L.narrow(t, 0, 1, 2), x)
    raises_like_torch(lambda L, t: t.split([1, 2], 1), x, match="sum exactly to 7")
    raises_like_torch(lambda L, t: t.narrow(1, 5, 3), x, match="exceeds dimension size")
    raises_like_torch(lambda L, t: t.chunk(0), x)
    raises_like_torch(lambda L, t: t.unbind(2), x, match="Dimension out of range")


# ---- index_select, index_add, scatter, scatter_add ----------------------------------------------
def test_index_select_matches_torch() -> None:
    both(lambda L, t, i: t.index_select(1, i), X, IDX)
    both(lambda L, t, i: L.index_select(t, 0, i), X, IDX[:2])
    both(lambda L, t, i: t.index_select(0, i), X[0], np.array(3))
    raises_like_torch(lambda L, t, i: t.index_select(1, i), X, np.array([5]))
    raises_like_torch(lambda L, t, i: t.index_select(1, i), X, np.array([1.0]))


def test_index_add_matches_torch_with_repeats_and_alpha() -> None:
    src = RNG.normal(size=(3, 3))
    both(lambda L, t, i, s: t.index_add(1, i, s), X, IDX, src)
    both(lambda L, t, i, s: t.index_add(1, i, s, alpha=-0.5), X, IDX, src)
    both(lambda L, t, i, s: L.index_add(t, 0, i, s), X, np.array([1, 1]), RNG.normal(size=(2, 5)))
    raises_like_torch(lambda L, t, i, s: t.index_add(1, i, s), X, IDX, src[:2])
    raises_like_torch(lambda L, t, i, s: t.index_add(1, i, s), X, IDX, src.astype(np.float32))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")  # torch's own
def test_scatter_and_scatter_add_match_torch() -> None:
    idx = np.array([[4, 0, 2], [1, 3, 0], [0, 1, 2]])  # no repeat within a row
    src = RNG.normal(size=(3, 4))
    both(lambda L, t, i, s: t.scatter(1, i, s), X, idx, src[:, :3])
    both(lambda L, t, i, s: t.scatter(1, i, s), X, idx, src, grad=False)  # torch's backward fails
    both(lambda L, t, i: t.scatter(1, i, 2.5), X, idx)
    both(lambda L, t, i: t.scatter(dim=1, index=i, value=-1.0), X, idx)
    both(lambda L, t, i, s: L.scatter(t, 1, i, s), X, idx, src[:, :3])
    rep = np.array([[1, 1, 1], [0, 0, 4], [2, 3, 2]])  # repeats: sums
    both(lambda L, t, i, s: t.scatter_add(1, i, s), X, rep, src[:, :3])
    both(lambda L, t, i, s: t.scatter_add(1, i, s), X, rep, src, grad=False)
    both(lambda L, t, i, s: t.scatter(1, i, s, reduce="add"), X, rep, src, grad=False)
    raises_like_torch(lambda L, t, i, s: t.scatter(1, i, s), X, np.array([[5]]), src)
    raises_like_torch(lambda L, t, i, s: t.scatter(1, i, s), X, idx[:, :2].ravel(), src)


def test_scatter_with_repeated_targets_keeps_the_last_write_as_torch_on_cpu() -> None:
    x, src = np.zeros((1, 3)), np.array([[1.0, 2.0, 3.0]])
    idx = np.array([[0, 0, 2]])
    want = torch.zeros(1, 3).double().scatter(1, torch.tensor(idx), torch.tensor(src))
    got = rlgrad.tensor(x).scatter(1, rlgrad.tensor(idx), rlgrad.tensor(src))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


# ---- where, mm, bmm, addcmul, addcdiv, lerp, norm, repeat_interleave, alpha=, rounding_mode= ---
def test_elementwise_compositions_match_torch() -> None:
    a, b, c = (RNG.uniform(0.5, 2, size=(3, 4)) for _ in range(3))
    both(lambda L, x, y: x.where(x > 1, y), a, b)
    both(lambda L, x, y, z: x.addcmul(y, z, value=0.3), a, b, c)
    both(lambda L, x, y, z: L.addcdiv(x, y, z, value=-2), a, b, c)
    both(lambda L, x, y: x.lerp(y, 0.25), a, b)
    both(lambda L, x, y, z: L.lerp(x, y, z), a, b, c)
    both(lambda L, x, y: x.add(y, alpha=3), a, b)
    both(lambda L, x, y: x.sub(y, alpha=0.5), a, b)
    both(lambda L, x, y: L.add(x, y, alpha=2), a, b)
    for mode in ("trunc", "floor"):
        both(lambda L, x, y, mode=mode: x.div(-y, rounding_mode=mode), a, b)
        both(lambda L, x, y, mode=mode: x.div(y, rounding_mode=mode),
             np.array([7, -7, 9]), np.array([2, 2, -4]))
    raises_like_torch(lambda L, x, y: x.div(y, rounding_mode="round"), a, b)


def test_matrix_products_and_norms_match_torch() -> None:
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 2))
    both(lambda L, x, y: x.mm(y), a, b)
    both(lambda L, x, y: L.mm(x, y), a, b)
    p, q = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 4, 5))
    both(lambda L, x, y: x.bmm(y), p, q)
    raises_like_torch(lambda L, x, y: x.mm(y), p, q)
    raises_like_torch(lambda L, x, y: x.bmm(y), a, b)
    both(lambda L, x: x.norm(), a)
    both(lambda L, x: x.norm(dim=1), a)
    both(lambda L, x: x.norm(1, dim=0, keepdim=True), a)
    both(lambda L, x: x.norm(p=3, dim=[0, 1]), a)
    both(lambda L, x: x.norm(float("inf"), 1), a)
    both(lambda L, x: x.norm("nuc"), a)
    both(lambda L, x: L.norm(x, dim=(1, 2)), p)


def test_repeat_interleave_matches_torch() -> None:
    both(lambda L, x: x.repeat_interleave(2), X)
    both(lambda L, x: x.repeat_interleave(3, dim=1), X)
    both(lambda L, x, r: x.repeat_interleave(r, dim=0), X, np.array([1, 0, 2]))
    both(lambda L, x: L.repeat_interleave(x, 2, 0), X)
    raises_like_torch(lambda L, x, r: x.repeat_interleave(r, dim=0), X, np.array([1, 2]))


def test_dims_as_lists_and_the_other_section_2_methods() -> None:
    both(lambda L, x: x.mean(dim=[0, 1]), X)
    both(lambda L, x: x.sum([0, 1], keepdim=True), X)
    both(lambda L, x: x.std(dim=[0, 1]), X)
    both(lambda L, x: x.amax(dim=[0, 1]), X)
    both(lambda L, x: x.cumprod(1), X)
    both(lambda L, x: x.cumsum(dim=0), X)
    both(lambda L, x: x[:, :3].diag(), X)
    both(lambda L, x: x.trace(), X)
    both(lambda L, x: x.flip(dims=(0, 1)), X)
    both(lambda L, x: x.clone(), X)
    both(lambda L, x: L.erf(x), X)
    both(lambda L, x: x.erfinv(), X / 4)
    both(lambda L, x: L.atan2(x, x.flip(dims=(1,))), X)
    both(lambda L, x: L.fmod(x, 0.7), X)
    both(lambda L, x: L.diff(x, dim=1), X)
    both(lambda L, x: L.outer(x[0], x[1]), X)
    both(lambda L, x, y: L.einsum("ij,kj->ik", x, y), X, X[:2])
    both(lambda L, x, y: L.einsum("ij,ij->", [x, y]), X, X)
    raises_like_torch(lambda L, x, y: L.einsum("i,i->", x, y), X[0], X[0].astype(np.float32))
    _same(rlgrad.linspace(0, 1, steps=5), torch.linspace(0, 1, steps=5))
    _same(rlgrad.linspace(start=-1.0, end=2.0, steps=4), torch.linspace(start=-1.0, end=2.0, steps=4))


# ---- gradients of the compositions against finite differences (float64, 1st and 2nd order) ---
GRAD_CASES: dict[str, Callable] = {
    "sort": lambda t: t.sort(1, descending=True)[0],
    "topk": lambda t: t.topk(2)[0],
    "median": lambda t: t.median(1)[0],
    "split": lambda t: t.split([2, 3], 1)[1],
    "chunk": lambda t: t.chunk(2)[0],
    "unbind": lambda t: t.unbind(1)[3],
    "narrow": lambda t: t.narrow(1, 1, 3),
    "index_select": lambda t: t.index_select(1, rlgrad.tensor(IDX)),
    "index_add": lambda t: t.index_add(1, rlgrad.tensor(IDX), t[:, :3] * t[:, 1:4]),
    "scatter": lambda t: t.scatter(1, rlgrad.tensor([[4, 0], [1, 3], [0, 1]]), t[:, 1:3] ** 2),
    "scatter_add": lambda t: t.scatter_add(1, rlgrad.tensor([[4, 4], [1, 3], [0, 0]]), t[:, :2] ** 2),
    "norm": lambda t: t.norm(dim=1),
    "norm3": lambda t: t.norm(3),
    "addcdiv": lambda t: t.addcdiv(t, t * t + 1, value=0.5),
    "lerp": lambda t: t.lerp(t ** 2, t[:, :1]),
    "repeat_interleave": lambda t: t.repeat_interleave(2, 1) ** 2,
    "mm": lambda t: t.mm(t.T),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_composition_gradients_against_finite_differences(name: str) -> None:
    f = GRAD_CASES[name]
    check_grads(lambda a: f(rlgrad.as_tensor(a)), modes=("rev", "fwd"), order=2)(X.copy())


# ---- in-place forms, through Tensor's in-place mechanism ---------------------------------------
def _inplace_both(f: Callable, x: np.ndarray, *args: np.ndarray) -> None:
    """``f(lib, buffer, *args)`` mutates ``buffer`` and returns it: the same values and object."""
    tb, rb = torch.tensor(x), rlgrad.tensor(x)
    tw = f(torch, tb, *[torch.tensor(a) for a in args])
    rw = f(rlgrad, rb, *[rlgrad.tensor(a) for a in args])
    assert rw is rb and tw is tb
    _same(rb, tb)


def test_inplace_methods_write_into_the_tensor_as_torch() -> None:
    src = RNG.normal(size=(3, 3))
    _inplace_both(lambda L, t, i, s: t.index_add_(1, i, s, alpha=2.0), X, IDX, src)
    _inplace_both(lambda L, t, m: t.masked_fill_(m, -1.5), X, X > 0)
    _inplace_both(lambda L, t, i: t.scatter_(1, i, 1.0), np.zeros((3, 4)), np.array([[1], [3], [0]]))
    _inplace_both(lambda L, t, i, s: t.scatter_(1, i, s), X, np.array([[4], [0], [2]]), src)
    _inplace_both(lambda L, t, i, s: t.scatter_add_(1, i, s), X, np.array([[1, 1], [0, 2], [4, 4]]),
                  src)
    _inplace_both(lambda L, t, a, b: t.addcmul_(a, b, value=0.5), X, X, X)
    _inplace_both(lambda L, t, a, b: t.addcdiv_(a, b + 3.0, value=-1), X, X, X)
    _inplace_both(lambda L, t: t.fill_(2.0), X)
    ints = np.zeros((2, 3), np.int64)
    _inplace_both(lambda L, t, i, s: t.index_add_(0, i, s), ints, np.array([1, 1]), np.ones((2, 3), np.int64))


def test_inplace_methods_bump_the_version_and_refuse_where_torch_does() -> None:
    t = rlgrad.zeros(3, 4)
    v = t._written
    t.masked_fill_(t == 0, 1.0)
    assert t._written > v
    leaf = rlgrad.zeros(3, requires_grad=True)
    for f in (lambda L, x: x.masked_fill_(x == 0, 1.0), lambda L, x: x.uniform_(),
              lambda L, x: x.index_add_(0, L.tensor([0]), L.ones(1))):
        with pytest.raises(RuntimeError):
            f(torch, torch.zeros(3, requires_grad=True))
        with pytest.raises(RuntimeError, match="leaf"):
            f(rlgrad, leaf)
    with rlgrad.no_grad():
        leaf.normal_(0.0, 0.01)  # as nn.init does
    assert 0 < float(leaf.abs().sum()) < 1
    with pytest.raises(RuntimeError):  # float into an int64 tensor: torch refuses the cast
        torch.zeros(2, dtype=torch.int64).index_add_(0, torch.tensor([0]), torch.ones(1))
    with pytest.raises(RuntimeError, match="same dtype"):
        rlgrad.zeros(2, dtype=rlgrad.int64).index_add_(0, rlgrad.tensor([0]), rlgrad.ones(1))
    with pytest.raises(RuntimeError, match="can't be cast"):
        rlgrad.zeros(2, dtype=rlgrad.int64).masked_fill_(rlgrad.tensor([True, False]), 0.5) \
            .addcmul_(rlgrad.ones(2), rlgrad.ones(2), value=0.5)


def test_an_operand_that_requires_grad_is_recorded_as_torch_records_it() -> None:
    """``buf.index_add_(dim, idx, src)`` with ``src`` requiring grad: ``buf`` joins the graph
    (rlgrad/inplace.py), and ``src`` gets torch's gradient."""
    grads = []
    for lib in (torch, rlgrad):
        buf = lib.zeros(2, 3, dtype=lib.float64)
        src = lib.tensor(np.arange(4.0).reshape(2, 2), requires_grad=True)
        out = buf.index_add_(1, lib.tensor([0, 2]), src * 2)
        assert out is buf and buf.requires_grad
        (buf.exp() * lib.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
        grads.append(src.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


def test_uniform_and_normal_draw_in_place_with_their_parameters() -> None:
    t = rlgrad.FloatTensor(200, 50).uniform_(-3.0, -1.0)
    v = t.numpy()
    assert t.dtype == np.float32 and v.min() >= -3.0 and v.max() < -1.0 and abs(v.mean() + 2) < 0.02
    t = rlgrad.empty(200, 50, dtype=rlgrad.float64).normal_(mean=1.0, std=0.5)
    v = t.numpy()
    assert t.dtype == np.float64 and abs(v.mean() - 1) < 0.01 and abs(v.std() - 0.5) < 0.01
    rlgrad.manual_seed(3)
    a = rlgrad.zeros(5).uniform_(**{"from": 2, "to": 4}).numpy().copy()
    rlgrad.manual_seed(3)
    b = rlgrad.zeros(5).uniform_(2, 4, generator=None).numpy()
    np.testing.assert_array_equal(a, b)
    for f in (lambda L: L.zeros(3).uniform_(1, 0), lambda L: L.zeros(3).normal_(0, -1),
              lambda L: L.zeros(3, dtype=L.int64).uniform_()):
        with pytest.raises(RuntimeError):
            f(torch)
        with pytest.raises(RuntimeError):
            f(rlgrad)


# ---- torch's legacy types -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor",
                                  "BoolTensor", "ByteTensor"])
def test_legacy_tensor_types_construct_and_test_as_torch(name: str) -> None:
    T, R = getattr(torch, name), getattr(rlgrad, name)
    assert tuple(R(3, 4).shape) == tuple(T(3, 4).shape) == (3, 4)
    assert _dtype(R(3, 4)) == _dtype(T(3, 4))
    _same(R([1, 0, 2]), T([1, 0, 2]))
    assert tuple(R(rlgrad.Size([2, 5])).shape) == tuple(T(torch.Size([2, 5])).shape) == (2, 5)
    assert tuple(R().shape) == tuple(T().shape) == (0,)
    x, tx = rlgrad.tensor([1.5, 0.0]), torch.tensor([1.5, 0.0])
    assert isinstance(x.type(R), R) and isinstance(tx.type(T), T)
    _same(x.type(R), tx.type(T))
    assert isinstance(x, R) == isinstance(tx, T)
    assert x.type(R).type() == tx.type(T).type() == f"torch.{name}"


# ---- rlgrad.linalg as torch.linalg ---------------------------------------------------------------
SPD = (lambda m: m @ m.T + 4 * np.eye(4))(RNG.normal(size=(4, 4)))
SQ = RNG.normal(size=(4, 4))
TALL = RNG.normal(size=(5, 3))
RHS = RNG.normal(size=(4, 2))


def test_linalg_functions_match_torch_values_and_gradients() -> None:
    both(lambda L, a: L.linalg.det(a), SQ)
    both(lambda L, a: L.det(a) + L.inverse(a).sum(), SQ)
    both(lambda L, a: L.linalg.slogdet(a)[1], SQ)
    both(lambda L, a: L.linalg.inv(a), SQ)
    both(lambda L, a, b: L.linalg.solve(a, b), SQ, RHS, rtol=1e-10)
    both(lambda L, a, b: L.linalg.solve(a, b), SQ, RHS[:, 0], rtol=1e-10)  # a vector B
    both(lambda L, a, b: L.linalg.solve(a, b, left=False), SQ, RHS.T, rtol=1e-10)
    both(lambda L, a: L.linalg.cholesky(a), SPD, rtol=1e-10)
    both(lambda L, a: L.linalg.cholesky(a, upper=True), SPD, rtol=1e-10)
    both(lambda L, a: L.linalg.eigh(a, UPLO="U")[1].abs(), SQ + SQ.T, rtol=1e-9)
    both(lambda L, a: L.linalg.eigh(a)[1].abs(), SQ, rtol=1e-9, grad=False)  # the lower triangle
    both(lambda L, a: L.linalg.eigh(a)[0], SPD, rtol=1e-10)
    both(lambda L, a: L.linalg.eigvalsh(a), SPD, rtol=1e-10)
    both(lambda L, a: L.linalg.svdvals(a), TALL, rtol=1e-10)
    both(lambda L, a: L.linalg.pinv(a), TALL, rtol=1e-9)
    both(lambda L, a: L.linalg.matrix_power(a, 3), SQ, rtol=1e-10)
    both(lambda L, a: L.linalg.norm(a), TALL)
    both(lambda L, a: L.linalg.norm(a, ord=1, dim=0), TALL)
    both(lambda L, a: L.linalg.vector_norm(a, ord=3, dim=[0, 1], keepdim=True), TALL)
    both(lambda L, a: L.linalg.matrix_norm(a, ord="nuc"), TALL, rtol=1e-10)
    both(lambda L, a: L.linalg.multi_dot([a, a.T, a]), TALL)
    both(lambda L, a, b: L.linalg.cross(a, b), TALL, TALL[::-1].copy())
    both(lambda L, a, b: L.linalg.vecdot(a, b, dim=0), TALL, TALL)
    raises_like_torch(lambda L, a: L.linalg.det(a), TALL, match="square")


@pytest.mark.parametrize("shape", [(5, 3), (4, 4), (2, 4, 3)])
def test_qr_matches_torch_and_finite_differences(shape: tuple) -> None:
    a = RNG.normal(size=shape)
    both(lambda L, x: tuple(L.linalg.qr(x)), a, rtol=1e-10)
    both(lambda L, x: L.linalg.qr(x, mode="r")[1], a, rtol=1e-10, grad=False)
    got = rlgrad.linalg.qr(rlgrad.tensor(a))
    np.testing.assert_allclose((got.Q @ got.R).numpy(), a, atol=1e-12)
    check_grads(lambda x: rlgrad.linalg.qr(rlgrad.as_tensor(x)).Q, modes=("rev", "fwd"), order=2)(a)
    check_grads(lambda x: rlgrad.linalg.qr(rlgrad.as_tensor(x)).R, modes=("rev", "fwd"), order=2)(a)


def test_qr_gradient_outside_reduced_tall_raises_one_line() -> None:
    t = rlgrad.tensor(RNG.normal(size=(5, 3)), requires_grad=True)
    with pytest.raises(NotImplementedError, match="mode='reduced'"):
        rlgrad.linalg.qr(t, mode="complete")
    with rlgrad.no_grad():
        q, r = rlgrad.linalg.qr(t, mode="complete")
    assert q.shape == (5, 5) and r.shape == (5, 3)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_matches_torch(upper: bool, left: bool, unit: bool) -> None:
    a = SQ + 3 * np.eye(4)
    b = RHS if left else RHS.T.copy()
    both(lambda L, x, y: L.linalg.solve_triangular(x, y, upper=upper, left=left,
                                                   unitriangular=unit), a, b, rtol=1e-10)
    check_grads(lambda x, y: rlgrad.linalg.solve_triangular(
        rlgrad.as_tensor(x), rlgrad.as_tensor(y), upper=upper, left=left, unitriangular=unit),
        modes=("rev", "fwd"), order=2)(a, b)


def test_matrix_exp_matches_torch_and_finite_differences() -> None:
    for a in (0.3 * SQ, 3 * SQ, RNG.normal(size=(2, 3, 3)), np.zeros((2, 2))):
        both(lambda L, x: L.linalg.matrix_exp(x), a, rtol=1e-9)
        both(lambda L, x: L.matrix_exp(x), a, rtol=1e-9)
    check_grads(lambda x: rlgrad.linalg.matrix_exp(rlgrad.as_tensor(x)), modes=("rev", "fwd"),
                order=2)(0.5 * SQ[:3, :3])


def test_lstsq_matches_torch_gelsd_and_its_gradient() -> None:
    b = RNG.normal(size=(5, 2))
    want = torch.linalg.lstsq(torch.tensor(TALL), torch.tensor(b), driver="gelsd")
    got = rlgrad.linalg.lstsq(rlgrad.tensor(TALL), rlgrad.tensor(b))
    for name in ("solution", "residuals", "rank", "singular_values"):
        np.testing.assert_allclose(np.asarray(getattr(got, name)), getattr(want, name).numpy(),
                                   rtol=1e-10, err_msg=name)
    both(lambda L, a, y: L.linalg.lstsq(a, y).solution, TALL, b, rtol=1e-9)
    check_grads(lambda a, y: rlgrad.linalg.lstsq(rlgrad.as_tensor(a), rlgrad.as_tensor(y)).solution,
                modes=("rev", "fwd"), order=2)(TALL, b)


@pytest.mark.parametrize("a", [np.array([[1.0, 2.0], [2.0, 4.0]]), np.diag([1.0, 0.0, 2.0]),
                               np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0]])],
                         ids=["rank1", "diag0", "rank2"])
def test_det_gradient_at_a_singular_matrix_is_the_cofactor_matrix(a: np.ndarray) -> None:
    """torch's double-backward path (create_graph=True) gives the cofactors, as finite
    differences do; its plain first-order backward gives 0 there (docs/dropin.md)."""
    ta = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(torch.linalg.det(ta), ta, create_graph=True)
    ra = rlgrad.tensor(a, requires_grad=True)
    rlgrad.linalg.det(ra).backward()
    np.testing.assert_allclose(ra.grad.numpy(), want.detach().numpy(), atol=1e-12)
    check_grads(lambda x: rlgrad.linalg.det(rlgrad.as_tensor(x)), modes=("rev", "fwd"), order=2)(a)


def test_det_gradient_near_singular_matches_torch() -> None:
    u = RNG.normal(size=(3, 2))
    a = u @ RNG.normal(size=(2, 3))  # rank 2 up to rounding: det ~ 1e-16
    both(lambda L, x: L.linalg.det(x), a, rtol=1e-6)


def test_compiled_step_recomputes_sorts_and_replays_inplace_methods() -> None:
    """Under rlgrad.jit the order statistics are recorded ops (recomputed at every call) and the
    in-place methods are replayed in their place: no value of the tracing call is frozen."""
    def step(buf: Any, x: Any, idx: Any, src: Any) -> Any:
        buf.index_add_(1, idx, src)
        buf.masked_fill_(buf > 1.0, 1.0)
        return x.sort(1, descending=True)[0], x.topk(2)[1], x.median(1)[0], buf * 1.0

    jitted = rlgrad.jit(step)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(2, 5)).astype(np.float32)
        idx, src = rng.integers(0, 4, 3), rng.normal(size=(2, 3)).astype(np.float32)
        bufs = [rlgrad.zeros(2, 4), rlgrad.zeros(2, 4)]
        outs = [f(b, rlgrad.tensor(x), rlgrad.tensor(idx), rlgrad.tensor(src))
                for f, b in zip((jitted, step), bufs)]
        for got, want in zip(*outs):
            np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-6)
        np.testing.assert_allclose(bufs[0].numpy(), bufs[1].numpy(), rtol=1e-6)


# ---- more methods: kthvalue, msort, masked_select, nonzero, closeness, matrix functions, x_
def test_selection_and_order_methods_match_torch() -> None:
    both(lambda L, t: t.kthvalue(2, dim=1), X)
    both(lambda L, t: L.kthvalue(t, 3, 0, True), X)
    both(lambda L, t: t.msort(), X)
    both(lambda L, t, m: t.masked_select(m), X, X > 0.2)
    both(lambda L, t, m: L.masked_select(t, m), X, np.array([True, False, True, True, False]))
    both(lambda L, t: t.nonzero(), (X > 0).astype(np.int64))
    both(lambda L, t: L.nonzero(t, as_tuple=True), X > 0)
    both(lambda L, t: t.tile((2, 1, 3)), X)
    both(lambda L, t: L.tile(t, (2,)), X)
    raises_like_torch(lambda L, t: t.kthvalue(6), X)
    check_grads(lambda a: rlgrad.as_tensor(a).kthvalue(2)[0], modes=("rev", "fwd"), order=2)(X.copy())
    check_grads(lambda a: rlgrad.as_tensor(a).masked_select(rlgrad.tensor(X > 0)),
                modes=("rev", "fwd"), order=2)(X.copy())


def test_closeness_and_elementwise_extras_match_torch() -> None:
    y = X + np.array([0.0, 1e-9, 1e-3, 0.0, np.inf])
    x = np.where(np.arange(5) == 4, np.inf, X)
    both(lambda L, a, b: a.isclose(b), x, y, grad=False)
    both(lambda L, a, b: L.isclose(a, b, rtol=0, atol=1e-6), x, y, grad=False)
    n = np.array([np.nan, 1.0])
    both(lambda L, a, b: a.isclose(b, equal_nan=True), n, n, grad=False)
    for a, b in ((x, y), (X, X), (X, X[:2])):
        assert rlgrad.tensor(a).equal(rlgrad.tensor(b)) == torch.tensor(a).equal(torch.tensor(b))
        if a.shape == b.shape:
            assert rlgrad.tensor(a).allclose(rlgrad.tensor(b)) == \
                torch.tensor(a).allclose(torch.tensor(b))
    pos = np.abs(X) + 0.1
    both(lambda L, a: a.rsqrt(), pos)
    both(lambda L, a: L.rsqrt(a), np.array([1, 4, 9]))
    both(lambda L, a: a.frac(), 3 * X)
    both(lambda L, a: L.frac(a), 3 * X)
    both(lambda L, a: a.fliplr() + a.flipud() + a.swapdims(0, 1).T, X)


def test_matrix_methods_match_torch() -> None:
    spd = SPD
    both(lambda L, a: a.det(), SQ)
    both(lambda L, a: a.inverse(), SQ)
    both(lambda L, a: a.logdet(), spd)
    both(lambda L, a: L.logdet(a), spd)
    both(lambda L, a: a.slogdet()[1], SQ)
    both(lambda L, a: a.matrix_exp(), 0.5 * SQ, rtol=1e-9)
    neg = -np.eye(3)
    assert np.isnan(rlgrad.tensor(neg).logdet().item()) and np.isnan(torch.tensor(neg).logdet().item())


@pytest.mark.parametrize("name", ["abs", "neg", "exp", "log", "sqrt", "sigmoid", "tanh", "relu",
                                  "square", "floor", "ceil", "round", "trunc", "sign",
                                  "reciprocal", "frac", "rsqrt", "tril", "triu"])
def test_unary_inplace_methods_match_torch(name: str) -> None:
    x = np.abs(X) + 0.5 if name in ("log", "sqrt", "rsqrt") else 3 * X
    _inplace_both(lambda L, t: getattr(t, name + "_")(), x)
    if name in ("exp", "sqrt", "sigmoid"):  # a float result into an int64 tensor: refused
        for lib in (torch, rlgrad):
            with pytest.raises(RuntimeError):
                getattr(lib.tensor([1, 2]), name + "_")()
