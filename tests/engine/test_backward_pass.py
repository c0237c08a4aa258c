"""The backward pass itself (rlgrad/core.py): the order it visits tensors in, what it skips, and
the shortcuts it takes (pass-through rules, outer products, direct rule calls), each checked
against closed forms or against the plain computation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd, nn
from rlgrad.tracer import defvjp, primitive


def leaf(values: Any) -> Tensor:
    return rlgrad.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


def test_shared_intermediates_are_complete_before_they_pass_on() -> None:
    # y feeds three later tensors created in an order unlike the walk's: y's gradient must hold
    # all three contributions before y hands it to x.
    x = leaf([0.3, -1.2, 2.0])
    y = x * x
    z = rnp.sin(y)
    w = y * 3.0 + z * y
    out = (w + y).sum()
    out.backward()
    xv = x._value
    yv = xv * xv
    dy = 3.0 + np.cos(yv) * yv + np.sin(yv) + 1.0
    np.testing.assert_allclose(x.grad._value, dy * 2 * xv, rtol=1e-13)


def test_a_tensor_used_twice_in_one_op_gets_both_contributions() -> None:
    x = leaf([1.5, -0.5])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad._value, 2 * x._value, rtol=1e-15)
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()  # add passes g itself to both arguments
    assert a.grad._value is not b.grad._value  # each .grad owns its array
    a.grad._value += 1.0
    np.testing.assert_array_equal(b.grad._value, [1.0, 1.0])


def _counting_identity() -> tuple[Any, list[int]]:
    calls = [0]

    def rule(g: Any, ans: Any, x: Any) -> Any:
        calls[0] += 1
        return g

    f = primitive(lambda x: x * 1.0, "counted", arity=1)
    defvjp(f, rule)
    return f, calls


def test_grad_visits_only_the_part_that_reaches_the_inputs() -> None:
    f, calls = _counting_identity()
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    out = (x * 2.0).sum() + f(w).sum()
    (gx,) = autograd.grad(out, x, retain_graph=True)
    np.testing.assert_array_equal(gx._value, [2.0, 2.0])
    assert calls[0] == 0  # the branch to w alone was never walked
    out.backward()
    assert calls[0] == 1
    np.testing.assert_array_equal(w.grad._value, [1.0, 1.0])


def test_grad_with_respect_to_an_intermediate() -> None:
    x = leaf([0.5, -2.0])
    h = rnp.tanh(x)
    out = (h * h).sum()
    gh, gx = autograd.grad(out, (h, x))
    np.testing.assert_allclose(gh._value, 2 * np.tanh(x._value), rtol=1e-14)
    np.testing.assert_allclose(gx._value, 2 * np.tanh(x._value) * (1 - np.tanh(x._value) ** 2), rtol=1e-14)


def test_rules_get_arrays_for_parameters_in_plain_backward() -> None:
    seen: list[type] = []

    def rule(g: Any, ans: Any, x: Any, y: Any) -> Any:
        seen.append(type(x))
        return g * y

    f = primitive(lambda x, y: x * y, "typed_mul", arity=2)
    defvjp(f, rule)
    p = nn.Parameter(np.array([1.0, 2.0]))
    f(p, np.array([3.0, 4.0])).sum().backward()
    assert seen == [np.ndarray]
    np.testing.assert_array_equal(p.grad._value, [3.0, 4.0])


@pytest.mark.parametrize("shapes", [((1, 5), (5, 4)), ((3, 1), (1, 4)), ((2, 1, 3), (3, 1)),
                                    ((6, 1), (1, 1))])
def test_outer_product_gradients_equal_matmul_and_check_to_second_order(shapes: Any) -> None:
    rng = np.random.default_rng(0)
    a0, b0 = (rng.standard_normal(s) for s in shapes)
    a, b = leaf(a0), leaf(b0)
    g0 = rng.standard_normal(np.broadcast_shapes(a0.shape[:-2], b0.shape[:-2])
                             + (a0.shape[-2], b0.shape[-1]))
    (a @ b).backward(g0)
    ga = np.matmul(g0, np.swapaxes(b0, -1, -2))
    gb = np.matmul(np.swapaxes(a0, -1, -2), g0)
    gb = gb.sum(axis=tuple(range(gb.ndim - b0.ndim))) if gb.ndim > b0.ndim else gb
    np.testing.assert_allclose(a.grad._value, ga, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(b.grad._value, gb, rtol=1e-14, atol=1e-15)
    rlgrad.check_grads(lambda p, q: rnp.sum(rnp.tanh(p @ q)), order=2)(a0, b0)


def test_float32_batch_one_weight_gradient_is_exactly_the_outer_product() -> None:
    rng = np.random.default_rng(1)
    h = rng.standard_normal((1, 64)).astype(np.float32)
    w = rlgrad.tensor(rng.standard_normal((64, 64)).astype(np.float32), requires_grad=True)
    g = rng.standard_normal((1, 64)).astype(np.float32)
    (rlgrad.tensor(h) @ w).backward(g)
    assert w.grad.dtype == np.float32
    np.testing.assert_array_equal(w.grad._value, h.T @ g)


def test_freed_graph_error_and_retain_graph() -> None:
    x = leaf([1.0, 2.0])
    y = (rnp.exp(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad._value, 2 * np.exp(x._value) * (1 + x._value), rtol=1e-14)
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        y.backward()


def test_functional_grad_leaves_closed_over_parameters_alone() -> None:
    # rlgrad.grad walks without the pruning pre-pass: a closed-over Parameter is a leaf nobody
    # asked about, so it gets no gradient and its .grad stays untouched.
    w = nn.Parameter(np.array([2.0, -1.0]))
    x0 = np.array([0.5, 0.25])
    gx = rlgrad.grad(lambda x: rnp.sum(rnp.tanh(x * w) * w))(x0)
    np.testing.assert_allclose(gx, w._value ** 2 * (1 - np.tanh(x0 * w._value) ** 2), rtol=1e-14)
    assert w.grad is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(513, 2), (7, 3), (4, 5, 7), (2, 3, 6), (300, 4)])
def test_short_last_axis_reductions_have_numpys_bits(dtype: Any, shape: Any) -> None:
    # sums and log_softmax over a few actions take a column-by-column path: the same bits as
    # NumPy's own reduction, so compiled RL updates keep their trajectories exactly
    from rlgrad.ops import _log_softmax, _sum

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)
    for keepdims in (False, True):
        got, want = _sum(x, axis=-1, keepdims=keepdims), x.sum(axis=-1, keepdims=keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    shifted = x - np.maximum.reduce(x, axis=-1, keepdims=True)
    want = shifted - np.log(np.add.reduce(np.exp(shifted), axis=-1, keepdims=True))
    np.testing.assert_array_equal(_log_softmax(x, axis=-1), want)
    rlgrad.check_grads(lambda t: rnp.sum(rnp.log_softmax(t, axis=-1) ** 2), order=2)(
        x.astype(np.float64))


def test_linear_value_head_input_gradient_is_the_outer_product() -> None:
    rng = np.random.default_rng(4)
    x = rlgrad.tensor(rng.standard_normal((64, 16)).astype(np.float32), requires_grad=True)
    w = rlgrad.tensor(rng.standard_normal((1, 16)).astype(np.float32), requires_grad=True)
    g = rng.standard_normal((64, 1)).astype(np.float32)
    nn.functional.linear(x, w).backward(g)
    np.testing.assert_array_equal(x.grad._value, g @ w._value)
    rlgrad.check_grads(lambda a, b: rnp.sum(rnp.tanh(nn.functional.linear(a, b)) ** 2), order=2)(
        rng.standard_normal((5, 3)), rng.standard_normal((1, 3)))


def _dag(x: Tensor, w: Tensor) -> Tensor:
    """Fan-out, skip connections and arguments older than what waits on the heap: the walk
    Tensor.backward takes straight from a node to its newest argument must still visit every
    tensor after all its consumers."""
    a = x * w  # used by b, d, e: three consumers created apart
    b = rnp.tanh(a)
    c = b * x  # x: a leaf reached from several nodes
    d = a + c  # a is older than c: it must wait for e's share
    e = rnp.exp(a * 0.5) * d
    f = rnp.concatenate([e, b, a])  # a variadic op with three arguments
    return (f * f).sum() + rnp.max(d) - a.mean()


def test_backward_walk_matches_the_general_loop_and_finite_differences() -> None:
    rng = np.random.default_rng(7)
    xv, wv = rng.standard_normal(4), rng.standard_normal(4)
    x, w = leaf(xv), leaf(wv)
    out = _dag(x, w)
    gx, gw = autograd.grad(out, (x, w), retain_graph=True)  # the general loop (inputs given)
    out.backward()  # the plain loop
    np.testing.assert_array_equal(x.grad._value, gx._value)  # same ops, same order: same bits
    np.testing.assert_array_equal(w.grad._value, gw._value)
    eps = 1e-6
    for k in range(4):
        dx = np.zeros(4)
        dx[k] = eps
        fd = (_dag(leaf(xv + dx), leaf(wv))._value - _dag(leaf(xv - dx), leaf(wv))._value) / (2 * eps)
        np.testing.assert_allclose(x.grad._value[k], fd, rtol=1e-6, atol=1e-8)


def test_an_error_in_a_rule_leaves_no_gradient_behind() -> None:
    """A rule that raises mid-pass: nothing half-propagated survives into the next pass."""
    def boom_rule(g: Any, ans: Any, x: Any) -> Any:
        raise ValueError("boom")

    boom = primitive(lambda x: x * 1.0, "boom", arity=1)
    defvjp(boom, boom_rule)
    x = leaf([1.0, 2.0])
    y = x * 2.0
    with pytest.raises(ValueError, match="boom"):
        (boom(y) + y).sum().backward()
    (y * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad._value, [6.0, 6.0])
