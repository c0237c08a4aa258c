"""dtypes are preserved end to end: float32 stays float32 (forward, gradients, every node of the
recorded backward pass, second order, functional transforms), float64 stays float64, no silent
upcasts; rlgrad.tensor keeps NumPy dtypes; integer and boolean tensors never require grad."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd, ops

RNG = np.random.default_rng(0)
X = RNG.random((3, 3)) + 0.5  # in [0.5, 1.5): inside every domain below, distinct values
A = RNG.standard_normal((3, 3)) * 0.3 + 3 * np.eye(3)  # well conditioned


def _float_nodes(t: Any) -> dict[str, np.dtype]:
    """dtype of every floating Tensor in the graph that produced ``t``, by op name."""
    found: dict[str, np.dtype] = {}
    stack, seen = [t], set()
    while stack:
        u = stack.pop()
        if not isinstance(u, Tensor) or id(u) in seen:
            continue
        seen.add(id(u))
        if u._value.dtype.kind == "f":
            found.setdefault(f"{u._op.name if u._op else 'leaf'}#{len(found)}", u._value.dtype)
        stack.extend(u._args or ())
    return found


def _assert_graph_dtype(t: Any, dtype: Any, what: str) -> None:
    bad = {k: v for k, v in _float_nodes(t).items() if v != dtype}
    assert not bad, f"{what}: nodes not in {np.dtype(dtype)}: {bad}"


OPS: list[tuple[str, Callable[[Any, Any], Any]]] = [
    # (name, fn(x, a)) where x is the differentiated input, a a constant of the same dtype
    ("exp", lambda x, a: rnp.exp(x)),
    ("log", lambda x, a: rnp.log(x)),
    ("log1p", lambda x, a: rnp.log1p(x)),
    ("expm1", lambda x, a: rnp.expm1(x)),
    ("sqrt", lambda x, a: rnp.sqrt(x)),
    ("square", lambda x, a: rnp.square(x)),
    ("reciprocal", lambda x, a: rnp.reciprocal(x)),
    ("abs", lambda x, a: rnp.abs(x - 1.01)),
    ("sign", lambda x, a: rnp.sign(x - 1.01) * x),
    ("tanh", lambda x, a: rnp.tanh(x)),
    ("sin", lambda x, a: rnp.sin(x)),
    ("cos", lambda x, a: rnp.cos(x)),
    ("tan", lambda x, a: rnp.tan(x)),
    ("arcsin", lambda x, a: rnp.arcsin(x / 2)),
    ("arccos", lambda x, a: rnp.arccos(x / 2)),
    ("arctan", lambda x, a: rnp.arctan(x)),
    ("sinh", lambda x, a: rnp.sinh(x)),
    ("cosh", lambda x, a: rnp.cosh(x)),
    ("arcsinh", lambda x, a: rnp.arcsinh(x)),
    ("arctanh", lambda x, a: rnp.arctanh(x / 2)),
    ("sigmoid", lambda x, a: rnp.sigmoid(x)),
    ("softplus", lambda x, a: ops.softplus(x)),
    ("relu", lambda x, a: ops.relu(x - 1.01)),
    ("floor", lambda x, a: rnp.floor(x) * x),
    ("sinc", lambda x, a: rnp.sinc(x)),
    ("heaviside", lambda x, a: rnp.heaviside(x - 1.01, 0.5) * x),
    ("add", lambda x, a: x + a),
    ("subtract", lambda x, a: a - x),
    ("multiply", lambda x, a: x * a),
    ("divide", lambda x, a: a / x),
    ("python scalars", lambda x, a: 2.5 * x - 1.5 / x + 0.5),
    ("power", lambda x, a: x ** x),
    ("power const exp", lambda x, a: x ** 2.5),
    ("rpow", lambda x, a: 2.0 ** x),
    ("maximum", lambda x, a: rnp.maximum(x, x.T)),
    ("minimum", lambda x, a: rnp.minimum(x, 1.0)),
    ("logaddexp", lambda x, a: rnp.logaddexp(x, a)),
    ("arctan2", lambda x, a: rnp.arctan2(x, a)),
    ("clip", lambda x, a: rnp.clip(x, 0.7, 1.2)),
    ("where", lambda x, a: rnp.where(x > 1, x, -x)),
    ("sum", lambda x, a: rnp.sum(x, axis=0)),
    ("mean", lambda x, a: rnp.mean(x, axis=(0, 1), keepdims=True)),
    ("prod", lambda x, a: rnp.prod(x, axis=1)),
    ("max", lambda x, a: rnp.max(x, axis=0)),
    ("min", lambda x, a: rnp.min(x)),
    ("var", lambda x, a: rnp.var(x, axis=0, ddof=1)),
    ("std", lambda x, a: rnp.std(x)),
    ("logsumexp", lambda x, a: rnp.logsumexp(x, axis=1)),
    ("softmax", lambda x, a: rnp.softmax(x)),
    ("log_softmax", lambda x, a: rnp.log_softmax(x, axis=0)),
    ("cumsum", lambda x, a: rnp.cumsum(x, axis=0)),
    ("cumprod", lambda x, a: rnp.cumprod(x, axis=1)),
    ("sort", lambda x, a: rnp.sort(x)),
    ("reshape", lambda x, a: rnp.reshape(x, (9,)) * 2),
    ("transpose", lambda x, a: rnp.transpose(x) * a),
    ("broadcast_to", lambda x, a: rnp.broadcast_to(x[0], (2, 3, 3))),
    ("concatenate", lambda x, a: rnp.concatenate([x, a])),
    ("stack", lambda x, a: rnp.stack([x, a], axis=1)),
    ("split", lambda x, a: rnp.split(x, 3, axis=1)[1]),
    ("flip", lambda x, a: rnp.flip(x, 0) * a),
    ("roll", lambda x, a: rnp.roll(x, 1, axis=1) * a),
    ("tile", lambda x, a: rnp.tile(x, (2, 1))),
    ("repeat", lambda x, a: rnp.repeat(x, 2, axis=0)),
    ("pad", lambda x, a: rnp.pad(x, 1)),
    ("diag", lambda x, a: rnp.diag(x)),
    ("triu", lambda x, a: rnp.triu(x) * a),
    ("getitem", lambda x, a: x[[0, 0, 2], 1:]),
    ("take", lambda x, a: rnp.take(x, np.array([1, 1, 0]), axis=1)),
    ("take_along_axis", lambda x, a: rnp.take_along_axis(x, np.array([[0], [2], [2]]), 1)),
    ("gather", lambda x, a: rlgrad.gather(x, 1, np.array([[0], [1], [1]]))),
    ("matmul", lambda x, a: x @ a),
    ("matvec", lambda x, a: x @ a[0]),
    ("dot", lambda x, a: rnp.dot(a[0], x)),
    ("outer", lambda x, a: rnp.outer(x[0], a[1])),
    ("tensordot", lambda x, a: rnp.tensordot(x, a, 1)),
    ("einsum", lambda x, a: rnp.einsum("ij,jk->ik", x, a)),
    ("inv", lambda x, a: rnp.linalg.inv(x + a)),
    ("det", lambda x, a: rnp.linalg.det(x + a)),
    ("slogdet", lambda x, a: rnp.linalg.slogdet(x + a)[1]),
    ("solve", lambda x, a: rnp.linalg.solve(a, x)),
    ("solve vector", lambda x, a: rnp.linalg.solve(x + a, a[0])),
    ("cholesky", lambda x, a: rnp.linalg.cholesky(x @ rnp.transpose(x) + a @ a.T)),
    ("norm", lambda x, a: rnp.linalg.norm(x)),
    ("norm ord=1", lambda x, a: rnp.linalg.norm(x, ord=1, axis=0)),
    ("norm ord=inf", lambda x, a: rnp.linalg.norm(x, ord=np.inf, axis=1)),
    ("norm ord=3", lambda x, a: rnp.linalg.norm(x, ord=3, axis=1)),
    ("norm nuc", lambda x, a: rnp.linalg.norm(x, "nuc")),
    ("norm ord=-inf matrix", lambda x, a: rnp.linalg.norm(x, -np.inf)),
    ("eigh", lambda x, a: rnp.linalg.eigh(x + rnp.transpose(x))[0] * rnp.linalg.eigh(x + a)[1]),
    ("eig", lambda x, a: rnp.linalg.eig(rnp.triu(x) + np.diag([0.0, 3.0, 6.0]).astype(a.dtype))[1]),
    ("svd", lambda x, a: rnp.linalg.svd(x, full_matrices=False)[0] * rnp.linalg.svd(x)[1]),
    ("svdvals", lambda x, a: rnp.linalg.svd(x, compute_uv=False)),
    ("pinv", lambda x, a: rnp.linalg.pinv(x[:, :2])),
    ("matrix_power", lambda x, a: rnp.linalg.matrix_power(x + a, -2)),
    ("array of tensors", lambda x, a: rnp.array([x[0], x[1] * 2, a[2]])),
    ("average", lambda x, a: rnp.average(x, axis=0, weights=x)),
    ("trace", lambda x, a: rnp.trace(x)),
    ("astype same", lambda x, a: rnp.astype(x, x.dtype) * 2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, fn", OPS, ids=[o[0] for o in OPS])
def test_dtype_preserved(name: str, fn: Callable, dtype: Any) -> None:
    x_np = X.astype(dtype)
    a_np = A.astype(dtype)
    plain = fn(x_np, a_np)  # plain NumPy path
    assert np.asarray(plain).dtype == dtype, f"plain forward gave {np.asarray(plain).dtype}"
    x = rlgrad.tensor(x_np, requires_grad=True)
    a = rlgrad.tensor(a_np)
    y = fn(x, a)
    assert isinstance(y, Tensor) and y.dtype == dtype, f"forward gave {y.dtype}"
    _assert_graph_dtype(y, dtype, "forward")
    # first order, fast path: into .grad
    (y * y).sum().backward()
    assert x.grad.dtype == dtype
    # first order recorded (create_graph): every node of the backward pass keeps the dtype
    x.grad = None
    y = fn(x, a)
    (g,) = autograd.grad((y * y).sum(), x, create_graph=True)
    assert g.dtype == dtype
    _assert_graph_dtype(g, dtype, "first-order backward graph")
    # second order
    (h,) = autograd.grad((g * g).sum(), x, create_graph=True, allow_unused=True)
    if h is not None:
        assert h.dtype == dtype
        _assert_graph_dtype(h, dtype, "second-order backward graph")
    # the functional transforms on plain arrays
    def loss(z: Any) -> Any:
        return rnp.sum(fn(z, a_np) ** 2)

    v, gf = rlgrad.value_and_grad(loss)(x_np)
    assert np.asarray(v).dtype == dtype and gf.dtype == dtype and isinstance(gf, np.ndarray)
    hv = rlgrad.hvp(loss)(x_np, np.ones_like(x_np))
    assert hv.dtype == dtype


def test_tensor_methods_keep_float32() -> None:
    x = rlgrad.tensor(X.astype(np.float32), requires_grad=True)
    y = (x.exp().sum(dim=1, keepdim=True) * x.mean() + x.var(dim=0) - x.std()).T.softmax(dim=0)
    y = y.log_softmax(dim=1).clamp(-5.0, 5.0).reshape(9).max() + x.sigmoid().prod()
    assert y.dtype == np.float32
    (g,) = autograd.grad(y, x, create_graph=True)
    _assert_graph_dtype(g, np.float32, "backward graph")
    g.sum().backward()
    assert x.grad.dtype == np.float32


def test_functional_transforms_keep_float32() -> None:
    x = X.astype(np.float32)
    v = np.ones_like(x)

    def f(z: Any) -> Any:
        return rnp.tanh(z @ z) * 2.0

    def loss(z: Any) -> Any:
        return rnp.sum(f(z) ** 2)

    assert rlgrad.grad(loss)(x).dtype == np.float32
    assert rlgrad.elementwise_grad(f)(x).dtype == np.float32
    assert rlgrad.jacobian(f)(x).dtype == np.float32
    assert rlgrad.hessian(loss)(x).dtype == np.float32
    out, vjp_fn = rlgrad.vjp(f, x)
    assert out.dtype == np.float32 and vjp_fn(v)[0].dtype == np.float32
    vjp_fn2, out2 = rlgrad.make_vjp(f)(x)
    assert out2.dtype == np.float32 and vjp_fn2(v).dtype == np.float32
    out3, tangent = rlgrad.jvp(f, (x,), (v,))
    assert out3.dtype == np.float32 and tangent.dtype == np.float32
    value, tangent = rlgrad.make_jvp(f)(x)(v)
    assert value.dtype == np.float32 and tangent.dtype == np.float32
    hvp_fn, gradient = rlgrad.make_hvp(loss)(x)
    assert hvp_fn(v).dtype == np.float32 and gradient.dtype == np.float32
    assert rlgrad.tensor_jacobian_product(f)(x, v).dtype == np.float32
    g, aux = rlgrad.grad_and_aux(lambda z: (loss(z), f(z)))(x)
    assert g.dtype == np.float32 and aux.dtype == np.float32
    third = rlgrad.grad(lambda z: rnp.sum(rlgrad.grad(lambda w: rnp.sum(rlgrad.grad(loss)(w)))(z)))(x)
    assert third.dtype == np.float32
    params = {"w": x, "b": np.zeros(3, np.float32)}
    gp = rlgrad.grad(lambda p: rnp.sum(rnp.tanh(p["w"] + p["b"])))(params)
    assert gp["w"].dtype == np.float32 and gp["b"].dtype == np.float32
    # a Python-float input is float64, as in NumPy and autograd
    assert np.asarray(rlgrad.grad(lambda s: s * s)(1.5)).dtype == np.float64


def test_policy_gradient_loss_float32_end_to_end() -> None:
    """The benchmark's loss: mean(-log_softmax(logits)[i, a_i] * adv_i) through a tanh MLP."""
    rng = np.random.default_rng(1)
    w1 = rlgrad.tensor(rng.standard_normal((4, 8)).astype(np.float32) * 0.5, requires_grad=True)
    b1 = rlgrad.tensor(np.zeros(8, np.float32), requires_grad=True)
    w2 = rlgrad.tensor(rng.standard_normal((8, 2)).astype(np.float32) * 0.5, requires_grad=True)
    obs = rlgrad.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    actions = np.array([0, 1, 1, 0, 1])
    adv = rlgrad.tensor(rng.standard_normal(5).astype(np.float32))
    logits = rnp.tanh(obs @ w1 + b1) @ w2
    logp = rnp.log_softmax(logits, axis=-1)[np.arange(5), actions]
    loss = rnp.mean(-logp * adv)
    assert loss.dtype == np.float32
    _assert_graph_dtype(loss, np.float32, "forward")
    loss.backward(create_graph=True)
    for p in (w1, b1, w2):
        assert p.grad.dtype == np.float32
        _assert_graph_dtype(p.grad, np.float32, "backward graph")


def test_grad_takes_the_parameter_dtype() -> None:
    """A float32 parameter gets a float32 .grad even when float64 constants promote the graph."""
    x = rlgrad.tensor(np.ones(3, np.float32), requires_grad=True)
    y = (x * np.arange(3.0)).sum()  # NumPy promotion: the product is float64
    assert y.dtype == np.float64
    y.backward()
    assert x.grad.dtype == np.float32
    (g,) = autograd.grad((x * np.arange(3.0)).sum(), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(x.grad._value, [0.0, 1.0, 2.0])


# ---------------------------------------------------------------------------------------------
# rlgrad.tensor and integer / boolean tensors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64,
                                   np.uint8, np.bool_, np.complex64])
def test_tensor_keeps_numpy_dtype(dtype: Any) -> None:
    arr = np.zeros(3, dtype=dtype)
    assert rlgrad.tensor(arr).dtype == dtype
    assert rlgrad.tensor(arr[0]).dtype == dtype  # NumPy scalars too


def test_python_values_get_torch_defaults() -> None:
    assert rlgrad.tensor(1.5).dtype == np.float32
    assert rlgrad.tensor([1.5, 2.0]).dtype == np.float32
    assert rlgrad.tensor([[1, 2.5]]).dtype == np.float32
    assert rlgrad.tensor([1, 2]).dtype == np.int64
    assert rlgrad.tensor(True).dtype == np.bool_
    assert rlgrad.tensor([1.5], dtype=np.float64).dtype == np.float64
    assert rlgrad.zeros(2).dtype == np.float32 and rlgrad.ones((2, 2)).dtype == np.float32


def test_set_default_dtype() -> None:
    prev = rlgrad.get_default_dtype()
    try:
        rlgrad.set_default_dtype(np.float64)
        assert rlgrad.tensor(1.5).dtype == np.float64
        with pytest.raises(TypeError, match="floating"):
            rlgrad.set_default_dtype(np.int32)
    finally:
        rlgrad.set_default_dtype(prev)
    assert rlgrad.tensor(1.5).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
def test_integer_and_bool_tensors_never_require_grad(dtype: Any) -> None:
    arr = np.zeros(2, dtype=dtype)
    with pytest.raises(TypeError, match=f"{np.dtype(dtype).name}.*never differentiable"):
        rlgrad.tensor(arr, requires_grad=True)
    t = rlgrad.tensor(arr)
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        t.requires_grad_()
    assert not t.requires_grad


def test_casts_to_integer_or_bool_leave_the_graph() -> None:
    x = rlgrad.tensor(np.array([0.4, 1.6]), requires_grad=True)
    for out in (x.long(), x.int(), x.bool(), rnp.astype(x, np.int16), rnp.floor_divide(x, 1.0) * 0):
        assert not (out.requires_grad and out.dtype.kind in "iub")
    assert x.long().dtype == np.int64 and not x.long().requires_grad
    y = x.float()
    assert y.dtype == np.float32 and y.requires_grad
    y.sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad._value, [1.0, 1.0])


def test_comparisons_return_bool() -> None:
    for dtype in (np.float32, np.float64, np.int64):
        x = rlgrad.tensor(np.array([1, 2, 3], dtype=dtype), requires_grad=dtype != np.int64)
        for out in (x > 1, x >= 2, x < 2, x <= 1, x == 2, x != 2, rnp.isfinite(x), rnp.isnan(x),
                    rnp.logical_and(x > 1, x < 3), ~(x > 1)):
            assert out.dtype == np.bool_
            assert not out.requires_grad
    x = rlgrad.tensor(np.array([1.0, 3.0]), requires_grad=True)
    assert rnp.argmax(x).dtype.kind == "i" and not rnp.argmax(x).requires_grad


def test_sigmoid_keeps_relative_accuracy_in_the_lower_tail() -> None:
    import math

    import rlgrad.numpy as rnp

    x = np.array([-40.0, -20.0, 0.0, 20.0, 40.0])
    want = np.array([1 / (1 + math.exp(-v)) for v in x])
    np.testing.assert_allclose(rnp.sigmoid(x), want, rtol=1e-14)
    assert rnp.sigmoid(np.float32(-90.0)) > 0  # 8e-40: subnormal in float32, not rounded to 0
    assert rnp.sigmoid(np.array([-1000.0, 1000.0])).tolist() == [0.0, 1.0]  # no overflow warning
