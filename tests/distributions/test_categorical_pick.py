"""The one-op selection of the taken action in a compiled ``Categorical.log_prob``
(``categorical_pick`` and its transpose ``categorical_unpick``): values as the eager path,
derivatives by finite differences at first and second order in both modes, replays that read
each call's actions."""

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import ops
from rlgrad.distributions import Categorical
from rlgrad.distributions.categorical import pick, unpick

RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 3))
A = np.array([0, 2, 1, 1, 0, 2])
W = RNG.normal(size=6)


def test_pick_and_unpick_values():
    np.testing.assert_array_equal(pick(X, A), X[np.arange(6), A])
    out = unpick(W, A, 3)
    want = np.zeros((6, 3))
    want[np.arange(6), A] = W
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("modes", [["rev"], ["fwd"]])
def test_pick_of_log_softmax_derivatives_first_and_second_order(modes):
    # the log-probability of the taken actions, weighted: what a policy-gradient loss reads
    def f(x):
        return rnp.sum(pick(ops.log_softmax(x, axis=-1), A) * W)

    rlgrad.check_grads(f, modes=modes, order=2)(X)


@pytest.mark.parametrize("modes", [["rev"], ["fwd"]])
def test_unpick_derivatives_first_and_second_order(modes):
    # unpick is the backward of pick; differentiated again (a gradient penalty, Hessian products)
    def f(g):
        return rnp.sum(rnp.tanh(unpick(g * g, A, 3)) * X)

    rlgrad.check_grads(f, modes=modes, order=2)(W)


def test_compiled_log_prob_uses_pick_and_reads_each_calls_actions():
    def loss(x, a):
        d = Categorical(logits=x)
        return (d.log_prob(a) * W).sum()

    step = rlgrad.jit(rlgrad.value_and_grad(loss))
    assert "categorical_pick" in step.lower(X, A)
    for seed in range(3):
        a = np.random.default_rng(seed).integers(0, 3, size=6)
        value, grad = step(X, a)
        want_v, want_g = rlgrad.value_and_grad(loss)(X, a)
        np.testing.assert_allclose(value, want_v, rtol=1e-12)
        np.testing.assert_allclose(grad, want_g, rtol=1e-12, atol=1e-15)
        p = np.exp(X - X.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        onehot = np.eye(3)[a]
        np.testing.assert_allclose(grad, W[:, None] * (onehot - p), rtol=1e-10, atol=1e-15)


def test_compiled_log_prob_broadcasting_actions_keeps_the_general_path():
    # actions of another shape than the batch broadcast against it, as eagerly
    x = X[:2]

    def lp(x, a):
        return Categorical(logits=x).log_prob(a).sum()

    a = np.array([[0], [2], [1]])  # (3, 1) against batch (2,): a (3, 2) result
    got = rlgrad.jit(rlgrad.value_and_grad(lp))(x, a)
    want = rlgrad.value_and_grad(lp)(x, a)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("k", [2, 3, 5, 8, 9, 40])
@pytest.mark.parametrize("batch", [(), (7,), (3, 4)])
def test_sampling_columns_equal_the_reductions(k, batch):
    # inverse_cdf and row_max work column by column for a few categories: the same results as
    # the reductions they replace, with masked (zero-mass) categories, ties and NaN
    from rlgrad.distributions.categorical import inverse_cdf, row_max

    rng = np.random.default_rng(k)
    x = rng.normal(size=batch + (k,))
    x[..., k // 2] = -np.inf  # a masked category
    if batch:
        x.reshape(-1, k)[0, 0] = np.nan
        x.reshape(-1, k)[-1, :] = 1.0  # ties everywhere
    np.testing.assert_array_equal(row_max(x), np.maximum.reduce(x, axis=-1, keepdims=True))
    with np.errstate(invalid="ignore"):  # (a row of NaN and -inf only: NaN masses)
        cdf = np.cumsum(np.exp(x - np.nanmax(x, axis=-1, keepdims=True)), axis=-1)
    for u in (rng.random(batch), np.zeros(batch), np.full(batch, np.nextafter(1.0, 0.0))):
        got = inverse_cdf(cdf, u)
        want = np.add.reduce(cdf[..., :-1] <= (u * cdf[..., -1])[..., None], axis=-1,
                             dtype=np.int64)
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.int64 and np.shape(got) == batch
