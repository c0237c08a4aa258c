"""In-place operations on tensors in the graph, recorded as PyTorch records them: each snippet
runs under torch 2.13 and under rlgrad (every backward loop: C, Python, reference) and must give
the same values, gradients and exceptions; second order through an in-place op is checked
against finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.tensor import TraceError

torch = pytest.importorskip("torch")

X = np.array([0.3, -1.2, 2.0, 0.7])
W = np.array([1.5, -0.5, 0.25, 2.0])
MASK = np.array([True, False, True, False])


def _run(lib: Any, snippet: Callable) -> dict[str, Any]:
    """``snippet(lib, x, w)`` with two float64 leaves; what it returned and their gradients, or
    the exception's type and first line."""
    x = lib.tensor(X.copy(), requires_grad=True)
    w = lib.tensor(W.copy(), requires_grad=True)
    try:
        out = snippet(lib, x, w)
    except (RuntimeError, ValueError, TypeError) as e:
        return {"error": type(e).__name__, "message": str(e).splitlines()[0]}
    arr = (lambda t: None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64))
    return {"out": arr(out), "x.grad": arr(x.grad), "w.grad": arr(w.grad)}


def _same(snippet: Callable, message: str | None = None) -> dict[str, Any]:
    want, got = _run(torch, snippet), _run(rlgrad, snippet)
    if "error" in want:
        assert got.get("error") == want["error"], (want, got)
        assert message is not None and message in got["message"] and message in want["message"]
        return got
    assert "error" not in got, got
    for k, v in want.items():
        if v is None:
            assert got[k] is None or not np.any(got[k]), (k, got[k])
        else:
            np.testing.assert_allclose(got[k], v, rtol=1e-12, atol=1e-12, err_msg=k)
    return got


def _mask(lib: Any) -> Any:
    return lib.tensor(MASK)


SNIPPETS: dict[str, Callable] = {
    # RL action masking: logits of a policy, illegal actions set to -inf, then the softmax
    "mask_minus_inf": lambda L, x, w: _masked_logits(L, x, w),
    "iadd_nonleaf": lambda L, x, w: _iadd(L, x, w),
    "mul_": lambda L, x, w: _chain(L, x, w, lambda y: y.mul_(2.0)),
    "mul_tensor_other": lambda L, x, w: _chain(L, x, w, lambda y: y.mul_(w)),
    "div_sub_alpha": lambda L, x, w: _chain(L, x, w, lambda y: y.div_(w.detach() + 3.0).sub_(x, alpha=0.5)),
    "add_alpha": lambda L, x, w: _chain(L, x, w, lambda y: y.add_(w * w, alpha=-2.0)),
    "clamp_": lambda L, x, w: _chain(L, x, w, lambda y: y.clamp_(-0.5, 1.0)),
    "copy_nonleaf": lambda L, x, w: _chain(L, x, w, lambda y: y.copy_(w.exp())),
    "copy_constant": lambda L, x, w: _chain(L, x, w, lambda y: y.copy_(L.ones(4, dtype=L.float64))),
    "fill_zero": lambda L, x, w: _chain(L, x, w, lambda y: y.fill_(3.0).zero_()),
    "lerp_": lambda L, x, w: _chain(L, x, w, lambda y: y.lerp_(w, 0.25)),
    "setitem_int_slice": lambda L, x, w: _setitem(L, x, w, (slice(1, 3),)),
    "setitem_list": lambda L, x, w: _setitem(L, x, w, ([0, 3],)),
    "setitem_constant_buffer": lambda L, x, w: _buffer(L, x, w),
    "view_mul_updates_base": lambda L, x, w: _view(L, x, w),
    "index_iadd": lambda L, x, w: _index_iadd(L, x, w),
    "older_consumer_keeps_old_graph": lambda L, x, w: _older(L, x, w),
    "two_views_of_one_base": lambda L, x, w: _two_views(L, x, w),
    "twice_in_place": lambda L, x, w: _chain(L, x, w, lambda y: y.mul_(w).add_(x).mul_(3.0)),
    # the methods helper tmethods added through the same mechanism
    "masked_fill_": lambda L, x, w: _square(
        (x * w).masked_fill_(_mask(L), -1e9).softmax(0)),  # action masking, torch's other way
    "index_add_": lambda L, x, w: _square((x * 2.0).index_add_(0, L.tensor([0, 2, 0]), w[:3])),
    "scatter_": lambda L, x, w: _square((x * 2.0).scatter_(0, L.tensor([3, 1]), w[:2])),
    "scatter_add_": lambda L, x, w: _square((x * 2.0).scatter_add_(0, L.tensor([3, 3]), w[:2])),
    "addcmul_": lambda L, x, w: _square((x + 1.0).addcmul_(w, x, value=0.5)),
    "index_add_into_buffer": lambda L, x, w: _square(
        L.zeros(4, dtype=L.float64).index_add_(0, L.tensor([1, 1, 2, 3]), x * w)),
}


def _square(y: Any) -> Any:
    (y * y).sum().backward()
    return y


def _masked_logits(L: Any, x: Any, w: Any) -> Any:
    logits = x * w
    logits[_mask(L)] = -float("inf")
    p = L.softmax(logits, 0)
    (p * L.tensor(np.arange(4.0))).sum().backward()
    return p


def _iadd(L: Any, x: Any, w: Any) -> Any:
    y = x * 2.0
    alias = y
    y += w * w  # the same object: the alias sees the new values
    (alias * x).sum().backward()
    return alias


def _chain(L: Any, x: Any, w: Any, write: Callable) -> Any:
    y = x * w + 1.0
    write(y)
    (y * y).sum().backward()
    return y


def _setitem(L: Any, x: Any, w: Any, key: tuple) -> Any:
    y = x.sin()
    y[key] = w[key] * 3.0
    (y * y * x).sum().backward()
    return y


def _buffer(L: Any, x: Any, w: Any) -> Any:
    buf = L.zeros(3, 4, dtype=L.float64)  # a constant that becomes part of the graph
    buf[0] = x
    buf[2, 1:] = w[:3] * 2.0
    (buf * buf).sum().backward()
    return buf


def _view(L: Any, x: Any, w: Any) -> Any:
    y = x * 1.0
    v = y[1:]
    v.mul_(w[1:])  # torch: y's node becomes CopySlices, v a view of it
    ((y ** 2).sum() + v.sum()).backward()
    return y


def _index_iadd(L: Any, x: Any, w: Any) -> Any:
    y = x.exp()
    y = y * 1.0
    y[1:] += w[:3]  # Python: t = y[1:]; t += ...; y[1:] = t
    (y ** 2).sum().backward()
    return y


def _older(L: Any, x: Any, w: Any) -> Any:
    y = x + 1.0
    z = y * L.tensor(W.copy())  # saves y only for the constant's gradient: never needed
    y.mul_(w)
    (z.sum() + (y * 2.0).sum()).backward()
    return y


def _two_views(L: Any, x: Any, w: Any) -> Any:
    y = x * 3.0
    a, b = y[0:2], y[2]
    a.mul_(2.0)
    (a.sum() + b * 5.0).backward()
    return y


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_in_place_on_the_graph_matches_torch(name: str, backward_loop: str) -> None:
    _same(SNIPPETS[name])


REFUSED: dict[str, tuple[Callable, str]] = {
    "saved_output_written": (lambda L, x, w: _saved_output(L, x, w),
                             "modified by an inplace operation"),
    "saved_input_written": (lambda L, x, w: _saved_input(L, x, w), "modified by an inplace operation"),
    "leaf_mul_": (lambda L, x, w: x.mul_(2.0), "a leaf Variable that requires grad is being used"),
    "leaf_iadd": (lambda L, x, w: x.__iadd__(1.0), "a leaf Variable that requires grad is being used"),
    "leaf_setitem": (lambda L, x, w: x.__setitem__(0, 1.0),
                     "a view of a leaf Variable that requires grad is being used"),
    "view_of_leaf": (lambda L, x, w: x[1:].mul_(2.0),
                     "a view of a leaf Variable that requires grad is being used"),
    "exp_then_scatter_add_": (lambda L, x, w: _square(
        x.exp().scatter_add_(0, L.tensor([3, 3]), w[:2])), "modified by an inplace operation"),
}


def _saved_output(L: Any, x: Any, w: Any) -> Any:
    y = x.exp()  # exp saves its output
    y.mul_(2.0)
    y.sum().backward()


def _saved_input(L: Any, x: Any, w: Any) -> Any:
    y = x * 2.0
    z = y.sin()  # sin saves its input
    y.add_(1.0)
    z.sum().backward()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_torch_refuses_is_refused_in_one_line(name: str, backward_loop: str) -> None:
    snippet, message = REFUSED[name]
    got = _same(snippet, message)
    assert "\n" not in got["message"]


def test_the_old_value_is_what_the_in_place_node_reads() -> None:
    # y.mul_(w) with y = x * w + 1: the loss is sum(y0^2 w^2), y0 the value before the write
    # (torch saves original_self): d/dw = 2 y0^2 w + 2 y0 w^2 x
    got = _same(lambda L, x, w: _chain(L, x, w, lambda y: y.mul_(w)))
    y0 = X * W + 1
    np.testing.assert_allclose(got["w.grad"], 2 * y0 ** 2 * W + 2 * y0 * W ** 2 * X, rtol=1e-12)


def test_repeated_indices_and_other_views_say_what_to_do() -> None:
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    y = x * 1.0
    with pytest.raises(RuntimeError, match="repeated indices"):
        y[[0, 0]] = rlgrad.tensor(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="view .*reshape.*clone"):
        y.reshape(2, 2).mul_(2.0)


def _penalty(lib: Any, x: Any, w: Any) -> Any:
    """A gradient penalty through an in-place op: the gradient of (h masked in place) w.r.t. x,
    squared, differentiated again w.r.t. w."""
    h = (x * w).sin()  # sin saves its input, not h (tanh's saved output would be refused)
    h[_mask(lib)] = 0.0
    h.mul_(w)
    out = (h * h * x).sum()
    (gx,) = lib.autograd.grad(out, [x], create_graph=True)
    return (gx ** 2).sum()


def test_double_backward_through_in_place_matches_torch_and_finite_differences(
        backward_loop: str) -> None:
    def value(lib: Any, x: Any, w: Any) -> Any:
        p = _penalty(lib, x, w)
        p.backward()
        return p

    got = _same(value)
    # finite differences of the penalty in w (float64, central)

    def pen(wv: np.ndarray) -> float:
        x = rlgrad.tensor(X.copy(), requires_grad=True)
        return float(_penalty(rlgrad, x, rlgrad.tensor(wv)).detach())

    eps = 1e-6
    fd = np.array([(pen(W + eps * e) - pen(W - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(got["w.grad"], fd, rtol=1e-6, atol=1e-8)


def test_first_order_gradient_matches_finite_differences() -> None:
    def f(xv: np.ndarray) -> float:
        x = rlgrad.tensor(xv)
        y = x * rlgrad.tensor(W) + 1.0
        y[rlgrad.tensor(MASK)] = -1.0
        y.mul_(x)
        y[1:] += x[:3]
        return float((y ** 2).sum())

    x = rlgrad.tensor(X.copy(), requires_grad=True)
    y = x * rlgrad.tensor(W) + 1.0
    y[rlgrad.tensor(MASK)] = -1.0
    y.mul_(x)
    y[1:] += x[:3]
    (y ** 2).sum().backward()
    eps = 1e-6
    fd = np.array([(f(X + eps * e) - f(X - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(x.grad._value, fd, rtol=1e-6, atol=1e-8)


def test_forward_mode_follows_the_rebased_graph() -> None:
    def f(x: Any) -> Any:
        y = x * 2.0
        y.mul_(x)
        y[0] = 0.0
        return y

    _, tangent = rlgrad.jvp(f, (rlgrad.tensor(X.copy()),), (rlgrad.tensor(np.ones(4)),))
    want = 4 * X
    want[0] = 0.0
    np.testing.assert_allclose(np.asarray(tangent), want)


def test_no_grad_writes_stay_plain_and_aliases_see_every_write() -> None:
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    y = x * 2.0
    arr = y._value
    y.add_(1.0)
    assert y._value is arr and y.grad_fn is not None and y._op.name != "multiply"
    with rlgrad.no_grad():
        y.mul_(0.5)  # not recorded; nodes that saved y refuse later, as torch's version check
    assert y._value is arr
    np.testing.assert_allclose(arr, (2 * X + 1) * 0.5)


def test_jit_refuses_in_place_methods_on_the_graph_at_trace_time() -> None:
    lin = nn.Linear(4, 2)

    def step(x: Any) -> Any:
        h = lin(x)
        h.mul_(2.0)
        return h.sum()

    with pytest.raises(TraceError, match="in-place mul_"):
        rlgrad.jit(step)(np.ones((3, 4), dtype=np.float32))

    def accumulate(x: Any) -> Any:  # `loss += term` in a jitted step: a new tensor, as before
        loss = lin(x).sum()
        loss += (lin(x) ** 2).sum()
        return loss

    x = np.ones((3, 4), dtype=np.float32)
    eager = float(accumulate(x).detach())
    f = rlgrad.jit(accumulate)
    f(x)
    out = f(x)
    np.testing.assert_allclose(float(np.asarray(getattr(out, "_value", out))), eager, rtol=1e-6)


def test_self_as_operand_reads_the_old_value() -> None:
    # y.mul_(y): torch refuses at backward (the saved operand is the written tensor); rlgrad's
    # node reads the value before the write, so it is y0 ** 2 and its gradient 2 y0
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    y = x * 1.0
    y.mul_(y)
    y.sum().backward()
    np.testing.assert_allclose(y._value, X ** 2)
    np.testing.assert_allclose(x.grad._value, 2 * X)


def test_jit_refuses_an_index_assignment_that_would_enter_the_graph() -> None:
    lin = nn.Linear(3, 2)

    def step(x: Any) -> Any:
        buf = rlgrad.zeros(2, 2)
        buf[0] = lin(x)[0]  # eager: buf joins the graph (torch's CopySlices)
        return buf.sum()

    with pytest.raises(TraceError, match="in-place index assignment"):
        rlgrad.jit(step)(np.ones((1, 3), dtype=np.float32))


def test_old_values_are_copied_only_when_a_rule_reads_them() -> None:
    # torch saves original_self only for formulas that need it; so does rlgrad (memory: a
    # residual `h += f(h)` or `loss += term` keeps no second copy of h)
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    w = rlgrad.tensor(W.copy(), requires_grad=True)
    y = x * 2.0
    arr = y._value
    y += w  # add's rules read nothing
    assert y._prev._value is arr
    y.mul_(w)  # the rule for w reads y's value before the write: a copy
    assert y._prev._value is not arr and y._value is arr
    np.testing.assert_allclose(y._prev._value, 2 * X + W)
    y.sum().backward()
    np.testing.assert_allclose(w.grad._value, 2 * X + W + W)


def test_a_write_into_an_identity_node_leaves_its_input_alone() -> None:
    # identity (a module backward hook's output node) shares its input's array: the write must
    # not reach the input behind the graph's back
    from rlgrad.ops import identity

    x = rlgrad.tensor(X.copy(), requires_grad=True)
    y = x * 2.0
    z = identity(y)
    z.mul_(3.0)
    np.testing.assert_allclose(y._value, 2 * X)
    (z.sum() + y.sum()).backward()
    np.testing.assert_allclose(x.grad._value, np.full(4, 8.0))
