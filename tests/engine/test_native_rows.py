"""``ops.write_rows`` (a ring buffer's write at a run-time index) and its adjoint ``written_rows``:
the NumPy reference against plain loops, gradients against finite differences (float64, first
and second order), vmap against a loop over slices, and the native lowering against the NumPy
replay, bit for bit (rows are copied, nothing is computed). Inside a ``lax.scan`` whose carry
is the ring and nothing reads the old ring after the write, the native program writes the rows
in place (donation: O(rows) per step, no copy of the ring in the loop); where the old ring is
read after the write it copies, and both give the copying reference's values.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import lax, ops
from rlgrad.native import build
from rlgrad.transforms import tree_flatten

IDX = np.array([[1, 3, 1], [-1, 0, 4]])  # a repeat (the later row wins), two outside (skipped)


def _put_loop(x: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = x.copy()
    for s in range(idx.shape[0]):
        for r in range(idx.shape[1]):
            if 0 <= idx[s, r] < x.shape[1]:
                out[s, idx[s, r]] = rows[s, r]
    return out


def test_write_rows_and_written_rows_equal_plain_loops() -> None:
    rng = np.random.default_rng(0)
    x, rows = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 3, 3))
    np.testing.assert_array_equal(np.asarray(ops.write_rows(x, IDX, rows)), _put_loop(x, IDX, rows))
    got = np.asarray(ops.written_rows(x, IDX))
    want = np.zeros((2, 3, 3))
    want[0, 1], want[0, 2], want[1, 1] = x[0, 3], x[0, 1], x[1, 0]  # (0, 0) overwritten by (0, 2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bad, match", [
    (lambda: ops.write_rows(np.zeros((2, 4)), np.zeros((2, 3)), np.zeros((2, 3))), "must be integers"),
    (lambda: ops.write_rows(np.zeros((2, 4, 3)), IDX, np.zeros((2, 3))), r"rows must have .*\[2, 3, 3\]"),
    (lambda: ops.written_rows(np.zeros((3, 4)), IDX), "of shape"),
])
def test_bad_arguments_say_what_was_expected(bad: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bad()


def _loss(x: Any, rows: Any) -> Any:
    y = ops.write_rows(x, IDX, rows)
    return (rlgrad.sin(y) * y).sum() + (ops.written_rows(y * y, IDX) ** 2).sum()


def _fd(f: Any, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (float(f(x + d)) - float(f(x - d))) / (2 * eps)
    return g


def test_gradients_equal_finite_differences_first_and_second_order() -> None:
    rng = np.random.default_rng(1)
    x, rows = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 3, 3))
    gx, gr = rlgrad.grad(_loss, argnums=(0, 1))(x, rows)
    np.testing.assert_allclose(np.asarray(gx), _fd(lambda v: _loss(v, rows), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(gr), _fd(lambda v: _loss(x, v), rows), rtol=1e-6, atol=1e-8)
    # second order: the gradient's sum, differentiated again, against differences of it
    h = lambda v: np.asarray(rlgrad.grad(_loss, argnums=1)(x, v)).sum()  # noqa: E731
    hr = rlgrad.grad(lambda v: rlgrad.grad(_loss, argnums=1)(x, v).sum())(rows)
    np.testing.assert_allclose(np.asarray(hr), _fd(h, rows, 1e-5), rtol=1e-5, atol=1e-7)


def test_vmap_equals_a_loop_over_slices() -> None:
    rng = np.random.default_rng(2)
    x, rows = rng.normal(size=(5, 2, 4, 3)), rng.normal(size=(5, 2, 3, 3))
    got = rlgrad.vmap(lambda a, b: ops.write_rows(a, IDX, b))(x, rows)
    np.testing.assert_array_equal(np.asarray(got), np.stack([_put_loop(a, IDX, b) for a, b in zip(x, rows)]))
    got = rlgrad.vmap(lambda a: ops.written_rows(a, IDX))(x)
    want = np.stack([np.asarray(ops.written_rows(a, IDX)) for a in x])
    np.testing.assert_array_equal(np.asarray(got), want)


# ---- native: a ring written at every step of a scan ------------------------------------------
def _ring(read_old: bool) -> Any:
    def run(ring: Any, rows: Any, pos: Any) -> Any:
        def step(carry: Any, x: Any) -> Any:
            buf, p = carry
            n = buf.shape[1]
            idx = (p[:, None] + np.arange(x.shape[1])) % n
            new = ops.write_rows(buf, idx, x)
            seen = buf[:, 0].sum() if read_old else new[:, 0].sum()  # the old ring read after?
            return (new, (p + x.shape[1]) % n), seen

        return lax.scan(step, (ring, pos), rows)

    return run


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("read_old", [False, True])
def test_a_scan_writing_a_ring_native_equals_the_copying_reference(
        read_old: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(3)
    ring = rng.normal(size=(3, 1000, 4)).astype(np.float32)
    rows = rng.normal(size=(50, 3, 7, 4)).astype(np.float32)  # 50 steps of 7 rows per seed
    pos = np.array([0, 995, 500])  # one seed wraps around the ring's end
    ref = rlgrad.jit(_ring(read_old), backend="numpy")(ring, rows, pos)
    native = rlgrad.jit(_ring(read_old), backend="native")
    got = native(ring, rows, pos)
    assert native.backend == "native"
    for a, b in zip(tree_flatten(got)[0], tree_flatten(ref)[0]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    source = next(c.native_source for c in native._cache.values())
    loop = source[source.index("for (npy_intp t"):]
    loop = loop[:loop.index("\n    }")]
    whole = re.findall(r"< 12000;", loop)  # a loop over the whole ring (3 x 1000 x 4) in the step
    assert (len(whole) > 0) == read_old
