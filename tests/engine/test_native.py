"""The native backend of ``rlgrad.jit`` (rlgrad/native): each lowering against the NumPy replay
(the reference) in float32 and float64, gradients against central finite differences, the
fallbacks (an op without a lowering, no compiler, an argument laid out otherwise than traced),
the on-disk cache across processes, the GEMMs without BLAS, and the errors.

Tolerances: float64 1e-10, float32 1e-5 relative (and absolute, times the largest magnitude):
the native program differs from the replay by the order of its sums and by glibc's math
functions only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.nn.functional as F
import rlgrad.numpy as rnp
from rlgrad.distributions import Categorical
from rlgrad.native import LOWERINGS, build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
TOL = {np.float64: 1e-10, np.float32: 1e-5}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _close(got: Any, want: Any, tol: float) -> None:
    for g, w in zip(rlgrad.tree_util.tree_flatten(got)[0], rlgrad.tree_util.tree_flatten(want)[0]):
        w = np.asarray(w)
        assert np.asarray(g).dtype == w.dtype and np.shape(g) == w.shape
        scale = max(1.0, float(np.max(np.abs(w), initial=0)))
        np.testing.assert_allclose(np.asarray(g), w, rtol=tol, atol=tol * scale)


def both(fn: Callable, *args: Any, dtype: type = np.float64, lowered: bool = True) -> Any:
    """``fn`` jitted under both backends on ``args``: equal results; native ran (``lowered``)."""
    ref = rlgrad.jit(fn, backend="numpy")
    nat = rlgrad.jit(fn, backend="native")
    want, got = ref(*args), nat(*args)
    assert nat.backend == ("native" if lowered else "numpy")
    _close(got, want, TOL[dtype])
    assert type(got) is type(want)
    return nat


def _arr(rng: np.random.Generator, shape: tuple, dtype: type, lo: float = -1.5, hi: float = 1.5) -> Any:
    return rng.uniform(lo, hi, shape).astype(dtype)


UNARY = ["exp", "tanh", "sin", "cos", "arctan", "sinh", "cosh", "expm1", "floor", "ceil", "trunc",
         "absolute", "square", "negative", "sign", "arcsinh"]
POSITIVE = ["log", "sqrt", "log1p", "reciprocal", "arccosh"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "arctan2", "hypot",
          "logaddexp", "power", "greater", "less_equal", "equal", "not_equal"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", UNARY + POSITIVE)
def test_unary_ufuncs(name: str, dtype: type) -> None:
    rng = np.random.default_rng(0)
    lo = 1.1 if name in POSITIVE else -1.5
    x = _arr(rng, (3, 17), dtype, lo, 3.0)
    both(lambda x: getattr(rnp, name)(x) * 1.0, x, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", BINARY)
def test_binary_ufuncs_broadcasting(name: str, dtype: type) -> None:
    rng = np.random.default_rng(1)
    x, y = _arr(rng, (4, 1, 5), dtype, 0.5, 2.0), _arr(rng, (3, 1), dtype, 0.5, 2.0)
    y[0, 0] = x[0, 0, 0]  # a tie: equal, maximum and minimum meet one
    both(lambda x, y: getattr(rnp, name)(x, y), x, y, dtype=dtype)
    both(lambda x: getattr(rnp, name)(x, 1.25), x, dtype=dtype)  # a Python scalar: NumPy's weak type


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nan_propagates_as_in_numpy(dtype: type) -> None:
    x = np.array([1.0, np.nan, -2.0, 3.0], dtype)
    y = np.array([np.nan, 0.5, -1.0, 4.0], dtype)
    both(lambda x, y: (rnp.maximum(x, y), rnp.minimum(x, y), rnp.max(x), rnp.clip(x, -1, 2.5),
                       rnp.where(x > y, x, y), rnp.isnan(x)), x, y, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(axis: Any, keepdims: bool, dtype: type) -> None:
    x = _arr(np.random.default_rng(2), (3, 4, 5), dtype)
    both(lambda x: [f(x, axis=axis, keepdims=keepdims) for f in
                    (rnp.sum, rnp.mean, rnp.max, rnp.min, rnp.prod, rnp.logsumexp)], x, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_views_and_copies(dtype: type) -> None:
    x = _arr(np.random.default_rng(3), (4, 3, 5), dtype)

    def f(x: Any) -> Any:
        t = rnp.transpose(x, (2, 0, 1))
        return [t * 2.0, x[1:, ::2, -1] + 1.0, x[..., None, 2] * x[0], rnp.reshape(t, (5, -1)) - 1.0,
                rnp.broadcast_to(x[0, 0], (2, 5)) * 1.0, rnp.concatenate([x, x * 2.0], 1),
                rnp.stack([x[0], x[1]], axis=-1), x.astype(np.float32), x, x[0]]

    both(f, x, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)),
                                    ((2, 5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4))])
def test_matmul_shapes(shapes: tuple, dtype: type) -> None:
    rng = np.random.default_rng(4)
    a, b = _arr(rng, shapes[0], dtype), _arr(rng, shapes[1], dtype)
    both(lambda a, b: (a @ b, rnp.swapaxes(b, -1, -2) @ rnp.swapaxes(a, -1, -2)
                       if len(shapes[0]) > 1 and len(shapes[1]) > 1 else a @ b), a, b, dtype=dtype)


def _mlp_loss(params: list, x: Any, a: Any, adv: Any) -> Any:
    w1, b1, w2, b2, w3, b3 = params
    h1 = rnp.tanh(F.linear(x, w1, b1))
    h2 = F.relu(F.linear(h1, w2, b2))
    logits = F.linear(h2, w3, b3)
    dist = Categorical(logits=logits)
    return -rnp.mean(dist.log_prob(a) * adv) - 0.01 * rnp.mean(dist.entropy()) + rnp.mean(
        F.softmax(logits, dim=-1)[:, 0]) + F.mse_loss(logits[:, 0], adv)


def _mlp_problem(dtype: type, batch: int = 8) -> tuple:
    rng = np.random.default_rng(5)
    sizes = (4, 16, 16, 3)
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        params += [_arr(rng, (n, m), dtype, -0.5, 0.5), _arr(rng, (n,), dtype, -0.1, 0.1)]
    return params, _arr(rng, (batch, 4), dtype), rng.integers(0, 3, batch), _arr(rng, (batch,), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mlp_policy_gradient_lowers_whole(dtype: type) -> None:
    """linear and its gradients, tanh, relu, log_softmax, categorical pick/unpick, softmax,
    mse_loss: value_and_grad of a policy loss is one native program."""
    params, x, a, adv = _mlp_problem(dtype)
    nat = both(rlgrad.value_and_grad(_mlp_loss), params, x, a, adv, dtype=dtype)
    assert "gemm_" in next(iter(nat._cache.values())).native_source


def test_native_gradients_match_finite_differences() -> None:
    """float64: the native program's gradient against central differences of the loss."""
    params, x, a, adv = _mlp_problem(np.float64, batch=4)
    g = rlgrad.jit(rlgrad.grad(_mlp_loss), backend="native")
    got = g(params, x, a, adv)
    assert g.backend == "native"
    eps = 1e-6
    for p, gp in zip(params, got):
        for i in [0, p.size // 2, p.size - 1]:
            old = p.flat[i]
            p.flat[i] = old + eps
            up = float(_mlp_loss(params, x, a, adv))
            p.flat[i] = old - eps
            down = float(_mlp_loss(params, x, a, adv))
            p.flat[i] = old
            assert abs(gp.flat[i] - (up - down) / (2 * eps)) < 1e-7


def test_ppo_loss_step_lowers_whole() -> None:
    """The PPO minibatch step (surrogate, value loss, entropy, their gradients) as PPO traces it."""
    from rlgrad.rl import PPO

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, n_epochs=1, seed=0, verbose=0)
    model.learn(32)
    batch, _valid = next(iter(model._minibatches()))
    batch["clip"] = np.array(0.2, np.float32)
    ref = rlgrad.jit(lambda b: model.loss(b, True)[0])
    nat = rlgrad.jit(lambda b: model.loss(b, True)[0], backend="native")
    _close(nat(batch), ref(batch), 1e-5)
    assert nat.backend == "native"
    grads = rlgrad.jit(lambda b: rlgrad.autograd.grad(model.loss(b, True)[0], model._params),
                       backend="native")
    _close(grads(batch), rlgrad.jit(lambda b: rlgrad.autograd.grad(
        model.loss(b, True)[0], model._params))(batch), 1e-5)
    assert grads.backend == "native"


def test_an_op_without_lowering_keeps_the_numpy_replay(caplog: pytest.LogCaptureFixture) -> None:
    x = np.random.default_rng(6).standard_normal((3, 3))
    assert "det" not in LOWERINGS
    with caplog.at_level(logging.DEBUG, logger="rlgrad.jit"):
        auto = rlgrad.jit(lambda x: rnp.linalg.det(rnp.tanh(x)), backend="auto")
        np.testing.assert_allclose(auto(x), np.linalg.det(np.tanh(x)), rtol=1e-12)
    assert auto.backend == "numpy"
    assert any("op 'det' has no native lowering" in r.getMessage()
               and r.levelno == logging.DEBUG for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="rlgrad.jit"):  # NumPy's default sort: not stable
        nat = rlgrad.jit(lambda x: rnp.sort(x, axis=1), backend="native")
        np.testing.assert_array_equal(nat(x), np.sort(x, axis=1))
    assert nat.backend == "numpy" and any(r.levelno == logging.WARNING and "stable" in r.getMessage()
                                          for r in caplog.records)


def test_no_compiler_keeps_the_numpy_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(build._state, "cc", None)
    f = rlgrad.jit(lambda x: rnp.tanh(x) * 2.0, backend="auto")
    x = np.ones(3)
    np.testing.assert_array_equal(f(x), np.tanh(x) * 2.0)
    assert f.backend == "numpy"


def test_replayed_calls_keep_the_numpy_replay() -> None:
    """A PyTorch-style step (optimizer.step() inside) is replayed calls: not lowered."""
    model = rlgrad.nn.Linear(3, 2)
    opt = rlgrad.optim.SGD(model.parameters(), lr=0.1)

    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    f = rlgrad.jit(step, backend="auto")
    f(np.ones((4, 3), np.float32))
    assert f.backend == "numpy"


def test_an_argument_laid_out_otherwise_runs_the_replay_for_that_call() -> None:
    x = np.arange(12.0).reshape(3, 4)
    f = rlgrad.jit(lambda x: rnp.exp(x / 10.0).sum(axis=0), backend="native")
    f(x)
    assert f.backend == "native"
    y = np.asfortranarray(x + 1.0)  # same shape and dtype, not C-contiguous
    np.testing.assert_allclose(f(y), np.exp(y / 10.0).sum(axis=0), rtol=1e-12)


def test_outside_tensors_are_read_at_every_call() -> None:
    w = rlgrad.tensor(np.ones((3, 2)))
    f = rlgrad.jit(lambda x: x @ w, backend="native")
    x = np.ones((1, 3))
    np.testing.assert_array_equal(f(x), [[3.0, 3.0]])
    w._value[...] = 2.0
    np.testing.assert_array_equal(f(x), [[6.0, 6.0]])
    w._value = np.ones((3, 2)) * 5.0  # a new array: read too
    np.testing.assert_array_equal(f(x), [[15.0, 15.0]])
    assert f.backend == "native"


def test_gemm_without_blas_equals_blas() -> None:
    rng = np.random.default_rng(7)
    a, b = _arr(rng, (6, 9), np.float32), _arr(rng, (9, 5), np.float32)
    f = rlgrad.jit(lambda a, b: (a @ b, rnp.transpose(b) @ rnp.transpose(a)), backend="native")
    with_blas = f(a, b)
    assert f.backend == "native" and any(build.blas_pointers()), "NumPy's wheel bundles OpenBLAS"
    modules = [m for n, m in sys.modules.items() if n.startswith("rlgrad_native_")]
    try:
        for m in modules:
            m.setup(0, 0)  # the generated module's own loops
        _close(f(a, b), with_blas, 1e-5)
        _close(f(a, b), (a @ b, b.T @ a.T), 1e-5)
    finally:
        for m in modules:
            m.setup(*build.blas_pointers())


def test_categorical_index_out_of_range_raises() -> None:
    logits = np.zeros((3, 4))
    f = rlgrad.jit(lambda z, a: Categorical(logits=z).log_prob(a), backend="native")
    np.testing.assert_allclose(f(logits, np.array([0, 3, -1])), np.log(0.25) * np.ones(3))
    assert f.backend == "native"
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        f(logits, np.array([0, 4, 1]))


def test_bad_backend_name_is_one_line() -> None:
    with pytest.raises(ValueError, match="backend='c'; use 'numpy', 'native' or 'auto'"):
        rlgrad.jit(lambda x: x, backend="c")


def test_a_lowering_that_disagrees_with_the_trace(monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A wrong lowering never gives a silent wrong answer: strict raises, else the replay runs."""
    monkeypatch.setitem(LOWERINGS, "tanh", LOWERINGS["sin"])
    x = np.linspace(0.5, 2.0, 7)
    from rlgrad.native import LoweringError

    with pytest.raises(LoweringError, match="differs from the trace"):
        rlgrad.jit(lambda x: rnp.tanh(x) * 3.0, backend="auto")(x)
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "0")
    f = rlgrad.jit(lambda x: rnp.tanh(x) * 3.0, backend="auto")
    with caplog.at_level(logging.WARNING, logger="rlgrad.jit"):
        np.testing.assert_allclose(f(x), np.tanh(x) * 3.0)
    assert f.backend == "numpy" and "native lowering failed" in caplog.text


def test_check_tolerance_narrows_the_first_call_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 lowering off by 1e-4 relative passes the default check (1e-3 of the largest
    magnitude) and is caught under ``check_tolerance(float32=1e-5)``, the compiled DQN's;
    float64 keeps its default there, and the default is back after the block."""
    from rlgrad.native import _CHECK, CHECK_TOLERANCE, LoweringError, check_tolerance

    monkeypatch.setitem(LOWERINGS, "tanh", _template_lowering("tanh{f}({0}) * ({T})1.0001"))
    x = np.linspace(0.5, 2.0, 7, dtype=np.float32)
    f = rlgrad.jit(lambda x: rnp.tanh(x) * np.float32(3.0), backend="native")
    f(x)
    assert f.backend == "native"
    with check_tolerance(float32=1e-5), pytest.raises(LoweringError, match="differs from the trace"):
        rlgrad.jit(lambda x: rnp.tanh(x) * np.float32(3.0), backend="native")(x)
    with check_tolerance(float32=1e-5):
        assert _CHECK.get() == {"float32": 1e-5, "float64": 1e-6}
    assert _CHECK.get() is None and CHECK_TOLERANCE == {"float32": 1e-3, "float64": 1e-6}
    h = rlgrad.jit(lambda x: rnp.tanh(x) * np.float32(2.0), backend="native")
    h(x)
    assert h.backend == "native"


def _template_lowering(tmpl: str) -> Any:
    from rlgrad.native.lowerings import _elementwise

    return _elementwise(tmpl, "float")


def test_the_cache_is_shared_across_processes(tmp_path: Any) -> None:
    """A second process loads the module the first built (same hash), and no temporary file
    is left behind."""
    code = ("import logging, numpy as np, rlgrad, rlgrad.numpy as rnp\n"
            "logging.basicConfig(level=logging.DEBUG)\n"
            "f = rlgrad.jit(lambda x: rnp.tanh(x @ x.T).sum(), backend='native')\n"
            "print(float(f(np.eye(3))), f.backend)\n")
    env = {**os.environ, "RLGRAD_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [repr(float(np.tanh(1.0) * 3)), "native"]
    assert "built in" in runs[0].stderr and "loaded from the cache" in runs[1].stderr
    files = os.listdir(tmp_path / "native")
    assert len(files) == 1 and files[0].startswith("rlgrad_native_") and files[0].endswith(".so")


def test_numba_is_not_imported_by_the_core() -> None:
    code = ("import sys, numpy as np, rlgrad, rlgrad.numpy as rnp\n"
            "rlgrad.jit(lambda x: rnp.exp(x), backend='native')(np.ones(2))\n"
            "print('numba' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_ppo_trains_alike_with_every_step_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLGRAD_JIT_BACKEND=native: PPO's compiled steps run as native code and one rollout's
    update (2 epochs of 2 minibatches, Adam) lands on the NumPy replay's parameters within float32
    rounding."""
    from rlgrad.rl import PPO

    params = {}
    for backend in ("numpy", "native"):
        monkeypatch.setenv("RLGRAD_JIT_BACKEND", backend)
        model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=0,
                    verbose=0)
        model.learn(64)
        params[backend] = [p._value.copy() for p in model._params]
        jits = [j for step, _ in model._loss_steps.values() if step.__closure__
                for c in step.__closure__ if isinstance(c.cell_contents, dict)
                for j in c.cell_contents.values()]
        assert jits and all(j.backend == backend for j in jits)
    for a, b in zip(params["native"], params["numpy"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _rnn(w: Any, h0: Any, xs: Any, reverse: bool = False) -> Any:
    def cell(carry: Any, x: Any) -> Any:
        h, k = carry
        h = rnp.tanh(h @ w + x)
        return (k * 0.5, h), (h.sum(axis=1), k)  # carries swap: each is written from the other

    (a, b), (ys, ks) = rlgrad.lax.scan(cell, (h0, h0 * 2.0), xs, reverse=reverse)
    return (a ** 2).sum() + (b * ys[-1][:, None]).sum() + ks.mean()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_lowers_with_its_gradient(reverse: bool, dtype: type) -> None:
    """A scan (and the reverse scan of its VJP) is one C loop around its body."""
    rng = np.random.default_rng(8)
    w, h0, xs = _arr(rng, (6, 6), dtype, -0.4, 0.4), _arr(rng, (3, 6), dtype), _arr(rng, (5, 3, 6), dtype)
    f = lambda w, h0, xs: _rnn(w, h0, xs, reverse)  # noqa: E731
    both(f, w, h0, xs, dtype=dtype)
    nat = both(rlgrad.value_and_grad(f, argnums=(0, 1, 2)), w, h0, xs, dtype=dtype)
    assert "for (npy_intp t" in next(iter(nat._cache.values())).native_source


def test_scan_carries_that_swap_and_pass_through() -> None:
    """New carries that are the old ones (swapped, unchanged, a slice of the scanned array)."""
    rng = np.random.default_rng(11)
    a, b, xs = _arr(rng, (3,), np.float64), _arr(rng, (3,), np.float64), _arr(rng, (4, 3), np.float64)

    def f(a: Any, b: Any, xs: Any) -> Any:
        def body(c: Any, x: Any) -> Any:
            p, q, r = c
            return (q, p, x), p  # swap, and a y that is a carry before the step
        (p, q, r), ys = rlgrad.lax.scan(body, (a, b, a * 0.0), xs)
        return p * 1.0, q * 1.0, r * 1.0, ys * 1.0

    both(f, a, b, xs)
    both(rlgrad.grad(lambda a, b, xs: sum((v ** 2).sum() for v in f(a, b, xs)), argnums=(0, 1, 2)),
         a, b, xs)


def test_fori_loop_and_rnn_lower() -> None:
    rng = np.random.default_rng(9)
    x = _arr(rng, (4,), np.float64)
    both(lambda x: rlgrad.lax.fori_loop(0, 7, lambda i, c: rnp.sin(c) * 1.5 + i, x), x)
    rnn = rlgrad.nn.RNN(5, 8, batch_first=True)
    seq = _arr(rng, (2, 6, 5), np.float32)

    def loss(seq: Any) -> Any:
        out, h = rnn(seq)
        return (out ** 2).mean() + h.sum()

    both(lambda s: rlgrad.autograd.grad(loss(s), list(rnn.parameters())), seq, dtype=np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_activations_losses_and_indexing(dtype: type) -> None:
    rng = np.random.default_rng(10)
    x, y = _arr(rng, (5, 4), dtype), _arr(rng, (5, 4), dtype)
    idx = rng.integers(-4, 4, (5, 2))

    def f(x: Any, y: Any) -> Any:
        return [F.leaky_relu(x, 0.1), F.elu(x, alpha=0.7), F.huber_loss(x, y, delta=0.5),
                F.smooth_l1_loss(x, y, reduction="sum"), F.huber_loss(x, y, reduction="none"),
                rnp.argmax(x, axis=1), rnp.argmin(x), rnp.flip(x, 0) * 1.0, rnp.flip(x) * 1.0,
                rnp.cumsum(x, axis=0), rnp.cumsum(x), rnp.take_along_axis(x, idx, axis=1)]

    both(f, x, y, dtype=dtype)
    g = lambda x, y: (F.leaky_relu(x, 0.1) * F.elu(y) + F.huber_loss(x, y, delta=0.5)).sum()  # noqa: E731
    both(rlgrad.grad(g, argnums=(0, 1)), x, y, dtype=dtype)


def test_dqn_trains_with_its_step_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """DQN's compiled update (Huber loss of the taken action's Q against the target) lowers."""
    import rlgrad.native
    from rlgrad.rl import DQN

    ran, lower = [], rlgrad.native.lower

    def spy(compiled: Any, *args: Any) -> None:
        lower(compiled, *args)
        ran.append(compiled.backend)

    monkeypatch.setattr(rlgrad.native, "lower", spy)
    params = {}
    for backend in ("numpy", "native"):
        monkeypatch.setenv("RLGRAD_JIT_BACKEND", backend)
        model = DQN("MlpPolicy", "CartPole-v1", learning_starts=64, train_freq=4, batch_size=32,
                    seed=0, verbose=0)
        model.learn(96)
        params[backend] = [p._value.copy() for p in model.policy.parameters()]
    assert ran and set(ran) == {"native"}, ran
    for a, b in zip(params["native"], params["numpy"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_an_unwritable_cache_keeps_the_numpy_replay(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path / "a_file" / "below"))
    f = rlgrad.jit(lambda x: rnp.cos(x) + 1.0, backend="native")
    with caplog.at_level(logging.WARNING, logger="rlgrad.jit"):
        np.testing.assert_array_equal(f(np.zeros(3)), np.full(3, 2.0))
    assert f.backend == "numpy" and "set RLGRAD_CACHE_DIR to a writable folder" in caplog.text


def test_while_loop_lowers() -> None:
    """A while_loop (forward only, as JAX) is one C loop: cond, break, body, carries updated."""
    def f(x: Any, n: Any) -> Any:
        def body(c: Any) -> Any:
            i, v, w = c
            return i + 1, w * 0.5 + 1.0, v  # v and w swap through the body
        i, v, w = rlgrad.lax.while_loop(lambda c: c[0] < n, body, (np.int64(0), x, x * 2.0))
        return i, v * 1.0, w + 0.0

    x = np.linspace(-1.0, 1.0, 5)
    nat = both(f, x, np.int64(7))
    np.testing.assert_array_equal(nat(x, np.int64(3))[0], 3)  # the trip count is the data's


def test_check_mode_accepts_native_rounding() -> None:
    """jit(check=True) compares every call with eager execution within 64 ulps: native passes."""
    params, x, a, adv = _mlp_problem(np.float32)
    f = rlgrad.jit(rlgrad.value_and_grad(_mlp_loss), backend="native", check=True)
    for _ in range(2):
        f(params, x, a, adv)
    assert f.backend == "native"


def test_switch_and_cond_lower() -> None:
    def f(i: Any, x: Any) -> Any:
        branches = [lambda v: rnp.sin(v) * 2.0, lambda v: v * v + 1.0, lambda v: rnp.exp(-v)]
        y = rlgrad.lax.switch(i, branches, x)
        return y + rlgrad.lax.cond(i > 0, lambda v: v - 1.0, lambda v: v * 3.0, x)

    x = np.linspace(-1.0, 1.0, 4)
    nat = both(f, np.int64(1), x)
    for i in (-3, 0, 2, 9):  # clamped to the branches, as lax.switch
        _close(nat(np.int64(i), x), rlgrad.jit(f)(np.int64(i), x), 1e-12)
    both(rlgrad.grad(lambda i, x: f(i, x).sum(), argnums=1), np.int64(2), x)


def exact(fn: Callable, *args: Any) -> Any:
    """``fn`` jitted under both backends: bit for bit the same results; native ran."""
    ref, nat = rlgrad.jit(fn, backend="numpy"), rlgrad.jit(fn, backend="native")
    with np.errstate(all="ignore"):  # (NumPy warns of a zero divisor; both give its value)
        want, got = ref(*args), nat(*args)
    assert nat.backend == "native"
    for g, w in zip(rlgrad.tree_util.tree_flatten(got)[0], rlgrad.tree_util.tree_flatten(want)[0]):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)
    return nat


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.uint32])
def test_integer_arithmetic_is_bit_exact(dtype: type) -> None:
    """Bitwise ops, floor division and remainder (NumPy's signs; a zero divisor gives 0; the
    smallest int over -1 wraps), wrapping products, int clip, literals above int64's range."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(12)
    x = rng.integers(info.min, info.max, (5, 8), dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, (8,), dtype=dtype, endpoint=True)
    y[:3] = [0, 1, 7]
    x[0, :3] = [info.max, info.min, 5]
    if info.min < 0:
        y[3:5] = [-1, -7]
        x[1, 3], x[1, 4] = info.min, -20
    big = dtype(info.max - 3)  # a literal of the program (for uint64 above 2**63)

    def f(x: Any, y: Any) -> Any:
        return [rnp.bitwise_and(x, y), rnp.bitwise_or(x, y), rnp.bitwise_xor(x, y), rnp.invert(x),
                rnp.floor_divide(x, y), rnp.remainder(x, y), x * y, x + y, x - y, x * big,
                rnp.floor_divide(x, dtype(1 << 20)), rnp.bitwise_xor(x, big),
                rnp.clip(x, dtype(3), big), rnp.asarray(x, dtype=np.float64)]

    exact(f, x, y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_float_floor_divide_and_remainder_as_numpy(dtype: type) -> None:
    """npymath's divmod: signs, zeros (signed), infinities and NaN as NumPy's."""
    x = np.array([-3.5, 3.5, -0.0, 0.0, np.inf, -np.inf, np.nan, 7.0, -7.0, 1e30, 5.5, 0.3],
                 dtype)
    y = np.array([2.0, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 0.3, -0.3, 1.0], dtype)
    exact(lambda x, y: [rnp.floor_divide(x[:, None], y), rnp.remainder(x[:, None], y),
                        rnp.remainder(x, dtype(2 * np.pi))], x, y)


def test_boolean_bitwise_any_and_all() -> None:
    rng = np.random.default_rng(13)
    a, b = rng.random((4, 6)) < 0.5, rng.random((4, 6)) < 0.3
    x = rng.standard_normal((4, 6))
    x[1] = 0.0
    x[2, 3] = np.nan

    def f(a: Any, b: Any, x: Any) -> Any:
        return [rnp.bitwise_and(a, b), rnp.bitwise_xor(a, b), rnp.bitwise_or(a, b), rnp.invert(a),
                rnp.any(a), rnp.all(a | True), rnp.any(a, axis=1), rnp.all(b, axis=0, keepdims=True),
                rnp.any(x != 0, axis=1), rnp.all(x, axis=1), rnp.any(x, axis=0)]

    exact(f, a, b, x)


@pytest.mark.parametrize("n", [33, 600])  # (runs of 16 sorted by insertion, then merged)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_stable_argsort_keeps_ties_in_order(dtype: type, n: int) -> None:
    """Ties in their order, NaN last, along the last axis and along an inner one."""
    rng = np.random.default_rng(14)
    x = rng.integers(0, 4, (3, 5, n)).astype(dtype)
    if dtype in (np.float64, np.float32):
        x[0, 1, [3, 9, 20]] = np.nan
        x[1, 2, 5] = -np.inf

    def f(x: Any) -> Any:
        return [rnp.argsort(x, axis=-1, kind="stable"), rnp.argsort(x, axis=1, kind="stable"),
                rnp.argsort(x[0, 0], kind="stable"), rnp.argsort(x[:, ::-2], axis=0, kind="stable")]

    exact(f, x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scatter_along_axis_adds_repeats(dtype: type) -> None:
    """take_along_axis's gradient (repeated and negative indices add up), and the scatter into a
    larger output whose size-1 dimension sums the lanes."""
    rng = np.random.default_rng(15)
    x, w = _arr(rng, (4, 5), dtype), _arr(rng, (4, 7), dtype)
    idx = rng.integers(-5, 5, (4, 7))
    idx[0, :3] = 2
    g = rlgrad.grad(lambda x, w: (rnp.take_along_axis(x, idx, axis=1) * w).sum())
    both(g, x, w, dtype=dtype)
    both(g, x, w, dtype=dtype)
    from rlgrad.ops import scatter_along_axis

    j = rng.integers(0, 6, (3, 4))
    both(lambda v: [scatter_along_axis(v, j, 1, (3, 6)), scatter_along_axis(v, j, 1, (1, 6)),
                    scatter_along_axis(v[:2], j[:2], 1, (3, 6))], _arr(rng, (3, 4), dtype),
         dtype=dtype)


def test_dead_buffers_are_shared_and_loop_values_kept() -> None:
    """Temporaries whose values are dead share one buffer (``#define`` in the C); a value made
    before a loop and read at every step, and the loop's carries, keep theirs through it."""
    from rlgrad import lax

    rng = np.random.default_rng(16)
    x, w = _arr(rng, (3, 5), np.float64), _arr(rng, (5, 5), np.float64)

    def f(x: Any, w: Any) -> Any:
        a = rnp.tanh(x * 2.0) + 1.0  # read inside the loop at every step

        def body(c: Any, xs: Any) -> Any:
            h = rnp.tanh(rnp.exp(c @ w * 0.1) + a) * 0.5
            return h * 0.5 + xs, rnp.sum(h * h)

        c, ys = lax.scan(body, x, rnp.stack([x, x * 3.0, x - 1.0]))
        return rnp.exp(rnp.tanh(c) * 2.0) + a, ys * 2.0

    nat = both(f, x, w)
    assert "#define b" in next(iter(nat._cache.values())).native_source


def test_loop_carries_keep_64_bit_integers_beside_floats() -> None:
    """uint64 keys near 2**64 and an int64 counter above 2**53 carried beside float64 state:
    the node stores them as bytes (``lax._Node.layout``), the C writes and reads those bytes."""
    from rlgrad import lax

    k = np.array([2**64 - 7, 2**63 + 5, 3], np.uint64)
    n = np.array(2**60 + 3, np.int64)
    x = np.array([1.0, 2.0, 3.0])

    def f(k: Any, n: Any, x: Any) -> Any:
        def body(c: Any, _: Any) -> Any:
            k, n, x = c
            return (k * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1), n + 1, x * 0.5 + 1.0), (k, n)

        return lax.scan(body, (k, n, x), None, length=5)

    exact(f, k, n, x)
    (k5, n5, _), (ks, _ns) = rlgrad.jit(f, backend="native")(k, n, x)
    assert int(n5) == 2**60 + 8
    assert int(ks[1, 0]) == (int(k[0]) * 0x9E3779B97F4A7C15 + 1) % 2**64  # all 64 bits
