"""Gather benchmark: pick one Q-value per row of a (4096, 18) float32 batch, forward + backward.

The forward selects ``q[i, a_i]``; the backward scatter-adds an upstream gradient into a zero
matrix of ``q``'s shape. rlgrad (``take_along_axis``, ``gather``, ``q[rows, actions]``,
``gather_nd``) is compared in the same process with raw NumPy written by hand
(``np.take_along_axis`` + ``np.add.at``, the target is rlgrad within 3x of it) and with the
fastest NumPy equivalents found (``np.put_along_axis``, ``np.bincount``, flat indices), and with
``torch.gather`` when PyTorch is installed. One thread; medians of interleaved rounds.

    python bench/gather.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
import rlgrad.numpy as rnp  # noqa: E402
from rlgrad.indexing import gather, gather_nd  # noqa: E402

BATCH, ACTIONS = 4096, 18
RAW = "numpy: take_along_axis + np.add.at"


def make_problem(batch: int = BATCH, actions: int = ACTIONS, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "q": rng.standard_normal((batch, actions)).astype(np.float32),
        "a": rng.integers(0, actions, batch),
        "g": rng.standard_normal(batch).astype(np.float32),  # upstream gradient, one per row
    }


# ---- NumPy by hand: forward value and the gradient w.r.t. q ------------------------------------
def numpy_impls(p: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    q, a, g = p["q"], p["a"], p["g"]
    n, m = q.shape
    rows = np.arange(n)
    a2, g2 = a[:, None], g[:, None]

    def raw() -> Any:  # the textbook pair
        sel = np.take_along_axis(q, a2, 1)
        dq = np.zeros_like(q)
        np.add.at(dq, (rows, a), g)
        return sel, dq

    def fancy_add_at() -> Any:
        sel = q[rows, a]
        dq = np.zeros_like(q)
        np.add.at(dq, (rows, a), g)
        return sel, dq

    def put_along() -> Any:  # one index per row: no repeats, so a put is a scatter-add
        sel = np.take_along_axis(q, a2, 1)
        dq = np.zeros_like(q)
        np.put_along_axis(dq, a2, g2, 1)
        return sel, dq

    def bincount() -> Any:
        flat = rows * m + a
        sel = q.reshape(-1)[flat]
        dq = np.bincount(flat, weights=g, minlength=q.size).astype(q.dtype).reshape(q.shape)
        return sel, dq

    def flat_index() -> Any:  # what rlgrad does inside: flat take, flat 1-D np.add.at
        flat = rows * m + a
        sel = np.take(q.reshape(-1), flat)
        dq = np.zeros_like(q)
        np.add.at(dq.reshape(-1), flat, g)
        return sel, dq

    def flat_put() -> Any:  # flat take and a flat put (indices known unique)
        flat = rows * m + a
        sel = np.take(q.reshape(-1), flat)
        dq = np.zeros_like(q)
        dq.reshape(-1)[flat] = g
        return sel, dq

    return {
        RAW: raw,
        "numpy: q[rows, a] + np.add.at": fancy_add_at,
        "numpy: take_along_axis + put_along_axis": put_along,
        "numpy: flat take + bincount": bincount,
        "numpy: flat take + flat np.add.at": flat_index,
        "numpy: flat take + flat put": flat_put,
    }


# ---- rlgrad ------------------------------------------------------------------------------------
def rlgrad_impls(p: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    q = rlgrad.tensor(p["q"], requires_grad=True)
    a, g = p["a"], p["g"]
    rows = np.arange(q.shape[0])
    a2, g2 = a[:, None], g[:, None]
    nd_idx = np.stack([rows, a], axis=1)

    def along() -> Any:
        q.grad = None
        sel = rnp.take_along_axis(q, a2, 1)
        sel.backward(g2)
        return sel._value, q.grad._value

    def torch_style() -> Any:
        q.grad = None
        sel = gather(q, 1, a2)
        sel.backward(g2)
        return sel._value, q.grad._value

    def fancy() -> Any:
        q.grad = None
        sel = q[rows, a]
        sel.backward(g)
        return sel._value, q.grad._value

    def tf_style() -> Any:
        q.grad = None
        sel = gather_nd(q, nd_idx)
        sel.backward(g)
        return sel._value, q.grad._value

    return {
        "rlgrad: take_along_axis": along,
        "rlgrad: q[rows, actions]": fancy,
        "rlgrad: gather (torch)": torch_style,
        "rlgrad: gather_nd (tf)": tf_style,
    }


def torch_impls(p: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    try:
        import torch
    except Exception:  # absent, or a broken install: skip the comparison
        return {}
    torch.set_num_threads(1)
    q = torch.tensor(p["q"], requires_grad=True)
    a = torch.tensor(p["a"])
    a2, g, g2 = a[:, None], torch.tensor(p["g"]), torch.tensor(p["g"])[:, None]
    rows = torch.arange(q.shape[0])

    def gather_() -> Any:
        q.grad = None
        sel = torch.gather(q, 1, a2)
        sel.backward(g2)
        return sel.detach().numpy(), q.grad.numpy()

    def fancy() -> Any:
        q.grad = None
        sel = q[rows, a]
        sel.backward(g)
        return sel.detach().numpy(), q.grad.numpy()

    return {"PyTorch: torch.gather": gather_, "PyTorch: q[rows, actions]": fancy}


# ---- timing ------------------------------------------------------------------------------------
def check_same(impls: dict[str, Callable[[], Any]]) -> None:
    """Guard: every implementation gives the same values and gradient (or the timing is void)."""
    sel0, dq0 = impls[RAW]()
    for name, fn in impls.items():
        sel, dq = fn()
        np.testing.assert_array_equal(np.ravel(sel), np.ravel(sel0), err_msg=name)
        np.testing.assert_allclose(dq, dq0, rtol=1e-6, atol=1e-6, err_msg=name)
        assert dq.dtype == np.float32, (name, dq.dtype)


def run(repeats: int = 15, batch: int = BATCH, actions: int = ACTIONS) -> list[dict[str, Any]]:
    """One row per implementation: microseconds per forward+backward and ratios (medians of
    per-round ratios) to the raw NumPy pair and to the fastest NumPy equivalent."""
    p = make_problem(batch, actions)
    numpy_ = numpy_impls(p)
    impls = {**numpy_, **rlgrad_impls(p), **torch_impls(p)}
    check_same(impls)
    times = _timing.interleaved(impls, repeats)
    fastest = min(numpy_, key=lambda name: float(np.median(times[name])))
    rows = []
    for name, ts in times.items():
        rows.append({
            "implementation": name,
            "batch": batch,
            "actions": actions,
            "us_per_call": float(np.median(ts)) * 1e6,
            "vs_raw_numpy": float(np.median(ts / times[RAW])),
            "vs_fastest_numpy": float(np.median(ts / times[fastest])),
            "fastest_numpy": fastest,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 repeats")
    args = parser.parse_args()
    rows = run(5 if args.quick else args.repeats)
    print(f"gather forward + backward, batch {rows[0]['batch']} x {rows[0]['actions']} actions, "
          f"float32, one thread; fastest NumPy: {rows[0]['fastest_numpy']}\n")
    print("| implementation | us / call | vs raw NumPy | vs fastest NumPy |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['implementation']} | {r['us_per_call']:.1f} | {r['vs_raw_numpy']:.2f}x | "
              f"{r['vs_fastest_numpy']:.2f}x |")
    worst = max(r["vs_raw_numpy"] for r in rows if r["implementation"].startswith("rlgrad"))
    print(f"\nslowest rlgrad form: {worst:.2f}x raw NumPy (target: within 3x)")


if __name__ == "__main__":
    main()
