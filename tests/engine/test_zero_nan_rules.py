"""Rules that used to give NaN or a wrong number at zeros and NaNs (issue 19, part 2): ``prod``
with zeros, ``a ** b`` at ``b == 0``, ``max``/``min`` over NaN, the mean of nothing. Each is
checked against closed forms, finite differences (float64, up to third order) and PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import autograd

F64 = np.float64


def _torch():
    return pytest.importorskip("torch")


# ---- prod ---------------------------------------------------------------------------------------
def test_prod_gradient_with_one_and_two_zeros_is_the_product_of_the_others():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 anywhere on the way
        g1 = rlgrad.grad(rnp.prod)(np.array([0.0, 2.0, 3.0]))
        g2 = rlgrad.grad(rnp.prod)(np.array([0.0, 0.0, 3.0]))
        h1 = rlgrad.hessian(rnp.prod)(np.array([0.0, 2.0, 3.0]))
        h2 = rlgrad.hessian(rnp.prod)(np.array([0.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g1, [6.0, 0.0, 0.0])
    np.testing.assert_array_equal(g2, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(h1, [[0, 3, 2], [3, 0, 0], [2, 0, 0]])  # x_k for the pair (i, j)
    np.testing.assert_array_equal(h2, [[0, 3, 0], [3, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_prod_with_zeros_matches_finite_differences_to_third_order(axis, keepdims):
    x = np.random.default_rng(0).uniform(-1.5, 1.5, (3, 4, 3))
    x[0, 1, 2] = 0.0  # one zero in some groups
    x[1, :, 1] = 0.0  # two or more in others
    x[2, 2, :2] = 0.0
    rlgrad.check_grads(lambda x: rnp.prod(x, axis=axis, keepdims=keepdims), order=3)(x)


def test_tensor_prod_with_zeros_matches_torch_to_second_order():
    torch = _torch()
    x = np.array([[0.0, 2.0, 3.0, 0.5], [0.0, 0.0, 3.0, 1.5], [1.0, -2.0, 0.5, 4.0]])
    w = np.array([0.3, -1.2, 0.7])
    for kd in (False, True):
        t = rlgrad.tensor(x, requires_grad=True)
        (g,) = autograd.grad((t.prod(dim=1, keepdim=kd).reshape(-1) * w).sum(), t,
                             create_graph=True)
        (h,) = autograd.grad((g * g).sum(), t)
        tt = torch.tensor(x, requires_grad=True)
        (tg,) = torch.autograd.grad((tt.prod(dim=1, keepdim=kd).reshape(-1) * torch.tensor(w)).sum(),
                                    tt, create_graph=True)
        (th,) = torch.autograd.grad((tg * tg).sum(), tt)
        np.testing.assert_allclose(g._value, tg.detach().numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(h._value, th.numpy(), rtol=1e-12, atol=1e-15)


def test_prod_gradient_keeps_float32_and_empty_groups():
    g = rlgrad.grad(lambda x: rnp.sum(rnp.prod(x, axis=1)))(np.array([[0, 2], [3, 4]], np.float32))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [[2, 0], [4, 3]])
    e = rlgrad.grad(lambda x: rnp.sum(rnp.prod(x, axis=1)))(np.ones((3, 0)))
    assert e.shape == (3, 0)


# ---- power --------------------------------------------------------------------------------------
def _pow_derivatives(a: float, b: float) -> dict[str, float]:
    """Derivatives of a ** b up to third order, through rlgrad's nested grad."""
    def d(f, i):
        return rlgrad.grad(f, i)

    def f(a, b):
        return a ** b

    fa, fb = d(f, 0), d(f, 1)
    fab = d(fa, 1)
    return {"fa": fa(a, b), "fb": fb(a, b), "fab": fab(a, b), "fba": d(fb, 0)(a, b),
            "fabb": d(fab, 1)(a, b), "faab": d(d(fa, 0), 1)(a, b), "faa": d(fa, 0)(a, b)}


@pytest.mark.parametrize("a", [0.5, 2.0, 3.7])
def test_power_mixed_derivatives_at_exponent_zero_are_exact(a):
    got = _pow_derivatives(F64(a), F64(0.0))
    ln = np.log(a)
    want = {"fa": 0.0, "fb": ln, "fab": 1 / a, "fba": 1 / a, "fabb": 2 * ln / a, "faab": -1 / a**2,
            "faa": 0.0}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-12, atol=1e-15, err_msg=k)


def test_power_matches_finite_differences_to_third_order_with_zero_exponents():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.4, 2.5, (3, 4))
    b = rng.uniform(-2, 2, (3, 4))
    b[0] = 0.0
    b[1, :2] = 0.0
    rlgrad.check_grads(lambda a, b: a ** b, order=3)(a, b)
    t_a = rlgrad.tensor(a, requires_grad=True)  # Tensor methods reach the same rule
    t_b = rlgrad.tensor(b, requires_grad=True)
    (ga,) = autograd.grad(t_a.pow(t_b).sum(), t_a, create_graph=True)
    (gab,) = autograd.grad(ga.sum(), t_b)
    want = a ** (b - 1) * (1 + b * np.log(a))
    np.testing.assert_allclose(gab._value, want, rtol=1e-12)


def test_power_at_zero_base_agrees_with_torch_where_torch_is_defined():
    """At a == 0 only some derivatives exist; where torch gives a number, so do we (the same);
    at a == b == 0 (0 ** 0 = 1, constant along b == 0) we give 0 for d/da and 0 for the mixed
    derivative, which is 1/a there (infinite): torch gives 0 and nan."""
    torch = _torch()
    A = [2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]
    B = [0.0, 0.0, 2.0, 1.0, 3.0, -1.0, 0.5]
    a = rlgrad.tensor(np.array(A), requires_grad=True)
    b = rlgrad.tensor(np.array(B), requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ga, gb = autograd.grad((a ** b).sum(), (a, b), create_graph=True)
        ours = [ga, gb, *autograd.grad(ga.sum(), (a, b)), *autograd.grad(gb.sum(), (a, b),
                                                                         allow_unused=True)]
    ta = torch.tensor(A, requires_grad=True, dtype=torch.float64)
    tb = torch.tensor(B, requires_grad=True, dtype=torch.float64)
    tga, tgb = torch.autograd.grad((ta ** tb).sum(), (ta, tb), create_graph=True)
    theirs = [tga, tgb, *torch.autograd.grad(tga.sum(), (ta, tb)),
              *torch.autograd.grad(tgb.sum(), (ta, tb))]
    for name, o, t in zip(["da", "db", "daa", "dab", "dba", "dbb"], ours, theirs):
        o, t = o._value, t.detach().numpy()
        defined = ~np.isnan(t)
        defined[0] &= name not in ("dab",)  # a=2, b=0: torch masks the mixed one to 0; 1/a is right
        np.testing.assert_allclose(o[defined], t[defined], rtol=1e-12, err_msg=name)
        assert not np.isnan(o[1]), name  # a == b == 0: a number, not NaN
    assert ours[3]._value[0] == 0.5 and ours[4]._value[0] == 0.5  # d2/da db at a=2, b=0: 1/a
    np.testing.assert_array_equal([o._value[1] for o in ours], [0, 0, 0, 0, 0, 0])


def test_power_with_python_exponent_zero_has_zero_gradient():
    x = rlgrad.tensor(np.array([0.0, 2.0]), requires_grad=True)
    (g,) = autograd.grad((x ** 0).sum(), x)
    np.testing.assert_array_equal(g._value, [0.0, 0.0])
    rlgrad.check_grads(lambda x: x ** 2, order=3)(np.array([0.0, 1.5, -2.0]))


# ---- max / min over NaN -------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [rnp.max, rnp.min, rnp.amax, rnp.amin])
def test_extremum_over_nan_sends_the_gradient_to_the_nan(fn):
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0], [np.nan, 5.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g_all = rlgrad.grad(lambda x: fn(x))(x)
        g_rows = rlgrad.grad(lambda x: rnp.sum(fn(x, axis=1) * np.array([1.0, 2.0, 3.0])))(x)
    assert np.isnan(fn(x)) and np.isnan(fn(x, axis=1)[0])  # the value stays NumPy's
    want_all = np.zeros_like(x)
    want_all[np.isnan(x)] = 1 / 3  # three NaNs share it, as torch's max() does
    np.testing.assert_allclose(g_all, want_all)
    row1 = [0, 0, 2.0] if fn in (rnp.max, rnp.amax) else [2.0, 0, 0]
    np.testing.assert_allclose(g_rows, [[0, 1, 0], row1, [1.5, 0, 1.5]])


def test_tensor_max_min_over_nan_match_torch():
    torch = _torch()
    x = np.array([[1.0, np.nan, 3.0], [4.0, 2.0, 3.0]])
    for name in ("max", "min"):
        t = rlgrad.tensor(x, requires_grad=True)
        tt = torch.tensor(x, requires_grad=True)
        values, indices = getattr(t, name)(1)
        tv, ti = getattr(tt, name)(1)
        np.testing.assert_array_equal(values._value, tv.detach().numpy())
        np.testing.assert_array_equal(indices._value, ti.numpy())
        (g,) = autograd.grad((values * np.array([1.0, 2.0])).sum(), t)
        (tg,) = torch.autograd.grad((tv * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum(), tt)
        np.testing.assert_array_equal(g._value, tg.numpy())
        t.grad = None
        getattr(t, name)().backward()  # all elements: the NaN
        tt.grad = None
        getattr(tt, name)().backward()
        np.testing.assert_array_equal(t.grad._value, tt.grad.numpy())
        t.grad = None  # amax over a dim: torch gives NaN everywhere in that row; we do better
        getattr(t, "a" + name)(dim=1).sum().backward()
        np.testing.assert_array_equal(t.grad._value, [[0, 1, 0], [1, 0, 0] if name == "max"
                                                    else [0, 1, 0]])


# ---- mean of nothing ------------------------------------------------------------------------------
def test_mean_of_an_empty_array_is_nan_as_numpy_and_torch():
    torch = _torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "Mean of empty slice"
        assert np.isnan(rnp.mean(np.array([])))
        np.testing.assert_array_equal(rnp.mean(np.ones((0, 3)), axis=0), [np.nan] * 3)
        assert rnp.mean(np.ones((3, 0)), axis=0).shape == (0,)
        t = rlgrad.tensor(np.ones((0, 3)), requires_grad=True)
        m = t.mean(dim=0)
        m.sum().backward()
    np.testing.assert_array_equal(m._value, torch.ones((0, 3), dtype=torch.float64).mean(0).numpy())
    assert t.grad.shape == (0, 3)


# ---- xlogy at x == 0 (found by tests/engine/test_random_programs.py) -------------------------------------
@pytest.mark.parametrize("name", ["xlogy", "xlog1py"])
def test_xlogy_gradient_at_zero_x_is_log_y(name):
    """x * log(y) is smooth in x at x == 0 when y is inside log's domain: its derivative there is
    log(y) (the old mask made it 0); only where y is outside (y <= 0) is it defined as 0."""
    from rlgrad import special

    fn = getattr(special, name)
    shift = 0.0 if name == "xlogy" else -1.0
    x = np.array([0.0, 0.0, 0.0, 1.5, -0.5])
    y = np.array([0.5, 2.0, 0.0, 3.0, 0.25]) + shift
    with np.errstate(divide="ignore"):
        log_y = np.log(y - shift)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gx = rlgrad.grad(lambda x: rnp.sum(fn(x, y)))(x)
        gy = rlgrad.grad(lambda y: rnp.sum(fn(x, y)))(y)
    np.testing.assert_allclose(gx, [log_y[0], log_y[1], 0.0, log_y[3], log_y[4]], rtol=1e-14)
    np.testing.assert_allclose(gy, [0.0, 0.0, 0.0, 1.5 / 3.0, -0.5 / 0.25], rtol=1e-14)
    inside = np.array([0.0, 0.0, 1.5, -0.5]), np.array([0.5, 2.0, 3.0, 0.25]) + shift
    rlgrad.check_grads(fn, order=2)(*inside)
    scipy_special = pytest.importorskip("scipy.special")
    np.testing.assert_array_equal(fn(x, y), getattr(scipy_special, name)(x, y))


# ---- std of constant data, 0-d losses (found by tests/engine/test_random_programs.py) ---------------------
def test_std_gradient_where_the_spread_is_zero_is_zero_as_torch():
    torch = _torch()
    x = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = rlgrad.grad(lambda x: rnp.sum(rnp.std(x, axis=1)))(x)
        g1 = rlgrad.grad(lambda x: rnp.sum(rnp.std(x[:, :1], axis=1)))(x)  # one element
        t = rlgrad.tensor(x, requires_grad=True)
        t.std(dim=1, correction=0).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    tt.std(dim=1, correction=0).sum().backward()
    np.testing.assert_allclose(g, tt.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(t.grad._value, tt.grad.numpy(), rtol=1e-14)
    np.testing.assert_array_equal(g1, np.zeros_like(x))
    rlgrad.check_grads(lambda x: rnp.std(x, axis=1), order=2)(x[:1])  # away from 0: unchanged
    assert np.isnan(rnp.std(rlgrad.tensor([np.nan, 1.0]))._value)  # NaN stays NaN, not 0


def test_regression_losses_take_0d_operands_as_torch():
    torch = _torch()
    import rlgrad.nn.functional as F

    for red in ("none", "mean", "sum"):
        t = rlgrad.tensor(np.array(0.5), requires_grad=True)
        loss = F.mse_loss(t, rlgrad.tensor(np.array(0.2)), reduction=red)
        loss.backward()
        tt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        tl = torch.nn.functional.mse_loss(tt, torch.tensor(0.2, dtype=torch.float64), reduction=red)
        tl.backward()
        np.testing.assert_allclose(loss._value, tl.detach().numpy(), rtol=1e-15)
        np.testing.assert_allclose(t.grad._value, tt.grad.numpy(), rtol=1e-15)


def test_broadcast_to_fewer_dimensions_is_numpys_error():
    with pytest.raises(ValueError):
        rnp.broadcast_to(np.array([0.2]), ())
    with pytest.raises(ValueError):
        rnp.broadcast_to(rlgrad.tensor([0.2]), ())


@pytest.mark.parametrize("fn", [rnp.maximum, rnp.minimum])
def test_elementwise_maximum_over_nan_sends_the_gradient_to_the_nan(fn):
    """np.maximum's NaN result came from the NaN operand (the first one when both are): it gets
    the gradient and the other side 0 (was 0 to both: the NaN's source got nothing)."""
    a = np.array([np.nan, 1.0, np.nan, 2.0, 3.0])
    b = np.array([1.0, np.nan, np.nan, 2.0, 1.0])
    ga = rlgrad.grad(lambda a: rnp.sum(fn(a, b)))(a)
    gb = rlgrad.grad(lambda b: rnp.sum(fn(a, b)))(b)
    wins = [1.0, 0.0] if fn is rnp.maximum else [0.0, 1.0]  # the last pair: 3 vs 1
    np.testing.assert_array_equal(ga, [1, 0, 1, 0.5, wins[0]])
    np.testing.assert_array_equal(gb, [0, 1, 0, 0.5, wins[1]])
    ta, tb = rlgrad.tensor(a, requires_grad=True), rlgrad.tensor(b, requires_grad=True)
    (ga2, gb2) = autograd.grad(fn(ta, tb).sum(), (ta, tb), create_graph=True)  # recorded path
    np.testing.assert_array_equal(ga2._value, ga)
    np.testing.assert_array_equal(gb2._value, gb)


def test_tensor_max_min_with_dim_send_the_gradient_to_the_index_as_torch():
    """torch's max(dim)/min(dim) route the gradient to the returned index: with ties or several
    NaNs, the first one gets it all (rnp.max and Tensor.amax share it, as NumPy-style code)."""
    torch = _torch()
    x = np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, np.nan], [0.0, 0.0, 0.0], [4.0, -1.0, 2.0]])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    for name in ("max", "min"):
        for kd in (False, True):
            t = rlgrad.tensor(x, requires_grad=True)
            tt = torch.tensor(x, requires_grad=True)
            v, i = getattr(t, name)(1, keepdim=kd)
            tv, ti = getattr(tt, name)(1, keepdim=kd)
            (v * w.reshape(v.shape)).sum().backward()
            (tv * torch.tensor(w).reshape(tv.shape)).sum().backward()
            np.testing.assert_array_equal(v._value, tv.detach().numpy())
            np.testing.assert_array_equal(i._value, ti.numpy())
            np.testing.assert_array_equal(t.grad._value, tt.grad.numpy())
    y = np.random.default_rng(4).standard_normal((3, 4))
    rlgrad.check_grads(lambda y: _as_tensor(y).max(1)[0] ** 3, order=2)(y)


def _as_tensor(y):
    return y if isinstance(y, rlgrad.Tensor) else rlgrad.tensor(y)


def test_logsumexp_of_nothing_is_minus_inf_as_torch_and_scipy():
    torch = _torch()
    t = rlgrad.tensor(np.ones((2, 0)), requires_grad=True)
    with np.errstate(divide="ignore"):  # log(0), as NumPy says it
        out = t.logsumexp(dim=1)
        assert rnp.logsumexp(np.ones((0,))) == -np.inf
    np.testing.assert_array_equal(out._value, torch.ones((2, 0), dtype=torch.float64)
                                  .logsumexp(dim=1).numpy())
    out.sum().backward()
    assert t.grad.shape == (2, 0)
