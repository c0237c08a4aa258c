"""Benchmark: forward + backward of ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` over 32 steps, batch 16,
64 units (issue 29's speed note: eager rlgrad at most 1.0x eager PyTorch on one thread).

Both libraries run the same weights (rlgrad's are loaded from PyTorch's state_dict) and the
outputs and gradients are compared before timing. Timing rounds interleave the two (see
bench/_timing.py), so the ratio is the median of per-round ratios. Run ``python bench/recurrent.py``.
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


def _rlgrad_step(m: Any, x: np.ndarray) -> Callable[[], Any]:
    def step() -> Any:
        m.zero_grad()
        out = m(x)[0]
        (out * out).sum().backward()
        return out
    return step


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


def run(repeats: int = 9, min_time: float = 0.3) -> list[dict[str, Any]]:
    torch = _timing.torch_or_none()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, UNITS)).astype(np.float32)
    rows = []
    for name in ("LSTM", "GRU", "RNN"):
        m = getattr(nn, name)(UNITS, UNITS)
        impls = {"rlgrad": _rlgrad_step(m, x)}
        if torch is not None:
            tm = getattr(torch.nn, name)(UNITS, UNITS)
            m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
            impls["torch"] = _torch_step(torch, tm, x)
            _check_same(m, tm, impls["rlgrad"], impls["torch"])
        times = _timing.interleaved(impls, repeats, min_time / repeats)
        row = {"case": f"{name} T={T} B={B} H={UNITS}",
               "rlgrad_ms": float(np.median(times["rlgrad"])) * 1e3,
               "torch_ms": float(np.median(times["torch"])) * 1e3 if torch else None}
        row["rlgrad/torch"] = (float(np.median(times["rlgrad"] / times["torch"]))
                               if torch else None)
        rows.append(row)
    return rows


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case (forward + backward, float32) | rlgrad | PyTorch eager (1 thread) "
             "| rlgrad / PyTorch |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {_fmt(r['rlgrad_ms'], ' ms')} | "
                     f"{_fmt(r['torch_ms'], ' ms')} | {_fmt(r['rlgrad/torch'], 'x')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="interleaved timing rounds")
    args = ap.parse_args()
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread")
    print(table(run(args.repeats)))


if __name__ == "__main__":
    main()
