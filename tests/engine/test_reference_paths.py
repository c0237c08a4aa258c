"""Every fast path against its reference, in one place: a contributor can delete a fast path and
lose only speed.

* The backward pass: ``core.reference_backward`` against ``core._propagate`` and its C twin
  (``rlgrad/_engine.c``) on random programs (the generator of tests/helpers/programs.py), first and
  second order, bit for bit; the tests that name the ``backward_loop`` fixture (conftest.py) run
  under all three loops, as do the engine's gradient test files.
* The optimizers: ``rlgrad/optim/reference.py`` against the classes' per-parameter loop, their
  flat path, the C loop (``_fused.c``) and ``step_arrays``, over many steps with every option.
* The C kernels (``rlgrad/_kernels.c``) against the NumPy lines they replace: bit for bit.
* The eager fast paths (take_along_axis, max/min, the rules on plain arrays) against NumPy's own
  operation and the recorded rules.
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
from helpers.kernel_inputs import awkward, relu_inputs, rollout
from helpers.programs import SETTINGS, draw_program
from hypothesis import given
from hypothesis import strategies as st

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import core, nn, ops, optim, tracer
from rlgrad.indexing_kernels import _put_along_axis_add, _take_along_axis
from rlgrad.nn import Parameter
from rlgrad.ops import _amax, _amin
from rlgrad.optim import algorithms, reference
from rlgrad.rl.policies import mlp_numpy
from rlgrad.tensor import _const, tensor

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
    program = draw_program(data)
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

    assert _engine.API == 2, "rlgrad._engine is stale: rebuild it (`pip install -e .`)"


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


def test_autograd_grad_walks_only_what_leads_to_an_input(backward_loop: str) -> None:
    x = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = rlgrad.tensor(np.array([0.5, -0.5]), requires_grad=True)
    a, b = (x * 2.0).sum(), rnp.exp(y * 3.0).sum()
    gx, = rlgrad.autograd.grad([a, b], [x])  # b leads to no input: neither walked nor freed
    np.testing.assert_array_equal(gx._value, [2.0, 2.0])
    assert y.grad is None
    b.backward()
    np.testing.assert_allclose(y.grad._value, 3.0 * np.exp(3.0 * y._value), rtol=1e-15)


def test_an_in_place_write_is_refused_by_every_loop(backward_loop: str) -> None:
    w = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    h = w * 3.0
    y = rnp.sin(h)  # its rule reads h (exp's reads only its output: torch and rlgrad allow that)
    with rlgrad.no_grad():
        h += 1.0
    with pytest.raises(RuntimeError, match="argument 0 of sin .* was written"):
        y.sum().backward()
    z = rnp.exp(w * 3.0)
    with rlgrad.no_grad():
        z += 1.0  # exp's saved output written: refused (torch's ExpBackward saves its result)
    with pytest.raises(RuntimeError, match="its output of exp .* was written"):
        z.sum().backward()


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


# ---- the optimizers -------------------------------------------------------------------------

OPT_SHAPES = [(7, 3), (7,), (5, 7), (1,), (2, 5)]
OPT_CASES = [  # every option of every optimizer, alone or combined
    (optim.SGD, dict(lr=0.01)),
    (optim.SGD, dict(lr=0.01, momentum=0.9, dampening=0.3, weight_decay=0.1)),
    (optim.SGD, dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1, maximize=True)),
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.003, betas=(0.8, 0.99), eps=1e-6, maximize=True)),
    (optim.Adam, dict(lr=0.01, amsgrad=True)),
    (optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1, maximize=True)),  # per parameter
    (optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    (optim.RMSprop, dict(lr=0.01)),
    (optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-5, maximize=True)),
    (optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.5)),
    (optim.RMSprop, dict(lr=0.01, momentum=0.9, tf_style=True, maximize=True)),
    (optim.RMSprop, dict(lr=0.01, weight_decay=0.1, centered=True, tf_style=True)),
    (optim.RMSpropTFLike, dict(lr=7e-4, alpha=0.99, eps=1e-5)),
]
_REFERENCE = {optim.SGD: (reference.sgd, {}), optim.Adam: (reference.adam, {}),
              optim.AdamW: (reference.adam, {"decoupled": True}),
              optim.RMSprop: (reference.rmsprop, {}),
              optim.RMSpropTFLike: (reference.rmsprop, {"tf_style": True})}
# The per-parameter loop folds scalars differently from PyTorch's formulas (the references):
# after 150 steps, |loop - reference| <= TOL * (|reference| + 1) elementwise (measured: 2e-6 and
# 3e-15 at most). SGD does the reference's operations: bits.
OPT_TOL = {np.float32: 2e-5, np.float64: 1e-12}
SCALES = [1.0, 0.37, 1.0, 0.0123, 0.9, 1.0, 0.5]  # step_arrays' clip factors, in turn


def _opt_grads(rng: np.random.Generator, dtype: type, step: int, kind: str) -> list[np.ndarray]:
    out = []
    for i, s in enumerate(OPT_SHAPES):
        g = rng.normal(size=s)
        if kind == "tiny" and i == 1:  # moments that sink below Adam's flush floor
            g = g * (1e-27 if dtype == np.float32 else 1e-300)
        if kind == "tiny" and i == 3 and step >= 30:
            g = np.zeros(s)  # no gradient any more (a dead unit): the moments decay
        if kind == "nonfinite" and i == 2 and step in (20, 21):
            g.reshape(-1)[:3] = [np.inf, -np.inf, np.nan]
        out.append(g.astype(dtype))
    return out


def _run_path(path: str, cls: type, kw: dict, dtype: type, steps: int, kind: str,
              monkeypatch: Any) -> tuple[list[np.ndarray], dict]:
    """Parameters and state after ``steps`` steps on one path: "reference" (reference.py), "loop"
    (the per-parameter loop), "flat" (the flat path in NumPy), "fused" (in C), "step_arrays"."""
    monkeypatch.setattr(algorithms, "_fused", _FUSED if path in ("fused", "step_arrays") else None)
    rng = np.random.default_rng(0)
    values = [rng.normal(size=s).astype(dtype) for s in OPT_SHAPES]
    params = [tensor(v.copy(), requires_grad=True) for v in values]
    opt, states = cls(params, **kw), [{} for _ in params]
    if path == "loop":
        opt._flat_applies = lambda group: False
    fn, extra = _REFERENCE[cls]
    grads_rng = np.random.default_rng(1)
    for t in range(steps):
        grads, scale = _opt_grads(grads_rng, dtype, t, kind), SCALES[t % len(SCALES)]
        if path == "step_arrays":
            opt.step_arrays(grads, scale)
            continue
        grads = [g * g.dtype.type(scale) if scale != 1.0 else g for g in grads]
        if path == "reference":
            for v, g, s in zip(values, grads, states):
                fn(v, g, s, **kw, **extra)
            continue
        for p, g in zip(params, grads):
            p.grad = _const(g)
        opt.step()
    if path == "reference":
        return values, {}
    assert (path == "loop" or cls is optim.SGD or kw.get("weight_decay") and cls is not optim.AdamW
            or bool(opt._flat)), "the flat path should have been taken"
    return [p._value for p in params], opt.state_dict()["state"]


def _assert_same_bits(got: tuple, want: tuple, nonfinite: bool) -> None:
    for a, b in zip(got[0], want[0]):
        if nonfinite:  # NaN where NaN, the same numbers elsewhere
            np.testing.assert_array_equal(a, b)
        else:
            assert a.tobytes() == b.tobytes()
    assert got[1].keys() == want[1].keys()
    for k, state in want[1].items():
        assert got[1][k].keys() == state.keys()
        for key, v in state.items():
            np.testing.assert_array_equal(got[1][k][key], v, err_msg=f"state {k}.{key}")


_FUSED = algorithms._fused
OPT_PATHS = ["flat", "fused", "step_arrays"] if _FUSED is not None else ["flat", "step_arrays"]


@pytest.mark.parametrize("kind", ["normal", "tiny", "nonfinite"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,kw", OPT_CASES)
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the NaN gradients
def test_every_optimizer_path_gives_the_loops_bits_and_the_references_numbers(
        cls: type, kw: dict, dtype: type, kind: str, monkeypatch: Any) -> None:
    steps = 150 if kind != "nonfinite" else 25  # through Adam's flushes at steps 50, 100, 150
    loop = _run_path("loop", cls, kw, dtype, steps, kind, monkeypatch)
    for path in OPT_PATHS if cls is not optim.SGD else ["step_arrays"]:
        _assert_same_bits(_run_path(path, cls, kw, dtype, steps, kind, monkeypatch), loop,
                          kind == "nonfinite")
    ref, _ = _run_path("reference", cls, kw, dtype, steps, kind, monkeypatch)
    if kind == "nonfinite":
        assert any(np.isnan(p).any() for p in loop[0])  # the case is really there
    for a, b in zip(loop[0], ref):
        if cls is optim.SGD:
            np.testing.assert_array_equal(a, b)
        else:
            tol = OPT_TOL[dtype]
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    if kind == "tiny" and (cls is optim.AdamW or cls is optim.Adam and not kw.get("weight_decay")):
        # the flush happened at step 150: the tiny parameter's first moment is exactly zero
        # (without it, the test could not tell a missing flush)
        assert np.all(loop[1][1]["exp_avg"] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,kw", OPT_CASES)
def test_the_reference_updates_are_pytorchs(cls: type, kw: dict, dtype: type,
                                             monkeypatch: Any) -> None:
    """reference.py against torch.optim (and Stable-Baselines3's RMSpropTFLike for tf_style)
    over 150 steps: the same formulas, so only the libraries' rounding differs (measured: 3e-6
    and 6e-15 at most)."""
    torch = pytest.importorskip("torch")
    theirs = dict(kw)
    tf = cls is optim.RMSpropTFLike or theirs.pop("tf_style", False)
    sign = 1.0
    if tf:  # SB3's has no maximize: it minimizes the negated gradient instead
        rmsprop_tf = pytest.importorskip("stable_baselines3.common.sb2_compat.rmsprop_tf_like")
        tcls, sign = rmsprop_tf.RMSpropTFLike, -1.0 if theirs.pop("maximize", False) else 1.0
    else:
        tcls = getattr(torch.optim, cls.__name__)
    rng = np.random.default_rng(0)
    ps = [torch.tensor(rng.normal(size=s).astype(dtype), requires_grad=True) for s in OPT_SHAPES]
    opt = tcls(ps, **theirs)
    grads_rng = np.random.default_rng(1)
    for t in range(150):
        for p, g in zip(ps, _opt_grads(grads_rng, dtype, t, "normal")):
            p.grad = torch.from_numpy(sign * (g * g.dtype.type(SCALES[t % len(SCALES)])))
        opt.step()
    ref, _ = _run_path("reference", cls, kw, dtype, 150, "normal", monkeypatch)
    tol = 4 * OPT_TOL[dtype]
    for a, b in zip(ref, ps):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=tol, atol=tol)


# ---- the C kernels --------------------------------------------------------------------------
# Each case: the kernel (through rlgrad.ops where it is called from there) and the NumPy line it
# replaces, on awkward values (signed zeros, NaN, inf, subnormals, many magnitudes): the kernels
# promise NumPy's bits (rlgrad/_kernels.c), so bits it is.

K = ops._kernels
needs_kernels = pytest.mark.skipif(K is None, reason="rlgrad._kernels not built (or turned off)")
Pairs = list[tuple[Any, Any]]


def _k_sum_rows(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    x = awkward(rng, shape, dtype)
    out = np.empty(shape[1], dtype)
    assert K.sum_rows(x, out)
    want = np.add.reduce(x, axis=0)
    return [(out, want), (ops._sum(x, axis=0), want)]  # ops._sum: the traced sum, a bias gradient


def _k_sum_over(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    """A conv's bias gradient: the sum over (0, 2, 3) of an (N, C, H, W) view of NHWC memory
    (``shape``), and over (0, 1, 2) of the NHWC array itself; a layout NumPy reduces otherwise
    (the plain NCHW array) stays NumPy's."""
    x = awkward(rng, shape, dtype)
    nchw = x.transpose(0, 3, 1, 2)
    assert ops._rows_over(nchw, (0, 2, 3)) is not None and ops._rows_over(x, (0, 1, 2)) is not None
    plain = np.ascontiguousarray(nchw)
    if shape[1] * shape[2] > 1 and shape[3] > 1:  # (1x1 images or 1 channel: one layout)
        assert ops._rows_over(plain, (0, 2, 3)) is None
    return [(ops._sum(nchw, axis=(0, 2, 3)), np.add.reduce(nchw, axis=(0, 2, 3))),
            (ops._sum(nchw, axis=(-4, 3, 2)), np.add.reduce(nchw, axis=(0, 2, 3))),
            (ops._sum(x, axis=(0, 1, 2)), np.add.reduce(x, axis=(0, 1, 2))),
            (ops._sum(plain, axis=(0, 2, 3)), np.add.reduce(plain, axis=(0, 2, 3)))]


def _k_tanh_grad(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    g = np.asarray(rng.standard_normal(shape), dtype)
    y = np.asarray(np.tanh(3 * rng.standard_normal(shape)), dtype)  # saturated entries included
    if g.size > 2:
        g.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    want = g * (1 - y * y)
    pairs = [(ops._tanh_grad(g, y), want)]
    for into in ("g", "y"):  # a compiled step writes into a buffer it no longer needs
        gg, yy = g.copy(), y.copy()
        out = gg if into == "g" else yy
        assert ops._tanh_grad(gg, yy, out=out) is out
        pairs.append((out, want))
    return pairs


def _k_relu(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    x = relu_inputs(rng, shape, dtype)
    g = relu_inputs(rng, shape, dtype)[..., ::-1].copy() if shape else np.asarray(-2.0, dtype)
    want_fwd, want_bwd = np.maximum(x, 0), np.where(x <= 0, dtype(0), g)  # torch's select
    assert want_fwd.dtype == dtype and want_bwd.dtype == dtype
    pairs = [(ops._relu(x), want_fwd), (ops._relu_grad(g, x), want_bwd)]
    # into a buffer, and into an argument (a compiled step reuses what it no longer needs)
    xx, gg, xg = x.copy(), g.copy(), x.copy()
    assert ops._relu(xx, out=xx) is xx
    assert ops._relu_grad(gg, x, out=gg) is gg
    assert ops._relu_grad(g, xg, out=xg) is xg
    return pairs + [(xx, want_fwd), (gg, want_bwd), (xg, want_bwd)]


def _k_add_rows(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    out = relu_inputs(rng, shape, dtype)
    b = relu_inputs(rng, shape[-1:], dtype)[::-1].copy()
    want, out2 = out + b, out.copy()
    with np.errstate(invalid="ignore"):  # inf + -inf
        want_relu = np.maximum(out + b, 0)
    assert K.add_rows(out, b)
    assert K.add_rows(out2, b, True)  # the bias add and the ReLU in one pass
    return [(out, want), (out2, want_relu)]


def _k_live_columns(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    g = np.asarray(rng.standard_normal(shape), dtype)
    g[:, rng.random(shape[1]) < 0.5] = 0.0  # dead units
    g[rng.random(shape) < 0.5] = -0.0  # a -0.0 is no life
    if shape[0] > 2 and shape[1] > 5:
        g[:, 2] = 0.0
        g[1, 2] = np.nan  # a NaN is
        g[:, 4] = 0.0
        g[2, 4] = -np.inf
    idx = np.full(shape[1], -7, np.intp)
    n = K.live_columns(g, idx)
    return [(idx[:n], np.flatnonzero(g.any(axis=0)))]


def _k_take_columns(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    g = relu_inputs(rng, shape, dtype)
    pairs = []
    for idx in (np.arange(shape[1]), np.array([0, 3, shape[1] - 1]), np.array([], np.intp),
                np.array([5, 5, 2])):
        idx = idx.astype(np.intp)
        out = np.empty((shape[0], len(idx)), dtype)
        assert K.take_columns(g, idx, out)
        pairs.append((out, g.take(idx, axis=1)))
    return pairs


def _k_put_rows(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    pairs = []
    for idx in (np.array([0, 3, 9]), np.arange(10), np.array([], np.intp), np.array([9])):
        idx = idx.astype(np.intp)
        part = relu_inputs(rng, (len(idx), 7), dtype) if len(idx) else np.empty((0, 7), dtype)
        out = np.full((10, 7), -3.0, dtype)
        assert K.put_rows(part, idx, out)
        want = np.zeros((10, 7), dtype)
        want[idx] = part
        pairs.append((out, want))
    return pairs


def _k_outer(rng: np.random.Generator, dtype: type, shape: tuple) -> Pairs:
    a = relu_inputs(rng, shape, dtype)
    b = relu_inputs(rng, (1, 300), dtype)[:, ::-1].copy()
    out = np.empty(shape[:-1] + (300,), dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, 1e30 * 1e30 in float32
        want = a * b
        assert K.outer(a, b, out)
    return [(out, want)]


KERNEL_CASES = [
    ("sum_rows", _k_sum_rows, [(1, 3), (2, 2), (5, 64), (128, 2), (128, 64), (256, 3), (2048, 64),
                               (4097, 2), (3, 5000)]),
    ("sum_over", _k_sum_over, [(64, 15, 15, 32), (1, 6, 6, 64), (3, 4, 4, 2), (7, 1, 1, 5),
                               (2, 3, 5, 1)]),
    ("tanh_grad", _k_tanh_grad, [(), (1,), (7,), (128, 64), (3, 5, 7)]),
    ("relu", _k_relu, [(), (1,), (7,), (1, 256), (256, 300), (3, 5, 7)]),
    ("add_rows", _k_add_rows, [(5,), (1, 256), (256, 400), (2, 3, 4)]),
    ("live_columns", _k_live_columns, [(1, 1), (3, 7), (256, 256), (64, 300)]),
    ("take_columns", _k_take_columns, [(33, 40)]),
    ("put_rows", _k_put_rows, [(10, 7)]),
    ("outer", _k_outer, [(1, 1), (256, 1), (4, 3, 1)]),
]


@needs_kernels
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in NumPy's lines
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,case,shape", [(n, c, s) for n, c, shapes in KERNEL_CASES
                                             for s in shapes])
def test_every_kernel_gives_its_numpy_lines_bits(name: str, case: Any, shape: tuple,
                                                  dtype: type) -> None:
    rng = np.random.default_rng(sum(shape) + len(shape))
    for got, want in case(rng, dtype, shape):
        assert _bits(got) == _bits(want), name


# ---- the ops with the kernels against the ops without them (RLGRAD_KERNELS=0) ---------------

_INF_TIMES_ZERO = pytest.mark.filterwarnings("ignore:invalid value encountered")  # the inf reward


def test_the_numpy_path_gives_the_same_bits(monkeypatch: Any) -> None:
    rng = np.random.default_rng(3)
    x = awkward(rng, (64, 5), np.float32)
    g = rng.standard_normal((64, 5)).astype(np.float32)
    y = np.tanh(rng.standard_normal((64, 5))).astype(np.float32)
    with_c = ops._sum(x, axis=0), ops._tanh_grad(g, y)
    monkeypatch.setattr(ops, "_kernels", None)
    without = ops._sum(x, axis=0), ops._tanh_grad(g, y)
    for a, b in zip(with_c, without):
        assert _bits(a) == _bits(b)


@_INF_TIMES_ZERO
@pytest.mark.parametrize("steps, n", [(5, 8), (128, 4), (1, 3), (7, 1)])
@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.98, 1), (1, 0.8)])
def test_gae_kernel_gives_the_numpy_paths_bits(monkeypatch: Any, steps: int, n: int, gamma: float,
                                              lam: float) -> None:
    rng = np.random.default_rng(steps * n)
    b = rollout(rng, steps, n, gamma, lam)
    last = rng.standard_normal(n)  # float64: cast to float32 by both paths
    b.compute_returns_and_advantage(last)
    got = b.advantages.copy(), b.returns.copy()
    monkeypatch.setattr(ops, "_kernels", None)
    b.compute_returns_and_advantage(last)
    for a, e in zip(got, (b.advantages, b.returns)):
        assert _bits(a) == _bits(e)


@_INF_TIMES_ZERO
def test_gae_with_a_numpy_float64_gamma_keeps_numpys_float64_arithmetic(monkeypatch: Any) -> None:
    """A NumPy float64 gamma makes NumPy's GAE compute in float64 (it is not a weak Python
    float): the buffer then takes the NumPy path, whatever the kernel would round."""
    b = rollout(np.random.default_rng(3), 6, 3, gamma=np.float64(0.99), lam=np.float64(0.9))
    last = np.ones(3, np.float32)
    b.compute_returns_and_advantage(last)
    got = b.advantages.copy()
    monkeypatch.setattr(ops, "_kernels", None)
    b.compute_returns_and_advantage(last)
    assert _bits(got) == _bits(b.advantages)


def test_relu_paths_agree_and_linear_adds_its_bias_alike(monkeypatch: Any) -> None:
    rng = np.random.default_rng(5)
    x = relu_inputs(rng, (64, 5), np.float32)
    g = rng.standard_normal((64, 5)).astype(np.float32)
    w = rng.standard_normal((5, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    lin = rlgrad.nn.functional._linear
    with_c = ops._relu(x), ops._relu_grad(g, x), lin(g, w, b)
    monkeypatch.setattr(ops, "_kernels", None)
    without = ops._relu(x), ops._relu_grad(g, x), lin(g, w, b)
    for a, c in zip(with_c, without):
        assert _bits(a) == _bits(c)
    assert _bits(without[2]) == _bits(g @ w.T + b)


def test_dead_unit_skipping_finds_the_same_units_without_the_kernels(monkeypatch: Any) -> None:
    from rlgrad.nn import functional as F

    rng = np.random.default_rng(4)
    g = rng.standard_normal((128, 256)).astype(np.float32)
    g[:, rng.random(256) < 0.6] = 0.0
    g[0] = 0.0  # the first row does not decide
    w = rng.standard_normal((256, 96)).astype(np.float32)
    live = F._live_units(g, 96)
    assert live is not None and len(live) < 0.75 * 256
    x = rng.standard_normal((128, 96)).astype(np.float32)
    got = F._linear_grad_input(g, w), F._linear_grad_weight(g, x)
    monkeypatch.setattr(ops, "_kernels", None)
    np.testing.assert_array_equal(F._live_units(g, 96), live)
    assert _bits(F._linear_grad_input(g, w)) == _bits(got[0])
    assert _bits(F._linear_grad_weight(g, x)) == _bits(got[1])


def test_a_value_heads_input_gradient_is_the_product(monkeypatch: Any) -> None:
    """``linear``'s input gradient through a one-output layer is ``g @ weight``, computed as an
    outer product (in C where it fits): the product's bits, with and without the kernels."""
    F = rlgrad.nn.functional
    rng = np.random.default_rng(8)
    g = rng.standard_normal((256, 1)).astype(np.float32)
    w = rng.standard_normal((1, 64)).astype(np.float32)
    with_c = F._linear_grad_input(g, w)
    monkeypatch.setattr(ops, "_kernels", None)
    without = F._linear_grad_input(g, w)
    assert _bits(with_c) == _bits(without)
    assert _bits(with_c) == _bits(g @ w)


# ---- the eager fast paths against NumPy's own operation and the recorded rules --------------
# take_along_axis and its scatter index with the fancy index NumPy's take/put_along_axis build;
# max/min call the ufunc reduce np.max/np.min call; the rules on plain arrays (a first-order pass)
# give the numbers of the same rules on Tensors (the recorded ones). Same bits: both sides run the
# same operations (a gather or a copy; a maximum is exact).

@pytest.mark.parametrize("shape,axis", [((5, 3), 1), ((5, 3), -1), ((5, 3), 0), ((2, 3, 4), 1),
                                        ((4,), 0)])
def test_take_along_axis_is_numpys(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    ishape = list(shape)
    ishape[axis] = 2
    idx = rng.integers(-shape[axis], shape[axis], size=ishape)
    np.testing.assert_array_equal(_take_along_axis(x, idx, axis), np.take_along_axis(x, idx, axis))
    one = list(shape)
    one[axis] = 1
    lane = rng.integers(0, shape[axis], size=one)
    out = np.zeros(shape, np.float32)
    g = rng.standard_normal(one).astype(np.float32)
    np.put_along_axis(out, lane, g, axis)
    np.testing.assert_array_equal(_put_along_axis_add(g, lane, axis, shape), out)


@pytest.mark.parametrize("bad", [np.array([[5]] * 5), np.array([[0]] * 4), np.array([0, 1]),
                                 np.array([[0.0]] * 5)])
def test_take_along_axis_errors_are_numpys(bad: np.ndarray) -> None:
    x = np.zeros((5, 3))
    with pytest.raises((IndexError, ValueError)) as numpys:
        np.take_along_axis(x, bad, 1)
    with pytest.raises(type(numpys.value), match=str(numpys.value).strip()[:40]):
        _take_along_axis(x, bad, 1)


@pytest.mark.parametrize("x", [np.array(3.0), np.array([[1.0, np.nan], [2.0, 1.0]]),
                               np.arange(12).reshape(3, 4), np.array([[True, False]]),
                               np.array([[-0.0, 0.0], [0.0, -0.0]], np.float32),
                               np.random.default_rng(1).standard_normal((3, 4, 5))])
def test_max_min_are_numpys(x: np.ndarray) -> None:
    for axis in ([None, 0, -1, (0,)] if x.ndim else [None]):
        for keepdims in (False, True):
            for ours, theirs in ((_amax, np.max), (_amin, np.min)):
                got, want = ours(x, axis, keepdims), theirs(x, axis=axis, keepdims=keepdims)
                assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_max_of_nothing_is_numpys_error() -> None:
    with pytest.raises(ValueError, match="zero-size array"):
        _amax(np.zeros((0, 3)), 0, False)


@pytest.mark.parametrize("x", [np.array([[1.0, 1.0, 0.0], [np.nan, 2.0, np.nan], [3.0, 3.0, 3.0]],
                                        np.float32),
                               np.random.default_rng(2).standard_normal((4, 5)),
                               np.arange(6.0).reshape(2, 3)])
def test_max_rule_on_arrays_counts_as_the_recorded_one(x: np.ndarray) -> None:
    """Plain arrays count ties in the gradient's dtype and look for NaN only when a group has no
    hit; the recorded rule (Tensors) counts in int64 and always masks NaN: the same numbers."""
    from rlgrad.ops import _extremum_vjp
    from rlgrad.tensor import constant

    for axis in (None, 0, 1):
        for keepdims in (False, True):
            ans = np.max(x, axis=axis, keepdims=keepdims)
            g = np.random.default_rng(3).standard_normal(np.shape(ans)).astype(x.dtype)
            plain = _extremum_vjp(g, ans, x, axis, keepdims)
            recorded = _extremum_vjp(constant(g), constant(ans), constant(x), axis, keepdims)._value
            assert plain.dtype == recorded.dtype
            np.testing.assert_array_equal(plain, recorded)


@pytest.mark.parametrize("x", [np.array([[np.inf, 1.0], [-np.inf, -np.inf], [2.0, 2.0]]),
                               np.array([[1.0, np.nan, 3.0]], np.float32), np.array([[5.0]]),
                               np.array([[0.5, 0.25]], np.float32)])
@pytest.mark.filterwarnings("error")  # inf and -inf extrema: no "invalid value" warning either
def test_max_rule_nan_check_on_arrays(x: np.ndarray) -> None:
    """The plain rule marks NaNs only when ans holds one; inf and -inf extrema and
    single-element groups give the recorded rule's numbers too."""
    from rlgrad.ops import _extremum_vjp
    from rlgrad.tensor import constant

    for axis, keepdims in ((1, True), (-1, False), (None, False), (0, True)):
        ans = np.max(x, axis=axis, keepdims=keepdims)
        g = np.full(np.shape(ans), 3.0, x.dtype)
        plain = _extremum_vjp(g, ans, x, axis, keepdims)
        recorded = _extremum_vjp(constant(g), constant(ans), constant(x), axis, keepdims)._value
        np.testing.assert_array_equal(plain, recorded)


@pytest.mark.parametrize("shape,axis,keepdims", [((3, 4), 1, True), ((3, 4), -1, False),
                                                 ((2, 3, 4), 0, False), ((2, 3, 4), (0, 2), True),
                                                 ((3, 4), None, False), ((1, 1), None, True)])
def test_sum_and_mean_rules_on_arrays_broadcast_as_recorded(shape: tuple, axis: object,
                                                            keepdims: bool) -> None:
    """The plain sum/mean rules expand over one int axis with a repeat: a new writable array
    holding the recorded rule's numbers."""
    from rlgrad.ops import _mean_vjp, _sum_vjp
    from rlgrad.tensor import constant

    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    for rule, red in ((_sum_vjp, np.sum), (_mean_vjp, np.mean)):
        ans = red(x, axis=axis, keepdims=keepdims)
        g = np.asarray(np.random.default_rng(5).standard_normal(np.shape(ans)), np.float32)
        plain = rule(g, ans, x, axis, keepdims)
        recorded = rule(constant(g), constant(ans), constant(x), axis, keepdims)._value
        assert plain.shape == x.shape and plain.dtype == recorded.dtype
        np.testing.assert_array_equal(plain, recorded)
        if np.shape(g) != x.shape:  # expanded: a new array, which a .grad may take as it is
            assert plain.flags.writeable and not np.shares_memory(plain, g)


# ---- the NumPy forward for acting (rlgrad/rl/policies.py) -----------------------------------

def _layer_by_layer(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    for m in net:
        if isinstance(m, nn.Linear):
            x = x @ m.weight._value.T
            if m.bias is not None:
                x = x + m.bias._value
        elif isinstance(m, nn.ReLU):
            x = np.maximum(x, 0)
        else:
            x = np.tanh(x)
    return x


NETS = {
    "relu": lambda: nn.MLP([5, 32, 16, 3], activation=nn.ReLU),
    "tanh-relu-nobias": lambda: nn.Sequential(nn.Linear(5, 32), nn.Tanh(),
                                              nn.Linear(32, 16, bias=False), nn.ReLU(),
                                              nn.Linear(16, 3)),
    "tanh-tanh-out": lambda: nn.MLP([5, 32, 3], activation=nn.Tanh, output_activation=nn.Tanh),
}


@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("layers", sorted(NETS))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in the second layer
def test_mlp_numpy_is_the_modules_forward_bitwise(rows: int, layers: str) -> None:
    """``mlp_numpy`` (a Linear and its ReLU as one pass, ``_linear_relu``) against the layer by
    layer NumPy forward and the module's own, on NaN, infinite and signed-zero pre-activations."""
    rng = np.random.default_rng(rows)
    net = NETS[layers]()
    first = net[0]
    first.bias._value[:3] = [np.nan, np.inf, -np.inf]  # NaN, +-inf pre-activations in column 0-2
    first.weight._value[3] = 0.0
    first.bias._value[3] = -0.0  # column 3: -0.0 + 0 products
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    got = mlp_numpy(net, x)
    assert _bits(got) == _bits(_layer_by_layer(net, x))
    with rlgrad.no_grad():
        assert _bits(got) == _bits(net(rlgrad.tensor(x)))
    h = _layer_by_layer(net[:2], x)  # the first activation's output, signs of zero and NaN
    assert _bits(mlp_numpy(net[:2], x)) == _bits(h)


def test_the_policies_numpy_forwards_are_their_modules_forward() -> None:
    from gymnasium import spaces

    from rlgrad.rl import policies as P

    rng = np.random.default_rng(0)
    box = spaces.Box(-1.0, 1.0, (5,), np.float32)
    obs = rng.standard_normal((7, 5)).astype(np.float32)
    t = rlgrad.tensor(obs)
    pixels = spaces.Box(0, 255, (2, 10, 10), np.uint8)
    frames = rng.integers(0, 256, (3, 2, 10, 10)).astype(np.uint8)
    with rlgrad.no_grad():
        for space, x in ((box, obs), (pixels, frames)):
            for act in (spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32)):
                pol = P.ActorCriticPolicy(space, act, init_seed=1)
                f = pol._features(rlgrad.tensor(x))
                if pol.features_extractor is not None:  # the CNN trunk without a graph
                    assert _bits(P.trunk_numpy(pol.features_extractor, x)) == _bits(f)
                assert _bits(pol._head_np(x)) == _bits(pol.action_net(pol.pi_net(f)))
                assert _bits(pol.values_numpy(x)) == _bits(pol.value(rlgrad.tensor(x)))
        q = P.QNetwork(box, spaces.Discrete(4), [16, 16])
        assert _bits(q.q_numpy(obs)) == _bits(q(t))
        mu = P.DeterministicActor(5, 2, [16, 16])
        assert _bits(mu.numpy(obs)) == _bits(mu(t))
        sac = P.SquashedGaussianActor(5, 2, [16, 16])
        assert _bits(sac.numpy(obs, None)) == _bits(rnp.tanh(sac.mu(sac.latent_pi(t))))


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_fused_acting_path_matches_the_modules(env: str) -> None:
    """ActorCriticPolicy.fused_numpy (both towers as one network of block matrices) against the
    towers run apart: the block products add exact zeros but BLAS may order the sums
    differently, so a tolerance (float32: 1e-5 on the outputs, 1e-4 against the training
    graph's log-probabilities and values)."""
    from rlgrad.rl import PPO

    m = PPO(env, n_envs=2, seed=0)
    obs = np.random.default_rng(0).normal(size=(7, m.obs_dim)).astype(np.float32)
    a1, v1, l1 = m.policy.act(obs, np.random.default_rng(1))
    a2, v2, l2 = m.policy.act(obs, np.random.default_rng(1), m.policy.fused_numpy())
    np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a1, a2, rtol=1e-5, atol=1e-6)
    log_prob = m.policy.distribution(obs).log_prob(m.policy.actions_for_loss(a2))
    np.testing.assert_allclose(log_prob._value, l2, rtol=1e-4, atol=1e-5)  # the training graph
    np.testing.assert_allclose(m.policy.value(obs)._value, v2, rtol=1e-4, atol=1e-5)  # agrees


# ---- RL training: every fast path off, the reference on --------------------------------------

_TRAIN = """
import sys
sys.path.insert(0, {bench!r})
from _timing import state_hash
from rlgrad import core
from rlgrad.rl import A2C, DQN, PPO, SAC

calls = [0]
reference = core.reference_backward
def counted(*a, **k):
    calls[0] += 1
    return reference(*a, **k)
core.reference_backward = counted
runs = [
    DQN("CartPole-v1", seed=0, learning_starts=200, train_freq=4, target_update_interval=100)
    .learn(800),
    PPO("CartPole-v1", n_envs=2, n_steps=64, batch_size=32, n_epochs=2, seed=0).learn(256),
    A2C("CartPole-v1", n_envs=2, seed=0).learn(200),
    SAC("Pendulum-v1", seed=0, learning_starts=100, batch_size=32).learn(300),
]
print(" ".join(state_hash(m) for m in runs), calls[0])
"""
_NO_C = {"RLGRAD_ENGINE": "0", "RLGRAD_KERNELS": "0", "RLGRAD_FUSED": "0"}


def test_training_gives_the_same_bits_without_the_c_modules_and_with_the_reference() -> None:
    """DQN, PPO, A2C and SAC trained with every C module off (RLGRAD_ENGINE, RLGRAD_KERNELS,
    RLGRAD_FUSED = 0), and then also with the reference backward pass (RLGRAD_REFERENCE=1),
    end with the parameters and optimizer states of the default build, bit for bit."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _TRAIN.format(bench=os.path.join(root, "bench"))
    out = {}
    for name, env in (("default", {}), ("no C", _NO_C), ("reference", {**_NO_C, "RLGRAD_REFERENCE": "1"})):
        env = {**os.environ, "RLGRAD_REFERENCE": "0", **env}
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             cwd=root, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        hashes, calls = res.stdout.split()[:-1], int(res.stdout.split()[-1])
        assert (calls > 0) == (name == "reference"), (name, calls)  # the reference really ran
        out[name] = hashes
    assert out["no C"] == out["default"]
    assert out["reference"] == out["default"]
