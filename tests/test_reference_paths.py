"""Every fast path against its reference, in one place: a contributor can delete a fast path and
lose only speed.

* The backward pass: ``core.reference_backward`` against ``core._propagate`` and its C twin
  (``rlgrad/_engine.c``) on random programs (``test_random_programs``' generator), first and
  second order, bit for bit; the tests that name the ``backward_loop`` fixture (conftest.py) run
  under all three loops, as do the engine's gradient test files.
* The optimizers: ``rlgrad/optim/reference.py`` against the classes' per-parameter loop, their
  flat path, the C loop (``_fused.c``) and ``step_arrays``, over many steps with every option.
* The C kernels (``rlgrad/_kernels.c``) against the NumPy lines they replace: bit for bit.
* The NumPy forward for acting (``mlp_numpy``, ``trunk_numpy``, ``q_numpy``) against the modules'
  own forward.
* RL training with the C modules off and the reference backward pass selected: the same bits.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_random_programs import SETTINGS, _draw_program

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import core, tracer
from rlgrad.nn import Parameter

# ---- the backward pass ---------------------------------------------------------------------

_ENGINE, _NODE = core._engine, tracer._c_node
LOOPS = ["c", "python", "reference"] if _ENGINE is not None else ["python", "reference"]


@contextmanager
def _loop(name: str) -> Iterator[None]:
    """Run the backward passes inside through one loop (as conftest's ``backward_loop``)."""
    saved = core._engine, tracer._c_node, core._reference
    c = name == "c"
    core._engine, tracer._c_node = (_ENGINE, _NODE) if c else (None, None)
    core._reference = name == "reference"
    try:
        yield
    finally:
        core._engine, tracer._c_node, core._reference = saved


def _bits(a: Any) -> tuple:
    a = np.asarray(getattr(a, "_value", a))
    return a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()


def _all_orders(program: Any) -> list[tuple | None]:
    """``.backward()``'s leaf gradients, ``autograd.grad``'s (the create_graph pass), and the
    gradients of ``sum(grad * w)`` (second order), as bits."""
    xs = [rlgrad.tensor(x.copy(), requires_grad=True) for x in program.inputs]
    program(*xs).backward()
    first = [x.grad for x in xs]
    gs = rlgrad.autograd.grad(program(*xs), xs, create_graph=True, allow_unused=True)
    rng = np.random.default_rng(0)
    s = sum(rnp.sum(g * rng.standard_normal(g.shape)) for g in gs if g is not None)
    second = [None] * len(xs)
    if isinstance(s, rlgrad.Tensor) and s.requires_grad:
        second = rlgrad.autograd.grad(s, xs, allow_unused=True)
    return [None if g is None else _bits(g) for g in [*first, *gs, *second]]


@SETTINGS
@given(st.data())
def test_every_loop_gives_the_reference_bits_on_random_programs(data: Any) -> None:
    program = _draw_program(data)
    with np.errstate(all="ignore"):
        results = {}
        for name in LOOPS:
            with _loop(name):
                results[name] = _all_orders(program)
    for name in LOOPS:
        assert results[name] == results["reference"], (name, program)


def test_the_c_loop_is_built_where_there_is_a_c_compiler(backward_loop: str) -> None:
    if os.environ.get("RLGRAD_ENGINE") == "0":
        pytest.skip("RLGRAD_ENGINE=0 turns the C loop off")
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler: the Python loop is the only one")
    assert importlib.util.find_spec("rlgrad._engine") is not None, (
        "rlgrad._engine was not built: reinstall with `pip install -e .`")
    from rlgrad import _engine

    assert _engine.API == 1, "rlgrad._engine is stale: rebuild it (`pip install -e .`)"


def _program(w: rlgrad.Tensor, b: rlgrad.Tensor, x: np.ndarray) -> rlgrad.Tensor:
    """Unary, binary, keyword (sum axis=), variadic (concatenate, einsum) and three-argument
    (where) nodes; a tensor used by several ops; broadcasting undone for b."""
    h = rnp.tanh(x @ w + b)
    both = rnp.concatenate([h, h * 2.0], axis=1)
    e = rnp.einsum("ij,ij->i", both, both)
    m = rnp.where(e > 1.0, e, h.sum(axis=1) ** 2)
    return rnp.mean(m) + rnp.max(h, axis=1, keepdims=True).sum()


def _fd_grad(f: Any, v: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        d = np.zeros_like(v)
        d[i] = eps
        out[i] = (f(v + d) - f(v - d)) / (2 * eps)
    return out


def test_gradients_match_finite_differences_through_every_kind_of_node(backward_loop: str) -> None:
    rng = np.random.default_rng(0)
    w0, b0, x = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((5, 3))
    w, b = Parameter(w0.copy()), rlgrad.tensor(b0.copy(), requires_grad=True)
    _program(w, b, x).backward()
    fw = _fd_grad(lambda v: float(_program(rlgrad.tensor(v), rlgrad.tensor(b0), x)._value), w0)
    fb = _fd_grad(lambda v: float(_program(rlgrad.tensor(w0), rlgrad.tensor(v), x)._value), b0)
    np.testing.assert_allclose(w.grad._value, fw, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(b.grad._value, fb, rtol=1e-6, atol=1e-8)
    _program(w, b, x).backward()  # .grad accumulates
    np.testing.assert_allclose(w.grad._value, 2 * fw, rtol=1e-6, atol=1e-8)
    gw, = rlgrad.autograd.grad(_program(w, b, x), [w])  # autograd.grad, pruned to w
    np.testing.assert_allclose(gw._value, fw, rtol=1e-6, atol=1e-8)


def test_retain_grad_retain_graph_and_a_given_gradient(backward_loop: str) -> None:
    w = rlgrad.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    h = w * w
    h.retain_grad()
    y = rnp.exp(h)
    y.backward(rlgrad.tensor(np.array([1.0, 2.0, 0.5])), retain_graph=True)
    np.testing.assert_allclose(h.grad._value, np.exp([1.0, 4.0, 9.0]) * [1.0, 2.0, 0.5])
    np.testing.assert_allclose(w.grad._value, h.grad._value * 2 * w._value)
    y.backward(rlgrad.tensor(np.ones(3)))
    with pytest.raises(RuntimeError, match="backward through the graph a second time .*exp"):
        y.backward(rlgrad.tensor(np.ones(3)))


def test_higher_order_and_stops_at_what_needs_no_gradient(backward_loop: str) -> None:
    x = rlgrad.tensor(np.array([0.5, -1.5]), requires_grad=True)
    c = rlgrad.tensor(np.array([2.0, 3.0]))  # requires no gradient: never given one
    d = (x * 4.0).detach()  # cut from the graph
    y = rnp.sum(rnp.sin(x) * c + d * x)
    g, = rlgrad.autograd.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(g._value, np.cos(x._value) * c._value + d._value)
    h, = rlgrad.autograd.grad(g.sum(), [x], create_graph=True)  # second order
    np.testing.assert_allclose(h._value, -np.sin(x._value) * c._value)
    k, = rlgrad.autograd.grad(h.sum(), [x])  # third order
    np.testing.assert_allclose(k._value, -np.cos(x._value) * c._value)
    assert c.grad is None and d.grad is None


def test_an_in_place_write_is_refused_by_every_loop(backward_loop: str) -> None:
    w = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    h = w * 3.0
    y = rnp.exp(h)
    with rlgrad.no_grad():
        h += 1.0
    with pytest.raises(RuntimeError, match="argument 0 of exp .* was written"):
        y.sum().backward()


def test_the_loop_in_use_is_the_one_asked_for(backward_loop: str, monkeypatch: Any) -> None:
    calls: dict[str, int] = {"python": 0, "reference": 0}
    propagate, reference = core._propagate, core.reference_backward

    def count(name: str, fn: Any) -> Any:
        def counted(*a: Any) -> Any:
            calls[name] += 1
            return fn(*a)
        return counted

    monkeypatch.setattr(core, "_propagate", count("python", propagate))
    monkeypatch.setattr(core, "reference_backward", count("reference", reference))
    w = rlgrad.tensor(np.ones(2), requires_grad=True)
    (w * 2.0).sum().backward()
    want = {"c": (0, 0), "python": (1, 0), "reference": (0, 1)}[backward_loop]
    assert (calls["python"], calls["reference"]) == want
    (w * 2.0).sum().backward(create_graph=True)  # higher order: the Python loop, not C
    want = {"c": (1, 0), "python": (2, 0), "reference": (0, 2)}[backward_loop]
    assert (calls["python"], calls["reference"]) == want


def test_use_reference_selects_it_and_restores_the_loop() -> None:
    before = core._reference
    with core.use_reference():
        assert core._reference
        with core.use_reference(False):
            assert not core._reference
        assert core._reference
    assert core._reference == before


def test_graph_nodes_are_made_alike_by_every_loop(backward_loop: str) -> None:
    w = rlgrad.tensor(np.ones(2), requires_grad=True)
    y = rnp.sum(w * 2.0, axis=0, keepdims=True)
    assert y.requires_grad and not y.is_leaf and y.grad is None and y.grad_fn.name == "sum"
    assert y._args[0]._args[0] is w and y._kw == {"axis": 0, "keepdims": True}
    assert y._args[0]._seq < y._seq and y._written == 0 and not y._retain


def test_each_leaf_gets_its_own_gradient_array_in_its_dtype(backward_loop: str) -> None:
    a = rlgrad.tensor(np.ones(3, np.float32), requires_grad=True)
    b = rlgrad.tensor(np.ones(3, np.float32), requires_grad=True)
    (a + b).backward(rlgrad.tensor(np.full(3, 2.0, np.float32)))  # add hands one array to both
    a.grad._value += 1.0
    np.testing.assert_array_equal(b.grad._value, [2.0, 2.0, 2.0])
    c = rlgrad.tensor(np.ones(2, np.float32), requires_grad=True)
    (c * np.array([0.5, 3.0])).sum().backward()  # a float64 product: the gradient is cast back
    assert c.grad.dtype == np.float32
    np.testing.assert_array_equal(c.grad._value, [0.5, 3.0])
