"""The functional transforms (HIPS autograd names and signatures, JAX's ``argnums``) against
closed forms: argnum handling, pytrees in and out, plain NumPy results, nested transforms with no
perturbation confusion, third-order derivatives, and the Hessian of a small MLP loss."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import (
    elementwise_grad,
    grad,
    grad_and_aux,
    hessian,
    hessian_tensor_product,
    hvp,
    jacobian,
    jvp,
    make_hvp,
    make_jvp,
    make_vjp,
    stop_gradient,
    tensor_jacobian_product,
    value_and_grad,
    vjp,
)
from rlgrad.tensor import Tensor

RNG = np.random.default_rng(1234)


def is_plain(x: Any) -> bool:
    """A NumPy array or scalar (what autograd and JAX return), never a Tensor."""
    return isinstance(x, np.ndarray | np.generic | float) and not isinstance(x, Tensor)


def assert_plain_tree(tree: Any) -> None:
    if isinstance(tree, dict):
        for v in tree.values():
            assert_plain_tree(v)
    elif isinstance(tree, list | tuple):
        for v in tree:
            assert_plain_tree(v)
    else:
        assert is_plain(tree), f"expected a plain NumPy value, got {type(tree).__name__}"


def close(a: Any, b: Any, **kw: Any) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=kw.get("rtol", 1e-10),
                               atol=kw.get("atol", 1e-12))


# ---------------------------------------------------------------------------------------------
# grad, value_and_grad, elementwise_grad
# ---------------------------------------------------------------------------------------------
def test_grad_closed_form_array() -> None:
    x = RNG.standard_normal(5)
    g = grad(lambda x: rnp.sum(rnp.sin(x) * x))(x)
    assert isinstance(g, np.ndarray) and g.shape == (5,) and g.dtype == np.float64
    close(g, np.cos(x) * x + np.sin(x))


def test_grad_of_python_float_is_a_plain_float() -> None:
    g = grad(lambda x: x ** 3 + 2.0 * x)(1.5)
    assert is_plain(g) and np.ndim(g) == 0
    close(g, 3 * 1.5 ** 2 + 2.0)


def test_grad_matrix_argument() -> None:
    a = RNG.standard_normal((3, 4))
    w = RNG.standard_normal((4, 2))
    g = grad(lambda w: rnp.sum(rnp.tanh(a @ w)))(w)
    close(g, a.T @ (1 - np.tanh(a @ w) ** 2))


def test_value_and_grad() -> None:
    x = RNG.standard_normal(4)
    v, g = value_and_grad(lambda x: rnp.sum(x ** 2) / 2)(x)
    assert is_plain(v) and is_plain(g)
    close(v, np.sum(x ** 2) / 2)
    close(g, x)


def test_elementwise_grad() -> None:
    x = RNG.standard_normal((2, 3))
    g = elementwise_grad(rnp.tanh)(x)
    assert isinstance(g, np.ndarray) and g.shape == x.shape
    close(g, 1 - np.tanh(x) ** 2)
    # second derivative, elementwise
    close(elementwise_grad(elementwise_grad(rnp.tanh))(x),
          -2 * np.tanh(x) * (1 - np.tanh(x) ** 2))


def test_autograd_style_code_with_constants_like_the_input() -> None:
    """HIPS autograd code calls np.zeros_like / ones_like / full_like on traced values."""

    def f(x: Any) -> Any:
        acc = rnp.zeros_like(x)
        for k in range(3):
            acc = acc + x ** k * rnp.full_like(x, 1.0 / (k + 1))
        return rnp.sum(acc * rnp.ones_like(x))

    x = RNG.standard_normal(3)
    close(grad(f)(x), 0.5 + 2 * x / 3)


def test_grad_requires_scalar_output() -> None:
    with pytest.raises(TypeError, match=r"scalar output.*\(3,\)"):
        grad(lambda x: x * 2)(np.ones(3))


def test_grad_of_function_ignoring_its_input_is_zero() -> None:
    g = grad(lambda x, y: rnp.sum(y ** 2), argnum=0)(np.ones(3), np.ones(2))
    assert is_plain(g)
    close(g, np.zeros(3))


# ---------------------------------------------------------------------------------------------
# argnum / argnums
# ---------------------------------------------------------------------------------------------
def f3(x: Any, y: Any, z: Any) -> Any:
    return rnp.sum(x * y ** 2 + rnp.sin(z) * x)


X, Y, Z = RNG.standard_normal(3), RNG.standard_normal(3), RNG.standard_normal(3)
DX = Y ** 2 + np.sin(Z)
DY = 2 * X * Y
DZ = np.cos(Z) * X


@pytest.mark.parametrize("kw, expected", [
    ({}, DX),
    ({"argnum": 0}, DX),
    ({"argnum": 1}, DY),
    ({"argnum": 2}, DZ),
    ({"argnum": -1}, DZ),
    ({"argnums": 1}, DY),
    ({"argnums": (0, 2)}, (DX, DZ)),
    ({"argnum": (2, 1)}, (DZ, DY)),
    ({"argnums": (1,)}, (DY,)),
])
def test_argnum_and_argnums(kw: dict, expected: Any) -> None:
    g = grad(f3, **kw)(X, Y, Z)
    if isinstance(expected, tuple):
        assert isinstance(g, tuple) and len(g) == len(expected)
        for gi, ei in zip(g, expected):
            assert is_plain(gi)
            close(gi, ei)
    else:
        assert is_plain(g)
        close(g, expected)


def test_argnums_for_value_and_grad_elementwise_and_make_vjp() -> None:
    v, (gx, gz) = value_and_grad(f3, argnums=(0, 2))(X, Y, Z)
    close(v, np.sum(X * Y ** 2 + np.sin(Z) * X))
    close(gx, DX)
    close(gz, DZ)
    ex, ey = elementwise_grad(lambda x, y: x * y, argnums=(0, 1))(X, Y)
    close(ex, Y)
    close(ey, X)
    vjp_fn, out = make_vjp(lambda x, y: x * y, argnum=1)(X, Y)
    close(out, X * Y)
    close(vjp_fn(np.ones(3)), X)


def test_argnum_out_of_range() -> None:
    with pytest.raises(IndexError, match="argnum 3"):
        grad(f3, argnum=3)(X, Y, Z)


def test_keyword_arguments_pass_through() -> None:
    def f(x: Any, scale: float = 1.0) -> Any:
        return rnp.sum(x ** 2) * scale

    close(grad(f)(X, scale=3.0), 6 * X)


# ---------------------------------------------------------------------------------------------
# pytrees in and out
# ---------------------------------------------------------------------------------------------
def test_grad_of_dict_of_params() -> None:
    params = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
    x = RNG.standard_normal((4, 3))

    def loss(p: dict) -> Any:
        return rnp.sum((x @ p["w"] + p["b"]) ** 2)

    g = grad(loss)(params)
    assert isinstance(g, dict) and set(g) == {"w", "b"}
    assert_plain_tree(g)
    r = x @ params["w"] + params["b"]
    close(g["w"], x.T @ (2 * r))
    close(g["b"], np.sum(2 * r, axis=0))


def test_grad_of_nested_lists_tuples_dicts() -> None:
    tree = [RNG.standard_normal(2), (RNG.standard_normal(3), {"a": np.array(0.7), "z": [1.5]})]

    def f(t: Any) -> Any:
        a, (b, d) = t
        return rnp.sum(a ** 2) + rnp.sum(rnp.exp(b)) + d["a"] * d["z"][0] ** 2

    g = grad(f)(tree)
    assert isinstance(g, list) and isinstance(g[1], tuple) and isinstance(g[1][1], dict)
    assert isinstance(g[1][1]["z"], list)
    assert_plain_tree(g)
    close(g[0], 2 * tree[0])
    close(g[1][0], np.exp(tree[1][0]))
    close(g[1][1]["a"], 1.5 ** 2)
    close(g[1][1]["z"][0], 2 * 0.7 * 1.5)


def test_grad_of_tuple_argument_with_argnums() -> None:
    ws = (RNG.standard_normal(2), RNG.standard_normal(2))
    v = RNG.standard_normal(2)
    g_ws, g_v = grad(lambda ws, v: rnp.sum(ws[0] * ws[1] * v), argnums=(0, 1))(ws, v)
    assert isinstance(g_ws, tuple)
    close(g_ws[0], ws[1] * v)
    close(g_ws[1], ws[0] * v)
    close(g_v, ws[0] * ws[1])


def test_vjp_with_pytree_output() -> None:
    x = RNG.standard_normal(3)
    out, vjp_fn = vjp(lambda x: {"double": 2 * x, "parts": [rnp.sum(x), x ** 2]}, x)
    assert_plain_tree(out)
    close(out["double"], 2 * x)
    ct = {"double": np.ones(3), "parts": [2.0, np.arange(3.0)]}
    (gx,) = vjp_fn(ct)
    assert is_plain(gx)
    close(gx, 2 * np.ones(3) + 2.0 + 2 * x * np.arange(3.0))


def test_make_vjp_with_tuple_output() -> None:
    x = RNG.standard_normal(3)
    vjp_fn, out = make_vjp(lambda x: (rnp.sin(x), rnp.sum(x ** 3)))(x)
    assert isinstance(out, tuple)
    assert_plain_tree(out)
    g = vjp_fn((np.ones(3), 1.0))
    close(g, np.cos(x) + 3 * x ** 2)
    # an output that does not depend on the input still needs a cotangent of its shape
    vjp_fn2, _ = make_vjp(lambda x: (x * 2, np.ones(2)))(x)
    close(vjp_fn2((np.ones(3), np.zeros(2))), 2 * np.ones(3))


def test_vjp_cotangent_structure_and_shape_are_checked() -> None:
    x = RNG.standard_normal(3)
    _, vjp_fn = vjp(lambda x: [x, x], x)
    with pytest.raises(ValueError, match="structure"):
        vjp_fn([np.ones(3)])
    _, vjp_fn = vjp(lambda x: x * 2, x)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        vjp_fn(np.ones(2))


# ---------------------------------------------------------------------------------------------
# vjp, make_vjp, tensor_jacobian_product, jacobian, jvp
# ---------------------------------------------------------------------------------------------
def test_vjp_jax_signature_two_primals() -> None:
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal(3)
    out, vjp_fn = vjp(lambda a, b: a @ b, a, b)
    close(out, a @ b)
    ct = RNG.standard_normal(2)
    ga, gb = vjp_fn(ct)
    assert is_plain(ga) and is_plain(gb)
    close(ga, np.outer(ct, b))
    close(gb, a.T @ ct)
    # the returned function can be called again (the graph is kept)
    ga2, _ = vjp_fn(2 * ct)
    close(ga2, 2 * np.outer(ct, b))


def test_vjp_has_aux() -> None:
    x = RNG.standard_normal(3)
    out, vjp_fn, aux = vjp(lambda x: (x ** 2, {"n": rnp.sum(x)}), x, has_aux=True)
    close(out, x ** 2)
    assert_plain_tree(aux)
    close(aux["n"], np.sum(x))
    close(vjp_fn(np.ones(3))[0], 2 * x)


def test_make_vjp_hips_signature() -> None:
    x = RNG.standard_normal((2, 2))
    vjp_fn, ans = make_vjp(rnp.exp)(x)
    assert is_plain(ans)
    close(ans, np.exp(x))
    g = RNG.standard_normal((2, 2))
    close(vjp_fn(g), g * np.exp(x))
    close(vjp_fn(np.ones((2, 2))), np.exp(x))  # reusable


def test_tensor_jacobian_product() -> None:
    a = RNG.standard_normal((3, 4))
    x = RNG.standard_normal(4)
    t = RNG.standard_normal(3)
    r = tensor_jacobian_product(lambda x: rnp.tanh(a @ x))(x, t)
    assert is_plain(r)
    close(r, a.T @ (t * (1 - np.tanh(a @ x) ** 2)))
    assert rlgrad.vector_jacobian_product is tensor_jacobian_product


def test_jacobian_shapes_and_values() -> None:
    a = RNG.standard_normal((2, 3))
    x = RNG.standard_normal(3)
    j = jacobian(lambda x: a @ x)(x)
    assert isinstance(j, np.ndarray) and j.shape == (2, 3)
    close(j, a)
    m = RNG.standard_normal((2, 2))
    jm = jacobian(lambda m: m @ m)(m)  # d(MM)_ij / dM_kl = d_ik M_lj + M_ik d_jl
    expected = np.einsum("ik,lj->ijkl", np.eye(2), m) + np.einsum("ik,jl->ijkl", m, np.eye(2))
    assert jm.shape == (2, 2, 2, 2)
    close(jm, expected)
    js = jacobian(lambda x: rnp.sum(x ** 2))(x)  # scalar output: shape of the input
    assert js.shape == (3,)
    close(js, 2 * x)
    j1 = jacobian(lambda x, y: x * y, argnum=1)(x, 2 * x)
    close(j1, np.diag(x))


def test_jvp_and_make_jvp() -> None:
    a = RNG.standard_normal((3, 2))
    x = RNG.standard_normal(2)
    v = RNG.standard_normal(2)

    def f(x: Any) -> Any:
        return rnp.sin(a @ x)

    out, tangent = jvp(f, (x,), (v,))
    assert is_plain(out) and is_plain(tangent)
    close(out, np.sin(a @ x))
    close(tangent, np.cos(a @ x) * (a @ v))
    value, tangent = make_jvp(f)(x)(v)  # HIPS autograd: (fun(x), J v)
    assert is_plain(value) and is_plain(tangent)
    close(value, np.sin(a @ x))
    close(tangent, np.cos(a @ x) * (a @ v))
    close(make_jvp(lambda x, y: x * y, argnum=1)(x, 3 * x)(v)[1], x * v)
    # a tangent for a pytree argument, and an output that ignores the argument
    p = {"u": x, "w": 2 * x}
    tp = {"u": v, "w": -v}
    _, t = make_jvp(lambda p: p["u"] * p["w"])(p)(tp)
    close(t, v * 2 * x - x * v)
    value, t = make_jvp(lambda x, y: y * 2, argnum=0)(x, x)(v)
    close(t, np.zeros(2))
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        make_jvp(f)(x)(np.ones(3))
    close(jvp(f, (x,), (v,))[1], jacobian(f)(x) @ v)


# ---------------------------------------------------------------------------------------------
# hessian, hvp, make_hvp, grad_and_aux
# ---------------------------------------------------------------------------------------------
def test_hessian_closed_form() -> None:
    x = RNG.standard_normal(3)
    h = hessian(lambda x: rnp.sum(x ** 3) + x[0] * x[1])(x)
    assert isinstance(h, np.ndarray) and h.shape == (3, 3)
    expected = np.diag(6 * x)
    expected[0, 1] = expected[1, 0] = 1.0
    close(h, expected)
    hm = hessian(lambda m: rnp.sum(m ** 2))(RNG.standard_normal((2, 3)))
    assert hm.shape == (2, 3, 2, 3)
    close(hm, 2 * np.eye(6).reshape(2, 3, 2, 3))


def test_hessian_vector_products() -> None:
    a = RNG.standard_normal((3, 3))
    a = a + a.T
    x, v = RNG.standard_normal(3), RNG.standard_normal(3)

    def f(x: Any) -> Any:
        return 0.5 * x @ (a @ x) + rnp.sum(x ** 4)

    h = a + np.diag(12 * x ** 2)
    r = hessian_tensor_product(f)(x, v)
    assert is_plain(r)
    close(r, h @ v)
    close(hvp(f)(x, v), h @ v)
    assert hvp is hessian_tensor_product
    hvp_fn, gradient = make_hvp(f)(x)  # HIPS autograd returns the gradient alongside
    close(gradient, a @ x + 4 * x ** 3)
    close(hvp_fn(v), h @ v)
    close(hvp_fn(2 * v), 2 * h @ v)


def test_hvp_with_argnum_and_pytree() -> None:
    x, v = RNG.standard_normal(2), RNG.standard_normal(2)
    r = hessian_tensor_product(lambda c, x: c * rnp.sum(x ** 3), argnum=1)(2.0, x, v)
    close(r, 2.0 * 6 * x * v)
    params = {"a": x, "b": 2 * x}
    vp = {"a": v, "b": -v}
    r = hvp(lambda p: rnp.sum(p["a"] ** 2 * p["b"]))(params, vp)
    # H [va, vb]: d/da = 2ab, d/db = a^2 -> Hv_a = 2b va + 2a vb, Hv_b = 2a va
    close(r["a"], 2 * params["b"] * v + 2 * x * (-v))
    close(r["b"], 2 * x * v)


def test_grad_and_aux() -> None:
    x = RNG.standard_normal(3)
    g, aux = grad_and_aux(lambda x: (rnp.sum(x ** 2), {"pred": x * 3, "note": "kept"}))(x)
    assert is_plain(g)
    close(g, 2 * x)
    assert aux["note"] == "kept"
    assert is_plain(aux["pred"])
    close(aux["pred"], 3 * x)
    g2, aux2 = grad(lambda x: (rnp.sum(x ** 3), x), has_aux=True)(x)  # JAX's spelling
    close(g2, 3 * x ** 2)
    close(aux2, x)


# ---------------------------------------------------------------------------------------------
# Nested transforms: no perturbation confusion
# ---------------------------------------------------------------------------------------------
def test_siskind_pearlmutter() -> None:
    # D[x -> x * D[y -> x + y](1)](1) = D[x -> x * 1](1) = 1 (confusing x and y would give 2).
    assert grad(lambda x: x * grad(lambda y: x + y)(1.0))(1.0) == 1.0


def test_inner_grad_of_product() -> None:
    # d/dx [x * d/dy (x*y)|_{y=2}] = d/dx [x * x] = 2x
    for x in (3.0, -1.5):
        close(grad(lambda x: x * grad(lambda y: x * y)(2.0))(x), 2 * x)


def test_grad_of_grad_of_closure_over_outer_variable() -> None:
    # inner(x) = d/dy [x*y^2]|_{y=x} = 2x^2, outer = 4x
    close(grad(lambda x: grad(lambda y: x * y ** 2)(x))(2.0), 8.0)
    # inner(x) = d/dy [sin(x*y)]|_{y=1} = x cos(x);  d/dx = cos(x) - x sin(x)
    x = 0.7
    close(grad(lambda x: grad(lambda y: rnp.sin(x * y))(1.0))(x), np.cos(x) - x * np.sin(x))
    # the inner function ignores its own variable: its gradient is 0 for every x
    close(grad(lambda x: grad(lambda y: x ** 2)(1.0) + x)(3.0), 1.0)
    # inner variable evaluated at the outer one, with an extra outer dependence
    close(grad(lambda x: grad(lambda y: x * y + y)(x) * x)(3.0), 2 * 3.0 + 1.0)


def test_inner_transform_at_the_outer_point() -> None:
    # no closure: the inner derivative 2y evaluated at y = x, then differentiated: 2
    close(grad(lambda x: grad(lambda y: y * y)(x))(3.0), 2.0)
    x = RNG.standard_normal(3)
    # hessian inside grad: H_y sum(y^3 x) = diag(6 y x), at y = x its sum is 6 sum(x^2) -> 12 x
    close(grad(lambda x: rnp.sum(hessian(lambda y: rnp.sum(y ** 3 * x))(x)))(x), 12 * x)
    # jacobian inside grad: J_y (y * x) = diag(x) -> sum(diag(x)^2) = sum(x^2) -> 2x
    close(grad(lambda x: rnp.sum(jacobian(lambda y: y * x)(x) ** 2))(x), 2 * x)
    # hvp inside grad, and grad inside hessian
    v = RNG.standard_normal(3)
    close(grad(lambda x: rnp.sum(hvp(lambda y: rnp.sum(y ** 2 * x))(x, v)))(x), 2 * v)
    close(hessian(lambda x: grad(lambda y: rnp.sum(y * x ** 2))(x)[0])(x),
          np.diag([2.0, 0.0, 0.0]))


def test_nested_arrays_and_vector_functions() -> None:
    a = RNG.standard_normal(3)

    def outer(x: Any) -> Any:  # sum_i x_i * (d/dy sum(x*y*y))_i at y=a = sum_i x_i * 2 x_i a_i
        return rnp.sum(x * grad(lambda y: rnp.sum(x * y * y))(a))

    x = RNG.standard_normal(3)
    close(outer(x), np.sum(2 * x * x * a))
    close(grad(outer)(x), 4 * x * a)


def test_stop_gradient_inside_nested_transforms() -> None:
    close(grad(lambda x: stop_gradient(x) * x)(3.0), 3.0)
    # stop_gradient of the outer variable inside the inner function: inner = sg(x); outer sees 0
    close(grad(lambda x: grad(lambda y: stop_gradient(x) * y)(1.0))(2.0), 0.0)


def test_third_order_derivatives() -> None:
    close(grad(grad(grad(lambda x: x ** 4)))(2.0), 24 * 2.0)
    x = 0.3
    close(grad(grad(grad(rnp.sin)))(x), -np.cos(x))
    close(grad(grad(grad(lambda x: rnp.exp(2 * x) * x)))(x), np.exp(2 * x) * (8 * x + 12))
    xs = RNG.standard_normal(4)
    third = elementwise_grad(elementwise_grad(elementwise_grad(rnp.tanh)))(xs)
    t = np.tanh(xs)
    close(third, -2 * (1 - t ** 2) * (1 - 3 * t ** 2))
    # a third-order tensor: the jacobian of the hessian of sum(x^3 y) w.r.t. x
    t3 = jacobian(hessian(lambda x: rnp.sum(x ** 3) * x[0]))(np.array([1.0, 2.0]))
    # f = x0^4 + x0 x1^3; its third derivatives
    expected = np.zeros((2, 2, 2))
    expected[0, 0, 0] = 24 * 1.0
    expected[1, 1, 1] = 6 * 1.0
    expected[0, 1, 1] = expected[1, 0, 1] = expected[1, 1, 0] = 6 * 2.0
    close(t3, expected)


def test_fourth_order() -> None:
    f = grad(grad(grad(grad(lambda x: x ** 5))))
    close(f(1.5), 120 * 1.5)


def test_nested_value_and_grad_and_vjp() -> None:
    def g(x: Any) -> Any:
        v, dv = value_and_grad(lambda y: rnp.sum(y ** 3) * x)(x)
        return v + dv[0]

    # v = x^3 * x = x^4 (x scalar-shaped array), dv = 3x^2 * x = 3x^3 -> g = x^4 + 3x^3
    x = np.array([1.2])
    close(grad(lambda x: g(x)[0])(x), 4 * x ** 3 + 9 * x ** 2)
    # make_vjp inside grad: the VJP of y -> y^2 x at y = x is 2x^2, whose derivative is 4x
    close(grad(lambda x: make_vjp(lambda y: y * y * x)(x)[0](1.0))(2.0), 8.0)
    # vjp (JAX) inside grad: d/dx [x * (d/dy sin(y)|_{y=x})] = cos(x) - x sin(x)
    close(grad(lambda x: x * vjp(rnp.sin, x)[1](1.0)[0])(0.4), np.cos(0.4) - 0.4 * np.sin(0.4))


def test_autograd_grad_inside_a_transform() -> None:
    """The PyTorch-style API inside a functional transform, with create_graph, differentiates on."""

    def f(x: Any) -> Any:
        y = rlgrad.tensor(np.array(2.0), requires_grad=True)
        (g,) = rlgrad.autograd.grad(x * y * y, y, create_graph=True)  # 2 x y
        return g * x  # 2 x^2 y -> 4 x y

    close(grad(f)(3.0), 24.0)

    def f2(x: Any) -> Any:  # autograd.grad w.r.t. the transform's own variable
        (g,) = rlgrad.autograd.grad(x ** 3, x, create_graph=True)
        return g

    close(grad(f2)(3.0), 18.0)


def test_transforms_inside_autograd_graph() -> None:
    """A functional transform called on a Tensor inside a PyTorch-style graph is differentiable."""
    x = rlgrad.tensor(np.array([0.5, -1.0]), requires_grad=True)
    g = grad(lambda y: rnp.sum(y ** 3))(x)  # 3x^2, still connected to x
    assert isinstance(g, Tensor) and g.requires_grad
    rnp.sum(g).backward()
    close(x.grad._value, 6 * x._value)


# ---------------------------------------------------------------------------------------------
# The Hessian of a small MLP loss, against finite differences
# ---------------------------------------------------------------------------------------------
def _mlp_setup() -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((5, 2))
    ys = rng.standard_normal((5, 1))
    shapes = [(2, 3), (3,), (3, 1), (1,)]
    sizes = [int(np.prod(s)) for s in shapes]

    def unpack(theta: Any) -> list[Any]:
        out, pos = [], 0
        for s, n in zip(shapes, sizes):
            out.append(rnp.reshape(theta[pos:pos + n], s))
            pos += n
        return out

    def loss(theta: Any) -> Any:
        w1, b1, w2, b2 = unpack(theta)
        h = rnp.tanh(xs @ w1 + b1)
        return rnp.mean((h @ w2 + b2 - ys) ** 2)

    return loss, rng.standard_normal(sum(sizes)) * 0.7


def test_mlp_hessian_against_finite_differences() -> None:
    loss, theta = _mlp_setup()
    h = hessian(loss)(theta)
    n = theta.size
    assert h.shape == (n, n) and isinstance(h, np.ndarray)
    close(h, h.T, rtol=1e-9, atol=1e-10)
    # second differences of the loss itself (no engine gradient involved)
    eps = 1e-4
    fd = np.zeros((n, n))
    eye = np.eye(n)
    f = lambda t: float(loss(t))  # noqa: E731
    for i in range(n):
        for j in range(i, n):
            ei, ej = eps * eye[i], eps * eye[j]
            fd[i, j] = fd[j, i] = (f(theta + ei + ej) - f(theta + ei - ej) - f(theta - ei + ej)
                                   + f(theta - ei - ej)) / (4 * eps * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-4, atol=1e-6)
    # central differences of the gradient, and the HVP
    g = grad(loss)
    fd_g = np.stack([(g(theta + 1e-6 * eye[i]) - g(theta - 1e-6 * eye[i])) / 2e-6 for i in range(n)])
    np.testing.assert_allclose(h, fd_g, rtol=1e-6, atol=1e-8)
    v = np.random.default_rng(0).standard_normal(n)
    close(hvp(loss)(theta, v), h @ v, rtol=1e-9, atol=1e-10)


def test_mlp_hessian_with_dict_params_via_hvp() -> None:
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((4, 2))
    params = {"w": rng.standard_normal((2, 2)), "b": rng.standard_normal(2)}

    def loss(p: dict) -> Any:
        return rnp.sum(rnp.tanh(xs @ p["w"] + p["b"]) ** 2)

    flat = np.concatenate([params["b"], params["w"].ravel()])  # sorted keys: b, w

    def loss_flat(t: Any) -> Any:
        return loss({"b": t[:2], "w": rnp.reshape(t[2:], (2, 2))})

    h = hessian(loss_flat)(flat)
    v = {"b": rng.standard_normal(2), "w": rng.standard_normal((2, 2))}
    hv = hvp(loss)(params, v)
    expected = h @ np.concatenate([v["b"], v["w"].ravel()])
    close(hv["b"], expected[:2], rtol=1e-9, atol=1e-10)
    close(hv["w"], expected[2:].reshape(2, 2), rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# Cross-check against HIPS autograd when it is installed
# ---------------------------------------------------------------------------------------------
def test_against_hips_autograd() -> None:
    ag = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    x = RNG.standard_normal(4)

    def make(np_: Any) -> Any:
        def f(x: Any) -> Any:
            return np_.sum(np_.tanh(x) * np_.exp(-x ** 2)) + np_.log(np_.sum(x ** 2))

        return f

    close(grad(make(rnp))(x), ag.grad(make(anp))(x), rtol=1e-10)
    close(hessian(make(rnp))(x), ag.hessian(make(anp))(x), rtol=1e-9)
    close(grad(lambda x: x * grad(lambda y: x + y)(1.0))(1.0),
          ag.grad(lambda x: x * ag.grad(lambda y: x + y)(1.0))(1.0))
    # the same signatures and return values, so code ports by changing one import
    v = RNG.standard_normal(4)
    ours, theirs = make_hvp(make(rnp))(x), ag.make_hvp(make(anp))(x)
    close(ours[1], theirs[1], rtol=1e-10)
    close(ours[0](v), theirs[0](v), rtol=1e-9)
    ours, theirs = make_jvp(rnp.tanh)(x)(v), ag.make_jvp(anp.tanh)(x)(v)
    close(ours[0], theirs[0])
    close(ours[1], theirs[1], rtol=1e-10)
    ours, theirs = make_vjp(rnp.tanh)(x), ag.make_vjp(anp.tanh)(x)
    close(ours[1], theirs[1])
    close(ours[0](v), theirs[0](v), rtol=1e-10)
    close(hessian_tensor_product(make(rnp))(x, v), ag.hessian_tensor_product(make(anp))(x, v),
          rtol=1e-9)
    close(tensor_jacobian_product(rnp.tanh)(x, v), ag.tensor_jacobian_product(anp.tanh)(x, v))
    g1, aux1 = grad_and_aux(lambda x: (rnp.sum(x ** 2), x))(x)
    g2, aux2 = ag.grad_and_aux(lambda x: (anp.sum(x ** 2), x))(x)
    close(g1, g2)
    close(aux1, aux2)
    close(elementwise_grad(rnp.sin)(x), ag.elementwise_grad(anp.sin)(x))
    v1, d1 = value_and_grad(make(rnp))(x)
    v2, d2 = ag.value_and_grad(make(anp))(x)
    close(v1, v2)
    close(d1, d2, rtol=1e-10)
    close(jacobian(rnp.tanh)(x), ag.jacobian(anp.tanh)(x))
    f2 = lambda x, y: anp.sum(x * y ** 2)  # noqa: E731
    close(grad(lambda x, y: rnp.sum(x * y ** 2), argnum=(0, 1))(x, v)[1],
          ag.grad(f2, argnum=(0, 1))(x, v)[1])
