"""A short Atari learning curve in raw game score: one algorithm's zoo ``atari`` preset on one game.

    .venv/bin/python bench/atari_curve.py [--env BreakoutNoFrameskip-v4] [--algo a2c] [--seeds 0]
        [--steps 200000] [--json atari.json] [--png docs/atari_curve.png]
    .venv/bin/python bench/atari_curve.py --plot atari.json --png docs/atari_curve.png

The presets' budgets are 10M steps (40M frames); a CPU run here is the first stretch of that
curve. Every 10,000 steps it records the mean raw score of the last 10 whole games (all lives,
unclipped: ``RecordGameStatistics``), at the end 10 evaluation games (deterministic, whole games),
and prints a markdown table next to a uniformly random policy's score (10 games). A benchmark,
not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import _timing  # noqa: F401 - first: pins BLAS to one thread before NumPy loads
import numpy as np  # noqa: E402
from minatar_curves import plot, random_return, train  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="BreakoutNoFrameskip-v4")
    ap.add_argument("--algo", default="a2c")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--json", default=None, help="save the runs here (after every run)")
    ap.add_argument("--png", default=None)
    ap.add_argument("--plot", nargs="+", default=None, help="JSON files of earlier runs")
    args = ap.parse_args()
    if args.plot:
        runs = [r for f in args.plot for r in json.loads(Path(f).read_text())]
    else:
        runs = []
        for seed in args.seeds.split(","):
            def save(extra: list) -> None:
                if args.json:  # after every run and every point: a run stopped early stays
                    Path(args.json).write_text(json.dumps(runs + extra))

            runs.append(train(args.algo, args.env, int(seed), args.steps, every=10_000, last=10,
                              eval_episodes=10, partial=lambda run: save([run])))
            save([])
    rand = {r["game"]: random_return(r["env_id"], episodes=10) for r in runs}
    print("| game | algorithm | steps | seed | last 10 training games (raw score) | "
          "10 evaluation games | uniform random policy (10 games) | wall time |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['env_id']} | {r['algo'].upper()} | {r['steps']:,} | {r['seed']} | "
              f"{r['final']:.2f} | {r['eval']:.2f} +/- {r['eval_std']:.2f} | "
              f"{rand[r['game']][0]:.2f} +/- {rand[r['game']][1]:.2f} | {r['wall']:.0f} s |")
    if args.png:
        plot(runs, Path(args.png), rand, ylabel="raw game score, last 10 games")
        print(f"curves: {args.png}", file=sys.stderr)
    print(f"(first recorded mean {np.asarray(runs[0]['curve'])[0, 1]:.2f})" if runs[0]["curve"]
          else "(no game finished)")


if __name__ == "__main__":
    main()
