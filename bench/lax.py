"""Benchmark: a GRU over 32 steps, batch 16, 64 units, forward + backward, under ``rlgrad.jit``:
``nn.GRU`` (its sequence node, ``cells.gru_seq``), a ``lax.scan`` over ``GRUCell`` (the input
projection hoisted before the loop, the body then one ``gru_cell`` step: one ``gru_seq`` node,
``lax.defsequence``), the same scan as a loop of cells (``scan_fusion(False)``: the fused cell as
the body, its VJP reading the saved residuals), the same scan with residuals and hoisting off
(``scan_residuals(False)``, ``scan_hoisting(False)``: the backward runs the cell again at every
step), the same cell unrolled (a ``GRUCell`` called T times); ``nn.GRU`` eagerly; PyTorch eager
(``torch.nn.GRU``, one thread). The floor: the GEMMs
the scan makes, alone, NumPy's vs PyTorch's. And the size of the compiled step for T = 8, 32,
128 (issue 30: it must not grow with T).

All three run the same weights (rlgrad's are loaded from PyTorch's state_dict); losses and
parameter gradients are compared before timing. Rounds interleave the implementations (see
bench/_timing.py); times are the process's CPU time (``--clock wall``: elapsed), medians over
rounds, ratios medians of per-round ratios.
Run ``python bench/lax.py``. On a loaded machine, say so beside the numbers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads (the comparison is per core)
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad import nn  # noqa: E402

T, B, UNITS = 32, 16, 64


def _gru_step(m: Any) -> Callable[[np.ndarray], Any]:
    """nn.GRU's training step (under jit: one lax.scan over the cell)."""
    def step(x: Any) -> Any:
        m.zero_grad()
        out = m(x)[0]
        loss = (out * out).sum()
        loss.backward()
        return loss
    return step


def _scan_step(cell: Any) -> Callable[[np.ndarray], Any]:
    """The recurrence as a ``lax.scan`` over GRUCell: under jit, one node whose body is the cell."""
    def step(x: Any) -> Any:
        cell.zero_grad()
        _, out = rlgrad.lax.scan(lambda h, xt: (cell(xt, h),) * 2,
                                 rlgrad.zeros(x.shape[1], UNITS), x)
        loss = (out * out).sum()
        loss.backward()
        return loss
    return step


def _unrolled_step(cell: Any) -> Callable[[np.ndarray], Any]:
    """The same recurrence as a Python loop over GRUCell: jit unrolls it into T cells."""
    def step(x: Any) -> Any:
        cell.zero_grad()
        h, outs = None, []
        for t in range(x.shape[0]):
            h = cell(x[t], h)
            outs.append(h)
        out = rlgrad.stack(outs)
        loss = (out * out).sum()
        loss.backward()
        return loss
    return step


def _cell_from(m: Any) -> Any:
    cell = nn.GRUCell(UNITS, UNITS)
    cell.load_state_dict({k[:-3]: v.numpy() for k, v in m.state_dict().items()})
    return cell


def _torch_step(torch: Any, tm: Any, x: np.ndarray) -> Callable[[], Any]:
    tx = torch.from_numpy(x)

    def step() -> Any:
        tm.zero_grad()
        out = tm(tx)[0]
        loss = (out * out).sum()
        loss.backward()
        return loss
    return step


def program_sizes(lengths: tuple[int, ...] = (8, 32, 128)) -> list[dict[str, Any]]:
    """Lines of the compiled training step for each T: nn.GRU, the scan, unrolled."""
    m = nn.GRU(UNITS, UNITS)
    cell = _cell_from(m)
    rows = []
    for n in lengths:
        x = np.zeros((n, B, UNITS), np.float32)
        rows.append({"T": n, "gru_lines": len(rlgrad.jit(_gru_step(m)).lower(x).splitlines()),
                     "scan_lines": len(rlgrad.jit(_scan_step(cell)).lower(x).splitlines()),
                     "unrolled_lines": len(rlgrad.jit(_unrolled_step(cell)).lower(x).splitlines())})
    return rows


def _recompute_jit(cell: Any, x: np.ndarray) -> Any:
    """The scan's step traced with residuals and hoisting off: the reference VJP."""
    with rlgrad.lax.scan_residuals(False), rlgrad.lax.scan_hoisting(False):
        f = rlgrad.jit(_scan_step(cell))
        f(x)
    return f


def _loop_jit(cell: Any, x: np.ndarray) -> Any:
    """The scan's step traced as a loop of cells (not one ``gru_seq``): residuals, hoisting."""
    with rlgrad.lax.scan_fusion(False):
        f = rlgrad.jit(_scan_step(cell))
        f(x)
    return f


def gemm_floor(torch: Any, clock: Callable[[], float], repeats: int = 9,
               min_time: float = 0.3) -> dict[str, float]:
    """ms of the GEMMs alone of the scan's training step, NumPy's (what rlgrad calls) and
    PyTorch's: the input projection and its weight gradient once over T*B rows (hoisted), per
    step the recurrent product, its input and weight gradients."""
    rng = np.random.default_rng(1)
    x, w, h, g, gx = (rng.standard_normal(s).astype(np.float32) for s in (
        (T * B, UNITS), (3 * UNITS, UNITS), (B, UNITS), (B, 3 * UNITS), (T * B, 3 * UNITS)))

    def numpy_gemms() -> None:
        x @ w.T
        gx.T @ x
        for _ in range(T):
            h @ w.T
            g @ w
            g.T @ h

    impls = {"numpy": numpy_gemms}
    if torch is not None:
        tx, tw, th, tg, tgx = (torch.from_numpy(a) for a in (x, w, h, g, gx))

        def torch_gemms() -> None:
            tx @ tw.T
            tgx.T @ tx
            for _ in range(T):
                th @ tw.T
                tg @ tw
                tg.T @ th
        impls["torch"] = torch_gemms
    times = _timing.interleaved(impls, repeats, min_time / repeats, clock=clock)
    return {name: float(np.median(ts)) * 1e3 for name, ts in times.items()}


def run(repeats: int = 9, min_time: float = 0.3,
        clock: Callable[[], float] = time.process_time) -> dict[str, Any]:
    torch = _timing.torch_or_none()
    x = np.random.default_rng(0).standard_normal((T, B, UNITS)).astype(np.float32)
    m = nn.GRU(UNITS, UNITS)
    if torch is not None:
        tm = torch.nn.GRU(UNITS, UNITS)
        m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    cell = _cell_from(m)
    gru_jit, scan_jit = rlgrad.jit(_gru_step(m)), rlgrad.jit(_scan_step(cell))
    unrolled_jit = rlgrad.jit(_unrolled_step(cell))
    recompute_jit, loop_jit = _recompute_jit(cell, x), _loop_jit(cell, x)
    impls = {"nn.GRU_jit": lambda: gru_jit(x), "scan_GRUCell_jit": lambda: scan_jit(x),
             "scan_GRUCell_jit_loop": lambda: loop_jit(x),
             "scan_GRUCell_jit_recompute": lambda: recompute_jit(x),
             "unrolled_GRUCell_jit": lambda: unrolled_jit(x),
             "nn.GRU_eager": lambda: _gru_step(m)(rlgrad.tensor(x))}
    losses = {name: float(np.asarray(getattr(f(), "_value", f()))) for name, f in impls.items()}
    if torch is not None:
        impls["torch"] = _torch_step(torch, tm, x)
        losses["torch"] = float(impls["torch"]().item())
        gru_jit(x)
        for p, q in zip(m.parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4)
    ref = losses["nn.GRU_eager"]
    assert all(abs(v - ref) <= 1e-4 * abs(ref) for v in losses.values()), losses
    times = _timing.interleaved(impls, repeats, min_time / repeats, clock=clock)
    base = times.get("torch")
    return {name: {"ms": float(np.median(ts)) * 1e3,
                   "vs_torch": None if base is None else float(np.median(ts / base))}
            for name, ts in times.items()}


def gae(repeats: int = 9, min_time: float = 0.3, n_steps: int = 128,
        n_envs: int = 8) -> dict[str, float]:
    """ms per call of GAE: the default (``compute_gae``: a NumPy loop over rows) vs the
    ``lax.scan`` version, eager and under ``jit``."""
    from rlgrad.rl.buffers import compute_gae, compute_gae_scan

    rng = np.random.default_rng(0)
    r, v, nv = (rng.standard_normal((n_steps, n_envs)).astype(np.float32) for _ in range(3))
    term = rng.random((n_steps, n_envs)) < 0.05
    done = term | (rng.random((n_steps, n_envs)) < 0.05)
    scan_jit = rlgrad.jit(lambda *a: compute_gae_scan(*a, 0.99, 0.95))
    impls = {"compute_gae": lambda: compute_gae(r, v, nv, term, done, 0.99, 0.95),
             "scan_eager": lambda: compute_gae_scan(r, v, nv, term, done, 0.99, 0.95),
             "scan_jit": lambda: scan_jit(r, v, nv, term, done)}
    want = impls["compute_gae"]()[0]
    for f in impls.values():
        np.testing.assert_allclose(np.asarray(f()[0]), want, rtol=1e-5, atol=1e-5)
    times = _timing.interleaved(impls, repeats, min_time / repeats)
    return {name: float(np.median(ts)) * 1e3 for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="interleaved timing rounds")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="the process's CPU time (default) or elapsed time")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread, {args.clock} time")
    print(f"GRU T={T} B={B} H={UNITS}, forward + backward, float32\n")
    print("| implementation | ms per step | / PyTorch eager |\n|---|---:|---:|")
    rows = run(args.repeats, clock=clock)
    for name, r in rows.items():
        ratio = "-" if r["vs_torch"] is None else f"{r['vs_torch']:.2f}x"
        print(f"| {name} | {r['ms']:.2f} | {ratio} |")
    floor = gemm_floor(_timing.torch_or_none(), clock, args.repeats)
    print("\n| the scan's GEMMs alone | ms | / PyTorch eager's GRU step |\n|---|---:|---:|")
    for name, ms in floor.items():
        base = rows.get("torch", {}).get("ms")
        print(f"| {name} | {ms:.2f} | {'-' if base is None else f'{ms / base:.2f}x'} |")
    print("\n| T | lines of the compiled step: nn.GRU | scan over GRUCell | unrolled |\n"
          "|---:|---:|---:|---:|")
    for r in program_sizes():
        print(f"| {r['T']} | {r['gru_lines']} | {r['scan_lines']} | {r['unrolled_lines']} |")
    print("\n| GAE, T=128, 8 envs | ms per call |\n|---|---:|")
    for name, ms in gae(args.repeats).items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
