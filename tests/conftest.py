"""The backward pass has a reference (core.reference_backward) and two optimized loops: the C one
(rlgrad/_engine.c, built by setup.py: the backward loop, the leaves' .grad, the graph node) and the
Python one (core._propagate, core._write_leaf_grads, tracer._record; the fallback without a
compiler, or with RLGRAD_ENGINE=0). The gradient test files below, and every test that names the
``backward_loop`` fixture, run under all three; every other test under whichever is installed.

Hypothesis draws the same examples on every run (CI included): a random draw can land where finite
differences cannot resolve a kink after an amplifying chain (exp -> arcsin -> huber flaked once);
RLGRAD_HYPOTHESIS_EXPLORE=1 draws new ones when hunting for wrong rules."""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
from hypothesis import settings

from rlgrad import core, tracer

settings.register_profile("rlgrad", derandomize=os.environ.get("RLGRAD_HYPOTHESIS_EXPLORE") != "1")
settings.load_profile("rlgrad")

_ENGINE, _NODE = core._engine, tracer._c_node
EVERY_LOOP = {"test_backward_pass.py", "test_inplace_versions.py", "test_ops_gradcheck.py",
              "test_autograd_names.py", "test_zero_nan_rules.py", "test_errors.py",
              "test_functional.py", "test_torch_semantics.py"}
LOOPS = ["c", "python", "reference"]


# The jit test files also run with RLGRAD_JIT_CHECK=1: every replay checked against eager execution.
JIT_CHECKED = {"test_jit.py", "test_jit_replay.py", "test_jit_stale.py", "test_jit_outputs.py",
               "test_lax.py", "test_lax_dtypes.py"}


def pytest_generate_tests(metafunc: Any) -> None:
    module = metafunc.module.__name__.rpartition(".")[2] + ".py"
    named = "backward_loop" in inspect.signature(metafunc.function).parameters
    if named or module in EVERY_LOOP:
        metafunc.parametrize("backward_loop", LOOPS, indirect=True)
    if module in JIT_CHECKED:
        metafunc.parametrize("jit_check", ["replay", "checked"], indirect=True)


@pytest.fixture(autouse=True)
def jit_check(request: Any, monkeypatch: Any) -> str:
    """"checked": rlgrad.jit made in this test runs the eager function beside every replay and
    raises at the first difference (RLGRAD_JIT_CHECK=1); "replay": as the environment says."""
    mode = getattr(request, "param", None)
    if mode == "checked":
        monkeypatch.setenv("RLGRAD_JIT_CHECK", "1")
    elif mode == "replay":
        monkeypatch.delenv("RLGRAD_JIT_CHECK", raising=False)
    return mode or "environment"


@pytest.fixture(autouse=True)
def backward_loop(request: Any, monkeypatch: Any) -> str:
    """Which loop core.run_backward uses in this test: "c" (skipped when the module was not
    built), "python" or "reference" (core.reference_backward, with the Python graph nodes); other
    tests keep the installed one."""
    loop = getattr(request, "param", None)
    if loop is not None:
        monkeypatch.setattr(core, "_reference", loop == "reference")
    if loop in ("python", "reference"):
        monkeypatch.setattr(core, "_engine", None)
        monkeypatch.setattr(tracer, "_c_node", None)
    elif loop == "c":
        if _ENGINE is None:
            pytest.skip("rlgrad._engine not built (or RLGRAD_ENGINE=0): the Python loop only")
        monkeypatch.setattr(core, "_engine", _ENGINE)
        monkeypatch.setattr(tracer, "_c_node", _NODE)
    if core._reference:
        return "reference"
    return loop or ("c" if core._engine is not None else "python")
