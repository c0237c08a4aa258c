"""Where an off-policy Pendulum run's CPU goes, and whether a change kept its bits.

    .venv/bin/python bench/offpolicy_profile.py [--algos sac,td3,ddpg] [--steps N] [--hash]
        [--profile] [--parts] [--repeat 1]

Each run is the zoo's Pendulum-v1 preset (``make_from_preset``, seed 0) trained for ``--steps``
steps past its ``learning_starts`` (default 1,000: as ``bench/offpolicy_sb3.py --quick``), one
BLAS thread; it prints the CPU seconds of ``learn`` (``time.process_time``). ``--hash`` also
prints a hash of every network's parameters and every optimizer's state after the run (two
commits train alike iff their hashes match; run with ``RLGRAD_KERNELS=0`` and ``RLGRAD_FUSED=0``
to check the pure-Python paths give the same bits); ``--profile`` a cProfile of the run sorted by
own time; ``--parts`` the CPU time of the update's parts (timers around them add a little).
"""

from __future__ import annotations

import argparse

import _timing  # noqa: F401  (one BLAS thread, this checkout's rlgrad)
from _timing import add_cpu_time, learn_cpu, state_hash

from rlgrad.rl import make_from_preset

ENV = "Pendulum-v1"


def _time_parts(model) -> dict:
    """Timers around the parts of ``learn`` (nested parts are subtracted when printed)."""
    import rlgrad.rl.off_policy as off
    from rlgrad import optim

    acc = dict.fromkeys(("collect", "env", "act", "train", "sample", "step", "opt", "polyak"), 0.0)
    add_cpu_time(model, "collect_rollouts", acc, "collect")
    add_cpu_time(model, "train", acc, "train")
    add_cpu_time(model, "sample", acc, "sample")
    add_cpu_time(model, "_explore", acc, "act")
    add_cpu_time(off, "step_with_grads", acc, "opt")
    add_cpu_time(optim, "polyak_update", acc, "polyak")
    compiled = model.compiled_step

    def compiled_step(name, loss_fn, optimizers):
        step, params = compiled(name, loss_fn, optimizers)
        holder = type("H", (), {})()
        holder.step = step
        add_cpu_time(holder, "step", acc, "step")
        return holder.step, params
    model.compiled_step = compiled_step
    return acc


def _print_parts(acc: dict, cpu: float) -> None:
    rows = [("acting (_explore)", acc["act"]),
            ("collection glue (env, buffer add, ...)", acc["collect"] - acc["act"]),
            ("replay sample", acc["sample"]),
            ("compiled gradient steps", acc["step"]),
            ("optimizers (step_with_grads)", acc["opt"]),
            ("polyak", acc["polyak"]),
            ("update glue", acc["train"] - acc["sample"] - acc["step"] - acc["opt"]
             - acc["polyak"])]
    rest = cpu - sum(v for _, v in rows)
    for name, v in [*rows, ("other", rest)]:
        print(f"    {name:42s} {v:7.3f} s  {100 * v / cpu:5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="sac,td3,ddpg")
    ap.add_argument("--steps", type=int, default=1000, help="steps past learning_starts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hash", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--parts", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    for algo in args.algos.split(","):
        for _ in range(args.repeat):
            model, _ = make_from_preset(algo.strip(), ENV, seed=args.seed)
            budget = model.learning_starts + args.steps
            parts = _time_parts(model) if args.parts else None
            cpu, stats = learn_cpu(model, budget, args.profile)
            line = f"{algo:5s} steps {model.num_timesteps:6d}  cpu {cpu:7.3f} s"
            if args.hash:
                line += f"  hash {state_hash(model)}"
            print(line, flush=True)
            if stats is not None:
                stats.print_stats(args.top)
            if parts is not None:
                _print_parts(parts, cpu)


if __name__ == "__main__":
    main()
