"""QR-DQN learning check: rl-baselines3-zoo's CartPole-v1 preset and budget (50k steps).

    .venv/bin/python bench/qrdqn.py [--seeds 0,1,2]

Trains ``rlgrad.rl.QRDQN`` with ``rlgrad/presets/qrdqn.yaml`` and evaluates 20 deterministic
episodes (``rlgrad.rl.evaluate``), as ``bench/rl.py`` does for PPO, A2C and DQN. Prints a markdown
table; exits with status 1 if a seed's mean return is below 500 (CartPole-v1's maximum). A long
run, so it lives here rather than in the tests.
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rl import run_rlgrad  # noqa: E402  (bench/rl.py: the same training and evaluation)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    print("| algo | seed | steps | learn (s) | return |\n|---|---|---|---|---|")
    ok = True
    for seed in (int(s) for s in args.seeds.split(",")):
        r = run_rlgrad("qrdqn", seed, "native")  # rlgrad's own env stepping, as the preset runs
        ok &= r["mean"] >= 500.0
        print(f"| QRDQN | {seed} | {r['steps']} | {r['time']:.1f} | {r['mean']:.1f} ± "
              f"{r['std']:.1f} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
