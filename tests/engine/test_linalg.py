"""rlgrad.numpy.linalg as HIPS autograd's (issue 15 part 2): NumPy's values, gradients checked by
finite differences in float64 to 2nd order (batched inputs too) and against autograd's."""

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")

R = np.random.RandomState(0)
la = rnp.linalg


def _sym(*shape):
    a = R.randn(*shape)
    return a + np.swapaxes(a, -1, -2)


def _real_eig(n, batch=()):
    """A matrix with distinct real eigenvalues: P diag(d) P^-1."""
    p = R.randn(*batch, n, n) + 2 * np.eye(n)
    d = np.arange(n) * 1.5 - 2 + R.rand(*batch, n) * 0.3
    return p @ (d[..., :, None] * np.linalg.inv(p))


def _spd(*shape):
    a = R.randn(*shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


SQ, SQ3, TALL, WIDE = R.randn(4, 4), R.randn(2, 3, 3), R.randn(5, 3), R.randn(2, 3, 5)

# (name, f(m, a) with m the namespace, a the input): each is checked to 2nd order by finite
# differences, against NumPy's values on plain arrays and against autograd's gradient.
CASES = [
    ("inv", lambda m, a: m.linalg.inv(a), SQ3),
    ("det", lambda m, a: m.linalg.det(a), SQ3),
    ("slogdet", lambda m, a: m.linalg.slogdet(a)[1] * m.linalg.slogdet(a)[0], SQ3),
    ("solve", lambda m, a: m.linalg.solve(a, a[..., :1] * 2 + 1), SQ3),
    # (autograd's cholesky rule is for symmetric perturbations: the input is symmetrised)
    ("cholesky", lambda m, a: m.linalg.cholesky(a + m.swapaxes(a, -1, -2)), _spd(2, 3, 3)),
    ("eigh_values", lambda m, a: m.linalg.eigh(a)[0], _sym(4, 4)),
    ("eigh_vectors", lambda m, a: m.linalg.eigh(a)[1] ** 2, _sym(2, 3, 3)),
    ("eigh_upper", lambda m, a: m.linalg.eigh(a, "U")[1] ** 2 + m.linalg.eigh(a, UPLO="U")[0][..., None],
     _sym(4, 4)),
    ("eig_values", lambda m, a: m.linalg.eig(a)[0], _real_eig(4)),
    ("eig_vectors", lambda m, a: m.linalg.eig(a)[1] ** 2, _real_eig(3, (2,))),
    ("svd_square", lambda m, a: [o ** 2 for o in m.linalg.svd(a, full_matrices=False)], SQ),
    ("svd_tall", lambda m, a: [o ** 2 for o in m.linalg.svd(a, full_matrices=False)], TALL),
    ("svd_wide_batched", lambda m, a: [o ** 2 for o in m.linalg.svd(a, full_matrices=False)], WIDE),
    ("svd_values", lambda m, a: m.linalg.svd(a, compute_uv=False), WIDE),
    ("pinv_tall", lambda m, a: m.linalg.pinv(a), TALL),
    ("pinv_wide_batched", lambda m, a: m.linalg.pinv(a), WIDE),
    ("norm", lambda m, a: m.linalg.norm(a), WIDE),
    ("norm_fro_axes", lambda m, a: m.linalg.norm(a, "fro", axis=(2, 0)), WIDE),
    ("norm_nuc", lambda m, a: m.linalg.norm(a, "nuc"), TALL),
    ("norm_nuc_axes", lambda m, a: m.linalg.norm(a, "nuc", axis=(0, 2)), WIDE),
    ("norm_vec_3", lambda m, a: m.linalg.norm(a, 3, axis=1), WIDE),
    ("norm_vec_2", lambda m, a: m.linalg.norm(a, 2, axis=-1), WIDE),
]
NOT_IN_AUTOGRAD = {"norm_nuc_axes"}  # autograd's rule reshapes the gradient wrongly for (0, 2)


def _flat(m, out):
    if isinstance(out, list | tuple):
        return m.concatenate([m.ravel(o) for o in out])
    return out


@pytest.mark.parametrize("name, f, a", CASES, ids=[c[0] for c in CASES])
def test_linalg_gradients(name, f, a):
    rlgrad.check_grads(lambda a: _flat(rnp, f(rnp, a)), order=2)(a)
    np.testing.assert_allclose(_flat(rnp, f(rnp, a)), _flat(np, f(np, a)), rtol=1e-12, atol=1e-12)
    t = rlgrad.tensor(a, requires_grad=True)
    np.testing.assert_allclose(_flat(rnp, f(rnp, t))._value, _flat(np, f(np, a)), rtol=1e-12,
                               atol=1e-12)
    if name in NOT_IN_AUTOGRAD:
        return
    w = R.randn(*np.shape(_flat(np, f(np, a))))
    got = rlgrad.grad(lambda a: rnp.sum(_flat(rnp, f(rnp, a)) * w))(a)
    want = autograd.grad(lambda a: anp.sum(_flat(anp, f(anp, a)) * w))(a)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


MATRIX_ORDS = [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]
VECTOR_ORDS = [None, 2, 1, 3, 0.5, -1.5, 0, np.inf, -np.inf]


@pytest.mark.parametrize("ord_", MATRIX_ORDS, ids=str)
def test_matrix_norm_every_ord(ord_):
    """NumPy's values (axes in any order, batched, keepdims) and 2nd-order gradients; the data
    has no ties in its sums and distinct singular values, so every ord is differentiable there."""
    x = R.randn(3, 2, 4)
    for axis in [(0, 2), (2, 0), (-1, -3), (1, 2)]:
        for keepdims in (False, True):
            want = np.linalg.norm(x, ord_, axis, keepdims)
            got = la.norm(rlgrad.tensor(x), ord_, axis, keepdims)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got._value, want, rtol=1e-13)
        rlgrad.check_grads(lambda x, axis=axis: la.norm(x, ord_, axis), order=2)(x)
    rlgrad.check_grads(lambda x: la.norm(x, ord=ord_, keepdims=True), order=2)(x[0])


@pytest.mark.parametrize("ord_", VECTOR_ORDS, ids=str)
def test_vector_norm_every_ord(ord_):
    x = R.randn(3, 5)
    for axis in (None, 0, 1, -1) if ord_ is not None else (0, -1):
        v = x[0] if axis is None else x
        for keepdims in (False, True):
            want = np.linalg.norm(v, ord_, axis, keepdims)
            got = la.norm(rlgrad.tensor(v), ord_, axis, keepdims)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got._value, want, rtol=1e-13)
        if ord_ != 0:
            rlgrad.check_grads(lambda v, axis=axis: la.norm(v, ord_, axis), order=2)(v)
    g = rlgrad.grad(lambda v: rnp.sum(la.norm(v, ord_, -1)))(x)
    if ord_ == 0:  # a count: piecewise constant
        np.testing.assert_array_equal(g, 0 * x)
    if ord_ in (3, 2, None):  # autograd has p > 1
        np.testing.assert_allclose(g, autograd.grad(lambda v: anp.sum(anp.linalg.norm(v, ord_, -1)))(x))


def test_norm_refuses_what_numpy_refuses():
    t = rlgrad.tensor(R.randn(2, 3, 4), requires_grad=True)
    for kw, match in [({"ord": 2}, "Improper number"), ({"ord": "nuc", "axis": 1}, "Invalid norm"),
                      ({"ord": 3, "axis": (0, 1)}, "Invalid norm order for matrices"),
                      ({"axis": (1, -2)}, "Duplicate axes")]:
        with pytest.raises(ValueError, match=match):
            np.linalg.norm(t._value, **kw)
        with pytest.raises(ValueError, match=match):
            la.norm(t, **kw)
    assert la.norm(rlgrad.tensor(np.array([3, 4]))).dtype == np.float64  # integers: as floats


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 3, 5, 6])
def test_matrix_power(n):
    a = R.randn(2, 3, 3) * 0.5 + np.eye(3)
    got = la.matrix_power(rlgrad.tensor(a), n)
    np.testing.assert_allclose(got._value, np.linalg.matrix_power(a, n), rtol=1e-12, atol=1e-12)
    assert got.dtype == a.dtype and got.shape == a.shape
    if n != 0:
        rlgrad.check_grads(lambda a: la.matrix_power(a, n), order=2)(a)
    with pytest.raises(TypeError):
        la.matrix_power(rlgrad.tensor(a), 1.5)


def test_eig_and_eigh_refuse_what_has_no_gradient():
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues +-i
    assert np.iscomplexobj(la.eig(rot)[0])  # plain arrays: NumPy's complex result
    with pytest.raises(ValueError, match="complex eigenvalues"):
        la.eig(rlgrad.tensor(rot, requires_grad=True))
    with pytest.raises(TypeError, match="complex Tensor"):
        la.eigh(rlgrad.tensor(rot * 1j))
    # repeated eigenvalues: the eigenvalues' gradient exists (autograd's too), the vectors' not
    a = np.diag([1.0, 1.0, 2.0])
    g = rlgrad.grad(lambda a: rnp.sum(la.eigh(a)[0] ** 2))(a)
    np.testing.assert_allclose(g, autograd.grad(lambda a: anp.sum(anp.linalg.eigh(a)[0] ** 2))(a))
    np.testing.assert_allclose(g, 2 * a)
    with pytest.raises(ValueError, match="repeated values"):
        rlgrad.grad(lambda a: rnp.sum(la.eigh(a)[1] * np.arange(9.0).reshape(3, 3)))(a)
    with pytest.raises(ValueError, match="repeated values"):
        rlgrad.grad(lambda a: rnp.sum(la.svd(a)[0] * np.arange(9.0).reshape(3, 3)))(a)
    g = rlgrad.grad(lambda a: rnp.sum(la.svd(a, compute_uv=False)))(np.diag([3.0, 2.0, 1.0]))
    np.testing.assert_allclose(g, np.eye(3))


def test_svd_full_matrices():
    """full_matrices=True: NumPy's shapes; the gradient flows through the first min(m, n)
    columns of U (rows of Vh), and the extra ones, any basis of a complement, raise."""
    for a in (TALL, WIDE, SQ):
        u, s, vh = la.svd(rlgrad.tensor(a))
        for got, want in zip((u, s, vh), np.linalg.svd(a)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got._value, want, rtol=1e-12, atol=1e-12)
        k = min(a.shape[-2:])
        rlgrad.check_grads(lambda a, k=k: la.svd(a)[0][..., :k] ** 2, order=2)(a)
        rlgrad.check_grads(lambda a, k=k: la.svd(a)[2][..., :k, :] * la.svd(a)[1][..., None], order=2)(a)
    with pytest.raises(ValueError, match="full_matrices=False"):
        rlgrad.grad(lambda a: rnp.sum(la.svd(a)[0] ** 3))(TALL)
    with pytest.raises(NotImplementedError, match="hermitian"):
        la.svd(rlgrad.tensor(SQ), hermitian=True)
    np.testing.assert_allclose(la.svd(SQ @ SQ.T, hermitian=True)[1], np.linalg.svd(SQ @ SQ.T)[1])


def test_linalg_on_tensors_through_numpy_and_jit():
    """numpy.linalg's functions on a Tensor reach these; rlgrad.jit replays them on new values."""
    a = _sym(3, 3)
    t = rlgrad.tensor(a, requires_grad=True)
    w, v = np.linalg.eigh(t)
    assert isinstance(w, rlgrad.Tensor) and w.requires_grad
    (np.linalg.norm(t, "nuc") + rnp.sum(w * v[0] ** 2) + np.linalg.svd(t)[1][0]).backward()

    def loss(a):
        w, v = la.eigh(a)
        return rnp.sum(w * v[..., 0, :] ** 2) + la.norm(a, 2) + rnp.sum(la.pinv(a)) + la.svd(a)[2][0, 0]

    step = rlgrad.jit(rlgrad.value_and_grad(loss))
    for b in (a, _sym(3, 3), _sym(3, 3)):
        val, g = step(b)
        v_want, g_want = rlgrad.value_and_grad(loss)(b)
        np.testing.assert_allclose(val, v_want, rtol=1e-12)
        np.testing.assert_allclose(g, g_want, rtol=1e-9, atol=1e-12)


def test_numpy2_norms_multi_dot_matrix_transpose():
    x = R.randn(2, 3, 4)
    for kw in [{}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}, {"ord": 3, "axis": (-1, 0)},
               {"ord": np.inf}, {"keepdims": True, "ord": 1}]:
        want = np.linalg.vector_norm(x, **kw)
        got = la.vector_norm(rlgrad.tensor(x), **kw)
        assert got.shape == want.shape
        np.testing.assert_allclose(got._value, want, rtol=1e-13)
        rlgrad.check_grads(lambda x, kw=kw: la.vector_norm(x, **kw), order=2)(x)
    for kw in [{}, {"ord": "nuc"}, {"ord": -1, "keepdims": True}, {"ord": 2}]:
        np.testing.assert_allclose(la.matrix_norm(rlgrad.tensor(x), **kw)._value,
                                   np.linalg.matrix_norm(x, **kw), rtol=1e-13)
        rlgrad.check_grads(lambda x, kw=kw: la.matrix_norm(x, **kw), order=2)(x)
    chain = [R.randn(4), R.randn(4, 3), R.randn(3, 5), R.randn(5)]
    np.testing.assert_allclose(la.multi_dot([rlgrad.tensor(c) for c in chain])._value,
                               np.linalg.multi_dot(chain), rtol=1e-12)
    rlgrad.check_grads(lambda *c: la.multi_dot(list(c)), order=2)(*chain)
    np.testing.assert_array_equal(la.matrix_transpose(rlgrad.tensor(x))._value, np.linalg.matrix_transpose(x))


def test_norm_of_a_list_of_tensors():
    x = R.randn(3)
    f = lambda m, x: m.linalg.norm([x[0] * 2, x[1], 1.5, x[2] ** 2])  # noqa: E731
    np.testing.assert_allclose(f(rnp, x), f(np, x), rtol=1e-14)
    rlgrad.check_grads(lambda x: f(rnp, x), order=2)(x)
    np.testing.assert_allclose(rlgrad.grad(lambda x: f(rnp, x))(x), autograd.grad(lambda x: f(anp, x))(x))


def test_svd_of_a_rank_deficient_non_square_matrix():
    """Singular values 0: their gradient exists (U diag(g) Vh); one through U or Vh does not."""
    a = np.zeros((4, 3))
    a[0, 0], a[1, 1] = 3.0, 2.0  # singular values 3, 2 and exactly 0
    g = rlgrad.grad(lambda a: rnp.sum(la.svd(a, full_matrices=False)[1]))(a)
    np.testing.assert_allclose(g, rlgrad.grad(lambda a: rnp.sum(la.svd(a, compute_uv=False)))(a))
    assert np.all(np.isfinite(g))
    with pytest.raises(ValueError, match="rank-deficient"):
        rlgrad.grad(lambda a: rnp.sum(la.svd(a, full_matrices=False)[0] * np.arange(12.0).reshape(4, 3)))(a)


@pytest.mark.parametrize("ord_", [None, 2, 3, 1.5])
def test_norm_of_zeros_has_gradient_zero(ord_):
    """At x = 0 the norm has no derivative; its subgradient 0 is taken (PyTorch's, and rlgrad's
    std's), not 0 / 0 = NaN (autograd's); elsewhere in the same call the gradient is exact."""
    x = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 3.0]])
    g = rlgrad.grad(lambda x: rnp.sum(la.norm(x, ord_, 1)))(x)
    np.testing.assert_array_equal(g[0], 0 * x[0])
    p = 2 if ord_ is None else ord_
    want = np.sign(x[1]) * np.abs(x[1]) ** (p - 1) / np.linalg.norm(x[1], p) ** (p - 1)
    np.testing.assert_allclose(g[1], want, rtol=1e-14)
    zero = np.zeros((2, 2))
    np.testing.assert_array_equal(rlgrad.grad(lambda m: la.norm(m, "fro"))(zero), zero)
    if p >= 2:  # (for p < 2 the second derivative of |x| ** p is infinite at 0)
        np.testing.assert_array_equal(rlgrad.hessian(lambda v: la.norm(v, ord_))(np.zeros(3)),
                                      np.zeros((3, 3)))


_W9, _W12 = np.arange(9.0).reshape(3, 3), np.arange(12.0).reshape(4, 3)
_UNDEFINED = [  # (loss, a generic input, an input where the gradient is undefined, message)
    (lambda a: rnp.sum(la.eigh(a)[1] * _W9), _sym(3, 3), np.diag([1.0, 1.0, 2.0]), "repeated"),
    (lambda a: rnp.sum(la.eig(a)[1] * _W9), _real_eig(3), np.diag([1.0, 1.0, 2.0]), "repeated"),
    (lambda a: rnp.sum(la.svd(a)[0] * _W9), R.randn(3, 3), np.diag([3.0, 2.0, 2.0]), "repeated"),
    (lambda a: rnp.sum(la.svd(a)[0] ** 3), R.randn(4, 3), R.randn(4, 3), "full_matrices=False"),
    (lambda a: rnp.sum(la.svd(a, full_matrices=False)[0] * _W12), R.randn(4, 3),
     np.diag([3.0, 2.0, 0.0])[[0, 1, 2, 2]] * [[1], [1], [1], [0]], "rank-deficient"),
]


@pytest.mark.parametrize("case", range(len(_UNDEFINED)))
def test_compiled_steps_raise_where_the_gradient_is_undefined(case):
    """rlgrad.jit replays the checks: a step traced on a generic matrix raises at a degenerate
    one, as eager mode does, instead of returning the zeros the traced arithmetic gives there."""
    loss, generic, degenerate, message = _UNDEFINED[case]
    step = rlgrad.jit(rlgrad.grad(loss))
    if message != "full_matrices=False":
        np.testing.assert_allclose(step(generic), rlgrad.grad(loss)(generic), rtol=1e-10)
    for run in (rlgrad.grad(loss), step):
        with pytest.raises(ValueError, match=message):
            run(degenerate)
