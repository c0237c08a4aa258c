"""Benchmark: forward + backward of ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` over 32 steps, batch 16,
64 units (issue 29's speed goals: rlgrad at most 1.0x eager PyTorch eagerly and at most 0.5x
under ``rlgrad.jit``, one thread).

Both libraries run the same weights (rlgrad's are loaded from PyTorch's state_dict) and the
outputs and gradients are compared before timing. Timing rounds interleave the three (see
bench/_timing.py) on the process's CPU clock, so the ratios are medians of per-round ratios.
The last column is the floor under any implementation that computes the same products
(``minimal_flops``) at this machine's single-thread sgemm peak, measured in the same rounds by a
(1024, 1024) product: the 0.5x goal is out of reach where it, plus the work around the GEMMs,
is above 0.5x. PyTorch's CPU LSTM is oneDNN's fused RNN (``aten::mkldnn_rnn_layer`` and its
backward, ``torch.backends.mkldnn.enabled``); its GRU and RNN are ATen's loops of ops.
Run ``python bench/recurrent.py [--wall]``.
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


def _rlgrad_step(m: Any, x: np.ndarray) -> Callable[[], Any]:
    def step() -> Any:
        m.zero_grad()
        out = m(x)[0]
        (out * out).sum().backward()
        return out
    return step


def _jit_step(m: Any, x: np.ndarray) -> Callable[[], Any]:
    """The same step compiled by ``rlgrad.jit`` (checked equal to the eager step)."""
    params = list(m.parameters())

    def step(x: Any) -> Any:
        for p in params:
            p.grad = None
        out = m(x)[0]
        loss = (out * out).sum()
        loss.backward()
        return loss

    compiled = rlgrad.jit(step)
    return lambda: compiled(x)


def _torch_step(torch: Any, m: Any, x: np.ndarray) -> Callable[[], Any]:
    tx = torch.from_numpy(x)

    def step() -> Any:
        m.zero_grad()
        out = m(tx)[0]
        (out * out).sum().backward()
        return out
    return step


def _check_same(m: Any, tm: Any, f: Callable[[], Any], tf: Callable[[], Any]) -> None:
    """The two steps compute the same output and parameter gradients (float32 tolerance)."""
    out, tout = f(), tf()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    for p, q in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4)


def _gemm_floor(gates: int, x: np.ndarray) -> Callable[[], Any]:
    """The step's matrix products alone, in NumPy: the input projection of all steps, a hidden
    product per step forward and backward, and the two weight gradients (the floor under any
    implementation that computes the same products)."""
    rng = np.random.default_rng(1)
    G = gates * UNITS
    w_ih, w_hh = (rng.standard_normal((G, n)).astype(np.float32) for n in (x.shape[-1], UNITS))
    x2 = x.reshape(T * B, -1)
    h, d = np.zeros((B, UNITS), np.float32), rng.standard_normal((T, B, G)).astype(np.float32)
    hs = rng.standard_normal((T * B, UNITS)).astype(np.float32)  # every step's h

    def products() -> Any:
        xp = x2 @ w_ih.T
        for _ in range(T):
            np.matmul(h, w_hh.T)
        for t in range(T):
            np.matmul(d[t], w_hh)
        return xp, d.reshape(T * B, G).T @ hs, d.reshape(T * B, G).T @ x2
    return products


PEAK_N = 1024  # the large sgemm that measures this machine's single-thread peak, in the same run


def _peak_gemm() -> Callable[[], Any]:
    """A (PEAK_N, PEAK_N) float32 product: 2 PEAK_N^3 FLOPs at the BLAS's best rate."""
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((PEAK_N, PEAK_N)).astype(np.float32) for _ in range(2))
    out = np.empty_like(a)
    return lambda: np.matmul(a, b, out=out)


def minimal_flops(gates: int, inputs: int = UNITS) -> int:
    """The GEMM FLOPs a forward + backward cannot avoid: the input projection of all T steps, the
    hidden product of steps 1..T-1 forward (h0 = 0) and backward (the gradient of h_t, t < T-1:
    h0 needs none), the hidden weights' gradient over steps 1..T-1 (step 0 read h0 = 0) and the
    input weights' over all T. No input gradient (x needs none)."""
    G = gates * UNITS
    return 2 * B * G * (2 * T * inputs + 3 * (T - 1) * UNITS)


def _check_jit(m: Any, eager: Callable[[], Any], jit: Callable[[], Any]) -> None:
    out = eager()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    jit()
    np.testing.assert_allclose(float((out * out).sum().detach().numpy()), float(np.asarray(jit())),
                               rtol=1e-5)
    for g, p in zip(grads, m.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-5 * np.abs(g).max())


def run(repeats: int = 9, min_time: float = 0.3, wall: bool = False) -> list[dict[str, Any]]:
    torch = _timing.torch_or_none()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, UNITS)).astype(np.float32)
    clock = time.perf_counter if wall else time.process_time
    rows = []
    for name in ("LSTM", "GRU", "RNN"):
        m = getattr(nn, name)(UNITS, UNITS)
        impls = {"rlgrad": _rlgrad_step(m, x)}
        if torch is not None:
            tm = getattr(torch.nn, name)(UNITS, UNITS)
            m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
            impls["torch"] = _torch_step(torch, tm, x)
            _check_same(m, tm, impls["rlgrad"], impls["torch"])
        impls["jit"] = _jit_step(m, x)
        _check_jit(m, impls["rlgrad"], impls["jit"])
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[name]
        impls["floor"] = _gemm_floor(gates, x)
        impls["peak"] = _peak_gemm()
        times = _timing.interleaved(impls, repeats, min_time / repeats, clock=clock)
        rows.append(_row(name, times, minimal_flops(gates), torch is not None))
    return rows


def _row(name: str, times: dict[str, np.ndarray], flops: int, torch: bool) -> dict[str, Any]:
    """Medians of the times and of the per-round ratios to PyTorch; ``min`` is ``flops`` at the
    round's measured peak (GFLOP/s of the large sgemm)."""
    peak = 2.0 * PEAK_N ** 3 / times["peak"]  # FLOP/s, per round
    times = dict(times, min=flops / peak)
    row: dict[str, Any] = {"case": f"{name} T={T} B={B} H={UNITS}",
                           "peak_gflops": float(np.median(peak)) / 1e9, "min_mflop": flops / 1e6}
    for k in ("rlgrad", "jit", "torch", "floor", "min"):
        row[f"{k}_ms"] = float(np.median(times[k])) * 1e3 if k in times else None
        row[f"{k}/torch"] = (float(np.median(times[k] / times["torch"]))
                             if k in times and torch else None)
    return row


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case (forward + backward, float32) | rlgrad eager | rlgrad.jit "
             "| PyTorch eager (1 thread) | eager / PyTorch | jit / PyTorch "
             "| its GEMMs alone / PyTorch | minimal GEMM FLOPs at this machine's peak / PyTorch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {_fmt(r['rlgrad_ms'], ' ms')} | {_fmt(r['jit_ms'], ' ms')} | "
                     f"{_fmt(r['torch_ms'], ' ms')} | {_fmt(r['rlgrad/torch'], 'x')} | "
                     f"{_fmt(r['jit/torch'], 'x')} | {_fmt(r['floor/torch'], 'x')} | "
                     f"{_fmt(r['min/torch'], 'x')} ({r['min_mflop']:.1f} MFLOP at "
                     f"{r['peak_gflops']:.0f} GFLOP/s) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="interleaved timing rounds")
    ap.add_argument("--wall", action="store_true", help="the wall clock, not CPU time")
    args = ap.parse_args()
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread, "
          f"{'wall' if args.wall else 'CPU'} time")
    print(table(run(args.repeats, wall=args.wall)))


if __name__ == "__main__":
    main()
