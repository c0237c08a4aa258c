"""Tensor and Module hooks against torch 2.13: the same snippet under both libraries gives the
same values, gradients, hook arguments and call order. Hooks run in the reference backward loop
(core.reference_backward); the fast loops must agree with it where no hook changes anything."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import core

torch = pytest.importorskip("torch")

X = np.array([0.5, -1.5, 2.0])


def _np(t: Any) -> Any:
    return None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64)


def _both(snippet: Callable[[Any, list], Any]) -> tuple[Any, Any]:
    """``snippet(lib, log)`` under torch and rlgrad; their results with every Tensor as an
    array, and the two logs (what the hooks saw, in order)."""
    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor | rlgrad.Tensor):
            return _np(v)
        if isinstance(v, list | tuple):
            return [conv(u) for u in v]
        return v

    out = []
    for lib in (torch, rlgrad):
        log: list = []
        res = snippet(lib, log)
        out.append((conv(res), conv(log)))
    return out[0], out[1]


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (a, b)
        for u, v in zip(a, b):
            _assert_same(u, v)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
    else:
        assert a == b, (a, b)


def _check(snippet: Callable[[Any, list], Any]) -> None:
    want, got = _both(snippet)
    _assert_same(want[0], got[0])
    _assert_same(want[1], got[1])


def _leaf(lib: Any) -> Any:
    return lib.tensor(X.copy(), requires_grad=True)


# ---- Tensor.register_hook ------------------------------------------------------------------

def _replace_on_leaf(L: Any, log: list) -> Any:
    x = _leaf(L)
    x.register_hook(lambda g: log.append(g.clone()) or g * 10)
    (x * x).sum().backward()
    return [x.grad]


def _order_and_retain(L: Any, log: list) -> Any:
    x = _leaf(L)
    y = x.exp()
    y.retain_grad()  # torch: retain_grad's .grad comes after the other hooks, whatever the order
    y.register_hook(lambda g: log.append(("first", g.clone())) or g + 1)
    y.register_hook(lambda g: log.append(("second", g.clone())) and None)
    y.register_hook(lambda g: g * 2)
    (y * 3).sum().backward()
    return [y.grad, x.grad, y.retains_grad, x.retains_grad]


def _autograd_grad_inputs(L: Any, log: list) -> Any:
    x = _leaf(L)
    x.register_hook(lambda g: g * 10)
    z = x * 1.0
    z.register_hook(lambda g: log.append(g.clone()) or g * 100)
    first = L.autograd.grad((z * 2).sum(), [z], retain_graph=True)[0]  # (rlgrad frees z's node)
    return [first, L.autograd.grad((x * z).sum(), [x])[0]]


def _create_graph(L: Any, log: list) -> Any:
    x = _leaf(L)
    y = x ** 3
    y.register_hook(lambda g: g * x)  # a hook that is itself differentiated
    (gx,) = L.autograd.grad(y.sum(), [x], create_graph=True)
    gx.sum().backward()
    return [gx, x.grad]


def _remove(L: Any, log: list) -> Any:
    x = _leaf(L)
    h = x.register_hook(lambda g: g * 0)
    h.remove()
    (x * 2).sum().backward()
    with x.register_hook(lambda g: g + 1):  # a handle is a context manager too
        pass
    (x * 2).sum().backward()
    return [x.grad]


def _clip_in_hook(L: Any, log: list) -> Any:
    lin = L.nn.Linear(3, 2).double()
    with L.no_grad():
        lin.weight.copy_(L.tensor(np.arange(6.0).reshape(2, 3) / 7))
        lin.bias.fill_(0.25)
    for p in lin.parameters():
        p.register_hook(lambda g: g.clamp(-0.5, 0.5))  # per-parameter gradient clipping
    x = L.tensor(np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]]))
    (lin(x) ** 2).sum().backward()
    return [lin.weight.grad, lin.bias.grad]


@pytest.mark.parametrize("snippet", [_replace_on_leaf, _order_and_retain, _autograd_grad_inputs,
                                     _create_graph, _remove, _clip_in_hook])
def test_tensor_hooks_match_torch(snippet: Callable, backward_loop: str) -> None:
    _check(snippet)


def test_hook_errors_are_torch_s_in_one_line() -> None:
    for lib in (torch, rlgrad):
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            lib.tensor(X.copy()).register_hook(lambda g: g)
        x = _leaf(lib)
        x.register_hook(lambda g: g[:2])
        with pytest.raises(RuntimeError, match="hook .* has changed the size of value"):
            (x * 2).sum().backward()


def test_hooks_are_kept_by_the_version_they_were_registered_on() -> None:
    # torch: a hook registered before an in-place op sees the gradient of the old value
    def snippet(L: Any, log: list) -> Any:
        x = _leaf(L)
        y = x * 2.0
        y.register_hook(lambda g: log.append(("before", g.clone())) and None)
        y.mul_(x)
        y.register_hook(lambda g: log.append(("after", g.clone())) and None)
        (y * 3).sum().backward()
        return [x.grad]

    _check(snippet)


def test_fast_loops_agree_with_the_reference_loop_that_runs_hooks() -> None:
    """The same graph, once with an inspecting hook (reference loop) and once without (the C
    or Python fast loop): bit-identical gradients."""
    gc.collect()  # tensors with hooks that earlier tests left in reference cycles
    rng = np.random.default_rng(0)
    w1 = rlgrad.tensor(rng.normal(size=(4, 5)), requires_grad=True)
    w2 = rlgrad.tensor(rng.normal(size=(5, 2)), requires_grad=True)
    x = rlgrad.tensor(rng.normal(size=(3, 4)))

    def grads(hooked: bool) -> list[np.ndarray]:
        w1.grad = w2.grad = None
        h = rlgrad.tanh(x @ w1)
        handle = h.register_hook(lambda g: None) if hooked else None
        assert bool(core.HOOKED) == hooked
        ((h @ w2) ** 2).mean().backward()
        if handle is not None:
            handle.remove()
        return [w1.grad._value.copy(), w2.grad._value.copy()]

    for a, b in zip(grads(False), grads(True)):
        np.testing.assert_array_equal(a, b)


# ---- Module hooks ---------------------------------------------------------------------------

def _linear(L: Any) -> Any:
    lin = L.nn.Linear(3, 2).double()
    with L.no_grad():
        lin.weight.copy_(L.tensor(np.arange(6.0).reshape(2, 3) / 10))
        lin.bias.copy_(L.tensor(np.array([0.5, -0.5])))
    return lin


def _module_hooks(L: Any, log: list) -> Any:
    lin = _linear(L)
    hs = [lin.register_forward_pre_hook(lambda m, a: (a[0] * 2,)),
          lin.register_forward_hook(lambda m, a, o: log.append(("fwd", a[0], o)) or o + 1),
          lin.register_full_backward_hook(lambda m, gi, go: log.append(("bwd", list(gi), list(go)))),
          lin.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))]
    x = L.tensor(np.array([[1.0, 2.0, 3.0]]), requires_grad=True)
    y = lin(x)
    (y * L.tensor(np.array([[1.0, 2.0]]))).sum().backward()
    first = [y, x.grad, lin.weight.grad]
    for h in hs:
        h.remove()
    return first + [lin(x), type(lin).__name__]


def _kwargs_hooks(L: Any, log: list) -> Any:
    lin = _linear(L)
    lin.register_forward_pre_hook(lambda m, a, k: ((a[0] - 1,), k), with_kwargs=True)
    lin.register_forward_hook(lambda m, a, k, o: log.append(("kw", sorted(k))) or o * 2,
                              with_kwargs=True)
    lin.register_forward_hook(lambda m, a, o: log.append("appended"))
    lin.register_forward_hook(lambda m, a, o: log.append("prepended"), prepend=True)
    return [lin(L.tensor(np.array([[1.0, 2.0, 3.0]])))]


def _backward_hook_replaces_grad_input(L: Any, log: list) -> Any:
    class Two(L.nn.Module):
        def forward(self, a: Any, b: Any, c: Any) -> Any:
            return a * b + c.sum(), a.sum()

    m = Two()
    m.register_full_backward_hook(
        lambda mod, gi, go: log.append(("gi", list(gi), list(go))) or (gi[0] * 0.5, None, gi[2]))
    a = L.tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = L.tensor(np.array([3.0, -1.0]))  # needs no gradient: None in grad_input
    c = L.tensor(np.array([0.5, 0.25, 2.0]), requires_grad=True)
    out, s = m(a, b, c)
    (out.sum() * 2 + s * 5).backward()
    return [a.grad, c.grad]


def _no_input_needs_grad(L: Any, log: list) -> Any:
    lin = _linear(L)
    lin.register_full_backward_hook(lambda m, gi, go: log.append(("gi", list(gi), list(go))))
    lin(L.tensor(np.array([[1.0, 2.0, 3.0]]))).sum().backward()
    return [lin.bias.grad]


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # torch's, on the last one
@pytest.mark.parametrize("snippet", [_module_hooks, _kwargs_hooks,
                                     _backward_hook_replaces_grad_input, _no_input_needs_grad])
def test_module_hooks_match_torch(snippet: Callable) -> None:
    _check(snippet)


def test_a_module_without_hooks_keeps_the_bare_call_and_copies_keep_hooks() -> None:
    import copy
    import pickle

    a, b = rlgrad.nn.Linear(2, 2), rlgrad.nn.Linear(2, 2)
    h = a.register_forward_hook(lambda m, i, o: o * 0)
    assert type(b) is rlgrad.nn.Linear and isinstance(a, rlgrad.nn.Linear)
    c = copy.deepcopy(a)  # torch's deepcopy keeps hooks
    assert not np.any(c(np.ones((1, 2), dtype=np.float32))._value)
    plain = pickle.loads(pickle.dumps(a))  # hooks are not state
    assert type(plain) is rlgrad.nn.Linear and np.any(plain(np.ones((1, 2), dtype=np.float32))._value)
    h.remove()
    assert np.any(a(np.ones((1, 2), dtype=np.float32))._value)


def test_a_hook_that_computes_is_traced_by_jit() -> None:
    """Under rlgrad.jit the hook's operations are recorded like the rest of the backward pass,
    so every replay clips its own gradient (a hook's Python side effects run once, at trace)."""
    lin = rlgrad.nn.Linear(3, 2)
    handle = lin.weight.register_hook(lambda g: g.clamp(-0.1, 0.1))

    def step(x: Any) -> Any:
        lin.zero_grad()
        (lin(x) ** 2).sum().backward()
        return lin.weight.grad * 1.0

    f = rlgrad.jit(step)
    for k in range(3):
        x = np.random.default_rng(k).normal(size=(4, 3)).astype(np.float32) * (k + 1)
        got = f(x)
        np.testing.assert_array_equal(np.asarray(getattr(got, "_value", got)), step(x)._value)
    handle.remove()


def test_module_backward_hooks_leave_no_hooked_tensor_behind() -> None:
    """The identity nodes a backward hook adds per call die with their graph (no reference
    cycle), so later passes go back to the fast loops without waiting for the collector."""
    gc.collect()
    lin = rlgrad.nn.Linear(3, 2)
    handle = lin.register_full_backward_hook(lambda m, gi, go: None)
    gc.disable()
    try:
        lin(rlgrad.tensor(np.ones((1, 3), dtype=np.float32), requires_grad=True)).sum().backward()
        assert not core.HOOKED
    finally:
        gc.enable()
    handle.remove()
