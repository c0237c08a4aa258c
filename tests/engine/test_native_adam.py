"""Adam's one C spelling (rlgrad/_adam.h): the native backend's generated C includes the header
that rlgrad/optim/_fused.c includes, so the compiled DQN's ``fused_adam`` and the eager
optimizers run the same C arithmetic. Here: the generated code really calls the header (a
changed header changes its results, and builds anew rather than loading the cached module of
the old one), and a missing header keeps the NumPy replay with one line. The bits of both
against their NumPy reference are checked in tests/rl/test_compiled_loop_dqn.py
(``fused_adam``) and tests/engine/test_reference_paths.py (``_fused.adam``)."""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad.native import build
from rlgrad.rl.compiled_loop.dqn import _adam_clip, fused_adam

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
KW = dict(b1=0.9, b2=0.999, eps=1e-8, max_norm=0.5)


def _args() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(5)
    p, g, m = (rng.standard_normal((2, 300)).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal((2, 300))).astype(np.float32)
    return p, g, m, v, np.full(2, 3.0), np.array(1e-3)


def test_the_generated_adam_is_the_header_and_a_changed_header_builds_anew(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The program's C, built against the header as it is: the reference's bits. Built against
    a header whose parameter update is doubled: the moments unchanged, the step doubled (to
    rounding), from a second module in the cache, not the first one loaded again."""
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copy(os.path.join(build.INCLUDE_DIR, "_adam.h"), tmp_path / "_adam.h")
    monkeypatch.setattr(build, "INCLUDE_DIR", str(tmp_path))
    step = rlgrad.jit(lambda *a: fused_adam(*a, **KW), backend="native")
    want = _adam_clip(*_args(), **KW)
    np.testing.assert_array_equal(step(*_args()), want)
    assert step.backend == "native"
    source = next(iter(step._cache.values())).native_source
    assert "adam_step_float(" in source and '#include "_adam.h"' in source
    text = (tmp_path / "_adam.h").read_text()
    line = "return x - m / (SQRT(v) + eps) * step;"
    assert line in text
    (tmp_path / "_adam.h").write_text(text.replace(line, "return x - m / (SQRT(v) + eps) * (step + step);"))
    (doubled,) = build.build(source).step(*_args())
    np.testing.assert_array_equal(doubled[1:], want[1:])
    p = _args()[0]
    # (steps of ~1e-3 against the parameters' rounding, ulp(|p| < 4) <= 4.8e-7)
    np.testing.assert_allclose(p - doubled[0], 2 * (p - want[0]), rtol=0, atol=1e-6)
    assert np.max(np.abs(doubled[0] - want[0])) > 1e-3
    assert len(os.listdir(tmp_path / "cache" / "native")) == 2


def test_a_missing_header_keeps_the_numpy_replay(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "INCLUDE_DIR", str(tmp_path))  # (no _adam.h there)
    step = rlgrad.jit(lambda x: rlgrad.numpy.tanh(x) * 2.0, backend="native")
    with caplog.at_level(logging.WARNING, logger="rlgrad.jit"):
        np.testing.assert_array_equal(step(np.ones(3)), np.tanh(np.ones(3)) * 2.0)
    assert step.backend == "numpy"
    msg = [r.getMessage() for r in caplog.records]
    assert len(msg) == 1 and "header _adam.h is missing" in msg[0] and "\n" not in msg[0]


def test_the_eager_fused_module_has_no_adam_of_its_own() -> None:
    """rlgrad/optim/_fused.c includes the header and writes no update arithmetic itself (its
    bits against the NumPy path: tests/engine/test_reference_paths.py)."""
    root = os.path.dirname(build.INCLUDE_DIR)
    with open(os.path.join(root, "rlgrad", "optim", "_fused.c")) as f:
        src = f.read()
    adam = src[src.index("---- Adam"):src.index("---- RMSprop")]
    assert '#include "../_adam.h"' in src
    assert "adam_step_##T(" in adam and "adam_moments_##T(" in adam and "adam_param_##T(" in adam
    assert "SQRT(" not in adam and "* c1" not in adam and "* b2" not in adam
