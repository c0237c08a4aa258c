"""The PyTorch-style API: Tensor attributes and operators, backward, autograd.grad with PyTorch's
semantics, grad modes, gradient accumulation, retain_grad, double backward, and NumPy's own
functions dispatching to differentiable versions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd


def leaf(values: Any, dtype: Any = np.float64) -> Tensor:
    return rlgrad.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


def close(a: Any, b: Any) -> None:
    a = a._value if isinstance(a, Tensor) else a
    b = b._value if isinstance(b, Tensor) else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------------------------
def test_attributes() -> None:
    data = np.arange(6.0).reshape(2, 3)
    t = rlgrad.tensor(data, requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad_fn is None and t.grad is None
    assert t.shape == (2, 3) and t.ndim == 2 and t.dtype == np.float64
    assert isinstance(t._value, np.ndarray) and not isinstance(t._value, Tensor)
    assert t.T.shape == (3, 2)
    close(t.T, data.T)
    assert t.T.requires_grad
    assert len(t) == 2 and t.numel() == 6 and t.dim() == 2 and t.size() == (2, 3) and t.size(1) == 3


def test_computed_tensor_attributes() -> None:
    x = leaf([1.0, 2.0])
    y = x * 3
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    c = rlgrad.tensor([1.0, 2.0]) * 3
    assert not c.requires_grad and c.is_leaf and c.grad_fn is None


def test_int_float_of_any_one_element_tensor() -> None:
    """As torch: int() and float() take a one-element tensor of any rank (SB3's tests write
    ``int(dist.entropy().exp())`` on a shape (1,) result); more elements is one line."""
    assert int(rlgrad.tensor([2.7])) == 2 and int(rlgrad.tensor([[3]])) == 3
    assert float(rlgrad.tensor([[0.5]])) == 0.5 and float(rlgrad.tensor(1.5)) == 1.5
    assert int(leaf([4.0])) == 4  # as torch: no gradient is asked for
    with pytest.raises(TypeError, match=r"int\(\) needs a tensor with one element.*\(2,\)"):
        int(rlgrad.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"float\(\) needs a tensor with one element"):
        float(rlgrad.tensor(np.zeros((0,))))


def test_item_numpy_detach() -> None:
    x = leaf([[2.5]])
    v = x.item()
    assert v == 2.5 and isinstance(v, float)
    assert isinstance(rlgrad.tensor(np.array(3, dtype=np.int64)).item(), int)
    with pytest.raises(ValueError, match=r"one element.*\(2,\)"):
        leaf([1.0, 2.0]).item()
    with pytest.raises(RuntimeError, match="detach"):
        x.numpy()  # a gradient would be dropped
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert np.shares_memory(d._value, x._value)  # as torch: same storage
    arr = d.numpy()
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64
    assert rlgrad.tensor([1.0]).numpy().dtype == np.float32
    # detach cuts the graph
    y = (x.detach() * x).sum()
    y.backward()
    close(x.grad, x._value)


def test_tensor_constructor() -> None:
    t = rlgrad.tensor([1.0, 2.0], requires_grad=True)
    assert t.dtype == np.float32 and t.requires_grad
    assert rlgrad.tensor([1, 2]).dtype == np.int64
    assert rlgrad.tensor(np.ones(2, dtype=np.float16)).dtype == np.float16
    assert rlgrad.tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert rlgrad.tensor(np.ones(2), dtype=np.float32).dtype == np.float32
    assert rlgrad.tensor(3.5).shape == () and rlgrad.tensor(3.5).dtype == np.float32
    assert not rlgrad.tensor([1.0]).requires_grad
    u = rlgrad.tensor(t)  # from a Tensor: a new leaf holding the same values
    assert u.is_leaf and not u.requires_grad
    close(u, t._value)


def test_tensor_copies_its_data() -> None:
    """As torch.tensor: the new leaf never aliases the array (or Tensor) it was made from, so an
    in-place optimizer step on one (p._value -= lr * g) cannot change the other (a target network
    copied with rlgrad.tensor stays put)."""
    arr = np.zeros(3)
    p = rlgrad.tensor(arr, requires_grad=True)
    p._value -= 1.0
    close(arr, np.zeros(3))
    target = rlgrad.tensor(p)
    p._value -= 1.0
    close(target, -np.ones(3))
    view = np.arange(6.0)[::2]
    assert not np.shares_memory(rlgrad.tensor(view)._value, view)


# ---------------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------------
A = np.array([0.5, -1.5, 2.0])
B = np.array([1.5, 0.25, -0.75])

BINARY = [
    ("+", lambda a, b: a + b, lambda a, b: (np.ones(3), np.ones(3))),
    ("-", lambda a, b: a - b, lambda a, b: (np.ones(3), -np.ones(3))),
    ("*", lambda a, b: a * b, lambda a, b: (b, a)),
    ("/", lambda a, b: a / b, lambda a, b: (1 / b, -a / b ** 2)),
    ("@", lambda a, b: a @ b, lambda a, b: (b, a)),
]


@pytest.mark.parametrize("name, op, grads", BINARY, ids=[b[0] for b in BINARY])
def test_binary_operators(name: str, op: Any, grads: Any) -> None:
    a, b = leaf(A), leaf(B)
    out = op(a, b)
    assert isinstance(out, Tensor) and out.requires_grad
    close(out, op(A, B))
    out.sum().backward()
    ga, gb = grads(A, B)
    close(a.grad, ga)
    close(b.grad, gb)


@pytest.mark.parametrize("name, op, grads", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("left", ["ndarray", "scalar"])
def test_reflected_operators(name: str, op: Any, grads: Any, left: str) -> None:
    """ndarray or Python scalar on the left: the Tensor's reflected operator, a Tensor out."""
    if left == "scalar" and name == "@":
        return
    lhs: Any = B if left == "ndarray" else 1.5
    b = leaf(A)
    out = op(lhs, b)
    assert isinstance(out, Tensor) and out.requires_grad, type(out)
    close(out, op(lhs, A))
    out.sum().backward()
    expected = grads(np.broadcast_to(lhs, A.shape), A)[1]
    close(b.grad, expected if name != "@" else B)


def test_power_operators() -> None:
    x = leaf([0.5, 2.0])
    close(x ** 2, x._value ** 2)
    (x ** 3).sum().backward()
    close(x.grad, 3 * x._value ** 2)
    x = leaf([0.5, 2.0])
    (2.0 ** x).sum().backward()  # __rpow__ with a Python scalar
    close(x.grad, np.log(2.0) * 2.0 ** x._value)
    x = leaf([0.5, 2.0])
    (np.array([3.0, 4.0]) ** x).sum().backward()  # an ndarray base
    close(x.grad, np.log([3.0, 4.0]) * np.array([3.0, 4.0]) ** x._value)
    x, y = leaf([0.5, 2.0]), leaf([1.5, -1.0])
    (x ** y).sum().backward()
    close(x.grad, y._value * x._value ** (y._value - 1))
    close(y.grad, np.log(x._value) * x._value ** y._value)


def test_unary_operators() -> None:
    x = leaf([1.0, -2.0])
    (-x).sum().backward()
    close(x.grad, [-1.0, -1.0])
    x = leaf([1.0, -2.0])
    abs(x).sum().backward()
    close(x.grad, [1.0, -1.0])
    assert (+x) is x


def test_comparisons_are_non_differentiable_booleans() -> None:
    x = leaf([1.0, 2.0, 3.0])
    for out in (x > 2, x >= 2, x < 2, x <= 2, x == 2, x != 2, np.ones(3) < x, 2.0 > x):
        assert isinstance(out, Tensor)
        assert out.dtype == np.bool_
        assert not out.requires_grad and out.grad_fn is None
    close((x > 1.5)._value, [False, True, True])
    close((x == 2)._value, [False, True, False])
    with pytest.raises(TypeError, match="bool"):
        (x > 1).requires_grad_()
    # a comparison used as a mask keeps the gradient of the masked value
    y = (x * (x > 1.5)).sum()
    y.backward()
    close(x.grad, [0.0, 1.0, 1.0])


def test_getitem_is_differentiable() -> None:
    x = leaf(np.arange(12.0).reshape(3, 4))
    parts = [x[1], x[:, 2], x[0, 1:3], x[..., -1], x[[0, 0, 2]], x[x._value > 8], x[None, 1, ::2],
             x[rlgrad.tensor(np.array([2, 2]))]]
    total = sum(p.sum() for p in parts)
    total.backward()
    g = np.zeros((3, 4))
    g[1] += 1
    g[:, 2] += 1
    g[0, 1:3] += 1
    g[..., -1] += 1
    g[0] += 2  # repeated fancy indices accumulate
    g[2] += 1
    g[x._value > 8] += 1
    g[1, ::2] += 1
    g[2] += 2
    close(x.grad, g)
    with pytest.raises(TypeError, match="index"):
        x[leaf([0.0])]


def test_inplace_operators_follow_torch() -> None:
    p = leaf(np.ones(3, dtype=np.float32), np.float32)
    (p * p).sum().backward()
    arr = p._value
    with rlgrad.no_grad():  # the SGD step torch users write: updates the parameter itself
        p -= 0.5 * p.grad
        p *= 2.0
    assert p._value is arr and p.is_leaf and p.requires_grad and p.dtype == np.float32
    close(p, np.zeros(3))
    with pytest.raises(RuntimeError, match=r"leaf Variable that requires grad.*in-place.*no_grad"):
        p += 1.0
    total: Any = 0.0
    for k in range(1, 4):  # accumulating a loss: a new recorded tensor each time
        total += (p + k).sum()
    assert total.requires_grad
    total.backward()
    close(p.grad, np.full(3, 2.0 + 3.0))  # 2 from the first backward, 3 from this one
    c = rlgrad.tensor(np.arange(3.0))
    view = c._value
    c /= 2.0
    c += rlgrad.tensor(np.ones(3))
    assert c._value is view
    close(c, np.arange(3.0) / 2 + 1)
    with pytest.raises(ValueError):
        c += np.ones((2, 3))


def test_setitem_on_requires_grad_raises() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="in-place"):
        x[0] = 3.0
    c = rlgrad.tensor(np.array([1.0, 2.0]))
    c[0] = 3.0
    close(c, [3.0, 2.0])


# ---------------------------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------------------------
def test_backward_scalar() -> None:
    x = leaf([1.0, 2.0, 3.0])
    y = (x ** 2).sum()
    assert y.backward() is None
    assert isinstance(x.grad, Tensor) and not x.grad.requires_grad
    close(x.grad, 2 * x._value)


def test_backward_with_gradient() -> None:
    x = leaf([1.0, 2.0, 3.0])
    y = x * x
    y.backward(np.array([1.0, 0.0, -1.0]))
    close(x.grad, [2.0, 0.0, -6.0])
    x = leaf([1.0, 2.0, 3.0])
    (x * 2).backward(gradient=rlgrad.tensor(np.ones(3)))
    close(x.grad, [2.0, 2.0, 2.0])
    x = leaf([1.0, 2.0])
    x.sum().backward(gradient=rlgrad.tensor(3.0, dtype=np.float64))  # scalar seeds scale
    close(x.grad, [3.0, 3.0])


def test_backward_on_a_leaf_and_one_element_tensor() -> None:
    x = leaf([4.0])
    x.backward()
    close(x.grad, [1.0])
    y = leaf([[1.0, 2.0]])
    (y[:, :1] * 5).backward()  # shape (1, 1): one element, no gradient needed
    close(y.grad, [[5.0, 0.0]])


def test_gradient_accumulates_across_backward_calls() -> None:
    x = leaf([1.0, 2.0])
    (x * 3).sum().backward()
    (x ** 2).sum().backward()
    close(x.grad, 3 + 2 * x._value)
    x.grad = None  # zeroing, as optimizer.zero_grad(set_to_none=True)
    (x * 5).sum().backward()
    close(x.grad, [5.0, 5.0])


def test_retain_graph_allows_a_second_backward() -> None:
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    close(x.grad, 2 * np.exp(x._value) * (1 + x._value))


def test_intermediate_grads_only_with_retain_grad() -> None:
    x = leaf([1.0, 2.0])
    h = x * 3
    k = h + 1
    h.retain_grad()
    (k ** 2).sum().backward()
    close(h.grad, 2 * (3 * x._value + 1))
    assert k.grad is None  # not retained: as torch
    close(x.grad, 6 * (3 * x._value + 1))
    with pytest.raises(RuntimeError, match="retain_grad"):
        rlgrad.tensor([1.0]).retain_grad()


def test_shared_subexpressions_and_reused_inputs() -> None:
    x = leaf([0.5, -1.0])
    h = x.tanh()
    y = (h * h + h + x * x).sum()
    y.backward()
    t = np.tanh(x._value)
    close(x.grad, (2 * t + 1) * (1 - t ** 2) + 2 * x._value)


def test_double_backward_via_create_graph() -> None:
    x = leaf([1.0, 2.0])
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    g = x.grad
    assert g.requires_grad  # the gradient is itself recorded
    close(g, 3 * x._value ** 2)
    x.grad = None
    g.sum().backward()
    close(x.grad, 6 * x._value)


def test_backward_inputs_restricts_accumulation() -> None:
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (x * w).sum().backward(inputs=[w])
    close(w.grad, x._value)
    assert x.grad is None


def test_no_grad_from_rlgrad_backward_function() -> None:
    x = leaf([1.0, 2.0])
    a, b = (x * 2).sum(), (x * x).sum()
    autograd.backward([a, b])
    close(x.grad, 2 + 2 * x._value)


# ---------------------------------------------------------------------------------------------
# autograd.grad
# ---------------------------------------------------------------------------------------------
def test_autograd_grad_returns_tuple_and_leaves_grad_alone() -> None:
    x = leaf([1.0, 2.0])
    gs = autograd.grad((x ** 2).sum(), x)
    assert isinstance(gs, tuple) and len(gs) == 1
    assert isinstance(gs[0], Tensor) and not gs[0].requires_grad
    close(gs[0], 2 * x._value)
    assert x.grad is None


def test_autograd_grad_several_inputs_and_outputs() -> None:
    x, w = leaf([1.0, 2.0]), leaf([0.5, -0.5])
    a = (x * w).sum()
    b = (x ** 2).sum()
    gx, gw = autograd.grad([a, b], [x, w])
    close(gx, w._value + 2 * x._value)
    close(gw, x._value)
    x, w = leaf([1.0, 2.0]), leaf([0.5, -0.5])
    a, b = (x * w).sum(), (x ** 2).sum()
    (gx,) = autograd.grad([a, b], [x], grad_outputs=[rlgrad.tensor(np.array(2.0)), np.array(-1.0)])
    close(gx, 2 * w._value - 2 * x._value)


def test_autograd_grad_grad_outputs() -> None:
    x = leaf([1.0, 2.0, 3.0])
    y = x ** 2
    v = np.array([1.0, -2.0, 0.5])
    (g,) = autograd.grad(y, x, grad_outputs=v)
    close(g, 2 * x._value * v)
    (g,) = autograd.grad(x * 1.0, x, grad_outputs=rlgrad.tensor(v))
    close(g, v)


def test_autograd_grad_wrt_intermediate() -> None:
    x = leaf([1.0, 2.0])
    h = x * 2
    y = (h ** 2).sum()
    gh, gx = autograd.grad(y, [h, x])
    close(gh, 2 * h._value)
    close(gx, 4 * h._value)


def test_autograd_grad_retain_graph() -> None:
    x = leaf([1.0, 2.0])
    y = (x ** 2).sum()
    autograd.grad(y, x, retain_graph=True)
    (g,) = autograd.grad(y, x)  # the graph was kept
    close(g, 2 * x._value)
    with pytest.raises(RuntimeError, match="second time"):
        autograd.grad(y, x)


def test_autograd_grad_create_graph_and_higher_orders() -> None:
    x = leaf([0.5, 1.5])
    y = (x ** 4).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    assert g.requires_grad
    (h,) = autograd.grad(g.sum(), x, create_graph=True)
    close(h, 12 * x._value ** 2)
    (t,) = autograd.grad(h.sum(), x, create_graph=True)
    close(t, 24 * x._value)
    (f,) = autograd.grad(t.sum(), x)
    close(f, [24.0, 24.0])
    assert x.grad is None


def test_autograd_grad_gradient_penalty_style() -> None:
    """The WGAN-GP / R1 pattern: a loss on the norm of an input gradient, backpropagated to the
    parameters through create_graph."""
    w = leaf([0.3, -0.7])
    x = leaf([1.0, 2.0])
    out = (rnp.tanh(x * w)).sum()
    (gx,) = autograd.grad(out, x, create_graph=True)
    penalty = (gx ** 2).sum()
    penalty.backward()
    t = np.tanh(x._value * w._value)
    s = 1 - t ** 2  # d out / d x = w s ; penalty = sum w^2 s^2
    ds_dw = -2 * t * s * x._value
    close(w.grad, 2 * w._value * s ** 2 + w._value ** 2 * 2 * s * ds_dw)


def test_autograd_grad_differentiable_in_grad_outputs() -> None:
    """The double-VJP trick for forward mode: d/dv [v . J] = J."""
    x = leaf([1.0, 2.0])
    v = leaf([0.0, 0.0])
    y = x ** 3
    (g,) = autograd.grad(y, x, grad_outputs=v, create_graph=True)
    (jv,) = autograd.grad(g, v, grad_outputs=np.array([1.0, 1.0]))
    close(jv, 3 * x._value ** 2)


def test_autograd_grad_allow_unused() -> None:
    x, z = leaf([1.0]), leaf([2.0])
    y = (x * 2).sum()
    gx, gz = autograd.grad(y, [x, z], allow_unused=True)
    close(gx, [2.0])
    assert gz is None
    y = (x * 2).sum()
    gx, gz = autograd.grad(y, [x, z], allow_unused=True, materialize_grads=True)
    close(gz, [0.0])


# ---------------------------------------------------------------------------------------------
# Grad modes and stop_gradient
# ---------------------------------------------------------------------------------------------
def test_no_grad_context_manager() -> None:
    x = leaf([1.0])
    with rlgrad.no_grad():
        y = x * 2
        assert not rlgrad.is_grad_enabled()
    assert rlgrad.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    close(y, [2.0])


def test_enable_grad_inside_no_grad_and_restore_on_error() -> None:
    x = leaf([1.0])
    with rlgrad.no_grad():
        with rlgrad.enable_grad():
            a = x * 2
        b = x * 2
    assert a.requires_grad and not b.requires_grad
    with pytest.raises(ZeroDivisionError):
        with rlgrad.no_grad():
            1 / 0  # noqa: B018
    assert rlgrad.is_grad_enabled()


def test_grad_modes_as_decorators() -> None:
    x = leaf([1.0])

    @rlgrad.no_grad()
    def f(t: Tensor) -> Tensor:
        return t * 2

    @rlgrad.no_grad
    def f_bare(t: Tensor) -> Tensor:  # torch also accepts the bare decorator
        return t * 2

    @rlgrad.enable_grad()
    def g(t: Tensor) -> Tensor:
        return t * 2

    @rlgrad.set_grad_enabled(False)
    def h(t: Tensor) -> Tensor:
        return t * 2

    assert not f(x).requires_grad
    assert not f_bare(x).requires_grad
    assert not h(x).requires_grad
    assert rlgrad.is_grad_enabled()
    with rlgrad.no_grad():
        assert g(x).requires_grad
        assert not rlgrad.is_grad_enabled()
    assert f.__name__ == "f"


def test_set_grad_enabled() -> None:
    x = leaf([1.0])
    with rlgrad.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad
    with rlgrad.no_grad():
        with rlgrad.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not rlgrad.is_grad_enabled()
    try:
        rlgrad.set_grad_enabled(False)  # as torch: a plain call sets the mode
        assert not rlgrad.is_grad_enabled()
    finally:
        rlgrad.set_grad_enabled(True)
    assert rlgrad.is_grad_enabled()


def test_stop_gradient() -> None:
    x = leaf([1.0, 2.0])
    s = rlgrad.stop_gradient(x)
    assert not s.requires_grad
    close(s, x._value)
    y = (rlgrad.stop_gradient(x * x) * x).sum()
    (g,) = autograd.grad(y, x)
    close(g, x._value ** 2)
    arr = np.ones(2)
    assert rlgrad.stop_gradient(arr) is arr  # plain arrays pass through


# ---------------------------------------------------------------------------------------------
# NumPy's own functions on Tensors
# ---------------------------------------------------------------------------------------------
def test_numpy_ufuncs_dispatch() -> None:
    x = leaf([0.5, 1.5])
    y = np.exp(x)
    assert isinstance(y, Tensor) and y.requires_grad
    y2 = np.sum(np.tanh(x) * np.log(x))
    assert isinstance(y2, Tensor)
    y2.backward()
    t = np.tanh(x._value)
    close(x.grad, (1 - t ** 2) * np.log(x._value) + t / x._value)
    for fn in (np.sin, np.sqrt, np.square, np.negative, np.abs, np.log1p):
        out = fn(x)
        assert isinstance(out, Tensor) and out.requires_grad, fn.__name__
        close(out, fn(x._value))
    out = np.maximum(x, 1.0)
    assert isinstance(out, Tensor) and out.requires_grad


def test_numpy_array_functions_dispatch() -> None:
    x = leaf([[1.0, 2.0], [3.0, 5.0]])
    for fn in (lambda t: np.sum(t), lambda t: np.mean(t, axis=0), lambda t: np.linalg.inv(t),
               lambda t: np.linalg.det(t), lambda t: np.concatenate([t, t]),
               lambda t: np.reshape(t, (4,)), lambda t: np.transpose(t), lambda t: np.dot(t, t),
               lambda t: np.stack([t, t]), lambda t: np.clip(t, 1.5, 4.0),
               lambda t: np.linalg.norm(t), lambda t: np.std(t), lambda t: np.max(t, axis=1),
               lambda t: np.where(np.array([True, False]), t, 0.0), lambda t: np.matmul(t, t)):
        out = fn(x)
        assert isinstance(out, Tensor) and out.requires_grad
        close(out, fn(x._value))
    g = np.linalg.inv(x)
    g.sum().backward()
    inv = np.linalg.inv(x._value)
    close(x.grad, -(inv.T @ np.ones((2, 2)) @ inv.T))


def test_numpy_keyword_spellings_are_differentiable() -> None:
    """NumPy's keyword names reach the primitives and their gradient rules."""
    x = leaf([[0.2, 1.0, 2.0]])
    outs = [
        rnp.clip(x, a_min=0.5, a_max=1.5), np.clip(x, min=0.5, max=1.5),
        rnp.take_along_axis(x, indices=np.array([[2, 2]]), axis=1),
        rnp.reshape(x, shape=(3, 1)), rnp.sum(x, axis=1, keepdims=True), rnp.roll(x, shift=1, axis=1),
        rnp.repeat(x, repeats=2, axis=1), rnp.tile(x, reps=2), rnp.flip(x, axis=1),
        rnp.broadcast_to(x, shape=(2, 3)), rnp.transpose(x, axes=(1, 0)), rnp.cumsum(x, axis=1),
        rnp.pad(x, pad_width=1), rnp.moveaxis(x, source=0, destination=1),
    ]
    total = sum(rnp.sum(o) for o in outs)
    total.backward()
    expected = np.array([[0.0, 1.0, 0.0]]) * 2 + np.array([[0.0, 0.0, 2.0]])
    # reshape, sum, roll, repeat x2, tile x2, flip, broadcast x2, transpose, cumsum, pad, moveaxis
    expected += 1 + 1 + 1 + 2 + 2 + 1 + 2 + 1 + np.array([[3.0, 2.0, 1.0]]) + 1 + 1
    close(x.grad, expected)


@pytest.mark.parametrize("call, name", [
    (lambda t: np.median(t), "median"),
    (lambda t: np.cbrt(t), "cbrt"),
    (lambda t: np.linalg.lstsq(t, t), "lstsq"),
    (lambda t: np.add.reduce(t), "add.reduce"),
    (lambda t: np.exp(t, out=np.zeros((2, 2))), "exp"),
    (lambda t: np.percentile(t, 50), "percentile"),
])
def test_unsupported_numpy_function_raises_naming_it(call: Any, name: str) -> None:
    x = leaf([[2.0, 0.5], [0.5, 3.0]])
    with pytest.raises(TypeError, match=rf"numpy\.(linalg\.)?{name}.*no differentiable"):
        call(x)


def test_constants_shaped_like_a_tensor_and_predicates() -> None:
    """zeros_like & co. carry no gradient, so they accept Tensors (via NumPy or rlgrad.numpy)."""
    x = leaf([1.0, 2.0], np.float32)
    for fn, value in ((np.zeros_like, 0.0), (rnp.zeros_like, 0.0), (np.ones_like, 1.0),
                      (rnp.ones_like, 1.0), (lambda t: np.full_like(t, 3.0), 3.0)):
        c = fn(x)
        assert isinstance(c, Tensor) and not c.requires_grad and c.dtype == np.float32
        close(c, np.full(2, value))
    assert np.empty_like(x).shape == (2,)
    assert np.allclose(x, [1.0, 2.0]) is True and np.array_equal(x, x) is True
    close(np.isclose(x, 1.0), [True, False])
    assert np.result_type(x) == np.float32
    assert isinstance(rnp.zeros_like(np.ones(2)), np.ndarray)  # plain in, plain out


def test_boolean_and_index_valued_numpy_functions_accept_tensors() -> None:
    """No gradient exists for them, so nothing can be dropped: they run on the values."""
    x = leaf([[0.5, -1.0, 2.0]])
    assert np.all(x > -2) and not np.all(x > 0) and np.any(x > 1)
    assert np.count_nonzero(x > 0) == 2
    np.testing.assert_array_equal(np.nonzero(x > 0)[1], [0, 2])
    np.testing.assert_array_equal(np.argwhere(x < 0), [[0, 1]])
    assert np.searchsorted(rlgrad.tensor(np.array([1.0, 2.0, 3.0])), 2.5) == 2
    np.testing.assert_array_equal(np.signbit(x), [[False, True, False]])


def test_np_asarray_of_requires_grad_tensor_raises() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="detach"):
        np.asarray(x)
    with pytest.raises(TypeError, match="detach"):
        np.array(x * 2)
    arr = np.asarray(x.detach())
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64
    close(arr, x._value)


def test_rlgrad_numpy_on_plain_arrays_returns_plain_arrays() -> None:
    a = np.array([0.5, 1.5])
    for out in (rnp.exp(a), rnp.sum(a), rnp.linalg.inv(np.eye(2)), rnp.var(a), a @ rnp.ones(2),
                rnp.concatenate([a, a]), rnp.where(a > 1, a, 0.0), rnp.softmax(a)):
        assert not isinstance(out, Tensor)


# ---------------------------------------------------------------------------------------------
# Methods (NumPy names and torch aliases)
# ---------------------------------------------------------------------------------------------
def test_reduction_methods_numpy_and_torch_keywords() -> None:
    data = np.arange(6.0).reshape(2, 3)
    x = leaf(data)
    close(x.sum(axis=0), data.sum(0))
    close(x.sum(dim=1, keepdim=True), data.sum(1, keepdims=True))
    close(x.mean(1), data.mean(1))
    close(x.amax(dim=0), data.max(0))  # values, as torch.amax (torch's max(dim) is a pair)
    close(x.var(), data.var(ddof=1))  # PyTorch: unbiased by default
    close(x.var(unbiased=False), data.var())
    close(x.std(dim=1, correction=1), data.std(1, ddof=1))
    close(x.reshape(3, 2), data.reshape(3, 2))
    close(x.reshape((6,)), data.reshape(6))
    close(x.transpose(0, 1), data.T)
    close(x.unsqueeze(0), data[None])
    close(x.softmax(dim=-1), np.exp(data) / np.exp(data).sum(-1, keepdims=True))
    y = x.sum(dim=1).mean()
    y.backward()
    close(x.grad, np.full((2, 3), 0.5))


def test_kink_and_tie_conventions_match_torch() -> None:
    """Where the derivative does not exist, the value torch uses (checked against torch 2.13)."""
    x = leaf([1.0, 2.0, 2.0])
    rnp.max(x).backward()  # ties share evenly, as torch.amax / Tensor.max()
    close(x.grad, [0.0, 0.5, 0.5])
    a, b = leaf([1.0, 2.0]), leaf([1.0, 3.0])
    rnp.maximum(a, b).sum().backward()  # a tie in maximum: half each
    close(a.grad, [0.5, 0.0])
    close(b.grad, [0.5, 1.0])
    for fn, expected in ((rnp.abs, [0.0, 1.0]), (lambda t: t.relu(), [0.0, 1.0]),
                         (lambda t: t.clamp(0.0, 1.0), [1.0, 0.0])):
        z = leaf([0.0, 2.0])
        fn(z).sum().backward()
        close(z.grad, expected)


def test_against_torch() -> None:
    torch = pytest.importorskip("torch")
    data = np.array([[0.3, -1.2, 2.0], [0.7, 0.1, -0.4]])
    x = rlgrad.tensor(data, requires_grad=True)
    xt = torch.tensor(data, requires_grad=True)
    y = (x.tanh() * x.softmax(dim=1)).sum()
    yt = (xt.tanh() * xt.softmax(dim=1)).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    close(g, gt.detach().numpy())
    (g.sum() * 2).backward()
    (gt.sum() * 2).backward()
    close(x.grad, xt.grad.numpy())


def test_max_with_a_dim_is_torchs_values_and_indices_pair() -> None:
    # q.max(1)[0] is the DQN idiom: it must mean "the values", never "row 0"
    data = np.array([[1.0, 5.0], [7.0, 2.0]])
    q = rlgrad.tensor(data, requires_grad=True)
    values, indices = q.max(1)
    np.testing.assert_array_equal(q.max(1)[0]._value, [5.0, 7.0])
    np.testing.assert_array_equal(q.max(dim=1).values._value, [5.0, 7.0])
    np.testing.assert_array_equal(indices._value, [1, 0])
    np.testing.assert_array_equal(q.min(0, keepdim=True).indices._value, [[0, 1]])
    np.testing.assert_array_equal(q.max(axis=1)._value, [5.0, 7.0])  # NumPy's spelling: values
    assert q.max().item() == 7.0
    values.sum().backward()
    np.testing.assert_array_equal(q.grad._value, [[0.0, 1.0], [1.0, 0.0]])


def test_each_grad_is_its_own_array_so_in_place_edits_touch_one_parameter() -> None:
    a = rlgrad.tensor(np.ones(3), requires_grad=True)
    b = rlgrad.tensor(np.ones(3), requires_grad=True)
    (a + b).sum().backward()  # add's rule hands the same gradient to both
    a.grad._value *= 0.5  # what PyTorch code does to a .grad
    np.testing.assert_array_equal(a.grad._value, [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(b.grad._value, [1.0, 1.0, 1.0])
    seed = np.array([1.0, 2.0, 3.0])
    c = rlgrad.tensor(np.zeros(3), requires_grad=True)
    c.backward(seed)
    c.grad._value[0] = 9.0
    assert seed[0] == 1.0  # the seed gradient is not aliased by .grad
