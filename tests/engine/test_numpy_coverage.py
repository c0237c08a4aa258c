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
    np.testing.assert_array_equal(t.grad._value, np.ones_like(th))
    y = rlgrad.tensor(np.array([0.7, 1.3, 2.9]), requires_grad=True)
    (5.0 % y).sum().backward()  # __rmod__: d/dy (5 mod y) = -floor(5 / y)
    np.testing.assert_array_equal(y.grad._value, -np.floor(5.0 / y._value))


def test_einsum_sublist_form():
    a, b = R.randn(2, 3), R.randn(3, 4)
    np.testing.assert_allclose(rnp.einsum(rlgrad.tensor(a), [0, 1], b, [1, 2], [0, 2])._value, a @ b)
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


# nan_to_num turns inf into 1.8e308, whose square overflows: in autograd as in rlgrad, on purpose
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_nan_to_num_gradient():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    g = rlgrad.grad(lambda x: rnp.sum(rnp.nan_to_num(x) * 3.0))(x)
    np.testing.assert_array_equal(g, [3.0, 0, 0, 0, 3.0])  # replaced values are constants
    want = autograd.grad(lambda x: anp.sum(anp.nan_to_num(x) ** 2))(x)
    np.testing.assert_array_equal(rlgrad.grad(lambda x: rnp.sum(rnp.nan_to_num(x) ** 2))(x), want)
    rlgrad.check_grads(lambda x: rnp.nan_to_num(x) ** 3, order=2)(R.randn(4))


# ---- part 2: NumPy coverage (as autograd.numpy) -------------------------------------------------
M, V, C3 = R.randn(4, 6), R.randn(5), R.randn(2, 4, 6)
P3 = R.randn(4, 3)

# (name, f(m, *args) with m the namespace, args): every f is differentiated to 2nd order by finite
# differences, and compared with autograd's gradient where autograd has the function.
CASES = [
    ("append", lambda m, a, b: m.append(a, b), (M, V)),
    ("append_axis", lambda m, a: m.append(a, a[:1] * 2, axis=0), (M,)),
    ("hsplit", lambda m, a: m.hsplit(a, 3), (M,)),
    ("hsplit_1d", lambda m, a: m.hsplit(a, [2]), (V,)),
    ("vsplit", lambda m, a: m.vsplit(a, [1, 3]), (M,)),
    ("dsplit", lambda m, a: m.dsplit(a, 2), (C3,)),
    ("array_split_2d", lambda m, a: m.array_split(a, 4, axis=1), (M,)),
    ("array_split_3d", lambda m, a: m.array_split(a, [1, 3], axis=-2), (C3,)),
    ("column_stack", lambda m, a, b: m.column_stack([a, b[:4]]), (M, V)),
    ("row_stack", lambda m, a: m.vstack([a, a[0]]), (M,)),
    ("atleast_3d", lambda m, a, b: [m.atleast_3d(a), m.atleast_3d(b), m.atleast_3d(b[0])], (M, V)),
    ("vstack_0d_1d", lambda m, a: m.vstack([a[0], a[1]]) * m.vstack([a, a]), (V,)),
    ("hstack_0d_1d", lambda m, a: m.hstack([a[0], a, a[2]]), (V,)),
    ("radians", lambda m, a: m.radians(a) * m.deg2rad(a * 2), (V,)),
    ("degrees", lambda m, a: m.degrees(a) * m.rad2deg(a * 2), (V,)),
    ("arccosh", lambda m, a: m.arccosh(m.abs(a) + 1.2), (V,)),
    ("arcsinh_arctanh", lambda m, a: m.arcsinh(a) * m.arctanh(m.tanh(a) * 0.9), (V,)),
    ("logaddexp2", lambda m, a, b: m.logaddexp2(a, b[:1]), (M, V)),
    ("hypot", lambda m, a, b: m.hypot(a, b[:1]), (M, V)),
    ("fmax", lambda m, a: m.fmax(a, a[::-1] * 0.7), (V,)),
    ("fmin", lambda m, a: m.fmin(a, a[::-1] * 0.7), (V,)),
    ("select", lambda m, a: m.select([a > 0.3, a < -0.5], [a ** 2, m.sin(a)], a * 3), (V,)),
    ("rot90", lambda m, a: m.rot90(a) * 2 + m.rot90(a, 3, (1, 0)) ** 2, (M[:4, :4],)),
    ("rot90_k2", lambda m, a: m.rot90(a, 2, axes=(2, 1)), (C3,)),
    ("flipud_fliplr", lambda m, a: m.flipud(a) * m.fliplr(a) ** 2, (M,)),
    ("rollaxis", lambda m, a: [m.rollaxis(a, 2) * 2, m.rollaxis(a, 0, 3) ** 2, m.rollaxis(a, 2, 1)],
     (C3,)),
    ("kron", lambda m, a, b: m.kron(a, b), (P3, R.randn(2, 2))),
    ("kron_mixed", lambda m, a, b: m.kron(a, b), (V[:2], P3)),
    ("cross", lambda m, a, b: m.cross(a, b), (P3, P3[::-1] * 2)),
    ("cross_axis", lambda m, a, b: m.cross(a.T, b.T, axis=0), (P3, P3[::-1] * 2)),
    ("linspace", lambda m, a, b: m.linspace(a, b, 5), (V[0] * 1.0, V[1] * 1.0)),
    ("linspace_arrays", lambda m, a, b: m.linspace(a, b, 4, endpoint=False, axis=1), (V, V ** 2)),
    ("make_diagonal", lambda m, a: m.make_diagonal(a, axis1=-1, axis2=-2), (P3,)),
    ("repeat_empty", lambda m, a: m.repeat(a[:0], 2, axis=0) * 1.0 + 0 * m.sum(a), (M,)),
    ("r_", lambda m, a, b: m.r_[a, b, 0.5, a[:2]], (V, V)),
    ("c_", lambda m, a, b: m.c_[a, b], (V, V)),
    ("real_imag_conj", lambda m, a: m.real(a) * 2 + m.conj(a) ** 2 + m.conjugate(a) + m.imag(a)
     + m.real_if_close(a) + m.angle(a), (V,)),
    ("partition", lambda m, a: m.partition(a, 2) * m.arange(5.0), (V,)),
    ("partition_axis", lambda m, a: m.partition(a, [1, 2], axis=0) * m.arange(6.0), (M,)),
    ("full", lambda m, a: m.full((2, 5), a[1]) * m.full(5, a[0] * 2.0, dtype=np.float64), (V,)),
    ("full_array_fill", lambda m, a: m.full((2, 5), a) ** 2, (V,)),
    ("array_api_names", lambda m, a: m.pow(m.acos(m.tanh(a)), 2) + m.atan2(a, 2.0) + m.asinh(a)
     + m.atanh(m.tanh(a) * 0.5) + m.acosh(a * a + 1.5) + m.asin(m.tanh(a)) + m.atan(a), (V,)),
    ("permute_dims", lambda m, a: m.permute_dims(a, (2, 0, 1)) ** 2, (C3,)),
    ("gradient", lambda m, a: m.gradient(a * a), (V,)),
    ("gradient_2d", lambda m, a: m.gradient(a ** 3, 0.5, 2.0), (M,)),
    ("gradient_edge2", lambda m, a: m.gradient(a ** 3, axis=1, edge_order=2), (M,)),
]
NOT_IN_AUTOGRAD = {"partition", "partition_axis", "gradient", "gradient_2d", "gradient_edge2",
                   "r_", "c_",
                   # autograd has them, in another form: a boxed list (its split family), no
                   # axes= (rot90), no array endpoints (linspace); an array
                   # fill_value of full gets the sum of the gradient in autograd
                   "hsplit", "vsplit", "full_array_fill", "array_split_2d", "hsplit_1d", "dsplit",
                   "array_split_3d",
                   "rot90", "rot90_k2", "linspace_arrays"}


def _flat(m, out):
    if isinstance(out, list | tuple):
        return m.concatenate([m.ravel(o) for o in out])
    return out


@pytest.mark.parametrize("name, f, args", CASES, ids=[c[0] for c in CASES])
def test_numpy_function_gradients(name, f, args):
    rlgrad.check_grads(lambda *a: _flat(rnp, f(rnp, *a)), order=2)(*args)
    plain = _flat(np, f(np, *args)) if name != "make_diagonal" else None
    if plain is not None:  # on plain arrays: NumPy's values
        np.testing.assert_allclose(_flat(rnp, f(rnp, *args)), plain, rtol=1e-12, atol=1e-12)
    w = R.randn(*np.shape(_flat(rnp, f(rnp, *args))))
    if name in NOT_IN_AUTOGRAD:
        return
    _same_grad(lambda *a: rnp.sum(_flat(rnp, f(rnp, *a)) * w),
               lambda *a: anp.sum(_flat(anp, f(anp, *a)) * w), *args)


def test_complex_intermediate_raises_instead_of_a_wrong_gradient():
    """|x (1 + 2j)| = sqrt(5) |x|: the real rules gave -1.34 (the real part of a wrong complex
    gradient); now every way of asking for the gradient says complex values are not differentiated."""
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="through complex values"):
        rlgrad.grad(lambda x: rnp.sum(rnp.abs(x * (1 + 2j))))(x)
    t = rlgrad.tensor(x, requires_grad=True)
    with pytest.raises(TypeError, match="through complex values"):
        rnp.sum(rnp.abs(t * (1 + 2j))).backward()
    with pytest.raises(TypeError, match="through complex values"):
        rlgrad.autograd.grad(rnp.sum(rnp.abs(t * (1 + 2j))), [t])
    with pytest.raises(TypeError, match="complex Tensor"):
        rnp.real(t * (1 + 2j))


def test_numpy_ufuncs_on_tensors_dispatch_to_the_new_functions():
    x, y = R.randn(4), R.rand(4) + 0.5

    def f(x, y):
        return (np.hypot(x, y) + np.fmod(x, y) + np.logaddexp2(x, y) + np.deg2rad(x)
                + np.conjugate(x) + np.fmax(x, y) + np.arccosh(y + 1.0))

    rlgrad.check_grads(f, order=2)(x, y)
    np.testing.assert_allclose(rlgrad.grad(lambda x: rnp.sum(np.fmod(x, y)))(x), np.ones(4))


# ---- ties in max/min/maximum/minimum: autograd's split, which PyTorch's reductions share --------
TIES_X = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
TIES_Y = np.array([[1.0, 0.0, 3.0], [2.0, 5.0, 2.0]])


@pytest.mark.parametrize("name", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reduction_ties_share_the_gradient_evenly(name, axis):
    """Each of k tied extrema gets 1/k of the gradient (autograd's grad_chooser; torch.amax/amin
    and torch.max()/min() without dim do the same)."""
    x = TIES_X if name in ("max", "amax") else -TIES_X  # the same ties, at the minimum
    g = rlgrad.grad(lambda x: rnp.sum(getattr(rnp, name)(x, axis=axis)))(x)
    np.testing.assert_array_equal(g, autograd.grad(lambda x: anp.sum(getattr(anp, name)(x, axis=axis)))(x))
    expect = {None: [[0, 0.5, 0.5], [0, 0, 0]], 0: [[0, 1, 1], [1, 0, 0]],
              1: [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], (0, 1): [[0, 0.5, 0.5], [0, 0, 0]]}
    np.testing.assert_allclose(g, expect[axis], rtol=1e-15)


def test_tensor_max_dim_takes_the_index_as_pytorch():
    """Tensor.max(dim) returns (values, indices) and, as torch's, sends the gradient to the one
    element at the index (the first of the tied ones); amax(dim) splits it."""
    t = rlgrad.tensor(TIES_X, requires_grad=True)
    t.max(1)[0].sum().backward()
    np.testing.assert_array_equal(t.grad._value, [[0, 1, 0], [1, 0, 0]])
    t.grad = None
    t.amax(dim=1).sum().backward()
    np.testing.assert_allclose(t.grad._value, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15)


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmax", "fmin"])
def test_elementwise_ties_split_in_half(name):
    """On x == y each side gets half (autograd's balanced_eq; torch.maximum/minimum too; only
    torch.fmax/fmin give it all to the first argument)."""
    fn = getattr(rnp, name)
    gx, gy = rlgrad.grad(lambda x, y: rnp.sum(fn(x, y) * TIES_Y), argnums=(0, 1))(TIES_X, TIES_Y)
    af = getattr(anp, name)
    ax, ay = autograd.grad(lambda x, y: anp.sum(af(x, y) * TIES_Y), (0, 1))(TIES_X, TIES_Y)
    np.testing.assert_array_equal(gx, ax)
    np.testing.assert_array_equal(gy, ay)
    tie = TIES_X == TIES_Y
    np.testing.assert_array_equal(gx[tie], 0.5 * TIES_Y[tie])
    np.testing.assert_array_equal(gx + gy, TIES_Y)  # the whole gradient, once


# ---- arrays built from Tensors (autograd's array_from_args; JAX's jnp.array) ---------------------
BUILD_CASES = [
    ("pair", lambda m, x, y: m.array([x[0], y[1] * 2])),
    ("nested_mixed", lambda m, x, y: m.array([[x[0], 1.5, y[2]], [x[1] ** 2, np.float64(2.0), x[0] * y[0]]])),
    ("rows", lambda m, x, y: m.array([x, y, np.ones(3)]) * m.array((y, x, x))),
    ("asarray_list", lambda m, x, y: m.asarray([x[0] * y, x]) ** 2),
    ("tensor_itself", lambda m, x, y: m.array(x) * m.asarray(y)),
    ("mean_std_var_sum", lambda m, x, y: m.mean([x[0], y[1], 2.0]) * m.std([x[1], y[0] ** 2])
     + m.var([x, y], axis=0) + m.sum([x[2], y[0]])),
]


@pytest.mark.parametrize("name, f", BUILD_CASES, ids=[c[0] for c in BUILD_CASES])
def test_arrays_built_from_tensors_are_differentiable(name, f):
    x, y = R.randn(3), R.randn(3)
    rlgrad.check_grads(lambda x, y: f(rnp, x, y), order=2)(x, y)
    np.testing.assert_allclose(f(rnp, x, y), f(np, x, y), rtol=1e-14)  # plain arrays: NumPy's
    got = f(rnp, rlgrad.tensor(x, requires_grad=True), rlgrad.tensor(y))
    np.testing.assert_allclose(got._value, f(np, x, y), rtol=1e-14)
    if name == "tensor_itself":  # autograd's asarray of a box has no VJP
        return
    w = R.randn(*np.shape(f(np, x, y)))
    _same_grad(lambda x, y: rnp.sum(f(rnp, x, y) * w), lambda x, y: anp.sum(f(anp, x, y) * w), x, y)


def test_array_from_tensors_takes_numpys_dtype_shape_and_errors():
    x32 = rlgrad.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    for obj, kw in [([x32, x32], {}), ([x32, [1.0, 2.0]], {}), ([x32[0], 3], {}),
                    (x32, {"dtype": np.float64}), ([x32, x32], {"ndmin": 4}), (x32, {"ndmin": 3})]:
        got = rnp.array(obj, **kw)
        want = np.array(x32._value if obj is x32 else
                        [o._value if isinstance(o, rlgrad.Tensor) else o for o in obj], **kw)
        assert got.dtype == want.dtype and got.shape == want.shape, (obj, kw)
        assert got.requires_grad
        np.testing.assert_array_equal(got._value, want)
    assert rnp.asarray(x32) is x32 and rnp.array(x32) is not x32  # asarray does not copy
    with pytest.raises(ValueError, match="inhomogeneous"):
        rnp.array([x32, x32[0]])
    g = rlgrad.grad(lambda x: rnp.sum(rnp.array([x, x * 2], dtype=np.float32)))(np.array([1.0]))
    np.testing.assert_array_equal(g, [3.0])


def test_int_and_astype_are_reads_float_raises_inside_a_transform():
    """int(x) and x.astype(int) are piecewise constant: reads with derivative 0 (JAX's; autograd
    refuses int(x) and passes g through astype(int)). float(x) / x.item() would drop a non-zero
    derivative: refused inside a transform (as autograd and JAX), allowed outside (PyTorch's)."""
    assert rlgrad.grad(lambda x: x * int(x))(3.5) == 3.0
    np.testing.assert_array_equal(rlgrad.grad(lambda x: rnp.sum(x * x.astype(int)))(np.array([2.5, -1.5])),
                                  [2.0, -1.0])
    for read in (float, lambda t: t.item()):
        with pytest.raises(TypeError, match="would drop its gradient"):
            rlgrad.grad(lambda x, read=read: x * read(x))(3.5)
        assert rlgrad.grad(lambda x, read=read: x * read(rlgrad.stop_gradient(x)))(3.5) == 3.5
        t = rlgrad.tensor(2.0, requires_grad=True)
        assert read(t * t) == 4.0  # outside a transform: PyTorch's float(loss)
    assert rlgrad.grad(lambda x: x * float(np.float64(2.0)) + float(rlgrad.tensor(1.0)))(3.0) == 2.0


def test_arrays_built_from_tensors_replay_under_jit():
    """rnp.array / mean of lists / linalg.norm of a list inside a compiled step: recomputed from
    each call's values (the dtype and shape found from the first call's are fixed by the trace)."""
    def f(x):
        return (rnp.sum(rnp.array([[x[0], 1.0], [x[1] * 2, x[0] * x[1]]]) ** 2)
                + rnp.mean([x[0], x[1]]) + rnp.linalg.norm([x[0], 2.0]))

    step = rlgrad.jit(rlgrad.value_and_grad(f))
    for x in (np.array([1.0, 2.0]), np.array([3.0, -1.0]), np.array([0.5, 0.25])):
        v, g = step(x)
        v_want, g_want = rlgrad.value_and_grad(f)(x)
        np.testing.assert_allclose(v, v_want, rtol=1e-14)
        np.testing.assert_allclose(g, g_want, rtol=1e-14)
