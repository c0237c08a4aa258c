"""More of torch's Tensor API (issue 29): ``unique``, ``cummax``/``cummin``, ``bincount``,
``index_fill``, ``take``, ``take_along_dim``, ``histc``, ``searchsorted``, ``bucketize``,
``tril_indices``/``triu_indices``, ``cartesian_prod``, ``block_diag``, ``count_nonzero``,
``aminmax``, ``renorm``, ``clamp_min``/``clamp_max`` and their in-place forms, ``as_strided``,
``index_put``. Values, dtypes and gradients against torch; the differentiable ones against
central differences in float64 (first and second order, reverse and forward mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad.gradcheck import check_grads

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(290)
X = RNG.normal(size=(4, 5))
X3 = RNG.normal(size=(2, 3, 4))
TIES = np.array([[1.0, 3.0, 3.0, 2.0, 5.0, np.nan, 1.0], [2.0, 2.0, -1.0, 7.0, 7.0, 0.0, 8.0]])
INTS = RNG.integers(0, 6, 12)
IDX = np.array([3, 0, 3])


def _dtype(t: Any) -> np.dtype:
    return np.dtype(str(t.dtype).replace("torch.", "")) if hasattr(t, "dtype") and \
        "torch" in str(t.dtype) else np.dtype(t.dtype)


def _same(got: Any, want: Any, tol: float = 1e-12) -> None:
    if isinstance(want, tuple | list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, tol)
        return
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert np.dtype(got.dtype) == _dtype(want)
    np.testing.assert_allclose(np.asarray(got.detach().numpy(), np.float64),
                               np.asarray(want.detach().numpy(), np.float64), rtol=tol, atol=tol)


# name: function of (library, its tensor constructor)
VALUES: dict[str, Callable] = {
    "unique": lambda lib, t: lib.unique(t(INTS)),
    "unique inverse counts": lambda lib, t: lib.unique(t(INTS), return_inverse=True, return_counts=True),
    "unique dim": lambda lib, t: lib.unique(t(INTS.reshape(6, 2) % 2), dim=0, return_inverse=True,
                                            return_counts=True),
    "Tensor.unique float": lambda lib, t: t(np.round(X, 0)).unique(return_counts=True),
    "unique_consecutive": lambda lib, t: lib.unique_consecutive(t(np.sort(INTS)), return_inverse=True,
                                                                return_counts=True),
    "unique_consecutive dim": lambda lib, t: t(np.array([[1, 1], [1, 1], [2, 0], [1, 1]])).unique_consecutive(
        dim=0, return_counts=True),
    "cummax ties nan": lambda lib, t: lib.cummax(t(TIES), dim=1),
    "cummin ties nan": lambda lib, t: t(TIES).cummin(1),
    "cummax dim 0": lambda lib, t: t(X3).cummax(0),
    "cummin 0-d": lambda lib, t: t(np.float64(2.0)).cummin(0),
    "bincount": lambda lib, t: lib.bincount(t(INTS)),
    "bincount weights minlength": lambda lib, t: t(INTS).bincount(t(X.reshape(-1)[:12]), minlength=9),
    "bincount float32 weights": lambda lib, t: t(INTS).bincount(t(X.reshape(-1)[:12].astype(np.float32))),
    "index_fill": lambda lib, t: t(X).index_fill(1, t(np.array([0, 3, 3])), -2.5),
    "index_fill_": lambda lib, t: t(X).clone().index_fill_(0, t(np.array([1])), 0.0),
    "take": lambda lib, t: lib.take(t(X), t(np.array([[0, 19], [-1, 7]]))),
    "take_along_dim": lambda lib, t: lib.take_along_dim(t(X), t(np.array([[0], [4], [2], [2]])), dim=1),
    "take_along_dim flat": lambda lib, t: t(X).take_along_dim(t(np.array([3, 0, 19]))),
    "histc": lambda lib, t: lib.histc(t(X), bins=6, min=-1.5, max=1.5),
    "histc data range": lambda lib, t: t(X).histc(bins=4),
    "searchsorted": lambda lib, t: lib.searchsorted(t(np.array([0.0, 1.0, 1.0, 2.0])), t(X)),
    "searchsorted right int32": lambda lib, t: lib.searchsorted(
        t(np.array([0.0, 1.0, 1.0, 2.0])), t(np.array([1.0, 3.0, -1.0])), right=True, out_int32=True),
    "searchsorted side rows": lambda lib, t: lib.searchsorted(
        t(np.sort(X, axis=1)), t(X[:, :2] * 2), side="right"),
    "bucketize": lambda lib, t: lib.bucketize(t(X), t(np.array([-1.0, 0.0, 1.0]))),
    "bucketize right": lambda lib, t: lib.bucketize(t(np.array([0.0, 1.0, 0.5])), t(np.array([0.0, 1.0])),
                                                    right=True),
    "tril_indices": lambda lib, t: lib.tril_indices(4, 3),
    "tril_indices offset": lambda lib, t: lib.tril_indices(3, 5, -1),
    "triu_indices": lambda lib, t: lib.triu_indices(3, 4, 1),
    "cartesian_prod": lambda lib, t: lib.cartesian_prod(t(X[0, :2]), t(X[1, :3]), t(X[2, :2])),
    "cartesian_prod one": lambda lib, t: lib.cartesian_prod(t(X[0])),
    "block_diag": lambda lib, t: lib.block_diag(t(X[:2, :3]), t(np.float64(2.0)), t(X[3]), t(X[:1, :1])),
    "count_nonzero": lambda lib, t: lib.count_nonzero(t(np.round(X)), dim=1),
    "Tensor.count_nonzero": lambda lib, t: t(np.round(X3)).count_nonzero((0, 2)),
    "aminmax": lambda lib, t: tuple(lib.aminmax(t(X), dim=1, keepdim=True)),
    "Tensor.aminmax": lambda lib, t: tuple(t(X3).aminmax()),
    "renorm": lambda lib, t: lib.renorm(t(X), 2, 0, 1.5),
    "renorm p1 dim1": lambda lib, t: t(X3).renorm(1, 1, 2.0),
    "renorm_": lambda lib, t: t(X).clone().renorm_(3, 1, 0.8),
    "clamp_min": lambda lib, t: t(X).clamp_min(0.1),
    "clamp_max tensor": lambda lib, t: t(X).clamp_max(t(X[0])),
    "clamp_min_": lambda lib, t: t(X).clone().clamp_min_(-0.2),
    "clamp_max_": lambda lib, t: t(X).clone().clamp_max_(0.3),
    "nan_to_num_": lambda lib, t: t(TIES).clone().nan_to_num_(nan=-1.0),
    "as_strided windows": lambda lib, t: lib.as_strided(t(X.reshape(-1)), (4, 3), (2, 1), 1),
    "Tensor.as_strided": lambda lib, t: t(X).as_strided((2, 2, 2), (5, 1, 2)),
    "index_put": lambda lib, t: t(X).index_put((t(np.array([0, 2])), t(np.array([1, 4]))),
                                               t(np.float64(7.0))),
    "index_put accumulate repeats": lambda lib, t: t(X).index_put(
        (t(np.array([1, 1, 3])),), t(X[:3]), accumulate=True),
    "index_put_": lambda lib, t: t(X).clone().index_put_((t(np.array([3])),), t(X[0])),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_and_dtypes_match_torch(name: str) -> None:
    fn = VALUES[name]
    _same(fn(rlgrad, rlgrad.tensor), fn(torch, torch.tensor), 1e-6 if "float32" in name else 1e-12)


# name: (function of (library, tensor), input): the differentiable ones
GRADS: dict[str, tuple[Callable, np.ndarray]] = {
    "cummax values": (lambda lib, x: lib.cummax(x, 1)[0], X),
    "cummin values": (lambda lib, x: x.cummin(0).values, X3),
    "aminmax": (lambda lib, x: lib.aminmax(x, dim=0)[0] * 2 + lib.aminmax(x, dim=0)[1], X),
    "index_fill": (lambda lib, x: x.index_fill(1, lib.tensor(np.array([1, 3])), 0.5), X),
    "take": (lambda lib, x: lib.take(x, lib.tensor(np.array([[0, 19], [0, 7]]))), X),
    "take_along_dim": (lambda lib, x: lib.take_along_dim(x, lib.tensor(np.array([[0], [4], [4], [2]])),
                                                         1), X),
    "renorm": (lambda lib, x: lib.renorm(x, 2, 0, 1.5), X),
    "renorm p3": (lambda lib, x: x.renorm(3, 1, 0.8), X),
    "clamp_min": (lambda lib, x: x.clamp_min(0.1), X),
    "clamp_max": (lambda lib, x: x.clamp_max(-0.1), X),
    "as_strided overlapping": (lambda lib, x: lib.as_strided(x, (4, 3), (2, 1), 1), X),
    "cartesian_prod": (lambda lib, x: lib.cartesian_prod(x[0, :2], x[1, :3]), X),
    "block_diag": (lambda lib, x: lib.block_diag(x[:2, :3], x[3], x[2, 1]), X),
    "index_put": (lambda lib, x: x.index_put((lib.tensor(np.array([1, 1, 3])),), x[0] * 3,
                                             accumulate=True), X),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_match_torch(name: str) -> None:
    fn, x = GRADS[name]
    w = RNG.normal(size=np.shape(fn(torch, torch.tensor(x))))
    xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (fn(rlgrad, xr) * rlgrad.tensor(w)).sum().backward()
    (fn(torch, xt) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(GRADS))
def test_first_and_second_order_match_finite_differences(name: str) -> None:
    fn, x = GRADS[name]
    if name in ("clamp_min", "clamp_max"):  # away from the kink
        x = np.where(np.abs(x - 0.1) < 1e-3, x + 0.01, x)
        x = np.where(np.abs(x + 0.1) < 1e-3, x + 0.01, x)
    def f(a: Any) -> Any:  # check_grads hands arrays (the differences) and traced tensors
        out = rlgrad.numpy.tanh(fn(rlgrad, a if isinstance(a, rlgrad.Tensor) else rlgrad.tensor(a)))
        return out if isinstance(a, rlgrad.Tensor) else out.numpy()

    check_grads(f, modes=("rev", "fwd"), order=2)(x)


def test_cummax_indices_are_recorded_under_jit() -> None:
    """A compiled step recomputes the indices from each call's values, never the first call's."""
    step = rlgrad.jit(lambda x: x.cummax(1)[0].sum() + x.cummin(1)[1].sum())
    for _ in range(3):
        x = RNG.normal(size=(4, 5))
        want = torch.tensor(x).cummax(1)[0].sum() + torch.tensor(x).cummin(1)[1].sum()
        np.testing.assert_allclose(np.asarray(step(rlgrad.tensor(x))), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("call, err, match", [
    (lambda: rlgrad.bincount(rlgrad.tensor(np.array([1, -1]))), RuntimeError, "non-negative"),
    (lambda: rlgrad.bincount(rlgrad.tensor(X)), RuntimeError, "integral"),
    (lambda: rlgrad.tensor(X).index_fill(1, rlgrad.tensor(np.array([5])), 0.0), IndexError, "out of bounds"),
    (lambda: rlgrad.take(rlgrad.tensor(X), rlgrad.tensor(np.array([20]))), IndexError, "out of bounds"),
    (lambda: rlgrad.as_strided(rlgrad.tensor(X), (3, 3), (9, 1)), RuntimeError, "outside the tensor"),
    (lambda: rlgrad.histc(rlgrad.tensor(INTS), 3), RuntimeError, "floating point"),
    (lambda: rlgrad.cartesian_prod(rlgrad.tensor(X)), RuntimeError, "1-D"),
    (lambda: rlgrad.block_diag(rlgrad.tensor(X3)), RuntimeError, "2 or fewer"),
    (lambda: rlgrad.bucketize(rlgrad.tensor(X), rlgrad.tensor(X)), RuntimeError, "1-D"),
    (lambda: rlgrad.tensor(X).index_put(rlgrad.tensor(np.array([0])), rlgrad.tensor(1.0)),
     TypeError, "tuple of tensors"),
    (lambda: rlgrad.jit(lambda x: x.unique())(rlgrad.tensor(X)), RuntimeError, "depends on the values"),
])
def test_bad_input_raises_one_clear_line(call: Callable, err: type, match: str) -> None:
    with pytest.raises(err, match=match) as info:
        call()
    assert "\n" not in str(info.value)
