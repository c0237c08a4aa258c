"""Type promotion's cost on the Tensor's small ops: each operator or method (PyTorch's promotion,
rlgrad/promotion.py) against the bare primitive call it was before (NumPy's), in the same process,
interleaved repeats, minimum per call. Tiny tensors, so the dispatch is what is timed.

    python bench/promotion.py [--repeats 9] [--number 20000]
"""

from __future__ import annotations

import argparse
import timeit

import _timing  # noqa: F401 - first: pins BLAS to one thread before NumPy loads
import numpy as np

import rlgrad
from rlgrad import ops

PAIRS = [
    ("a + b (grad)", "a + b", "ops.add(a, b)"),
    ("s * 0.5 (grad)", "s * 0.5", "ops.multiply(s, 0.5)"),
    ("0.5 - s (grad)", "0.5 - s", "ops.subtract(0.5, s)"),
    ("c * c (no grad)", "c * c", "ops.multiply(c, c)"),
    ("s / s", "s / s", "ops.divide(s, s)"),
    ("s < 0.0", "s < 0.0", "ops.less(s, 0.0)"),
    ("s.exp()", "s.exp()", "ops.exp(s)"),
    ("s.sum()", "s.sum()", "ops.sum(s)"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    env = {"ops": ops,
           "a": rlgrad.tensor(np.ones((32, 64), np.float32), requires_grad=True),
           "b": rlgrad.tensor(np.ones((32, 64), np.float32)),
           "c": rlgrad.tensor(np.ones(4, np.float32)),
           "s": rlgrad.tensor(np.ones(4, np.float32), requires_grad=True)}
    print(f"{'op':16s} {'Tensor API (ns)':>16s} {'primitive (ns)':>15s} {'added (ns)':>11s}")
    for name, new, old in PAIRS:
        tn, to = [], []
        for _ in range(args.repeats):
            tn.append(timeit.timeit(new, globals=env, number=args.number) / args.number * 1e9)
            to.append(timeit.timeit(old, globals=env, number=args.number) / args.number * 1e9)
        print(f"{name:16s} {min(tn):16.0f} {min(to):15.0f} {min(tn) - min(to):11.0f}")


if __name__ == "__main__":
    main()
