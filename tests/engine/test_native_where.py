"""``where`` in the native backend's C: every operand of an elementwise op is loaded before its
expression (``codegen._Fused.render``), so a select picks between values already read and no
load runs under a condition (GCC 12 with AVX-512 vectorised ``c ? x[i] : 0`` under ``omp simd``
with a broadcast ``c`` as a masked load from the wrong address, and QR-DQN trained off the
replay). Here the masked-out operand is NaN, infinite, beyond float32's or int64's range, or
subnormal, the condition broadcast along each axis (also at a scan step's offset, QR-DQN's
gather backward), and the results are the NumPy replay's bit for bit: ``where``, ``sqrt``,
``/`` and the casts are exact, so no tolerance is needed."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import lax
from rlgrad.native import build

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
# a select one of whose operands is read from memory inside it: `c ? (float)b3[i] : ...`
_LOAD_IN_SELECT = re.compile(r"[?:] *(?:\(\w+\))?\(?\w+\[")


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _both(fn: Callable, *args: Any) -> Any:
    """``fn`` under both backends: the same bits (NaN where NaN); the native C holds no load
    inside a select."""
    with np.errstate(all="ignore"):  # (sqrt of x < 0, 1 / 0: the values under test)
        want = rlgrad.jit(fn, backend="numpy")(*args)
        nat = rlgrad.jit(fn, backend="native")
        got = nat(*args)
    assert nat.backend == "native"
    for g, w in zip(rlgrad.tree_util.tree_flatten(got)[0], rlgrad.tree_util.tree_flatten(want)[0]):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)
    source = next(iter(nat._cache.values())).native_source
    body = source[source.index("static PyObject *step("):]
    assert not _LOAD_IN_SELECT.search(body), _LOAD_IN_SELECT.search(body)
    return got


SHAPES = [  # (condition, x, y): flat, odd lengths, broadcast along each axis, a scalar
    ((1000,), (1000,), (1000,)), ((7,), (7,), ()), ((16, 2, 1), (16, 1, 7), (16, 2, 7)),
    ((16, 1, 7), (16, 2, 7), (1, 2, 1)), ((1, 5, 1), (3, 5, 9), (3, 1, 9)), ((), (4, 13), (4, 13))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cs, xs, ys", SHAPES, ids=[str(s[0]) for s in SHAPES])
def test_where_masked_out_nan_and_inf(cs: tuple, xs: tuple, ys: tuple, dtype: type) -> None:
    """``where(c, sqrt(x), 1 / y)``: x < 0 (sqrt's NaN) and y = 0 or subnormal (1/y = inf)
    in lanes the select drops and in lanes it keeps."""
    rng = np.random.default_rng(len(xs) * 7 + len(cs))
    c = rng.random(cs) < 0.5
    x = rng.standard_normal(xs).astype(dtype)  # (x < 0: NaN, in the lanes c drops or keeps)
    y = rng.standard_normal(ys).astype(dtype)
    if ys:
        y.flat[::3] = 0.0
        y.flat[1::3] = np.finfo(dtype).smallest_subnormal
    got = _both(lambda c, x, y: rnp.where(c, rnp.sqrt(x), dtype(1) / y), c, x, y)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.where(c, np.sqrt(x), dtype(1) / y))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_gradient_with_nan_in_the_masked_out_branch(dtype: type) -> None:
    """The gradient of ``sum(where(x > 0, sqrt(x), x * x))``: sqrt's backward at x < 0 is
    0 * NaN in the replay (NumPy's and JAX's rule, not a special case), and native gives the
    same NaN lanes and the same finite ones."""
    x = np.array([-2.0, -0.5, 0.0, 0.25, 1.0, 4.0, -3.0, 9.0, 2.0], dtype=dtype)
    g = _both(rlgrad.grad(lambda x: rnp.sum(rnp.where(x > 0, rnp.sqrt(x), x * x))), x)
    assert np.isnan(g[x < 0]).all() and np.isfinite(g[x > 0]).all()


def test_where_between_values_beyond_the_types_range() -> None:
    """Masked-out lanes that overflow: a float64 beyond float32 (inf when cast), a float beyond
    int64 (the cast's value is unspecified in C; the select never takes it), int64's extremes."""
    big = np.array([1e300, -1e300, 3.0, 1e40, -7.5, 2.0**63 * 4, 1.0], dtype=np.float64)
    ok = np.abs(big) < 1e10
    lo = np.array([np.iinfo(np.int64).min, 5, np.iinfo(np.int64).max, 0, -1, 7, 8], dtype=np.int64)

    def fn(ok: Any, big: Any, lo: Any) -> Any:
        as_int = rnp.where(ok, rnp.asarray(big, dtype=np.int64), lo)
        as_f32 = rnp.where(ok, rnp.asarray(big, dtype=np.float32), np.float32(-1))
        return as_int, as_f32

    as_int, as_f32 = _both(fn, ok, big, lo)
    np.testing.assert_array_equal(as_int, np.where(ok, np.trunc(np.where(ok, big, 0)), lo).astype(np.int64))
    np.testing.assert_array_equal(as_f32, np.where(ok, big, -1).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, k, q", [(16, 2, 7), (8, 3, 51), (5, 4, 1)])
def test_where_at_a_scan_step_with_a_broadcast_condition(n: int, k: int, q: int, dtype: type) -> None:
    """QR-DQN's gather backward in a scan: ``where(hit_t (n, k, 1), g (n, 1, q), 0)`` with the
    condition read at the step's offset, NaN in the masked-out lanes of g, summed over steps."""
    rng = np.random.default_rng(n * k * q)
    hits = rng.integers(0, k, (4, n, 1)) == np.arange(k).reshape(1, 1, k)
    g = rng.standard_normal((n, q)).astype(dtype)
    g[::2, 0] = np.nan

    def fn(hits: Any, g: Any) -> Any:
        def body(acc: Any, h: Any) -> tuple[Any, None]:
            picked = rnp.where(rnp.reshape(h, (n, k, 1)), rnp.reshape(g * dtype(1.5), (n, 1, q)),
                               dtype(0))
            return acc + rnp.where(rnp.isnan(picked), dtype(0), picked), None
        return lax.scan(body, rnp.zeros((n, k, q), dtype=dtype), hits)[0]

    _both(fn, hits, g)
