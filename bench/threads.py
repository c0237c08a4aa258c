"""One BLAS thread against the default on the matrix products of RL networks (the sizes of a
CleanRL PPO / DQN / SAC update), timed in interleaved rounds in one process: the ratio of
medians is what docs/dropin.md quotes for ``rlgrad.set_num_threads``.

    python -m bench.threads [--rounds 15]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlgrad.threads import get_num_threads, set_num_threads

SIZES = [  # (rows, inner, cols): batch x in-features @ in x out
    ("PPO rollout 4x4@4x64", 4, 4, 64), ("PPO minibatch 128x64@64x64", 128, 64, 64),
    ("PPO grad W 64x128@128x64", 64, 128, 64), ("DQN 128x120@120x84", 128, 120, 84),
    ("SAC 256x256@256x256", 256, 256, 256), ("big 1024x512@512x512", 1024, 512, 512),
]


def _time(a: np.ndarray, b: np.ndarray, reps: int) -> float:
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    t = time.perf_counter()
    for _ in range(reps):
        np.matmul(a, b, out=out)
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    default = get_num_threads()
    rng = np.random.default_rng(0)
    print(f"default BLAS threads: {default}")
    print(f"| product | 1 thread (us) | {default} threads (us) | default / 1 thread |")
    print("|---|---|---|---|")
    for name, m, k, n in SIZES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        reps = max(10, int(2e7 / (m * k * n)))
        one, many = [], []
        for _ in range(args.rounds):
            set_num_threads(1)
            one.append(_time(a, b, reps))
            set_num_threads(default)
            many.append(_time(a, b, reps))
        o, d = np.median(one), np.median(many)
        print(f"| {name} | {o * 1e6:.1f} | {d * 1e6:.1f} | {d / o:.2f} |")
    set_num_threads(default)


if __name__ == "__main__":
    main()
