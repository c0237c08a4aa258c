"""torch.distributions.transforms' remaining bijections (Power, Abs, Softmax, Softplus,
Independent, Reshape, Cat, Stack, CorrCholesky, LowerCholesky, PositiveDefinite,
CumulativeDistribution), constraints and ``biject_to``/``transform_to`` against torch in float64:
values, inverses, log-det-Jacobians (also against the log-determinant of a finite-difference
Jacobian), gradients, event dims, signs, caching, shapes and errors."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)
X6, X33, XP = RNG.normal(size=(2, 6)), RNG.normal(size=(2, 3, 3)), np.abs(RNG.normal(size=(2, 3))) + 0.1


def _tr(T):
    return T.distributions.transforms


TRANSFORMS = {  # name: (make(T), input)
    "power": (lambda T: _tr(T).PowerTransform(T.tensor(2.5, dtype=T.float64)), XP),
    # (a float exponent becomes a float32 tensor in torch, whose inverse 1/e loses digits)
    "power_neg": (lambda T: _tr(T).PowerTransform(T.tensor(-1.5, dtype=T.float64)), XP),
    "softplus": (lambda T: _tr(T).SoftplusTransform(), X6),
    "independent": (lambda T: _tr(T).IndependentTransform(_tr(T).ExpTransform(), 1), X6),
    "reshape": (lambda T: _tr(T).ReshapeTransform((6,), (2, 3)), X6),
    "cat": (lambda T: _tr(T).CatTransform([_tr(T).ExpTransform(), _tr(T).SigmoidTransform()], 1, [2, 4]), X6),
    "stack": (lambda T: _tr(T).StackTransform([_tr(T).ExpTransform(), _tr(T).TanhTransform()], 0), X6),
    "corr_cholesky": (lambda T: _tr(T).CorrCholeskyTransform(), X6),
    "cdf": (lambda T: _tr(T).CumulativeDistributionTransform(
        T.distributions.Normal(T.tensor(0.5, dtype=T.float64), T.tensor(2.0, dtype=T.float64))), X6),
}
NOT_BIJECTIVE = {  # no log-det-Jacobian in torch
    "abs": (lambda T: _tr(T).AbsTransform(), X6),
    "softmax": (lambda T: _tr(T).SoftmaxTransform(), X6),
    "lower_cholesky": (lambda T: _tr(T).LowerCholeskyTransform(), X33),
    "positive_definite": (lambda T: _tr(T).PositiveDefiniteTransform(), X33),
}


def _np(t) -> np.ndarray:
    return t.detach().numpy()


def _event_dim(t) -> object:
    try:
        return t.event_dim
    except ValueError as e:  # domain and codomain differ (CorrCholeskyTransform), as torch's
        return str(e)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_bijections_values_inverse_ladj_and_gradients_match_torch(name: str) -> None:
    make, x = TRANSFORMS[name]
    out = {}
    for T in (torch, rlgrad):
        t = make(T)
        xt = T.tensor(x, requires_grad=True)
        y = t(xt)
        ladj = t.log_abs_det_jacobian(xt, y)
        back = t.inv(y)
        (y.sum() + ladj.sum()).backward()
        out[T] = (_np(y), _np(ladj), _np(back), xt.grad.numpy(), _event_dim(t), t.domain.event_dim,
                  t.codomain.event_dim, t.forward_shape(x.shape), t.inverse_shape(y.shape), t.bijective)
    for a, b in zip(out[rlgrad], out[torch], strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        else:
            assert tuple(a) == tuple(b) if isinstance(a, tuple) else a == b
    np.testing.assert_allclose(out[rlgrad][2], x, rtol=1e-8, atol=1e-10)  # inv(t(x)) = x


@pytest.mark.parametrize("name", ["power", "softplus", "corr_cholesky", "cat"])
def test_log_abs_det_jacobian_is_the_finite_difference_jacobians(name: str) -> None:
    make, x = TRANSFORMS[name]
    t = make(rlgrad)
    x0 = x[0]
    f = lambda v: t(rlgrad.tensor(v[None])).numpy()[0]  # noqa: E731
    if name == "corr_cholesky":  # the free coordinates: the strict lower triangle
        rows, cols = np.tril_indices(4, -1)
        f = lambda v, g=f: g(v)[rows, cols]  # noqa: E731
    eps = 1e-6
    jac = np.stack([(f(x0 + eps * e) - f(x0 - eps * e)) / (2 * eps) for e in np.eye(x0.size)], -1)
    ladj = t.log_abs_det_jacobian(rlgrad.tensor(x0[None]), t(rlgrad.tensor(x0[None]))).numpy()
    if name != "corr_cholesky":  # elementwise: a diagonal Jacobian (cat: event_dim 0 pieces)
        np.testing.assert_allclose(ladj[0], np.log(np.abs(np.diagonal(jac))), rtol=1e-6)
    else:
        np.testing.assert_allclose(ladj[0], np.linalg.slogdet(jac)[1], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(NOT_BIJECTIVE))
def test_the_non_bijective_transforms_as_torch(name: str) -> None:
    make, x = NOT_BIJECTIVE[name]
    out = {}
    for T in (torch, rlgrad):
        t = make(T)
        xt = T.tensor(x, requires_grad=True)
        y = t(xt)
        (y * T.tensor(np.cos(np.arange(y.numel())).reshape(tuple(y.shape)))).sum().backward()
        inv = _np(t.inv(y)) if name != "abs" else _np(t.inv(T.tensor(np.abs(x))))
        out[T] = (_np(y), inv, xt.grad.numpy(), _event_dim(t))
        with pytest.raises(NotImplementedError):
            t.log_abs_det_jacobian(xt, y)
        assert bool(np.all(np.asarray(t.codomain.check(y.detach() if T is torch else _np(y)))))
    for a, b in zip(out[rlgrad], out[torch], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_caching_signs_equality_and_errors() -> None:
    for T in (torch, rlgrad):
        tr = _tr(T)
        t = tr.IndependentTransform(tr.TanhTransform(), 1, cache_size=1)
        x = T.tensor(X6)
        y = t(x)
        assert t.inv(y) is x and t(x) is y
        assert tr.CatTransform([tr.ExpTransform()], cache_size=1).transforms[0]._cache_size == 1
        assert int(tr.PowerTransform(-2.0).sign) == -1 and int(tr.PowerTransform(T.tensor(3.0)).sign) == 1
        assert tr.AbsTransform() == tr.AbsTransform() and tr.PowerTransform(2.0) == tr.PowerTransform(2.0)
        assert tr.CorrCholeskyTransform() != tr.CorrCholeskyTransform()  # identity, as torch's
        assert [tr.AbsTransform().bijective, tr.SoftmaxTransform().bijective] == [False, False]
        with pytest.raises(ValueError, match="different numbers of elements"):
            tr.ReshapeTransform((6,), (2, 2))
        with pytest.raises(ValueError, match="Shape mismatch"):
            tr.ReshapeTransform((6,), (2, 3)).forward_shape((4, 5))
        with pytest.raises(ValueError, match="flattened lower-diagonal"):
            tr.CorrCholeskyTransform().forward_shape((4, 5))
        assert tr.CorrCholeskyTransform().forward_shape((2, 10)) == (2, 5, 5)
        assert tr.CorrCholeskyTransform().inverse_shape((2, 5, 5)) == (2, 10)


CONSTRAINTS = {
    "real": lambda C: C.real, "positive": lambda C: C.positive, "nonnegative": lambda C: C.nonnegative,
    "greater_than": lambda C: C.greater_than(2.0), "greater_than_eq": lambda C: C.greater_than_eq(-1.0),
    "less_than": lambda C: C.less_than(1.5), "interval": lambda C: C.interval(-2.0, 3.0),
    "unit_interval": lambda C: C.unit_interval, "half_open": lambda C: C.half_open_interval(0.0, 2.0),
    "simplex": lambda C: C.simplex, "corr_cholesky": lambda C: C.corr_cholesky,
    "lower_cholesky": lambda C: C.lower_cholesky, "positive_definite": lambda C: C.positive_definite,
    "independent": lambda C: C.independent(C.positive, 1), "real_vector": lambda C: C.real_vector,
    "cat": lambda C: C.cat([C.positive, C.real], 0, [1, 2]),
    "stack": lambda C: C.stack([C.positive, C.unit_interval], 1),
}
SHAPES = {"simplex": (2, 3), "corr_cholesky": (2, 6), "lower_cholesky": (2, 3, 3),
          "positive_definite": (3, 3), "independent": (2, 3), "stack": (4, 2), "real_vector": (2, 3)}


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
def test_biject_to_and_transform_to_as_torch(name: str, registry: str) -> None:
    x = RNG.normal(size=SHAPES.get(name, (3,)))
    out = {}
    for T in (torch, rlgrad):
        c = CONSTRAINTS[name](T.distributions.constraints)
        try:
            t = getattr(T.distributions, registry)(c)
        except NotImplementedError as e:
            out[T] = ("raises", str(e))
            continue
        xt = T.tensor(x, requires_grad=True)
        y = t(xt)
        try:
            ladj = _np(t.log_abs_det_jacobian(xt, y))
        except (NotImplementedError, ValueError):
            ladj = None
        y.sum().backward()
        check = c.check(y.detach() if T is torch else _np(y))
        out[T] = (type(t).__name__, _np(y), ladj, xt.grad.numpy(), bool(np.all(np.asarray(check))))
    a, b = out[rlgrad], out[torch]
    assert a[0] == b[0] and a[-1] == b[-1]
    for u, v in zip(a[1:-1], b[1:-1], strict=True):
        if u is None or v is None or isinstance(u, str):
            assert u == v
        else:
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)


def test_constraints_check_as_torch() -> None:
    v = np.array([[0.0, 1.0, 2.5], [-1.0, 3.0, 1.0]])
    for name in ("nonnegative", "greater_than", "less_than", "half_open", "interval"):
        a = CONSTRAINTS[name](rlgrad.distributions.constraints).check(v)
        b = CONSTRAINTS[name](torch.distributions.constraints).check(torch.tensor(v)).numpy()
        np.testing.assert_array_equal(a, b)
    C, D = rlgrad.distributions.constraints, torch.distributions.constraints
    for name in ("nonnegative_integer", "positive_integer"):
        theirs = getattr(D, name).check(torch.tensor(v)).numpy()
        np.testing.assert_array_equal(getattr(C, name).check(v), theirs)
        assert getattr(C, name).is_discrete and getattr(D, name).is_discrete
    for m in (np.eye(3), np.array([[1.0, 0, 0], [2, 1, 0], [0, 0, -1]]), np.ones((3, 3))):
        for name in ("lower_triangular", "lower_cholesky", "corr_cholesky", "square", "symmetric",
                     "positive_definite", "positive_semidefinite"):
            assert bool(getattr(C, name).check(m)) == bool(getattr(D, name).check(torch.tensor(m))), name
    assert C.is_dependent(C.dependent) and not C.is_dependent(C.real)
    with pytest.raises(ValueError, match="dependent"):
        C.dependent.check(v)
    assert C.cat([C.positive, C.real_vector], -1, [1, 2]).event_dim == 1
    assert C.stack([C.real, C.real], -1).event_dim == D.stack([D.real, D.real], -1).event_dim == 1
    with pytest.raises(TypeError):
        rlgrad.distributions.biject_to.register(3, lambda c: None)
