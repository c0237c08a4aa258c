"""Benchmark: the Nature DQN CNN (rlgrad.rl.cnn.NatureCNN) against the same network in PyTorch on
one thread, in the same run: its forward at batch 1 (choosing one action per env step), its
forward at batch 32 without a graph (the target network's values) and forward + backward at batch
32 (one DQN update). Inputs are uint8 4x84x84 frames, divided by 255 inside both networks.

Both start from the same weights and are checked to compute the same outputs and weight gradients
before they are timed; ratios are medians of per-round ratios (bench/_timing.py). Run
``python bench/cnn.py [--repeats 9] [--quick]``; other scripts can call ``run()`` for the rows.

``--conv1`` times the first layer (8x8 stride 4, 4 -> 32 channels, batch 32) alone, forward and
weight gradient, on its two paths: im2col + GEMM and the row-folded one (``conv2d``'s
``_FOLD_ROWS``: one GEMM over half the columns and two shifted adds), in CPU time of the process
(``process_time``), interleaved rounds, ratio per round.

``--layers`` times each pass of the CNN on SB3's ``SimpleMultiObsEnv`` image (1x64x64, 256
features; issue 28's Dict-observation PPO) at batch 64 (an update) and 1 (a rollout step) in CPU
time: rlgrad (C column copies, conv+ReLU in one pass), its reference (``_C_COLUMNS`` off),
PyTorch's (oneDNN) and the GEMM of the same shape alone, with the sums scaled to the PPO run's
128 updates and 2048 steps: how far the convolutions are from this BLAS's floor.

``--input-grad`` times the input gradients of conv2 (4x4 stride 2) and conv3 (3x3 stride 1) at
batch 32, and the whole forward + backward at batch 32, on col2im (one GEMM, then one strided add
per kernel offset) and on ``conv2d``'s other paths (``_INPUT_GRAD_PATHS``: sub-pixel for stride 2,
a GEMM per kernel offset for stride 1), the same way.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads (the comparison is per core)
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad.nn import functional as F  # noqa: E402
from rlgrad.nn import winograd  # noqa: E402
from rlgrad.rl.cnn import NatureCNN  # noqa: E402


def _cases(model: NatureCNN, rng: np.random.Generator) -> dict[str, dict[str, Callable[[], Any]]]:
    """case -> {implementation: a call returning what is compared}."""
    x1 = rng.integers(0, 256, (1, 4, 84, 84), dtype=np.uint8)
    x32 = rng.integers(0, 256, (32, 4, 84, 84), dtype=np.uint8)
    g32 = rng.standard_normal((32, model.features_dim)).astype(np.float32)
    params = list(model.parameters())

    def act() -> Any:
        with rlgrad.no_grad():
            return model(x1)._value

    def target() -> Any:
        with rlgrad.no_grad():
            return model(x32)._value

    def update() -> Any:
        model.zero_grad()
        y = model(x32)
        y.backward(g32)
        return y._value, params[0].grad._value, params[6].grad._value

    cases = {"forward, batch 1 (act)": {"rlgrad": act},
             "forward, batch 32, no graph (target)": {"rlgrad": target},
             "forward + backward, batch 32 (update)": {"rlgrad": update}}
    torch = _timing.torch_or_none()
    if torch is None:
        return cases
    nn = torch.nn
    tm = nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                       nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU())
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    t1, t32, tg = torch.from_numpy(x1), torch.from_numpy(x32), torch.from_numpy(g32)

    def t_act() -> Any:
        with torch.no_grad():
            return tm(t1.float() / 255.0).numpy()

    def t_target() -> Any:
        with torch.no_grad():
            return tm(t32.float() / 255.0).numpy()

    def t_update() -> Any:
        tm.zero_grad()
        y = tm(t32.float() / 255.0)
        y.backward(tg)
        return y.detach().numpy(), tm[0].weight.grad.numpy(), tm[7].weight.grad.numpy()

    for case, fn in zip(cases, (t_act, t_target, t_update)):
        cases[case]["torch"] = fn
    return cases


def _check_same(case: str, fns: dict[str, Callable[[], Any]]) -> None:
    if "torch" not in fns:
        return
    ours, theirs = fns["rlgrad"](), fns["torch"]()
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    for a, b in zip(ours, theirs):
        # relative error of the whole array: a ReLU whose float32 input is within rounding of 0
        # may switch on one side only and move a few gradient entries by 1e-3 of their scale
        err = np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30)
        if not err < 1e-4:
            raise AssertionError(f"bench/cnn.py: rlgrad and PyTorch disagree on {case} "
                                 f"(relative error {err:.1e})")


def run(repeats: int = 9, min_time: float = 1.0) -> list[dict[str, Any]]:
    """One row per case: median microseconds per call and the median per-round ratio."""
    rlgrad.random.seed(0)  # the same weights every run
    model = NatureCNN()
    rows = []
    for case, fns in _cases(model, np.random.default_rng(0)).items():
        _check_same(case, fns)
        times = _timing.interleaved(fns, repeats, min_time / repeats)
        row = {"case": case, "rlgrad_us": float(np.median(times["rlgrad"])) * 1e6,
               "torch_us": None, "rlgrad/torch": None}
        if "torch" in times:
            row["torch_us"] = float(np.median(times["torch"])) * 1e6
            row["rlgrad/torch"] = float(np.median(times["rlgrad"] / times["torch"]))
        rows.append(row)
    return rows


def _flag_rows(cases: dict[str, Callable[[], Any]], flag: str, repeats: int,
               calls: int) -> list[tuple[str, float, float, float]]:
    """(case, ms with ``F.<flag>`` off, ms on, median per-round on / off) in CPU time per call,
    after checking that both settings give the same numbers."""
    saved, rows = getattr(F, flag), []
    try:
        for case, fn in cases.items():
            outs = []
            for on in (False, True):
                setattr(F, flag, on)
                out = fn()
                outs.append(out if isinstance(out, tuple) else (out,))
            for a, b in zip(*outs):
                if not np.allclose(b, a, rtol=1e-4, atol=1e-4 * float(np.abs(a).max())):
                    raise AssertionError(f"bench/cnn.py: {flag} on and off disagree on {case}")
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(repeats):
                for on in (False, True):
                    setattr(F, flag, on)
                    c = time.process_time()
                    for _ in range(calls):
                        fn()
                    times[on].append((time.process_time() - c) / calls)
            a, b = np.array(times[False]), np.array(times[True])
            rows.append((case, 1e3 * float(np.median(a)), 1e3 * float(np.median(b)),
                         float(np.median(b / a))))
    finally:
        setattr(F, flag, saved)
    return rows


def conv1_rows(repeats: int = 9, calls: int = 20) -> list[tuple[str, float, float, float]]:
    """(case, im2col ms, folded ms, median per-round folded / im2col) in CPU time per call."""
    rng = np.random.default_rng(0)
    x = F._images(rng.integers(0, 256, (32, 4, 84, 84), dtype=np.uint8), np.dtype(np.float32), 255.0)
    w = (rng.standard_normal((32, 4, 8, 8)) * 0.05).astype(np.float32)
    g = np.ascontiguousarray(rng.standard_normal((32, 20, 20, 32), dtype=np.float32)).transpose(
        0, 3, 1, 2)  # a gradient as the next layer gives it: NHWC memory
    cases = {"conv1 forward, batch 32": lambda: F._conv2d_fwd(x, w, None, 4),
             "conv1 weight gradient, batch 32": lambda: F._conv2d_weight_grad_fwd(x, g, 4, 0, w.shape)}
    return _flag_rows(cases, "_FOLD_ROWS", repeats, calls)


def input_grad_rows(repeats: int = 9, calls: int = 20) -> list[tuple[str, float, float, float]]:
    """(case, col2im ms, other paths ms, median per-round ratio) in CPU time per call."""
    rng = np.random.default_rng(0)
    cases: dict[str, Callable[[], Any]] = {}
    for name, (xs, o, k, st) in {"conv2 (4x4/2)": ((32, 32, 20, 20), 64, 4, 2),
                                 "conv3 (3x3/1)": ((32, 64, 9, 9), 64, 3, 1)}.items():
        w = (rng.standard_normal((o, xs[1], k, k)) * 0.05).astype(np.float32)
        oh = (xs[2] - k) // st + 1
        g = np.ascontiguousarray(rng.standard_normal((32, oh, oh, o), dtype=np.float32)).transpose(
            0, 3, 1, 2)
        cases[f"{name} input gradient, batch 32"] = (
            lambda g=g, w=w, st=st, xs=xs: F._conv2d_input_grad_fwd(g, w, st, 0, xs))
    rlgrad.random.seed(0)
    model = NatureCNN()
    cases["forward + backward, batch 32 (update)"] = _cases(model, rng)[
        "forward + backward, batch 32 (update)"]["rlgrad"]
    saved, F._C_COLUMNS = F._C_COLUMNS, False  # (the other paths are taken with NumPy's col2im)
    try:
        return _flag_rows(cases, "_INPUT_GRAD_PATHS", repeats, calls)
    finally:
        F._C_COLUMNS = saved


# SB3's SimpleMultiObsEnv image (1x64x64) through the Nature CNN: (name, input C, H, out, k, s)
_MULTI_LAYERS = (("conv1 8x8/4 1->32", 1, 64, 32, 8, 4), ("conv2 4x4/2 32->64", 32, 15, 64, 4, 2),
                 ("conv3 3x3/1 64->64", 64, 6, 64, 3, 1))


def _layer_fns(n: int, c: int, h: int, o: int, k: int, s: int,
               torch: Any) -> dict[str, dict[str, Callable[[], Any]]]:
    """pass -> {implementation: call} for one conv layer at batch ``n`` (float32): rlgrad with
    its fast paths and with ``_C_COLUMNS`` and ``WINOGRAD`` off (the im2col paths), torch's (oneDNN)
    forward and its backward for the one gradient, and the GEMM of im2col's shape alone (that
    path's floor; Winograd's GEMMs do 0.44x its multiplies)."""
    rng = np.random.default_rng(0)
    x = np.ascontiguousarray(rng.random((n, h, h, c), dtype=np.float32)).transpose(0, 3, 1, 2)
    w = (rng.standard_normal((o, c, k, k)) * 0.05).astype(np.float32)
    b = np.zeros(o, np.float32)
    oh = (h - k) // s + 1
    g = np.ascontiguousarray(rng.standard_normal((n, oh, oh, o), dtype=np.float32)).transpose(
        0, 3, 1, 2)
    rows, kk = n * oh * oh, c * k * k
    a, bm, gm = (rng.random(shape, dtype=np.float32) for shape in ((rows, kk), (kk, o), (rows, o)))

    def switched(on: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            F._C_COLUMNS = winograd.WINOGRAD = on
            return fn()
        return call

    ours = {"fwd + ReLU": lambda: F._conv2d_relu(x, w, b, s),
            "input grad": lambda: F._conv2d_input_grad_fwd(g, w, s, 0, x.shape),
            "weight grad": lambda: F._conv2d_weight_grad_fwd(x, g, s, 0, w.shape)}
    gemm = {"fwd + ReLU": lambda: a @ bm, "input grad": lambda: gm @ bm.T,
            "weight grad": lambda: gm.T @ a}
    out = {p: {"rlgrad": switched(True, fn), "reference": switched(False, fn), "GEMM": gemm[p]}
           for p, fn in ours.items()}
    if torch is not None:
        tx, tw, tb, tg = (torch.from_numpy(np.ascontiguousarray(v)) for v in (x, w, b, g))
        back = torch.ops.aten.convolution_backward
        args = ([o], [s, s], [0, 0], [1, 1], False, [0, 0], 1)
        out["fwd + ReLU"]["PyTorch"] = lambda: torch.relu(torch.conv2d(tx, tw, tb, s))
        out["input grad"]["PyTorch"] = lambda: back(tg, tx, tw, *args, [True, False, False])
        out["weight grad"]["PyTorch"] = lambda: back(tg, tx, tw, *args, [False, True, True])
    return out


def layer_rows(repeats: int = 7) -> list[dict[str, Any]]:
    """CPU microseconds per call of every conv pass of the SimpleMultiObsEnv CNN, at the update's
    batch 64 and the rollout's batch 1 (forward only; the first layer's input gradient is never
    taken: its input is data)."""
    torch = _timing.torch_or_none()
    rows = []
    for n in (64, 1):
        for name, c, h, o, k, s in _MULTI_LAYERS:
            for pas, fns in _layer_fns(n, c, h, o, k, s, torch).items():
                if (pas == "input grad" and c == 1) or (n == 1 and pas != "fwd + ReLU"):
                    continue  # (conv1's input is data; a rollout step only runs forward)
                ours, ref = fns["rlgrad"](), fns["reference"]()
                err = np.linalg.norm(ours - ref) / max(float(np.linalg.norm(ref)), 1e-30)
                if not err < 1e-5:
                    raise AssertionError(f"bench/cnn.py: {name} {pas}: the fast paths and the "
                                         f"reference disagree (relative error {err:.1e})")
                t = _timing.interleaved(fns, repeats, 0.05, clock=time.process_time)
                oh = (h - k) // s + 1
                rows.append({"layer": f"{name}, batch {n}", "pass": pas,
                             "gflop": 2e-9 * n * oh * oh * c * k * k * o,
                             **{impl: float(np.median(v)) * 1e6 for impl, v in t.items()}})
    F._C_COLUMNS = winograd.WINOGRAD = True
    return rows


def layer_table(rows: list[dict[str, Any]]) -> str:
    """The per-pass rows, then the sums per update (batch 64) and per rollout step (batch 1)
    beside the GEMMs alone: the convolutions' floor on this machine's BLAS."""
    impls = [k for k in ("rlgrad", "reference", "PyTorch", "GEMM") if k in rows[0]]
    lines = ["| layer | pass | " + " | ".join(f"{i} (µs)" for i in impls) + " | GEMM GFLOP/s |",
             "|---|---|" + "---:|" * (len(impls) + 1)]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['pass']} | " + " | ".join(f"{r[i]:,.0f}" for i in impls)
                     + f" | {r['gflop'] / r['GEMM'] * 1e6:.0f} |")
    for n, times in (("64", 128), ("1", 2048)):
        sub = [r for r in rows if r["layer"].endswith(f"batch {n}")]
        sums = {i: sum(r[i] for r in sub) for i in impls}
        lines.append(f"| all, batch {n} | sum (x{times} in the PPO run: s) | " + " | ".join(
            f"{sums[i]:,.0f} ({sums[i] * times * 1e-6:.2f} s)" for i in impls) + " | |")
    return "\n".join(lines)


def conv1_table(rows: list[tuple[str, float, float, float]],
                head: str = "| Nature CNN conv1, CPU time | im2col + GEMM | rows folded | "
                            "folded / im2col |") -> str:
    lines = [head, "|---|---:|---:|---:|"]
    lines += [f"| {c} | {a:.2f} ms | {b:.2f} ms | {r:.2f}x |" for c, a, b, r in rows]
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    fmt = lambda v, unit="": "-" if v is None else (f"{v:,.0f}{unit}" if unit else f"{v:.2f}x")
    lines = ["| NatureCNN, uint8 4x84x84 | rlgrad | PyTorch (1 thread) | rlgrad / PyTorch |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {fmt(r['rlgrad_us'], ' µs')} | {fmt(r['torch_us'], ' µs')} | "
                     f"{fmt(r['rlgrad/torch'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=9, help="interleaved rounds (default 9)")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 0.3 s")
    ap.add_argument("--conv1", action="store_true", help="conv1's two paths only (CPU time)")
    ap.add_argument("--input-grad", action="store_true",
                    help="conv2/conv3 input gradients: col2im vs the other paths (CPU time)")
    ap.add_argument("--layers", action="store_true",
                    help="SimpleMultiObsEnv's CNN per layer and pass: rlgrad, its reference, "
                         "PyTorch, the GEMM alone (CPU time)")
    args = ap.parse_args()
    repeats, min_time = (3, 0.3) if args.quick else (args.repeats, 1.0)
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread")
    if args.layers:
        print(layer_table(layer_rows(min(repeats, 7))))
        return
    if args.conv1:
        print(conv1_table(conv1_rows(repeats)))
        return
    if args.input_grad:
        print(conv1_table(input_grad_rows(repeats), "| Nature CNN, CPU time | col2im | sub-pixel "
                          "(stride 2) / per-offset GEMMs (stride 1) | new / col2im |"))
        return
    print(table(run(repeats, min_time)))


if __name__ == "__main__":
    main()
