"""``rlgrad train ... --seeds 0-4``: one ordinary run per seed, in parallel on Ray, plotted together.

Each seed is a ``rlgrad train`` of its own (``SeedRun``, a Ray actor of one CPU, runs the same
command line with ``--seed S --run-dir PARENT/seed-S``), so every seed leaves a whole run
directory that ``rlgrad resume``, ``eval`` and ``plot`` take as any other. At the end the seeds'
curves are drawn in ``PARENT/learning_curves.png``: their mean with a band of plus or minus one
standard deviation, and each seed as a thin line (``rlgrad plot``'s grouping: same environment,
algorithm and hyperparameters).

Ctrl-C / SIGTERM: the signal is passed on to every seed's process, on this machine or, by a Ray
task pinned to its node, on another (each checkpoints and stops as a single run does); a second
signal kills them at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rlgrad.cli.errors import CLIError


def parse_seeds(text: str) -> list[int]:
    """``0-4`` -> [0, 1, 2, 3, 4]; ``0,3,7`` and ``0-2,9`` too; at least one seed, no repeats."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise CLIError(f"--seeds {text}: expected seeds like 0-4 or 0,1,5") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise CLIError(f"--seeds {text}: expected distinct non-negative seeds, like 0-4")
    return seeds


class SeedRun:
    """One seed's ``rlgrad train`` in a Ray worker process (made an actor by ``ray.remote``)."""

    def pid(self) -> tuple[str, int]:
        """(the Ray node this seed runs on, its process id)."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def run(self, kwargs: dict[str, Any]) -> int:
        """``rlgrad train`` of one seed; bad input is one line and its exit status, as there."""
        from rlgrad.cli.train import cmd_train

        try:
            return cmd_train(**kwargs)
        except CLIError as e:
            print(f"rlgrad train: error: {e.message}", file=sys.stderr)
            return e.status


def _seed_kwargs(args: argparse.Namespace, sets: list[str], seed: int, run_dir: Path
                 ) -> dict[str, Any]:
    """``cmd_train``'s arguments for one seed, from the parsed ``train`` arguments."""
    argv = ["train", args.env_id, "--algo", args.algo, "--seed", str(seed), "--run-dir",
            str(run_dir)] + [x for s in sets for x in ("--set", s)]
    return {"env_id": args.env_id, "algo_name": args.algo, "seed": seed, "preset": args.preset,
            "steps": args.steps, "n_envs": args.n_envs, "sets": sets, "run_dir": str(run_dir),
            "checkpoint_interval": args.checkpoint_every, "save_buffer": args.save_buffer,
            "progress": False, "argv": argv, "keep_checkpoints": args.keep_checkpoints}


def cmd_train_seeds(args: argparse.Namespace) -> int:
    from rlgrad.cli.build import resolve
    from rlgrad.rl.distributed.cluster import check_cpus, connect, import_ray

    seeds = parse_seeds(args.seeds)
    sets = list(args.sets) + ([f"env_runners={args.env_runners}"] if args.env_runners else [])
    spec = resolve(args.env_id, args.algo, seeds[0], args.preset, args.steps, args.n_envs, sets)
    safe_env = spec.env_id.replace("/", "_").replace(":", "_")
    parent = Path(args.run_dir) if args.run_dir else Path("runs") / (
        f"{safe_env}__{spec.algo}__seeds{args.seeds}__{time.strftime('%Y%m%d-%H%M%S')}")
    if parent.exists() and any(parent.iterdir()):
        raise CLIError(f"'{parent}' is not empty: choose another --run-dir for the seeds")
    try:
        ray = import_ray()
        started = connect(args.ray_address, check_cpus(args.ray_cpus))
    except (ImportError, ConnectionError, ValueError) as e:
        raise CLIError(str(e)) from None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        actor = ray.remote(SeedRun).options(num_cpus=1, max_restarts=0)
        runs = {s: actor.remote() for s in seeds}
        where = dict(zip(seeds, ray.get([r.pid.remote() for r in runs.values()]), strict=True))
        refs = {s: runs[s].run.remote(_seed_kwargs(args, sets, s, parent / f"seed-{s}"))
                for s in seeds}
        print(f"{len(seeds)} seeds ({args.seeds}) in parallel on Ray; runs under {parent}")
        codes = _wait(ray, refs, runs, where)
    finally:
        if started:
            ray.shutdown()
    return _summary(parent, seeds, codes)


def _send_signal(pid: int, signum: int) -> None:
    """Run as a Ray task of no CPU on a seed's node: the signal to the seed's process there."""
    os.kill(pid, signum)


def _pass_on(ray: Any, node: str, pid: int, signum: int, here: str | None = None) -> Any:
    """``signum`` to process ``pid`` of Ray node ``node``: directly on this machine (``here``,
    by default the driver's node), else by a task pinned to that node (so a seed elsewhere also
    checkpoints and stops, as a local one); returns that task's reference."""
    if node == (here or ray.get_runtime_context().get_node_id()):
        os.kill(pid, signum)
        return None
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_send_signal).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
    return task.remote(pid, signum)


def _wait(ray: Any, refs: dict[int, Any], runs: dict[int, Any],
          where: dict[int, tuple[str, int]]) -> dict[int, int]:
    """Exit status of every seed; signals are passed on to the seeds' processes."""
    got: list[int] = []
    old = {s: signal.signal(s, lambda n, f: got.append(n)) for s in (signal.SIGINT,
                                                                     signal.SIGTERM)}
    passed = 0
    try:
        codes: dict[int, int] = {}
        while len(codes) < len(refs):
            for sig in got[passed:]:
                passed += 1
                for s in refs:
                    if s in codes:
                        continue
                    if passed > 1:
                        ray.kill(runs[s])
                    else:
                        _pass_on(ray, where[s][0], where[s][1], sig)
            left = [ref for s, ref in refs.items() if s not in codes]
            ready, _ = ray.wait(left, num_returns=len(left), timeout=0.5)
            for s, ref in refs.items():
                if ref in ready and s not in codes:
                    try:
                        codes[s] = int(ray.get(ref))
                    except Exception as e:  # killed by a second signal, a lost node
                        print(f"rlgrad: seed {s}: {type(e).__name__}", file=sys.stderr)
                        codes[s] = 1
        return codes
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for r in runs.values():
            ray.kill(r)


def _summary(parent: Path, seeds: list[int], codes: dict[int, int]) -> int:
    from rlgrad.cli.plot import RETURN_KEY, cmd_plot, load_run

    for s in seeds:
        try:
            run = load_run(parent / f"seed-{s}")
            last = f"mean episode return {run.values[-1]:.1f}" if len(run.values) else "no return"
        except CLIError:
            last = "no metrics"
        print(f"seed {s}: exit status {codes[s]}, {last}")
    try:
        cmd_plot([str(parent)], str(parent / "learning_curves.png"), RETURN_KEY)
    except CLIError as e:
        print(f"rlgrad: warning: {e.message}", file=sys.stderr)
    return max(codes.values())
