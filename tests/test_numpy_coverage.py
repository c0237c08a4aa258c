"""Issue 15: gradients that were silently wrong, and NumPy functions autograd differentiates.

Each is checked against finite differences in float64 (1st and 2nd order) and, where HIPS
autograd has the function, against autograd's gradient."""

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

anp = pytest.importorskip("autograd.numpy")
autograd = pytest.importorskip("autograd")

R = np.random.RandomState(0)


def _same_grad(f_r, f_a, *args):
    for i in range(len(args)):
        got = rlgrad.grad(f_r, argnums=i)(*args)
        want = autograd.grad(f_a, i)(*args)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ---- part 1: silent wrong gradients ------------------------------------------------------------
@pytest.mark.parametrize("name", ["mod", "remainder", "fmod"])
def test_mod_gradients(name):
    fn = getattr(rnp, name)
    x, y = R.randn(6) * 3, R.rand(6) + 0.5
    rlgrad.check_grads(lambda x, y: fn(x, y) * x * y, order=2)(x, y)
    g = rlgrad.grad(lambda x: rnp.sum(fn(x, y)))(x)
    np.testing.assert_array_equal(g, np.ones_like(x))  # was 0
    k = np.floor(x / y) if name != "fmod" else np.trunc(x / y)
    np.testing.assert_allclose(rlgrad.grad(lambda y: rnp.sum(fn(x, y)), argnums=0)(y), -k)
    if name != "fmod":  # (autograd has no fmod gradient)
        af = getattr(anp, name)
        _same_grad(lambda x, y: rnp.sum(fn(x, y) * y), lambda x, y: anp.sum(af(x, y) * y), x, y)


def test_angle_wrapping_operator():
    th = np.linspace(-10, 10, 7) + 0.1

    def f(th, m):
        return m.sum(m.sin((th + np.pi) % (2 * np.pi) - np.pi) * th ** 2)

    rlgrad.check_grads(lambda th: f(th, rnp), order=2)(th)
    _same_grad(lambda th: f(th, rnp), lambda th: f(th, anp), th)
    t = rlgrad.tensor(th, requires_grad=True)
    ((t + np.pi) % (2 * np.pi)).sum().backward()
    np.testing.assert_array_equal(t.grad.data, np.ones_like(th))


def test_einsum_sublist_form():
    a, b = R.randn(2, 3), R.randn(3, 4)
    np.testing.assert_allclose(rnp.einsum(rlgrad.tensor(a), [0, 1], b, [1, 2], [0, 2]).data, a @ b)
    _same_grad(lambda a, b: rnp.sum(rnp.einsum(a, [0, 1], b, [1, 2], [0, 2]) ** 2),
               lambda a, b: anp.sum(anp.einsum(a, [0, 1], b, [1, 2], [0, 2]) ** 2), a, b)
    rlgrad.check_grads(lambda a, b: rnp.einsum(a, [0, 1], b, [1, 2]), order=2)(a, b)
    rlgrad.check_grads(lambda a: rnp.einsum(a, [Ellipsis, 1], [Ellipsis]), order=2)(a)
    assert rnp.einsum(a, [0, 1], b, [1, 2], [0, 2]).shape == (2, 4)  # plain arrays: NumPy's


@pytest.mark.parametrize("kw", [{}, {"ddof": 1}, {"axis": 0}, {"axis": 1}, {"axis": 1, "ddof": 1},
                                {"axis": (0, 1)}, {"axis": 0, "keepdims": True}])
def test_std_gradients(kw):
    x = R.randn(3, 4)
    rlgrad.check_grads(lambda x: rnp.std(x, **kw), order=2)(x)
    _same_grad(lambda x: rnp.sum(rnp.std(x, **kw)), lambda x: anp.sum(anp.std(x, **kw)), x)


@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"axis": 1}, {"ddof": 1}])
def test_std_zero_spread_and_size_one_axes(kw):
    for x in (np.full((1, 3), 2.0), np.ones((2, 1)), np.array([[1.0, 2.0, 4.0]])):
        with np.errstate(all="ignore"):
            want = np.std(x, **kw)
        g = rlgrad.grad(lambda x: rnp.sum(rnp.std(x, **kw)))(x)
        if np.all(np.isfinite(want)):
            assert np.all(np.isfinite(g)), (x, kw, g)
        if np.all(want == 0):
            np.testing.assert_array_equal(g, 0 * x)


def test_nan_to_num_gradient():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    g = rlgrad.grad(lambda x: rnp.sum(rnp.nan_to_num(x) * 3.0))(x)
    np.testing.assert_array_equal(g, [3.0, 0, 0, 0, 3.0])  # replaced values are constants
    want = autograd.grad(lambda x: anp.sum(anp.nan_to_num(x) ** 2))(x)
    np.testing.assert_array_equal(rlgrad.grad(lambda x: rnp.sum(rnp.nan_to_num(x) ** 2))(x), want)
    rlgrad.check_grads(lambda x: rnp.nan_to_num(x) ** 3, order=2)(R.randn(4))
