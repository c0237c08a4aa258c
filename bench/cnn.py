"""Benchmark: the Nature DQN CNN (rlgrad.rl.cnn.NatureCNN) against the same network in PyTorch on
one thread, in the same run: its forward at batch 1 (choosing one action per env step), its
forward at batch 32 without a graph (the target network's values) and forward + backward at batch
32 (one DQN update). Inputs are uint8 4x84x84 frames, divided by 255 inside both networks.

Both start from the same weights and are checked to compute the same outputs and weight gradients
before they are timed; ratios are medians of per-round ratios (bench/_timing.py). Run
``python bench/cnn.py [--repeats 9] [--quick]``; other scripts can call ``run()`` for the rows.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads (the comparison is per core)
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
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
    args = ap.parse_args()
    repeats, min_time = (3, 0.3) if args.quick else (args.repeats, 1.0)
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread")
    print(table(run(repeats, min_time)))


if __name__ == "__main__":
    main()
