"""``rlgrad.jit`` replays what the eager code computes, for every input (issue 19, part 2).

* Every constant the tracer can meet survives code generation (nan, inf, NumPy scalars, ...).
* Whatever a rule or an index computes from the data (a sort permutation, an argmax, a mask) is
  recomputed at every call, never frozen from the first one: a differential test runs a set of
  such programs eagerly and compiled on differently ordered inputs.
* What a compiled step cannot replay (a shape that depends on the values, a random draw) is
  refused at trace time with one clear line.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
import rlgrad.nn.functional as F
import rlgrad.numpy as rnp
from rlgrad import special
from rlgrad.distributions import Beta, Categorical, Normal

# ---- constants ----------------------------------------------------------------------------------
CONSTANTS = [
    np.nan, np.inf, -np.inf, -0.0, 1e-310, 1.5, 2**70, -(2**70), 2**64 - 1, True, 3,
    np.float64(np.nan), np.float64(-np.inf), np.float64(0.1), np.float32(1.5), np.float32(np.inf),
    np.float16(2.5), np.longdouble(1.25), np.int8(-3), np.int16(7), np.int32(-9), np.int64(2**40),
    np.uint8(200), np.uint16(7), np.uint32(2**31), np.uint64(2**63), np.bool_(True),
    np.bool_(False), 1 + 2j, np.complex64(1j), np.complex128(np.nan), np.array(np.nan),
    np.array(-np.inf, dtype=np.float32), np.array(3, dtype=np.int16), np.array(True),
]


@pytest.mark.parametrize("c", CONSTANTS, ids=[repr(c) for c in CONSTANTS])
def test_every_constant_survives_code_generation(c):
    programs = [
        lambda x: rnp.where(x > 0, x, c) * 1,
        lambda x: (x * c, c - x),
        lambda x: rnp.sum(rnp.where(x > 0, x, c)),
        lambda x: (rnp.exp(x), c),  # a constant output
    ]
    for fn in programs:
        jitted = rlgrad.jit(fn)
        for x in (np.array([1.0, -2.0, 3.0]), np.array([-1.0, 2.0, 0.5])):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. a complex constant cast
                want, got = fn(x), jitted(x)
            for w, g in zip(_leaves(want), _leaves(got)):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
                assert np.asarray(g).dtype == np.asarray(w).dtype


def _leaves(tree):
    return list(tree) if isinstance(tree, tuple) else [tree]


def test_action_masking_with_minus_inf_logits_compiles():
    """The issue's example: -inf logits for masked actions."""
    fn = lambda x: rnp.sum(rnp.where(x > 0, x, -np.inf))  # noqa: E731
    jitted = rlgrad.jit(fn)
    assert jitted(np.array([1.0, 2.0])) == 3.0
    assert jitted(np.array([1.0, -2.0])) == -np.inf
    step = rlgrad.jit(rlgrad.value_and_grad(lambda z: rnp.sum(rnp.exp(F.log_softmax(
        rnp.where(z > 0, z, -np.inf), dim=-1)) * np.array([1.0, 2.0, 3.0]))))
    for z in (np.array([1.0, -1.0, 2.0]), np.array([-1.0, 1.0, 2.0])):
        v, g = step(z)
        ev, eg = rlgrad.value_and_grad(lambda z: rnp.sum(rnp.exp(F.log_softmax(
            rnp.where(z > 0, z, -np.inf), dim=-1)) * np.array([1.0, 2.0, 3.0])))(z)
        np.testing.assert_allclose(v, ev, rtol=1e-14)
        np.testing.assert_allclose(g, eg, rtol=1e-14)


# ---- data-dependent values: eager vs compiled -----------------------------------------------------
W = np.array([[0.3, -1.2, 0.7, 2.0], [1.1, 0.4, -0.6, 0.9], [-0.2, 0.5, 1.3, -1.7]])
ROWS = np.arange(3)


def _t(x):
    """x as a Tensor (inside a transform it is one already), for the PyTorch-style methods."""
    return x if isinstance(x, rlgrad.Tensor) else rlgrad.tensor(x)


def _val(x):
    return x._value if isinstance(x, rlgrad.Tensor) else x


def _programs():
    """Programs whose values or gradients depend on the order of the data: x is (3, 4)."""
    return {
        "sort": lambda x: rnp.sum(rnp.sort(x) * W),
        "sort_axis0": lambda x: rnp.sum(rnp.sort(x, axis=0) * W),
        "argsort_index": lambda x: rnp.sum(x[ROWS[:, None], rnp.argsort(x, axis=1)] * W),
        "argmax_index": lambda x: x[0, rnp.argmax(x[0])] * 1.0,
        "argmax_rows": lambda x: rnp.sum(x[ROWS, rnp.argmax(x, axis=1)] ** 2),
        "argmin_take": lambda x: rnp.sum(rnp.take_along_axis(x, rnp.argmin(x, 1)[:, None], 1) * 3),
        "max": lambda x: rnp.max(x) * 2.0,
        "amax_axis": lambda x: rnp.sum(rnp.amax(x, axis=1) * W[:, 0]),
        "min_keepdims": lambda x: rnp.sum(rnp.min(x, axis=0, keepdims=True) * W),
        "tensor_max_dim": lambda x: rnp.sum(_t(x).max(1)[0] * W[:, 1]) + rnp.sum(
            _t(x)[ROWS, _t(x).max(1)[1]]),
        "tensor_min_dim": lambda x: rnp.sum(_t(x).min(dim=0).values * W[0]),
        "tensor_amax_prod": lambda x: (_t(x).amax(dim=1) * _t(x).prod(dim=0, keepdim=True)[0, :3]
                                       ).sum(),
        "maximum": lambda x: rnp.sum(rnp.maximum(x, x[::-1]) * W),
        "where_mean": lambda x: rnp.sum(rnp.where(x > rnp.mean(x), x, -x) * W),
        "where_any": lambda x: rnp.sum(rnp.where(rnp.any(x > 1.5), x, 2 * x) * W),
        "relu_abs_clip": lambda x: rnp.sum((F.relu(x) + rnp.abs(x) + rnp.clip(x, -0.5, 0.5)) * W),
        "sign": lambda x: rnp.sum(rnp.sign(x) * x * W),
        "cumprod": lambda x: rnp.sum(rnp.cumprod(x, axis=1) * W),
        "prod": lambda x: rnp.sum(rnp.prod(x, axis=1) * W[:, 0]),
        "xlogy": lambda x: rnp.sum(special.xlogy(F.relu(x), rnp.abs(x) + 1) * W),
        "norm_inf": lambda x: rnp.linalg.norm(x[0], np.inf) + rnp.linalg.norm(x[1], -np.inf),
        "slogdet": lambda x: rnp.prod(rnp.linalg.slogdet(x[:, :3])[0]) * rnp.linalg.slogdet(
            x[:, :3])[1],
        "categorical_mode": lambda x: rnp.sum(x[ROWS, Categorical(logits=x).mode]),
        "nll_from_argmax": lambda x: F.nll_loss(F.log_softmax(x, dim=1), rnp.argmax(x, 1)),
        "partition": lambda x: rnp.sum(rnp.partition(x, 2, axis=1)[:, 2] * W[:, 0]),
        "fmax_select": lambda x: rnp.sum(rnp.select([x > 0.5], [rnp.fmax(x, x[::-1])], -x) * W),
        "median_by_sort": lambda x: rnp.sum(rnp.sort(x, axis=1)[:, 1:3] * W[:, :2]),
        "take_flat_argmax": lambda x: rnp.take(x, rnp.argmax(x)) * 2.0,
        "take_rows": lambda x: rnp.sum(rnp.take(x, rnp.argmin(x, 1), axis=1) * W[:, :3]),
        "gather": lambda x: rnp.sum(rlgrad.gather(x, 1, rnp.argmax(x, 1, keepdims=True)) ** 2),
        "scatter_add": lambda x: rnp.sum(rlgrad.scatter_add(
            x, 1, rnp.argmax(x, 1, keepdims=True), x[:, :1] * 3.0) * W),
        "one_hot": lambda x: rnp.sum(rlgrad.one_hot(rnp.argmax(x, 1), 4) * x * W),
        "categorical_log_prob": lambda x: rnp.sum(Categorical(logits=x).log_prob(
            rnp.argmin(x, 1))),
    }


def _inputs():
    rng = np.random.default_rng(0)
    base = rng.uniform(-2.0, 2.0, (3, 4))
    out = [base, base[:, ::-1].copy(), base[::-1].copy(), -base]
    for perm in (rng.permutation(12) for _ in range(2)):
        out.append(base.reshape(-1)[perm].reshape(3, 4))
    z = base.copy()
    z[1, 2] = 0.0  # a zero in cumprod/prod/xlogy, a tie-free order otherwise
    out.append(z)
    return out


@pytest.mark.parametrize("name", sorted(_programs()))
def test_compiled_step_equals_eager_on_differently_ordered_inputs(name):
    fn = _programs()[name]
    eager = rlgrad.value_and_grad(fn)
    compiled = rlgrad.jit(eager)
    forward = rlgrad.jit(fn)
    for x in _inputs():
        v, g = eager(x)
        cv, cg = compiled(x)
        np.testing.assert_allclose(cv, v, rtol=1e-13, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(cg, g, rtol=1e-13, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(forward(x), _val(fn(x)), rtol=1e-13, atol=1e-14, err_msg=name)


def test_second_order_through_a_sort_is_replayed():
    hvp = rlgrad.jit(lambda x, v: rlgrad.grad(lambda x: rnp.sum(
        rlgrad.grad(lambda x: rnp.sum(rnp.sort(x) ** 3 * W[0]))(x) * v))(x))
    v = np.array([1.0, -1.0, 0.5, 2.0])
    for x in (np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, 1.0, 2.0])):
        want = 6 * x * W[0][np.argsort(np.argsort(x))] * v
        np.testing.assert_allclose(hvp(x, v), want, rtol=1e-13)


def test_loss_targets_passed_to_the_step_are_read_at_every_call():
    logits = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 0.0]])

    def nll(x, t):
        return F.nll_loss(F.log_softmax(x, dim=1), t, weight=np.array([1.0, 2.0, 0.5]))

    def ce(x, t):
        return F.cross_entropy(x, t, label_smoothing=0.1, ignore_index=1,
                               weight=np.array([1.0, 2.0, 0.5]))

    for fn in (nll, ce):
        compiled = rlgrad.jit(rlgrad.value_and_grad(fn))
        for t in (np.array([0, 2]), np.array([2, 0]), np.array([1, 2])):
            v, g = rlgrad.value_and_grad(fn)(logits, t)
            cv, cg = compiled(logits, t)
            np.testing.assert_allclose(cv, v, rtol=1e-14)
            np.testing.assert_allclose(cg, g, rtol=1e-14)


def test_beta_mode_is_recomputed():
    compiled = rlgrad.jit(lambda a, b: Beta(a, b).mode * 1.0)
    for a, b in ((np.array([0.5, 2.0, 3.0]), np.array([3.0, 2.0, 0.5])),
                 (np.array([3.0, 0.5, 2.0]), np.array([0.5, 3.0, 2.0]))):
        np.testing.assert_allclose(compiled(a, b), Beta(a, b).mode._value)


# ---- refused at trace time --------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda x: rnp.sum(x[x > 0]),
    lambda x: rlgrad.grad(lambda x: rnp.sum(x[x > 0] ** 2))(x),
    lambda x, m: rnp.sum(x[m]),
], ids=["mask", "mask_grad", "mask_argument"])
def test_a_boolean_mask_of_traced_values_is_refused(fn):
    args = (np.array([1.0, -2.0, 3.0]),)
    if fn.__code__.co_argcount == 2:
        args += (np.array([True, False, True]),)
    with pytest.raises(RuntimeError, match="boolean mask.*depends on the data"):
        rlgrad.jit(fn)(*args)


@pytest.mark.parametrize("name", ["nonzero", "flatnonzero", "argwhere"])
def test_value_dependent_shapes_are_refused(name):
    with pytest.raises(RuntimeError, match=f"{name} of a traced tensor gives a result whose shape"):
        rlgrad.jit(lambda x: rnp.sum(x[getattr(rnp, name)(x > 0)]))(np.array([1.0, -2.0]))


def test_rsample_inside_jit_is_refused():
    with pytest.raises(RuntimeError, match="random draw.*frozen"):
        rlgrad.jit(lambda mu: rnp.sum(Normal(mu, 1.0).rsample()))(np.zeros(3))


def test_a_constant_boolean_mask_from_outside_still_compiles():
    mask = np.array([True, False, True])
    compiled = rlgrad.jit(lambda x: rnp.sum(x[mask] * 2.0))
    assert compiled(np.array([1.0, 5.0, 2.0])) == 6.0
    assert compiled(np.array([3.0, 5.0, 2.0])) == 10.0


def test_cumprod_does_not_freeze_the_branch_taken_for_positive_first_inputs():
    fn = rlgrad.value_and_grad(lambda x: rnp.sum(rnp.cumprod(x) * np.array([1.0, -2.0, 0.5])))
    compiled = rlgrad.jit(fn)
    for x in (np.array([1.0, 2.0, 3.0]), np.array([-1.0, 2.0, 0.0]), np.array([0.5, -3.0, 2.0])):
        v, g = fn(x)
        cv, cg = compiled(x)
        np.testing.assert_allclose(cv, v, rtol=1e-14)
        np.testing.assert_allclose(cg, g, rtol=1e-14)


def test_actions_passed_to_the_step_index_log_probs_at_every_call():
    from rlgrad.distributions import Bernoulli

    def cat(x, a):
        return rnp.sum(Categorical(logits=x).log_prob(a)) + rnp.sum(
            Categorical(probs=F.softmax(x, dim=-1)).log_prob(a[0]))

    def bern(x, a):
        return rnp.sum(Bernoulli(logits=x[:, 0]).log_prob(a) * W[:, 0])

    x = np.random.default_rng(3).standard_normal((3, 4))
    for fn, actions in ((cat, ([0, 3, 1], [2, 2, 0])), (bern, ([0, 1, 1], [1, 0, 0]))):
        compiled = rlgrad.jit(rlgrad.value_and_grad(fn))
        for a in actions:
            a = np.array(a)
            v, g = rlgrad.value_and_grad(fn)(x, a)
            cv, cg = compiled(x, a)
            np.testing.assert_allclose(cv, v, rtol=1e-14)
            np.testing.assert_allclose(cg, g, rtol=1e-14)


@pytest.mark.parametrize("fn, match", [
    (lambda x: rlgrad.put_along_axis(x, rnp.argmax(x, 1, keepdims=True), 0.0, 1) * 1.0,
     "put_along_axis"),
    (lambda x: rlgrad.one_hot(rnp.argmax(x, 1)) * 1.0, "num_classes"),
    (lambda x: np.array([10.0, 20.0, 30.0, 40.0])[rnp.argmax(x[0])] * x, "traced tensor"),
], ids=["put_along_axis", "one_hot_inferred", "numpy_indexed_by_traced"])
def test_index_uses_that_cannot_be_replayed_are_refused(fn, match):
    with pytest.raises(RuntimeError, match=match):
        rlgrad.jit(fn)(np.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize("name, args", [("median", ()), ("percentile", (50,)), ("quantile", (0.5,)),
                                        ("unique", ())])
def test_numpy_functions_without_an_rlgrad_version_are_refused_not_frozen(name, args):
    """NumPy's own median, unique, partition ... on a traced tensor: a TypeError naming the
    function (they have no rlgrad version), never a value computed once and replayed."""
    fn = getattr(np, name)
    with pytest.raises(TypeError, match=f"numpy.{name} has no differentiable rlgrad version"):
        rlgrad.jit(lambda x: fn(x, *args))(np.array([3.0, 1.0, 2.0]))
