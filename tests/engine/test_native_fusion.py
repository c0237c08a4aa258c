"""Elementwise fusion in the native backend's C (rlgrad.native.codegen, ``_Fused``): a program
compiled with fusion (the default) against the same program with every op its own loop
(``RLGRAD_NATIVE_FUSE=0``, the plain reference), bit for bit: on the random-program generator's
programs (values and gradients, float64 and float32), on chains that read and write one buffer
through different views (where fusing would change the element order), and on one whole update
of the compiled PPO loop with a seed axis.

Bit for bit is what fusion promises: each op keeps its own loop's form (flat or nested), so its
arithmetic, its casts and glibc's vector math run as unfused; only the loads and stores between
ops go (a temporary read only by later ops of its loop is never written to memory).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.programs import draw_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlgrad
from rlgrad.native import build
from rlgrad.rl import PPO
from rlgrad.rl.compiled_loop import initial_state, loop_spec, schedule
from rlgrad.rl.compiled_loop import program as P

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
EXAMPLES = int(os.environ.get("RLGRAD_NATIVE_PROGRAMS", "25"))


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _leaves(tree: Any) -> list[np.ndarray]:
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves(tree[k])]
    if isinstance(tree, list | tuple):
        return [x for t in tree for x in _leaves(t)]
    return [np.asarray(tree._value if hasattr(tree, "_value") else tree)]


def _both(fn: Callable, *args: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, str]:
    """(fused outputs, unfused outputs, the fused program's C) of ``rlgrad.jit(fn)(*args)``."""
    got = {}
    for fuse in ("1", "0"):
        monkeypatch.setenv("RLGRAD_NATIVE_FUSE", fuse)
        jitted = rlgrad.jit(fn, backend="native")
        with np.errstate(all="ignore"):
            got[fuse] = jitted(*args)
        assert jitted.backend == "native"
        if fuse == "1":
            source = next(c.native_source for c in jitted._cache.values())
    return got["1"], got["0"], source


def _bitwise(a: Any, b: Any) -> None:
    la, lb = _leaves(a), _leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)  # (NaN equal to NaN)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_random_programs_fused_equal_unfused_bit_for_bit(dtype: type, data: st.DataObject,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    program = draw_program(data)
    xs = [x.astype(dtype) for x in program.inputs]
    step = rlgrad.value_and_grad(program, argnums=tuple(range(len(xs))))
    got = {}
    for fuse in ("1", "0"):
        monkeypatch.setenv("RLGRAD_NATIVE_FUSE", fuse)
        jitted = rlgrad.jit(step, backend="auto")
        with np.errstate(all="ignore"):
            got[fuse] = (jitted(*xs), jitted.backend)
    assert got["1"][1] == got["0"][1]
    _bitwise(got["1"][0], got["0"][0])


def _adam_like(p: Any, g: Any, m: Any, v: Any) -> tuple[Any, Any, Any]:
    m2 = m + (g - m) * 0.1
    v2 = v * 0.999 + g * g * 0.001
    return p - 0.01 * m2 / (rlgrad.sqrt(v2) + 1e-8), m2, v2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_chain_is_one_loop_and_its_temporaries_stay_in_registers(
        dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    args = [rlgrad.tensor(rng.normal(size=(8, 301)).astype(dtype)) for _ in range(4)]
    args[3] = rlgrad.tensor(np.abs(args[3]._value))
    fused, plain, source = _both(_adam_like, *args, monkeypatch=monkeypatch)
    _bitwise(fused, plain)
    p, g, m, v = (a._value.astype(np.float64) for a in args)
    m2, v2 = m + (g - m) * 0.1, v * 0.999 + g * g * 0.001
    np.testing.assert_allclose(_leaves(fused)[0], p - 0.01 * m2 / (np.sqrt(v2) + 1e-8),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    body = source[source.index("static PyObject *step"):]
    assert len(re.findall(r"for \(npy_intp", body)) == 1  # nine ops, one loop
    assert len(re.findall(r"\bb\d+\[", body)) == 0  # the temporaries are never stored


def _views(x: Any, y: Any) -> Any:
    """Ops that read a value of the same loop through another view (flipped, a broadcast
    row, a slice): each such read must see the whole earlier value, not a half-written one."""
    a = x * 2.0 + 1.0
    b = a[::-1] - a  # a read back flipped
    c = rlgrad.exp(b) * a[0]  # a broadcast row of a
    d = c[:, ::-1] + y
    return d * d, (a + c)[1:].sum()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_views_of_a_fused_value_see_it_whole(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    x, y = (rlgrad.tensor(rng.uniform(-1, 1, size=(6, 5)).astype(dtype)) for _ in range(2))
    fused, plain, _ = _both(_views, x, y, monkeypatch=monkeypatch)
    _bitwise(fused, plain)
    xv, yv = x._value.astype(np.float64), y._value.astype(np.float64)
    a = xv * 2 + 1
    c = np.exp(a[::-1] - a) * a[0]
    d = c[:, ::-1] + yv
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(_leaves(fused)[0], d * d, rtol=tol)
    np.testing.assert_allclose(_leaves(fused)[1], (a + c)[1:].sum(), rtol=tol)


def test_one_ppo_update_of_two_seeds_fused_equals_unfused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled loop's whole update (rollout, GAE, epochs of minibatch steps, Adam), two
    seeds: the fused program's state and statistics equal the unfused one's bit for bit."""
    models = [PPO("CartPole-v1", seed=s, compile_loop=True, n_envs=4, n_steps=32, batch_size=32,
                  n_epochs=2, ent_coef=0.01) for s in (0, 1)]
    spec = loop_spec(models[0])
    sched = schedule(models[0], 10 * 128)
    row = {k: np.array(v[0]) for k, v in sched.items()}
    fused, plain, source = _both(P.make_program(spec), initial_state(models, spec), row,
                                 monkeypatch=monkeypatch)
    _bitwise(fused, plain)
    assert re.search(r"\be\d+_1 = ", source)  # some ops were fused


def _reorder(x: Any, y: Any) -> Any:
    """Loops of two shapes interleaved: an op moves back to the open loop of its shape only past
    loops it does not depend on."""
    a = x * 2.0  # loop 1, (6, 5)
    b = y * 3.0  # loop 2, (5,)
    c = a + 1.0  # loop 1 (independent of loop 2)
    d = c * b  # reads loop 2's b: a third loop after loop 2
    e = rlgrad.exp(b) + 1.0  # loop 2 (loop 3 reads nothing it writes)
    return d, e


def test_an_op_moves_back_only_past_loops_it_does_not_depend_on(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    x, y = rlgrad.tensor(rng.normal(size=(6, 5))), rlgrad.tensor(rng.normal(size=5))
    fused, plain, source = _both(_reorder, x, y, monkeypatch=monkeypatch)
    _bitwise(fused, plain)
    xv, yv = x._value, y._value
    np.testing.assert_allclose(_leaves(fused)[0], (xv * 2 + 1) * (yv * 3), rtol=1e-14)
    np.testing.assert_allclose(_leaves(fused)[1], np.exp(yv * 3) + 1, rtol=1e-14)
    body = source[source.index("static PyObject *step"):]
    assert body.count("#pragma omp simd") == 3  # (one per loop nest: d's is nested)
