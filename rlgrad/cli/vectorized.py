"""``rlgrad train ENV --algo ppo --seeds 0-7 --vectorize``: the seeds as one compiled program.

Every seed is a run of ``compile_loop=True`` (``rlgrad.rl.compiled_loop``), and the N runs are
one program whose arrays carry a leading seed axis, as PureJaxRL vmaps its training over seeds:
one process, no Ray. The program runs the whole budget at once, so each seed's run directory
(``--run-dir/seed-S``: config, one checkpoint at the end, metrics.csv with one row per update) is
written when it ends; ``rlgrad eval`` and ``rlgrad plot`` read them as ordinary runs.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any

from rlgrad.cli.errors import CLIError

__all__ = ["cmd_train_vectorized"]


def _metrics(model: Any, per_update: int) -> list[dict[str, Any]]:
    """One row per update: the mean return of the episodes that ended in the last 10 updates."""
    ret_sum, n_done = model.loop_returns
    rows = []
    for i in range(len(ret_sum)):
        lo = max(0, i - 9)
        n = int(n_done[lo:i + 1].sum())
        row: dict[str, Any] = {"time/total_timesteps": (i + 1) * per_update}
        if n:
            row["rollout/ep_rew_mean"] = float(ret_sum[lo:i + 1].sum() / n)
        rows.append(row)
    return rows


def cmd_train_vectorized(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    from rlgrad.cli.build import build, resolve
    from rlgrad.cli.run_dir import RunDir, plain, versions
    from rlgrad.cli.seeds import _summary, parse_seeds
    from rlgrad.cli.train import save_checkpoint
    from rlgrad.rl.compiled_loop import learn_compiled

    seeds = parse_seeds(args.seeds)
    if args.env_runners:
        raise CLIError("--vectorize runs the seeds in this process: leave out --env-runners")
    sets = [*args.sets, "compile_loop=true"]
    specs = [resolve(args.env_id, args.algo, s, args.preset, args.steps, args.n_envs, sets)
             for s in seeds]
    spec = specs[0]
    safe_env = spec.env_id.replace("/", "_").replace(":", "_")
    parent = Path(args.run_dir) if args.run_dir else Path("runs") / (
        f"{safe_env}__{spec.algo}__seeds{args.seeds}__vectorized__{time.strftime('%Y%m%d-%H%M%S')}")
    if parent.exists() and any(parent.iterdir()):
        raise CLIError(f"'{parent}' is not empty: choose another --run-dir for the seeds")
    models = [build(sp.cls, sp.env_id, sp.seed, sp.hyperparams) for sp in specs]
    print(f"{len(seeds)} seeds ({args.seeds}) as one compiled program, {spec.total_timesteps} "
          f"steps each; runs under {parent}", flush=True)
    t0 = time.perf_counter()
    learn_compiled(models, spec.total_timesteps)
    print(f"trained in {time.perf_counter() - t0:.1f} s (compilation included)", flush=True)
    per_update = models[0].num_timesteps // len(models[0].loop_returns[0])  # (DQN: train_freq)
    for sp, model in zip(specs, models):
        rd = RunDir(parent / f"seed-{sp.seed}")
        rd.create()
        cfg = {"env_id": sp.env_id, "algo": sp.algo, "seed": sp.seed,
               "total_timesteps": sp.total_timesteps, "preset": sp.preset,
               "overrides": sp.overrides, "hyperparams": model.get_hyperparams(),
               "versions": versions(), "vectorized_seeds": seeds,
               "command": shlex.join(["rlgrad", *(argv or [])]),
               "created": time.strftime("%Y-%m-%d %H:%M:%S")}
        rd.write_config(cfg)
        save_checkpoint(model, rd, plain(cfg))
        rd.write_metrics(_metrics(model, per_update))
    return _summary(parent, seeds, dict.fromkeys(seeds, 0))
