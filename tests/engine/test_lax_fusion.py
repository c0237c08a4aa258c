"""``lax.scan`` of one cell step as the cell's sequence node (``lax.defsequence``: a body
``h' = gru_cell(x_t, h, w, b)[..., :H]`` runs as one ``gru_seq``) against the loop of cells
(``lax.scan_fusion(False)``, the reference): the same states bit for bit, the same gradients to
rounding, finite differences in float64 to second order in both modes, a program of one size for
every T, and the bodies that must stay loops. Also the GRU step's kernels the loop of cells
runs (``_kernels.gru_pre``; ``gru_cell_grad`` written into its packed result)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import lax, nn
from rlgrad import numpy as rnp
from rlgrad.nn import cells

H = 3


def _args(T: int = 5, bias: bool = True, seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal((3 * H, H)) * 0.6, rng.standard_normal(3 * H) * 0.3,
            rng.standard_normal((2, H)) * 0.5, rng.standard_normal((T, 2, 3 * H))]
    return args if bias else [args[0], None, *args[2:]]


def _loss(reverse: bool = False, body: Callable | None = None) -> Callable[..., Any]:
    def loss(w: Any, b: Any, h0: Any, xs: Any) -> Any:
        def cell_step(h: Any, xp: Any) -> tuple[Any, Any]:
            new = cells.gru_cell(xp, h, w, b)[..., :H]
            return new, new
        h, ys = lax.scan(body(w, b) if body else cell_step, h0, xs, reverse=reverse)
        return rnp.sum(h ** 3) + rnp.sum(ys * ys * rnp.arange(1.0, 1.0 + ys.shape[0])[:, None, None])
    return loss


def _no_bias(f: Callable[..., Any]) -> Callable[..., Any]:
    return lambda w, h0, xs: f(w, None, h0, xs)


def _names(f: Callable[..., Any], *args: Any) -> str:
    return rlgrad.jit(f).lower(*args)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_a_cell_scan_is_one_sequence_node_with_the_loop_s_values(reverse: bool, bias: bool) -> None:
    args = _args(bias=bias)
    loss = _loss(reverse) if bias else _no_bias(_loss(reverse))
    args = args if bias else [args[0], *args[2:]]
    argnums = tuple(range(len(args)))
    g2 = rlgrad.grad(lambda *a: rnp.sum(rlgrad.grad(loss, 0)(*a) ** 2), argnums)
    src = _names(rlgrad.grad(loss, argnums), *args)
    assert "gru_seq" in src and "# scan" not in src and "gru_cell" not in src, src
    fused = [rlgrad.jit(loss)(*args), *rlgrad.jit(rlgrad.grad(loss, argnums))(*args),
             *rlgrad.jit(g2)(*args)]
    with lax.scan_fusion(False):
        src = _names(rlgrad.grad(loss, argnums), *args)
        assert "gru_seq" not in src and "# scan" in src, src
        loop = [rlgrad.jit(loss)(*args), *rlgrad.jit(rlgrad.grad(loss, argnums))(*args),
                *rlgrad.jit(g2)(*args)]
    eager = [loss(*args), *rlgrad.grad(loss, argnums)(*args), *g2(*args)]  # a Python loop
    assert np.array_equal(np.asarray(fused[0]), np.asarray(loop[0]))  # the states: same bits
    for a, b, c in zip(fused, loop, eager, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-12, atol=1e-12)


def test_the_fused_scan_matches_finite_differences_to_second_order() -> None:
    with lax.nodes_eagerly():  # the nodes jit records, made eagerly
        rlgrad.check_grads(_loss(), modes=("rev", "fwd"), order=2)(*_args(4))
        rlgrad.check_grads(_loss(True), modes=("rev",), order=2)(*_args(3, seed=1))


def test_the_program_has_one_size_for_every_length() -> None:
    cell = nn.GRUCell(4, 5).double()

    def step(x: Any) -> Any:
        cell.zero_grad()
        h, out = lax.scan(lambda h, xt: (cell(xt, h),) * 2, rlgrad.zeros(2, 5, dtype=rlgrad.float64), x)
        loss = (out * out).sum() + h.sum()
        loss.backward()
        return loss

    sizes = set()
    for T in (3, 16, 64):
        src = _names(step, np.zeros((T, 2, 4)))
        assert "gru_seq" in src and "gru_cell" not in src
        sizes.add(len(src.splitlines()))
    assert len(sizes) == 1


def _full_output(w: Any, b: Any) -> Callable:
    return lambda h, xp: (cells.gru_cell(xp, h, w, b)[..., :H], cells.gru_cell(xp, h, w, b))


def _scaled(w: Any, b: Any) -> Callable:
    def body(h: Any, xp: Any) -> tuple[Any, Any]:
        new = cells.gru_cell(xp, h, w, b)[..., :H]
        return new, new * 2.0
    return body


def _other_columns(w: Any, b: Any) -> Callable:
    return lambda h, xp: (cells.gru_cell(xp, h, w, b)[..., H:2 * H],) * 2


@pytest.mark.parametrize("body", [_full_output, _scaled, _other_columns])
def test_bodies_that_are_not_one_cell_step_stay_loops(body: Callable) -> None:
    """A y that is more than h' (the wide output, a product) or a carry that is not h' (the r
    gate's columns): the loop of cells, with the eager values."""
    def loss(w: Any, b: Any, h0: Any, xs: Any) -> Any:
        h, ys = lax.scan(body(w, b), h0, xs)
        return rnp.sum(h ** 3) + rnp.sum(ys * ys)

    args = _args()
    src = _names(rlgrad.grad(loss, (0, 1, 2, 3)), *args)
    assert "gru_seq" not in src and "# scan" in src
    for a, b in zip(rlgrad.jit(rlgrad.grad(loss, (0, 1, 2, 3)))(*args),
                    rlgrad.grad(loss, (0, 1, 2, 3))(*args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_gru_cell_grad_written_in_place_equals_the_concatenation() -> None:
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        xp, h, w, b = (rng.standard_normal(s).astype(dtype) for s in ((5, 12), (5, 4), (12, 4), (12,)))
        ans = cells._gru_cell(xp, h, w, b)
        G = rng.standard_normal(ans.shape).astype(dtype)
        packed = cells._grad_fwd(cells._gru_grads, True)(G, ans, xp, h, w, b)
        want = np.concatenate([np.ravel(d) for d in cells._gru_grads(G, ans, xp, h, w, b)])
        assert packed.dtype == want.dtype and np.array_equal(packed, want)
        wide = np.concatenate([h, rng.standard_normal((5, 8)).astype(dtype)], axis=1)  # hs wider than h
        packed = cells._grad_fwd(cells._gru_grads, True)(G, ans, xp, wide, w, None)
        want = np.concatenate([np.ravel(d) for d in cells._gru_grads(G, ans, xp, wide, w, None)[:3]])
        assert np.array_equal(packed, want)


@pytest.mark.skipif(cells.ops._kernels is None, reason="rlgrad._kernels not built (or turned off)")
def test_gru_pre_gives_the_numpy_lines_bits_and_refuses_what_does_not_fit() -> None:
    k = cells.ops._kernels
    rng = np.random.default_rng(6)
    for dtype in (np.float32, np.float64):
        for halve in (True, False):
            for with_b in (True, False):
                o = (rng.standard_normal((3, 20)) * 3).astype(dtype)  # (rows, 5H), H = 4
                xg = (rng.standard_normal((3, 12)) * 3).astype(dtype)
                b3 = rng.standard_normal((3, 1, 4)).astype(dtype) if with_b else None
                og, xgg = cells._gates(o, 5), cells._gates(xg, 3)
                want = og.copy()
                if b3 is not None:
                    want[1:4] += b3
                want[1:3] += xgg[:2]
                if halve:
                    want[1:3] *= 0.5
                assert k.gru_pre(og, xgg, b3, halve)
                assert np.array_equal(og, want)
    o5, x3 = np.zeros((5, 2, 3), np.float32), np.zeros((3, 2, 3), np.float32)
    assert not k.gru_pre(o5[:4], x3, None, True)  # four blocks
    assert not k.gru_pre(o5, x3.astype(np.float64), None, True)  # dtypes differ
    assert not k.gru_pre(o5, x3, np.zeros((3, 1, 3)), True)  # the bias's dtype
    assert not k.gru_pre(o5, x3, np.zeros((3, 2, 3), np.float32), True)  # a bias per row
    assert not k.gru_pre(o5, o5[2:], None, True)  # xg overlaps what it writes
    assert not k.gru_pre(o5, x3[..., ::2], None, True)  # rows not contiguous
    assert k.gru_pre(o5, x3 + 1, np.ones((3, 1, 3), np.float32), True)
    assert np.all(o5[1:3] == 1.0) and np.all(o5[3] == 1.0) and np.all(o5[[0, 4]] == 0.0)
    with pytest.raises(TypeError):
        k.gru_pre(o5, x3, None)


def test_a_cell_scan_without_ys_is_fused_too() -> None:
    def loss(w: Any, b: Any, h0: Any, xs: Any) -> Any:
        h, ys = lax.scan(lambda h, xp: (cells.gru_cell(xp, h, w, b)[..., :H], None), h0, xs)
        assert ys is None
        return rnp.sum(h ** 3)

    args = _args()
    src = _names(rlgrad.grad(loss, (0, 1, 2, 3)), *args)
    assert "gru_seq" in src and "# scan" not in src
    for a, b in zip(rlgrad.jit(rlgrad.grad(loss, (0, 1, 2, 3)))(*args),
                    rlgrad.grad(loss, (0, 1, 2, 3))(*args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
