"""The backward pass's two loops (rlgrad/_engine.c and core._propagate) give the same gradients
and the same errors; conftest.py runs this file, and the engine's gradient test files, under
both (the ``backward_loop`` fixture)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import core
from rlgrad.nn import Parameter


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


def _fd_grad(f, v: np.ndarray, eps: float = 1e-6) -> np.ndarray:
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


def test_an_in_place_write_is_refused_by_both_loops(backward_loop: str) -> None:
    w = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    h = w * 3.0
    y = rnp.exp(h)
    with rlgrad.no_grad():
        h += 1.0
    with pytest.raises(RuntimeError, match="argument 0 of exp .* was written"):
        y.sum().backward()


def test_the_loop_in_use_is_the_one_asked_for(backward_loop: str, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(core, "_propagate", lambda *a: calls.append(a))
    w = rlgrad.tensor(np.ones(2), requires_grad=True)
    (w * 2.0).sum().backward()
    assert len(calls) == (1 if backward_loop == "python" else 0)
    (w * 2.0).sum().backward(create_graph=True)  # higher order: always the Python loop
    assert len(calls) == (2 if backward_loop == "python" else 1)


def test_graph_nodes_are_made_alike_by_both(backward_loop: str) -> None:
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
