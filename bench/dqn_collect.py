"""Where the DQN CartPole preset's CPU time goes: collection (acting, stepping, replay writes,
bookkeeping) against ``train``, and collection alone.

    .venv/bin/python bench/dqn_collect.py [--algo dqn] [--steps 0] [--repeat 3]

Each repetition runs, in this process, the preset's ``learn`` with ``train`` timed (CPU seconds,
``time.process_time``; the rest of ``learn`` is collection) and then the same number of steps with
``train`` replaced by a no-op (the initial network acts: the same operations per step), and prints
a markdown table of the medians with the parameter hash of the full run (bit-identity checks
before/after a change: run it in both checkouts, alternating). ``--steps 0``: the preset's budget.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _timing  # noqa: F401  (first: one BLAS thread, this checkout's rlgrad)
from _timing import state_hash  # noqa: E402

from rlgrad.rl import make_from_preset  # noqa: E402


def run(algo: str, steps: int, train: bool) -> tuple[float, float, str, int]:
    model, budget = make_from_preset(algo, "CartPole-v1", seed=0, vectorization_mode="sync")
    budget = steps or budget
    spent = [0.0]
    inner = model.train

    def timed(*args):
        c = time.process_time()
        if train:
            inner(*args)
        spent[0] += time.process_time() - c

    model.train = timed
    c = time.process_time()
    model.learn(budget)
    return time.process_time() - c, spent[0], state_hash(model, model.replay_buffer.observations), budget


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algo", default="dqn")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"learn": [], "train": [], "collection": [], "collection alone": []}
    for _ in range(args.repeat):
        total, train, digest, budget = run(args.algo, args.steps, True)
        alone, _, _, _ = run(args.algo, args.steps, False)
        rows["learn"].append(total)
        rows["train"].append(train)
        rows["collection"].append(total - train)
        rows["collection alone"].append(alone)
    print(f"{args.algo} CartPole-v1, {budget} steps, {args.repeat} repetitions, hash {digest}\n")
    print("| part | CPU (s), median | per env step (us) | runs |\n|---|---:|---:|---|")
    for name, xs in rows.items():
        med = statistics.median(xs)
        print(f"| {name} | {med:.2f} | {med / budget * 1e6:.1f} | "
              f"{' / '.join(f'{x:.2f}' for x in xs)} |")


if __name__ == "__main__":
    main()
