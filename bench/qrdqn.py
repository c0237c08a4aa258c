"""DQN variants' learning check: QR-DQN (rl-baselines3-zoo's CartPole-v1 preset and budget, 50k
steps) or C51 (CleanRL's c51.py values, 500k steps).

    .venv/bin/python bench/qrdqn.py [--algo qrdqn|c51] [--seeds 0,1,2]

Trains the algorithm with its ``rlgrad/presets/<algo>.yaml`` CartPole-v1 entry and evaluates 20
deterministic episodes (``rlgrad.rl.evaluate``), as ``bench/rl.py`` does for PPO, A2C and DQN.
Prints a markdown table; exits with status 1 if a seed's mean return is below the goal (QR-DQN
500, CartPole-v1's maximum; C51 475, CartPole-v1's "solved"). Long runs, so they live here rather
than in the tests.
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rl import run_rlgrad  # noqa: E402  (bench/rl.py: the same training and evaluation)

GOALS = {"qrdqn": 500.0, "c51": 475.0}  # the mean return a seed must reach


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", choices=sorted(GOALS), default="qrdqn")
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    print("| algo | seed | steps | learn (s) | return |\n|---|---|---|---|---|")
    ok = True
    for seed in (int(s) for s in args.seeds.split(",")):
        r = run_rlgrad(args.algo, seed, "native")  # rlgrad's own env stepping, as presets run
        ok &= r["mean"] >= GOALS[args.algo]
        print(f"| {args.algo} | {seed} | {r['steps']} | {r['time']:.1f} | {r['mean']:.1f} ± "
              f"{r['std']:.1f} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
