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
import cProfile
import hashlib
import pstats
import time

import _timing  # noqa: F401  (one BLAS thread, this checkout's rlgrad)
import numpy as np

from rlgrad.rl import make_from_preset

ENV = "Pendulum-v1"


def state_hash(model) -> str:
    """sha256 of every module's parameters and buffers and every optimizer's tensors."""
    h = hashlib.sha256()

    def feed(tree) -> None:
        if isinstance(tree, dict):
            for k in sorted(tree, key=str):
                feed(tree[k])
        elif isinstance(tree, list | tuple):
            for v in tree:
                feed(v)
        elif isinstance(tree, np.ndarray) or hasattr(tree, "_value"):
            h.update(np.ascontiguousarray(getattr(tree, "_value", tree)).tobytes())

    for _, m in sorted(model._modules().items()):
        feed(m.state_dict())
    for _, o in sorted(model._optimizers().items()):
        feed(o.state_dict()["state"])
    if getattr(model, "auto_ent", False):
        feed(model.log_ent_coef._value)
    return h.hexdigest()[:16]


def _timed(obj, name: str, acc: dict, key: str) -> None:
    """Wrap ``obj.name`` to add its CPU time to ``acc[key]``."""
    fn = getattr(obj, name)
    clock = time.process_time

    def wrapper(*a, **k):
        t = clock()
        try:
            return fn(*a, **k)
        finally:
            acc[key] += clock() - t
    setattr(obj, name, wrapper)


def _time_parts(model) -> dict:
    """Timers around the parts of ``learn`` (nested parts are subtracted when printed)."""
    import rlgrad.rl.off_policy as off
    from rlgrad import optim

    acc = dict.fromkeys(("collect", "env", "act", "train", "sample", "step", "opt", "polyak"), 0.0)
    _timed(model, "collect_rollouts", acc, "collect")
    _timed(model, "train", acc, "train")
    _timed(model, "sample", acc, "sample")
    _timed(model, "_explore", acc, "act")
    _timed(off, "step_with_grads", acc, "opt")
    _timed(optim, "polyak_update", acc, "polyak")
    compiled = model.compiled_step

    def compiled_step(name, loss_fn, optimizers):
        step, params = compiled(name, loss_fn, optimizers)
        holder = type("H", (), {})()
        holder.step = step
        _timed(holder, "step", acc, "step")
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
            prof = cProfile.Profile() if args.profile else None
            c = time.process_time()
            if prof is not None:
                prof.enable()
            model.learn(budget)
            if prof is not None:
                prof.disable()
            cpu = time.process_time() - c
            line = f"{algo:5s} steps {model.num_timesteps:6d}  cpu {cpu:7.3f} s"
            if args.hash:
                line += f"  hash {state_hash(model)}"
            print(line, flush=True)
            if prof is not None:
                pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
            if parts is not None:
                _print_parts(parts, cpu)


if __name__ == "__main__":
    main()
