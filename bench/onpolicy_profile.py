"""Where an on-policy CartPole run's CPU goes, and whether a change kept its bits.

    .venv/bin/python bench/onpolicy_profile.py [--runs ppo_pjx,ppo,a2c,reinforce] [--steps N]
        [--hash] [--profile] [--repeat 1]

Runs: ``ppo_pjx`` PPO with PureJaxRL's configuration (``bench/purejaxrl.py``'s keyword
arguments), ``ppo`` / ``a2c`` the zoo CartPole presets on ``SyncVectorEnv`` (as ``bench/rl.py
--stepping same``), ``reinforce`` the REINFORCE preset (as ``bench/reinforce_torch.py``). Each
prints the CPU seconds of ``learn`` (``time.process_time``, one BLAS thread); ``--hash`` also a
hash of the parameters and optimizer state after the run (two commits train alike iff their
hashes match); ``--profile`` a cProfile of the run, sorted by own time. Use ``RLGRAD_ENGINE=0``
and ``RLGRAD_FUSED=0`` to run without the C modules.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _timing  # noqa: E402, F401  (one BLAS thread; this checkout's rlgrad first)
import numpy as np  # noqa: E402
from _timing import add_cpu_time, learn_cpu, state_hash  # noqa: E402
from purejaxrl import CONFIG, RLGRAD_KWARGS  # noqa: E402

from rlgrad.rl import PPO, make_from_preset  # noqa: E402

DEFAULT_STEPS = {"ppo_pjx": 100_000, "ppo": 100_000, "a2c": 100_000, "reinforce": 200_000}


def build(run: str, seed: int) -> tuple[object, int]:
    if run == "ppo_pjx":
        return PPO(CONFIG["ENV_NAME"], seed=seed, **RLGRAD_KWARGS), CONFIG["TOTAL_TIMESTEPS"]
    mode = None if run == "reinforce" else "sync"
    return make_from_preset(run, "CartPole-v1", seed=seed, vectorization_mode=mode)


def _time_parts(model) -> dict:
    """Timers around the parts of ``learn``: nested parts are subtracted when printed."""
    acc = dict.fromkeys(("env", "adapter", "act", "rollout", "step", "apply", "train"), 0.0)
    model.learn(1)  # builds the adapter and the first compiled step outside the timers
    add_cpu_time(model._adapter.venv, "step", acc, "env")
    add_cpu_time(model._adapter, "step", acc, "adapter")
    add_cpu_time(model.policy, "act", acc, "act")
    add_cpu_time(model, "collect_rollouts", acc, "rollout")
    add_cpu_time(model, "train", acc, "train")
    add_cpu_time(model, "_apply_grads", acc, "apply")
    get_step = model._loss_step

    def loss_step(compiled: bool):
        step = get_step(compiled)
        holder = type("H", (), {})()
        holder.step = step
        add_cpu_time(holder, "step", acc, "step")
        return holder.step
    model._loss_step = loss_step
    return acc


def _print_parts(acc: dict, cpu: float) -> None:
    rows = [("Gymnasium env step", acc["env"]),
            ("step adapter (finite check, statistics)", acc["adapter"] - acc["env"]),
            ("acting", acc["act"]),
            ("rollout glue (buffer, GAE, ...)", acc["rollout"] - acc["adapter"] - acc["act"]),
            ("compiled gradient steps", acc["step"]),
            ("clip + optimizer", acc["apply"]),
            ("update glue (minibatches, logging)", acc["train"] - acc["step"] - acc["apply"])]
    rest = cpu - sum(v for _, v in rows)
    for name, v in [*rows, ("other", rest)]:
        print(f"    {name:42s} {v:7.3f} s  {100 * v / cpu:5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="ppo_pjx,ppo,a2c,reinforce")
    ap.add_argument("--steps", type=int, default=None, help="steps of each run (default: per run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hash", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--parts", action="store_true",
                    help="CPU seconds of each part (timers around the parts add a little)")
    args = ap.parse_args()
    for run in args.runs.split(","):
        for _ in range(args.repeat):
            model, _budget = build(run, args.seed)
            steps = args.steps or DEFAULT_STEPS[run]
            parts = _time_parts(model) if args.parts else None
            cpu, stats = learn_cpu(model, steps, args.profile)
            ret = list(model._ep_stats.return_queue)[-20:]
            line = (f"{run:10s} steps {model.num_timesteps:7d}  cpu {cpu:7.3f} s  "
                    f"return(last 20) {np.mean(ret) if ret else float('nan'):.1f}")
            if args.hash:
                line += f"  hash {state_hash(model)}"
            print(line, flush=True)
            if stats is not None:
                stats.print_stats(args.top)
            if parts is not None:
                _print_parts(parts, cpu)


if __name__ == "__main__":
    main()
