"""Whether a change kept the bits of DQN-family training, on every way targets are computed.

    .venv/bin/python bench/dqn_hashes.py [--algos dqn,qrdqn] [--steps 5000]

Each algorithm's CartPole-v1 preset (seed 0) trains ``--steps`` steps in four settings that
between them take every target path of ``DQN.train``: the preset itself (stacked targets in
1,024-row chunks), few small minibatches per call (stacked targets in one pass), one gradient step
per call (targets inside the compiled step) and Double DQN (inside the step: they read the online
network). It prints one ``state_hash`` per run: two checkouts train alike iff the lines match.
Run it also with ``RLGRAD_KERNELS=0 RLGRAD_FUSED=0`` (the pure-Python paths).
"""

from __future__ import annotations

import argparse

import _timing  # noqa: F401  (one BLAS thread, this checkout's rlgrad)
from _timing import state_hash

from rlgrad.rl import make_from_preset

SETTINGS: dict[str, dict] = {
    "preset": {},
    "small-stack": {"train_freq": 16, "gradient_steps": 4, "batch_size": 32},
    "one-step": {"train_freq": 4, "gradient_steps": 1},
    "double-q": {"train_freq": 16, "gradient_steps": 8, "double_q": True},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="dqn,qrdqn")
    ap.add_argument("--steps", type=int, default=5000)
    args = ap.parse_args()
    for algo in args.algos.split(","):
        for name, overrides in SETTINGS.items():
            model, _ = make_from_preset(algo, "CartPole-v1", seed=0, **overrides)
            model.learn(args.steps)
            print(f"{algo:6s} {name:12s} hash {state_hash(model)}", flush=True)


if __name__ == "__main__":
    main()
