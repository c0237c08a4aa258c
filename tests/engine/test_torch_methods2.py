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
from helpers.torch_compare import (
    check_against_torch,
    grads_match_finite_differences,
    grads_match_torch,
)
from helpers.torch_compare import same as _same

import rlgrad
import rlgrad.func as rf
from rlgrad.gradcheck import check_grads

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(290)
X = RNG.normal(size=(4, 5))
X3 = RNG.normal(size=(2, 3, 4))
TIES = np.array([[1.0, 3.0, 3.0, 2.0, 5.0, np.nan, 1.0], [2.0, 2.0, -1.0, 7.0, 7.0, 0.0, 8.0]])
INTS = RNG.integers(0, 6, 12)
IDX = np.array([3, 0, 3])


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
    grads_match_torch(fn, x, RNG)


@pytest.mark.parametrize("name", sorted(GRADS))
def test_first_and_second_order_match_finite_differences(name: str) -> None:
    fn, x = GRADS[name]
    if name in ("clamp_min", "clamp_max"):  # away from the kink
        x = np.where(np.abs(x - 0.1) < 1e-3, x + 0.01, x)
        x = np.where(np.abs(x + 0.1) < 1e-3, x + 0.01, x)
    grads_match_finite_differences(fn, x)


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


# ---- the rest of the survey of torch APIs RL code calls --------------------------------------
P = 1 / (1 + np.exp(-X))
NAN = np.where(X > 1.0, np.nan, X)
SR_IDX = np.array([[0, 1, 1, 3], [2, 2, 2, 0]])
SURVEY: dict[str, Callable] = {
    "logit": lambda lib, t: lib.logit(t(P)),
    "logit eps": lambda lib, t: t(np.clip(P, 0, 0.7)).logit(eps=0.1),
    "float_power": lambda lib, t: t(np.abs(X)).float_power(1.5),
    "copysign": lambda lib, t: lib.copysign(t(X), t(np.array([-0.0, 0.0, -1.0, 2.0, 1.0]))),
    "sgn fix signbit": lambda lib, t: (t(X).sgn(), t(X * 3).fix(), t(np.array([-0.0, 0.0, -1.0])).signbit()),
    "sum_to_size": lambda lib, t: t(X3).sum_to_size(3, 1),
    "nansum nanmean": lambda lib, t: (lib.nansum(t(NAN)), t(NAN).nansum(1), lib.nanmean(t(NAN), dim=0)),
    "quantile linear": lambda lib, t: lib.quantile(t(X), t(np.array([0.1, 0.5, 0.93])), dim=1, keepdim=True),
    "quantile all": lambda lib, t: t(X3).quantile(0.3),
    "quantile keepdim none": lambda lib, t: t(X3).quantile(0.3, keepdim=True),
    "quantile lower higher": lambda lib, t: (t(X).quantile(0.3, dim=0, interpolation="lower"),
                                             t(X).quantile(0.3, dim=0, interpolation="higher")),
    "quantile midpoint nearest": lambda lib, t: (t(X).quantile(0.3, 1, interpolation="midpoint"),
                                                 t(X).quantile(0.6, 1, interpolation="nearest")),
    "nanquantile": lambda lib, t: lib.nanquantile(t(X), 0.25, dim=1),
    "unflatten": lambda lib, t: t(X3).unflatten(2, (2, 2)),
    "addmm addmv baddbmm": lambda lib, t: (
        lib.addmm(t(X[:2, :2]), t(X[:2]), t(X.T[:, :2].copy()), beta=0.5, alpha=2.0),
        lib.addmv(t(X[0, :4]), t(X[:, :4]), t(X[1, :4])),
        lib.baddbmm(t(X3[:, :3, :3]), t(X3), t(X3.transpose(0, 2, 1).copy()))),
    "masked_scatter": lambda lib, t: t(X).masked_scatter(t(X > 0), t(-np.arange(20.0))),
    "index_copy": lambda lib, t: t(X).index_copy(1, t(np.array([4, 0])), t(X[:, :2] * 10)),
    "put_ accumulate": lambda lib, t: t(X).clone().put_(t(np.array([0, 0, 7])), t(np.array([1.0, 2.0, 3.0])),
                                                        accumulate=True),
    "scatter_reduce sum mean": lambda lib, t: (
        t(X[:2]).scatter_reduce(1, t(SR_IDX), t(X[2:]), "sum"),
        t(X[:2]).scatter_reduce(1, t(SR_IDX), t(X[2:]), "mean", include_self=False)),
    "scatter_reduce prod amax amin": lambda lib, t: (
        t(X[:2]).scatter_reduce(1, t(SR_IDX), t(X[2:]), "prod"),
        t(X[:2]).scatter_reduce(1, t(SR_IDX), t(X[2:]), "amax"),
        t(X[:2]).scatter_reduce(1, t(SR_IDX), t(X[2:]), "amin", include_self=False)),
    "argwhere": lambda lib, t: lib.argwhere(t(X > 0)),
    "std_mean var_mean": lambda lib, t: lib.std_mean(t(X), dim=1) + lib.var_mean(t(X), 0, correction=0),
    "broadcast_tensors": lambda lib, t: lib.broadcast_tensors(t(X[:, :1]), t(X[0])),
    "meshgrid ij xy": lambda lib, t: lib.meshgrid(t(X[0, :3]), t(X[1]), indexing="ij") + lib.meshgrid(
        t(X[0, :3]), t(X[1]), t(X[2, :2]), indexing="xy"),
    "combinations": lambda lib, t: (lib.combinations(t(X[0])), lib.combinations(t(X[1, :3]), 3,
                                                                                with_replacement=True)),
    "tensor_split": lambda lib, t: lib.tensor_split(t(X3), 3, dim=2) + lib.tensor_split(t(X), [1, 4]),
    "hsplit vsplit": lambda lib, t: lib.hsplit(t(X), [2]) + lib.vsplit(t(X), 2),
    "stacks": lambda lib, t: (lib.hstack([t(X), t(X)]), lib.vstack([t(X[0]), t(X[1])]),
                              lib.dstack([t(X), t(X)]), lib.column_stack([t(X[0]), t(X[1])]),
                              lib.row_stack([t(X[0]), t(X[1])]), lib.concat([t(X), t(X)], dim=1)),
    "atleast rot90": lambda lib, t: (lib.atleast_1d(t(np.float64(1.0))), lib.atleast_2d(t(X[0])),
                                     lib.rot90(t(X3), 3, [1, 2])),
    "vdot cross cdist": lambda lib, t: (lib.vdot(t(X[0]), t(X[1])),
                                        lib.cross(t(X[:, :3]), t(X[:, 2:]), dim=1),
                                        lib.cdist(t(X), t(X[:2])), lib.cdist(t(X3), t(X3), p=1.0)),
    "tensordot": lambda lib, t: (lib.tensordot(t(X3), t(X3), dims=([1, 2], [1, 2])),
                                 lib.tensordot(t(X), t(X.T.copy()), dims=1)),
    "cov corrcoef": lambda lib, t: (lib.cov(t(X)), lib.cov(t(X[0]), correction=0), lib.corrcoef(t(X))),
    "lgamma digamma xlogy": lambda lib, t: (lib.lgamma(t(np.abs(X) + 0.5)), t(np.abs(X) + 0.5).digamma(),
                                            lib.xlogy(t(np.abs(X)), t(np.abs(X) + 1))),
    "floor_divide bitwise logical_xor": lambda lib, t: (
        lib.floor_divide(t(INTS), 4), lib.bitwise_and(t(INTS), 3), lib.bitwise_or(t(INTS), 8),
        lib.bitwise_xor(t(INTS), t(INTS[::-1].copy())), lib.bitwise_not(t(INTS > 2)),
        lib.logical_xor(t(X > 0), t(X < 1))),
    "logspace": lambda lib, t: lib.logspace(0, 2, steps=5, base=2.0, dtype=lib.float64),
    "byte char short": lambda lib, t: (t(INTS).byte(), t(INTS).char(), t(INTS).short()),
    "stride element_size": lambda lib, t: (t(np.array(t(X3).stride())), t(np.array([t(X).element_size()]))),
}


@pytest.mark.parametrize("name", sorted(SURVEY))
def test_survey_values_and_dtypes_match_torch(name: str) -> None:
    fn = SURVEY[name]
    _same(fn(rlgrad, rlgrad.tensor), fn(torch, torch.tensor), 1e-10)


SURVEY_GRADS: dict[str, tuple[Callable, np.ndarray]] = {
    "logit": (lambda lib, x: lib.logit(lib.sigmoid(x)), X),
    "float_power": (lambda lib, x: (x * x + 1).float_power(1.5), X),
    "copysign": (lambda lib, x: lib.copysign(x, x[0] - 0.3), X),
    "nansum nanmean": (lambda lib, x: lib.nanmean(x, dim=0) * 2 + x.nansum(1)[:1], X),
    "quantile": (lambda lib, x: lib.quantile(x, lib.tensor(np.array([0.1, 0.5, 0.93])), dim=1), X),
    "quantile midpoint": (lambda lib, x: x.quantile(0.3, 0, interpolation="midpoint"), X),
    "addmm": (lambda lib, x: lib.addmm(x[:2, :2], x[:2], x.T[:, :2], beta=0.5, alpha=2.0), X),
    "masked_scatter": (lambda lib, x: x.masked_scatter(lib.tensor(X > 0), x.flip(0) * 3), X),
    "index_copy": (lambda lib, x: x.index_copy(1, lib.tensor(np.array([4, 0])), x[:, 1:3] * 10), X),
    "scatter_reduce sum": (lambda lib, x: x[:2].scatter_reduce(1, lib.tensor(SR_IDX), x[2:, :4] ** 2,
                                                              "sum"), X),
    "scatter_reduce mean": (lambda lib, x: x[:2].scatter_reduce(1, lib.tensor(SR_IDX), x[2:, :4] ** 2, "mean",
                                                               include_self=False), X),
    "scatter_reduce prod": (lambda lib, x: x[:2].scatter_reduce(1, lib.tensor(SR_IDX), x[2:, :4], "prod"), X),
    "scatter_reduce amax": (lambda lib, x: x[:2].scatter_reduce(1, lib.tensor(SR_IDX), x[2:, :4], "amax"), X),
    "cross cdist": (lambda lib, x: lib.cross(x[:, :3], x[:, 2:], dim=1).sum()
                    + lib.cdist(x, x[:2] + 1).sum(), X),
    "cov corrcoef": (lambda lib, x: lib.cov(x).sum() + lib.corrcoef(x)[0, 1:], X),
    "tensordot vdot": (lambda lib, x: lib.tensordot(x, x.T * 2, dims=1) + lib.vdot(x[0], x[1]), X),
    "meshgrid combinations": (lambda lib, x: lib.meshgrid(x[0], x[1, :2])[1] * 2 +
                              lib.combinations(x[2], 2).sum(1)[:1], X),
}


@pytest.mark.parametrize("name", sorted(SURVEY_GRADS))
def test_survey_gradients_match_torch_and_finite_differences(name: str) -> None:
    fn, x = SURVEY_GRADS[name]
    check_against_torch(fn, x, RNG)


@pytest.mark.parametrize("call, support, mean", [
    (lambda t: t.bernoulli_(0.3), (0, 1), 0.3),
    (lambda t: t.exponential_(2.0), (0, np.inf), 0.5),
    (lambda t: t.geometric_(0.25), (1, np.inf), 4.0),
    (lambda t: t.log_normal_(0.0, 0.5), (0, np.inf), np.exp(0.125)),
    (lambda t: t.random_(3, 9), (3, 8), 5.5),
    (lambda t: t.cauchy_(), (-np.inf, np.inf), None),
])
def test_in_place_draws_are_seeded_in_their_support_with_torchs_mean(call: Callable, support: tuple,
                                                                      mean: Any) -> None:
    rlgrad.manual_seed(5)
    a = call(rlgrad.zeros(20000, dtype=rlgrad.float64)).numpy()
    rlgrad.manual_seed(5)
    np.testing.assert_array_equal(a, call(rlgrad.zeros(20000, dtype=rlgrad.float64)).numpy())
    assert a.min() >= support[0] and a.max() <= support[1]
    tm = call(torch.zeros(20000, dtype=torch.float64)).numpy().mean()
    if mean is not None:
        assert abs(a.mean() - mean) < 0.05 * mean and abs(tm - mean) < 0.05 * mean


def test_a_0d_tensor_formats_as_its_number() -> None:
    loss = rlgrad.tensor(0.123456, dtype=rlgrad.float64)
    assert f"{loss:.3f}" == f"{torch.tensor(0.123456, dtype=torch.float64):.3f}" == "0.123"
    with pytest.raises(TypeError):
        f"{rlgrad.tensor(X):.3f}"


def test_finfo_iinfo_determinism_and_print_options_take_torchs_calls() -> None:
    assert rlgrad.finfo(rlgrad.float32).eps == torch.finfo(torch.float32).eps
    assert rlgrad.iinfo(rlgrad.int64).max == torch.iinfo(torch.int64).max
    rlgrad.use_deterministic_algorithms(True)
    assert rlgrad.are_deterministic_algorithms_enabled()
    rlgrad.use_deterministic_algorithms(False)
    saved = np.get_printoptions()
    try:
        rlgrad.set_printoptions(precision=2)
        assert "0.12" in repr(rlgrad.tensor([0.123456]))
    finally:
        np.set_printoptions(**saved)


# ---- torch.nn.functional and torch.nn additions (rlgrad/nn/functional_extra.py, layers_extra.py)
IMG = RNG.normal(size=(2, 3, 7, 6))
SEQ = RNG.normal(size=(2, 3, 9))
FUNCTIONAL: dict[str, tuple[Callable, np.ndarray]] = {
    "conv1d": (lambda F, x: F.conv1d(x, x[0, :, :3].reshape(1, 3, 3).repeat(2, 1, 1) * 0.5, stride=2,
                                     padding=1), SEQ),
    "max_pool2d": (lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1), IMG),
    "max_pool2d rect": (lambda F, x: F.max_pool2d(x, (2, 3)), IMG),
    "avg_pool2d": (lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1), IMG),
    "avg_pool2d no pad count": (lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
                                IMG),
    "max_pool1d avg_pool1d": (lambda F, x: F.max_pool1d(x, 3, 2) + F.avg_pool1d(x, 3, 2), SEQ),
    "adaptive_avg_pool2d": (lambda F, x: F.adaptive_avg_pool2d(x, (3, 4)), IMG),
    "adaptive_max_pool2d": (lambda F, x: F.adaptive_max_pool2d(x, 2), IMG),
    "activations": (lambda F, x: F.softmin(x, 1) + F.hardtanh(x, -0.5, 0.7) + F.relu6(x * 4)
                    + F.hardsigmoid(x * 4) + F.hardswish(x * 4) + F.selu(x) + F.celu(x, 0.7)
                    + F.logsigmoid(x * 5) + F.softsign(x) + F.tanhshrink(x) + F.threshold(x, 0.1, -2.0)
                    + F.softshrink(x, 0.3) + F.hardshrink(x, 0.3), X),
    "glu": (lambda F, x: F.glu(x, dim=0), X),
    "cosine_similarity pairwise_distance": (lambda F, x: F.cosine_similarity(x, x.flip(0) + 1, dim=1)
                                            + F.pairwise_distance(x, x.flip(0)) + F.pairwise_distance(
                                                x, x * 2, p=1.5), X),
    "losses": (lambda F, x: F.poisson_nll_loss(x, x.abs().flip(0)) + F.poisson_nll_loss(
        x.abs() + 0.1, x.abs().flip(0) * 3, log_input=False, full=True) + F.gaussian_nll_loss(
        x, x.flip(0), x.abs() + 0.05, full=True) + F.margin_ranking_loss(x[0], x[1], x[2].sign(), 0.1), X),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_additions_match_torch_and_finite_differences(name: str) -> None:
    fn, x = FUNCTIONAL[name]
    xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = fn(rlgrad.nn.functional, xr), fn(torch.nn.functional, xt)
    _same(got, want, 1e-10)
    w = RNG.normal(size=tuple(want.shape))
    (got * rlgrad.tensor(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    # (torch's hardsigmoid and celu backward use float32 constants: 2e-8 off in float64)
    tol = 1e-7 if name == "activations" else 1e-9
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)
    if "pool" in name or name in ("conv1d", "glu"):
        grads_match_finite_differences(lambda lib, a: fn(lib.nn.functional, a), x)


def test_gumbel_softmax_is_a_distribution_and_hard_is_one_hot_with_the_soft_gradient() -> None:
    logits = rlgrad.tensor(np.log(np.array([[0.1, 0.6, 0.3]] * 4000)), requires_grad=True)
    rlgrad.manual_seed(0)
    soft = rlgrad.nn.functional.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.detach().numpy().sum(1), 1.0, rtol=1e-12)
    hard = rlgrad.nn.functional.gumbel_softmax(logits, tau=0.5, hard=True)
    h = hard.detach().numpy()
    assert set(np.unique(h)) == {0.0, 1.0} and (h.sum(1) == 1).all()
    np.testing.assert_allclose(h.mean(0), [0.1, 0.6, 0.3], atol=0.03)
    (hard * rlgrad.tensor(np.arange(3.0))).sum().backward()
    assert np.abs(logits.grad.numpy()).sum() > 0


MODULES: dict[str, Callable] = {
    "Conv1d": lambda nn: nn.Conv1d(3, 4, 3, stride=2, padding=1),
    "MaxPool2d AvgPool2d": lambda nn: nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.AvgPool2d(2)),
    "AdaptiveAvgPool2d": lambda nn: nn.AdaptiveAvgPool2d((2, 3)),
    "activations": lambda nn: nn.Sequential(nn.Hardtanh(-0.5, 0.5), nn.ReLU6(), nn.Hardswish(), nn.SELU(),
                                            nn.CELU(0.5), nn.LogSigmoid(), nn.Softsign(), nn.Tanhshrink(),
                                            nn.Threshold(0.1, 0.0), nn.Softmin(1), nn.Hardsigmoid()),
    "PReLU": lambda nn: nn.PReLU(3, 0.1),
    "GroupNorm": lambda nn: nn.GroupNorm(3, 3),
    "Unflatten": lambda nn: nn.Sequential(nn.Flatten(), nn.Unflatten(1, (6, 21))),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_additions_match_torch(name: str) -> None:
    tm = MODULES[name](torch.nn).double()
    rm = MODULES[name](rlgrad.nn).double()
    rm.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = SEQ if name == "Conv1d" else IMG
    _same(rm(rlgrad.tensor(x)), tm(torch.tensor(x)), 1e-10)
    assert [k for k, _ in rm.named_parameters()] == [k for k, _ in tm.named_parameters()]


def test_parameter_list_registers_its_parameters() -> None:
    pl = rlgrad.nn.ParameterList([np.ones(2), rlgrad.nn.Parameter(np.zeros(3))])
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(3))])
    assert [k for k, _ in pl.named_parameters()] == [k for k, _ in tl.named_parameters()] == ["0", "1"]
    assert len(pl) == 2 and tuple(pl[1].shape) == (3,)


@pytest.mark.parametrize("stride, padding, output_padding", [
    (1, 0, 0), (2, 1, 1), (3, 1, 0), ((2, 1), (0, 1), (1, 0))])
def test_conv_transpose2d_matches_torch_and_finite_differences(stride: Any, padding: Any,
                                                                output_padding: Any) -> None:
    x, w, b = RNG.normal(size=(2, 3, 5, 4)), RNG.normal(size=(3, 4, 3, 2)), RNG.normal(size=4)

    def run(lib: Any, F: Any, *args: Any) -> Any:
        return F.conv_transpose2d(*args, lib.tensor(b), stride, padding, output_padding)

    xr, wr = rlgrad.tensor(x, requires_grad=True), rlgrad.tensor(w, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    got, want = run(rlgrad, rlgrad.nn.functional, xr, wr), run(torch, torch.nn.functional, xt, wt)
    _same(got, want, 1e-12)
    (got ** 2).sum().backward()
    (want ** 2).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(wr.grad.numpy(), wt.grad.numpy(), rtol=1e-11, atol=1e-11)

    def f(a: Any, k: Any) -> Any:
        arr = not isinstance(a, rlgrad.Tensor)
        out = rlgrad.numpy.tanh(run(rlgrad, rlgrad.nn.functional, rlgrad.tensor(a) if arr else a,
                                    rlgrad.tensor(k) if not isinstance(k, rlgrad.Tensor) else k))
        return out.numpy() if arr and not isinstance(k, rlgrad.Tensor) else out

    check_grads(f, modes=("rev", "fwd"), order=2)(x, w)


def test_conv_transpose2d_module_and_vmap_match_torch() -> None:
    torch.manual_seed(3)
    tm = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1).double()
    rm = rlgrad.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1).double()
    rm.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = RNG.normal(size=(4, 2, 3, 5, 4))
    _same(rm(rlgrad.tensor(x[0])), tm(torch.tensor(x[0])), 1e-12)
    got = rf.vmap(rm)(rlgrad.tensor(x))
    _same(got, torch.func.vmap(tm)(torch.tensor(x)), 1e-12)


def test_bit_operators_numpy_force_and_conjugate_views_match_torch() -> None:
    b1, b2 = X > 0, X < 0.5
    for f in (lambda t: t(b1) ^ t(b2), lambda t: t(INTS) ^ t(INTS[::-1].copy()), lambda t: t(INTS) << 2,
              lambda t: t(INTS) >> 1, lambda t: 3 ^ t(INTS), lambda t: t(X3).mH, lambda t: t(X).H):
        _same(f(rlgrad.tensor), f(torch.tensor))
    xr = rlgrad.tensor(X, requires_grad=True)
    np.testing.assert_array_equal(xr.numpy(force=True), torch.tensor(X, requires_grad=True).numpy(force=True))
    with pytest.raises(RuntimeError, match="requires grad"):
        xr.numpy()
    with pytest.raises(TypeError, match="only integer and bool"):
        rlgrad.tensor(X) ^ rlgrad.tensor(X)


def test_random_split_is_seeded_disjoint_and_takes_fractions() -> None:
    from rlgrad.utils.data import TensorDataset, random_split

    ds = TensorDataset(rlgrad.tensor(np.arange(10.0)))
    a, b = random_split(ds, [0.7, 0.3], generator=rlgrad.random.Generator(0))
    c, d = random_split(ds, [7, 3], generator=rlgrad.random.Generator(0))
    assert (len(a), len(b)) == (7, 3) and a.indices == c.indices
    assert sorted(a.indices + b.indices) == list(range(10))
    assert float(a[0][0]) == float(a.indices[0])
    assert [len(s) for s in torch.utils.data.random_split(range(10), [0.34, 0.33, 0.33])] == \
        [len(s) for s in random_split(ds, [0.34, 0.33, 0.33])]
    with pytest.raises(ValueError, match="do not add up"):
        random_split(ds, [3, 3])
