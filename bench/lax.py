"""Benchmark: a GRU over 32 steps, batch 16, 64 units, forward + backward, under ``rlgrad.jit``:
``nn.GRU`` (its sequence node, ``cells.gru_seq``), a ``lax.scan`` over ``GRUCell`` (the fused
cell as the body) and the same cell unrolled (a ``GRUCell`` called T times); ``nn.GRU`` eagerly;
PyTorch eager (``torch.nn.GRU``, one thread). And the size of the compiled step for T = 8, 32,
128 (issue 30: it must not grow with T).

All three run the same weights (rlgrad's are loaded from PyTorch's state_dict); losses and
parameter gradients are compared before timing. Rounds interleave the implementations (see
bench/_timing.py); times are medians over rounds, ratios medians of per-round ratios.
Run ``python bench/lax.py``. On a loaded machine, say so beside the numbers.
"""

from __future__ import annotations

import argparse
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


def run(repeats: int = 9, min_time: float = 0.3) -> dict[str, Any]:
    torch = _timing.torch_or_none()
    x = np.random.default_rng(0).standard_normal((T, B, UNITS)).astype(np.float32)
    m = nn.GRU(UNITS, UNITS)
    if torch is not None:
        tm = torch.nn.GRU(UNITS, UNITS)
        m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    cell = _cell_from(m)
    gru_jit, scan_jit = rlgrad.jit(_gru_step(m)), rlgrad.jit(_scan_step(cell))
    unrolled_jit = rlgrad.jit(_unrolled_step(cell))
    impls = {"nn.GRU_jit": lambda: gru_jit(x), "scan_GRUCell_jit": lambda: scan_jit(x),
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
    times = _timing.interleaved(impls, repeats, min_time / repeats)
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
    args = ap.parse_args()
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread")
    print(f"GRU T={T} B={B} H={UNITS}, forward + backward, float32\n")
    print("| implementation | ms per step | / PyTorch eager |\n|---|---:|---:|")
    for name, r in run(args.repeats).items():
        ratio = "-" if r["vs_torch"] is None else f"{r['vs_torch']:.2f}x"
        print(f"| {name} | {r['ms']:.2f} | {ratio} |")
    print("\n| T | lines of the compiled step: nn.GRU | scan over GRUCell | unrolled |\n"
          "|---:|---:|---:|---:|")
    for r in program_sizes():
        print(f"| {r['T']} | {r['gru_lines']} | {r['scan_lines']} | {r['unrolled_lines']} |")
    print("\n| GAE, T=128, 8 envs | ms per call |\n|---|---:|")
    for name, ms in gae(args.repeats).items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
