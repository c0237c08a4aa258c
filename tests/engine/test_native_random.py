"""Every program of the random-program generator (tests/helpers/programs.py) compiled by
``rlgrad.jit`` under both backends, the NumPy replay and native code, in float64 and float32:
values and gradients equal within float rounding, on the trace's inputs and on fresh ones.

Tolerances (relative to the largest magnitude of the reference, at least 1): float64 1e-9
relative and absolute, float32 2e-4. The native program sums in another order than NumPy's
pairwise sums and calls glibc's math functions, not NumPy's SIMD ones: rounding, nothing more.
A program with an op that has no lowering runs as the NumPy replay (``.backend`` says so);
``RLGRAD_NATIVE_STRICT=1`` makes a compiler error or a lowering that disagrees with the trace
raise instead of falling back, so this file fails on any of them. Fewer examples than the
generator's own tests: each lowered program is a C build (~0.3 s).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
from helpers.programs import Program, draw_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlgrad
from rlgrad.native import build

EXAMPLES = int(os.environ.get("RLGRAD_NATIVE_PROGRAMS", "40"))
TOL = {np.float64: 1e-9, np.float32: 2e-4}
BACKENDS: Counter = Counter()  # which backend ran, over the whole file (reported at the end)

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _as(program: Program, dtype: type) -> Program:
    return Program([x.astype(dtype) for x in program.inputs], program.steps,
                   program.weight.astype(dtype))


def _close(got: object, want: object, tol: float) -> None:
    want = np.asarray(want)
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol * scale)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(st.data())
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_random_programs_native_equal_numpy_replay(dtype: type, data: st.DataObject) -> None:
    program = _as(draw_program(data), dtype)
    argnums = tuple(range(len(program.inputs)))
    step = rlgrad.value_and_grad(program, argnums=argnums)
    reference = rlgrad.jit(step, backend="numpy")
    native = rlgrad.jit(step, backend="native")
    rng = np.random.default_rng(len(program.steps))
    fresh = [rng.uniform(-1.5, 1.5, x.shape).astype(dtype) for x in program.inputs]
    for xs in (program.inputs, fresh):
        with np.errstate(all="ignore"):
            v, g = reference(*xs)
            nv, ng = native(*xs)
        assert np.asarray(nv).dtype == np.asarray(v).dtype
        _close(nv, v, TOL[dtype])
        for a, b in zip(ng, g):
            assert a.dtype == b.dtype and a.shape == b.shape
            _close(a, b, TOL[dtype])
    assert native.backend in ("native", "numpy")
    BACKENDS[native.backend] += 1


def test_random_programs_mostly_lowered() -> None:
    """The generator's programs draw from ~100 ops, most of which lower: at least a third of
    the programs above ran as native code (the rest have an op without a lowering)."""
    if sum(BACKENDS.values()) < 20:
        pytest.skip("run with the random-program test above")
    assert BACKENDS["native"] >= sum(BACKENDS.values()) / 3, BACKENDS
