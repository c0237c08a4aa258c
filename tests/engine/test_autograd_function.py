"""``rlgrad.autograd.Function`` (issue 29): the same custom Functions written for torch 2.13 and for
rlgrad give the same values and gradients, first and second order; the ctx API, non-tensor
arguments, several outputs, once_differentiable, rlgrad.jit, and the one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import autograd
from rlgrad.autograd import Function
from rlgrad.core import use_reference

torch = pytest.importorskip("torch")
once_differentiable = autograd.function.once_differentiable  # torch's path to it
TF = torch.autograd.Function

X = np.array([-1.7, -0.4, 0.3, 0.9, 2.5])


def _pair(fn_r: Any, fn_t: Any, *extra: Any) -> tuple[Any, Any, Any, Any]:
    """Each library's output and its input, from X."""
    xr = rlgrad.tensor(X.copy(), requires_grad=True)
    xt = torch.tensor(X.copy(), requires_grad=True)
    return fn_r(xr, *extra), fn_t(xt, *extra), xr, xt


# ---- the same Functions, twice ----------------------------------------------------------------
class SteR(Function):  # straight-through sign: the gradient of a hard clip, 1 inside [-1, 1]
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class SteT(TF):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class ReverseR(Function):  # gradient reversal (domain adaptation), a float argument
    @staticmethod
    def forward(ctx: Any, x: Any, lam: float) -> Any:
        ctx.lam = lam
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return -ctx.lam * g, None


class ReverseT(TF):
    @staticmethod
    def forward(ctx: Any, x: Any, lam: float) -> Any:
        ctx.lam = lam
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return -ctx.lam * g, None


class ClampR(Function):  # clamp whose gradient passes everywhere (setup_context style)
    @staticmethod
    def forward(x: Any, lo: float, hi: float) -> Any:
        return x.clamp(lo, hi)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.seen = inputs[1:]

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g, None, None


class ClampT(TF):
    @staticmethod
    def forward(x: Any, lo: float, hi: float) -> Any:
        return x.clamp(lo, hi)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.seen = inputs[1:]

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g, None, None


class ExpR(Function):  # exp, saving its output: backward is differentiable, so double backward
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (y,) = ctx.saved_tensors
        return g * y


class ExpT(TF):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (y,) = ctx.saved_tensors
        return g * y


class CubeR(Function):  # x**3 saving its input: second derivative 6x
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return 3 * g * x * x


class CubeT(TF):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return 3 * g * x * x


CASES = [(SteR, SteT, ()), (ReverseR, ReverseT, (0.7,)), (ClampR, ClampT, (-0.5, 1.0)),
         (ExpR, ExpT, ()), (CubeR, CubeT, ())]
IDS = ["straight_through", "grad_reversal", "clamp", "exp_saved_output", "cube_saved_input"]


@pytest.mark.parametrize("reference", [False, True], ids=["engine", "reference"])
@pytest.mark.parametrize("fr, ft, extra", CASES, ids=IDS)
def test_values_and_gradients_equal_torch(fr: Any, ft: Any, extra: tuple, reference: bool) -> None:
    w = np.linspace(0.5, 1.5, X.size)  # a weighted sum: a gradient that is not all ones
    with use_reference(reference):
        yr, yt, xr, xt = _pair(fr.apply, ft.apply, *extra)
        np.testing.assert_allclose(yr.detach().numpy(), yt.detach().numpy(), rtol=1e-15)
        (yr * rlgrad.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("fr, ft", [(ExpR, ExpT), (CubeR, CubeT)], ids=["exp", "cube"])
def test_second_order_equals_torch_and_closed_form(fr: Any, ft: Any) -> None:
    yr, yt, xr, xt = _pair(fr.apply, ft.apply)
    (gr,) = autograd.grad(yr.sum(), xr, create_graph=True)
    (gt,) = torch.autograd.grad(yt.sum(), xt, create_graph=True)
    np.testing.assert_allclose(gr.detach().numpy(), gt.detach().numpy(), rtol=1e-14)
    (hr,) = autograd.grad((gr * gr).sum(), xr)  # d/dx sum(f'(x)^2) = 2 f' f''
    (ht,) = torch.autograd.grad((gt * gt).sum(), xt)
    np.testing.assert_allclose(hr.detach().numpy(), ht.numpy(), rtol=1e-13)
    closed = 2 * np.exp(X) ** 2 if fr is ExpR else 2 * (3 * X**2) * (6 * X)
    np.testing.assert_allclose(hr.detach().numpy(), closed, rtol=1e-13)


def test_second_order_matches_finite_differences() -> None:
    """d/dx of the first derivative (through backward's own ops) vs central differences."""
    def first(v: np.ndarray) -> np.ndarray:
        x = rlgrad.tensor(v, requires_grad=True)
        (g,) = autograd.grad(ExpR.apply(x).sum() * 1.0, x, create_graph=True)
        return g

    x = rlgrad.tensor(X.copy(), requires_grad=True)
    (g,) = autograd.grad(ExpR.apply(x).sum(), x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    eps = 1e-6
    fd = (first(X + eps).detach().numpy() - first(X - eps).detach().numpy()) / (2 * eps)
    np.testing.assert_allclose(h.detach().numpy(), fd, rtol=1e-7)


# ---- several outputs, non-differentiable outputs, needs_input_grad ---------------------------
FLAGS: list[tuple[bool, ...]] = []


class SplitR(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, y: Any, k: int) -> Any:
        ctx.save_for_backward(x, y)
        ctx.k = k
        idx = (x > 0).to(rlgrad.int64)
        ctx.mark_non_differentiable(idx)
        FLAGS.append(ctx.needs_input_grad)
        return x * y, (x * k).sin(), idx

    @staticmethod
    def backward(ctx: Any, ga: Any, gb: Any, gi: Any) -> Any:
        x, y = ctx.saved_tensors
        gx = ga * y + gb * (x * ctx.k).cos() * ctx.k if ctx.needs_input_grad[0] else None
        gy = ga * x if ctx.needs_input_grad[1] else None
        return gx, gy, None


class SplitT(TF):
    @staticmethod
    def forward(ctx: Any, x: Any, y: Any, k: int) -> Any:
        ctx.save_for_backward(x, y)
        ctx.k = k
        idx = (x > 0).to(torch.int64)
        ctx.mark_non_differentiable(idx)
        FLAGS.append(ctx.needs_input_grad)
        return x * y, (x * k).sin(), idx

    @staticmethod
    def backward(ctx: Any, ga: Any, gb: Any, gi: Any) -> Any:
        x, y = ctx.saved_tensors
        gx = ga * y + gb * (x * ctx.k).cos() * ctx.k if ctx.needs_input_grad[0] else None
        gy = ga * x if ctx.needs_input_grad[1] else None
        return gx, gy, None


@pytest.mark.parametrize("y_grad", [True, False])
def test_several_outputs_and_needs_input_grad(y_grad: bool) -> None:
    yv = np.linspace(-1.0, 2.0, X.size)
    xr, xt = rlgrad.tensor(X.copy(), requires_grad=True), torch.tensor(X.copy(), requires_grad=True)
    yr, yt = rlgrad.tensor(yv.copy(), requires_grad=y_grad), torch.tensor(yv.copy(), requires_grad=y_grad)
    ar, br, ir = SplitR.apply(xr, yr, 3)
    at, bt, it = SplitT.apply(xt, yt, 3)
    assert not ir.requires_grad and not it.requires_grad
    np.testing.assert_array_equal(ir.detach().numpy(), it.numpy())
    for r, t in ((ar, at), (br, bt)):
        np.testing.assert_allclose(r.detach().numpy(), t.detach().numpy(), rtol=1e-15)
    ((ar * 2).sum() + (br * br).sum()).backward()
    ((at * 2).sum() + (bt * bt).sum()).backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-14)
    if y_grad:
        np.testing.assert_allclose(yr.grad.numpy(), yt.grad.numpy(), rtol=1e-14)
    else:
        assert yr.grad is None
    assert FLAGS[-2:] == [(True, y_grad, False)] * 2  # rlgrad's, then torch's


def test_only_one_output_used_gets_zeros_for_the_other() -> None:
    xr, xt = rlgrad.tensor(X.copy(), requires_grad=True), torch.tensor(X.copy(), requires_grad=True)
    yv = np.ones(X.size)
    br = SplitR.apply(xr, rlgrad.tensor(yv), 2)[1]
    bt = SplitT.apply(xt, torch.tensor(yv), 2)[1]
    br.sum().backward()
    bt.sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-14)


def test_no_input_needs_grad_gives_constants() -> None:
    y = ExpR.apply(rlgrad.tensor(X))
    assert not y.requires_grad
    with rlgrad.no_grad():
        y = ExpR.apply(rlgrad.tensor(X, requires_grad=True))
    assert not y.requires_grad


# ---- once_differentiable ----------------------------------------------------------------------
class OnceR(Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.tanh()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * (1 - x.tanh() ** 2)


def test_once_differentiable_first_order_and_one_line_refusal() -> None:
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    OnceR.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(X) ** 2, rtol=1e-14)
    (g,) = autograd.grad(OnceR.apply(x).sum(), x, create_graph=True)  # allowed, as in torch
    np.testing.assert_allclose(g.detach().numpy(), 1 - np.tanh(X) ** 2, rtol=1e-14)
    with pytest.raises(RuntimeError, match="once_differentiable") as e:
        g.sum().backward()
    assert "\n" not in str(e.value)


# ---- rlgrad.jit ------------------------------------------------------------------------------
@pytest.mark.parametrize("fr", [ExpR, CubeR, SteR, OnceR])
def test_jit_replays_a_function_with_new_values(fr: Any) -> None:
    def loss(x: Any) -> Any:
        return (fr.apply(x) * 2.0).sum()

    step = rlgrad.jit(rlgrad.value_and_grad(loss))
    eager = rlgrad.value_and_grad(loss)
    for k in range(3):
        v = X * (1 + 0.3 * k) - 0.2 * k
        val, g = step(v)
        ev, eg = eager(v)
        assert val == pytest.approx(float(ev), rel=1e-14)
        np.testing.assert_allclose(np.asarray(g), np.asarray(eg), rtol=1e-14)


# ---- errors: one line each -------------------------------------------------------------------
class TooFew(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, y: Any) -> Any:
        return x * y

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g


class GradForFloat(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, k: float) -> Any:
        return x * k

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g, g


class WrongShape(Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g[:2]


class NoBackward(Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2


@pytest.mark.parametrize("fn, extra, match", [
    (TooFew, (rlgrad.tensor(X),), "returned 1 gradients but forward had 2 inputs"),
    (GradForFloat, (2.0,), "input 1, which is a float"),
    (WrongShape, (), r"shape \(2,\) for input 0 of shape \(5,\)"),
    (NoBackward, (), "must define backward"),
], ids=["count", "non_tensor", "shape", "no_backward"])
def test_bad_backward_one_line(fn: Any, extra: tuple, match: str) -> None:
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    with pytest.raises((RuntimeError, NotImplementedError), match=match) as e:
        fn.apply(x, *extra).sum().backward()
    assert "\n" not in str(e.value)


def test_forward_mode_and_keywords_refused_in_one_line() -> None:
    with pytest.raises(TypeError, match="forward mode .* cannot go through ExpR") as e:
        rlgrad.jvp(lambda x: ExpR.apply(x), (X,), (np.ones_like(X),))
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="positional arguments only"):
        ReverseR.apply(rlgrad.tensor(X), lam=1.0)


def test_torch_import_paths() -> None:
    import importlib

    mod = importlib.import_module("rlgrad.autograd.function")
    assert mod.once_differentiable is once_differentiable and mod.Function is rlgrad.autograd.Function


@pytest.mark.parametrize("fn, extra", [(ExpR, ()), (SplitR, (rlgrad.tensor(X), 2))], ids=["one", "three"])
def test_an_output_dropped_is_freed_without_the_cycle_collector(fn: Any, extra: tuple) -> None:
    """The node holds its ctx and the ctx only weak references to the outputs: no cycle."""
    import gc
    import weakref

    x = rlgrad.tensor(X.copy(), requires_grad=True)
    gc.disable()
    try:
        out = fn.apply(x, *extra)
        first = out[0] if isinstance(out, tuple) else out
        ref = weakref.ref(first)
        del out, first
        assert ref() is None
    finally:
        gc.enable()
