"""``rlgrad train ... --seeds 0-4``: one ordinary run per seed, in parallel on Ray, plotted together.

Each seed is a ``rlgrad train`` of its own (``SeedRun``, a Ray actor of one CPU, runs the same
command line with ``--seed S --run-dir PARENT/seed-S``; with more seeds than the cluster's CPUs,
as many run at once as there are CPUs and the others wait their turn), so every seed leaves a
whole run directory that ``rlgrad resume``, ``eval`` and ``plot`` take as any other. A seed's
output goes to ``PARENT/seed-S.log``; the driver prints one line as each seed starts and ends
(with the seed's last line when it failed). At the end the seeds' curves are drawn in
``PARENT/learning_curves.png``: their mean with a band of plus or minus one standard deviation,
and each seed as a thin line (``rlgrad plot``'s grouping: same environment, algorithm and
hyperparameters).

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
from contextlib import redirect_stderr, redirect_stdout
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

    def run(self, kwargs: dict[str, Any], log: str) -> int:
        """``rlgrad train`` of one seed, its output written to ``log`` (not the driver's: Ray
        would prefix, colour and deduplicate it); bad input is one line and its exit status,
        as there."""
        from rlgrad.cli.train import cmd_train

        with open(log, "w", buffering=1) as f, redirect_stdout(f), redirect_stderr(f):
            try:
                return cmd_train(**kwargs)
            except CLIError as e:
                print(f"rlgrad train: error: {e.message}", file=sys.stderr)
                return e.status


def log_path(run_dir: Path) -> Path:
    """Where a seed's output goes: ``PARENT/seed-S.log``, beside its run directory."""
    return run_dir.with_name(run_dir.name + ".log")


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
        started = connect(args.ray_address, check_cpus(args.ray_cpus), log_to_driver=False)
    except (ImportError, ConnectionError, ValueError) as e:
        raise CLIError(str(e)) from None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        slots = max(1, min(len(seeds), int(ray.cluster_resources().get("CPU", 1.0))))
        at_once = "in parallel" if slots == len(seeds) else f"{slots} at a time, the rest queued"
        print(f"{len(seeds)} seeds ({args.seeds}) on Ray, {at_once}; runs under {parent}",
              flush=True)
        queue = _SeedQueue(ray, {s: _seed_kwargs(args, sets, s, parent / f"seed-{s}")
                                 for s in seeds}, slots)
        codes = queue.wait()
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


class _SeedQueue:
    """The seeds' runs, at most ``slots`` at once (one CPU each: a seed that waited for a CPU
    Ray could not give would wait forever, silently), the next started as one finishes. Each
    start and end is a line. Ctrl-C / SIGTERM: passed on to the running seeds, the queued ones
    are not started; a second signal kills the running ones."""

    def __init__(self, ray: Any, kwargs: dict[int, dict[str, Any]], slots: int) -> None:
        self.ray, self.kwargs, self.slots = ray, kwargs, slots
        self.queued = list(kwargs)
        self.actor = ray.remote(SeedRun).options(num_cpus=1, max_restarts=0)
        self.running: dict[int, tuple[Any, Any, Any]] = {}  # seed: (actor, pid ref, run ref)
        self.where: dict[int, tuple[str, int]] = {}  # seed: (its node, its process id)
        self.codes: dict[int, int] = {}
        self.signals = 0

    def _start(self) -> None:
        while self.queued and len(self.running) < self.slots and not self.signals:
            s = self.queued.pop(0)
            a = self.actor.remote()
            self.running[s] = (a, a.pid.remote(), a.run.remote(self.kwargs[s], str(log_path(
                Path(self.kwargs[s]["run_dir"])))))

    def _end(self, s: int, code: int, why: str = "") -> None:
        self.codes[s] = code
        if s in self.running:
            self.ray.kill(self.running.pop(s)[0])
        if not why:
            why = f"finished, exit status {code}"
            log = log_path(Path(self.kwargs[s]["run_dir"]))
            if code != 0 and log.exists():  # what went wrong, as the seed said it
                said = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                why += f": {said[-1].strip()} (all of it in {log})" if said else ""
        print(f"seed {s}: {why} ({len(self.codes)}/{len(self.kwargs)} done)", flush=True)

    def _signal(self, signum: int) -> None:
        self.signals += 1
        for s in list(self.queued):
            self.queued.remove(s)
            self._end(s, 128 + signum, f"not started ({signal.Signals(signum).name})")
        for s in list(self.running):
            if self.signals > 1 or s not in self.where:  # killed, or not yet training
                self._end(s, 128 + signum, f"stopped ({signal.Signals(signum).name})")
            else:
                _pass_on(self.ray, self.where[s][0], self.where[s][1], signum)

    def _poll(self) -> None:
        refs = [r for s, (_, p, run) in self.running.items()
                for r in ((run,) if s in self.where else (p, run))]
        if not refs:
            return
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0.5)
        for s, (_, pid_ref, run_ref) in list(self.running.items()):
            if pid_ref in ready and s not in self.where:
                self.where[s] = tuple(self.ray.get(pid_ref))  # type: ignore[assignment]
                print(f"seed {s}: started ({len(self.queued)} queued)", flush=True)
            if run_ref in ready:
                try:
                    self._end(s, int(self.ray.get(run_ref)))
                except Exception as e:  # killed by a second signal, a lost node
                    self._end(s, 1, f"failed ({type(e).__name__})")

    def wait(self) -> dict[int, int]:
        """Exit status of every seed."""
        got: list[int] = []
        old = {s: signal.signal(s, lambda n, f: got.append(n))
               for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while len(self.codes) < len(self.kwargs):
                while self.signals < len(got):
                    self._signal(got[self.signals])
                self._start()
                self._poll()
            return self.codes
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for a, _, _ in self.running.values():
                self.ray.kill(a)


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
