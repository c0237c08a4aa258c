"""``rlgrad tune ENV_ID --algo ALGO --samples K``: a hyperparameter sweep on Ray Tune.

The search space is a YAML file of the algorithm next to the presets
(``rlgrad/presets/search/<algo>.yaml``, or ``--space FILE``): one line per hyperparameter, a
distribution (``loguniform``, ``uniform``, ``randint``, ``choice``) or a fixed value; ENV_ID's
preset gives the rest. The file is checked before Ray starts: an unknown hyperparameter or a
value out of its range (``rl.ranges``) is one line.

Every trial is an ordinary run directory (``SWEEP/runs/TRIAL``), trained by the very code of
``rlgrad train`` (in the trial's Ray worker, with ``--set`` for the sampled values), and reports
its mean episode return to Tune whenever the logger writes a row, so that ASHA can stop it
early. At the end ``SWEEP/results.csv`` lists the trials best first and ``SWEEP/curves.png``
draws their learning curves. ``--resume`` continues an interrupted sweep (``Tuner.restore``):
finished trials are kept, an unfinished one continues from its run's last checkpoint
(``rlgrad resume``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from rlgrad.cli.errors import CLIError, did_you_mean
from rlgrad.cli.run_dir import atomic_write_bytes

METRIC = "ep_rew_mean"
TIME_ATTR = "timesteps"
DISTRIBUTIONS = ("loguniform", "uniform", "randint", "choice")
SETTINGS = "sweep.json"
_NEW_OUTPUT = "RAY_AIR_NEW_OUTPUT"  # Ray's switch between Tune's two output engines


# ---- the search space ----------------------------------------------------------------------
def space_path(algo: str, space: str | None) -> Path:
    if space is not None:
        return Path(space)
    return Path(str(resources.files("rlgrad").joinpath("presets", "search", f"{algo}.yaml")))


def read_space(path: Path) -> dict[str, Any]:
    """The search space file, read as any YAML rlgrad is handed: bounded in size, nesting and
    alias expansion, and a key given twice refused (YAML would keep the last silently)."""
    from rlgrad.cli.safe_files import load_yaml, read_bounded

    try:
        data = load_yaml(read_bounded(path, follow_links=True), f"search space {path}")
    except FileNotFoundError:
        raise CLIError(f"no search space at {path}: give one with --space FILE.yaml") from None
    except OSError as e:
        raise CLIError(f"search space {path}: cannot read it: {e}") from None
    if not isinstance(data, dict) or not data:
        raise CLIError(f"search space {path}: expected a mapping of hyperparameters to ranges")
    return data


def _candidates(where: str, key: str, spec: Any) -> tuple[str, list[Any]]:
    """(distribution name or "fixed", the values that must all be valid: ends or choices)."""
    if not isinstance(spec, dict):
        return "fixed", [spec]
    if len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
        raise CLIError(f"{where}: {key}: expected one of {{{', '.join(DISTRIBUTIONS)}: ...}} "
                       f"or a fixed value, got {spec!r}")
    kind, args = next(iter(spec.items()))
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise CLIError(f"{where}: {key}: choice takes a non-empty list, got {args!r}")
        return kind, list(args)
    nums = isinstance(args, list) and len(args) == 2 and all(
        isinstance(a, int | float) and not isinstance(a, bool) for a in args)
    if not nums or not args[0] < args[1] or (kind == "loguniform" and args[0] <= 0) or (
            kind == "randint" and not all(isinstance(a, int) for a in args)):
        what = "two integers" if kind == "randint" else "two numbers"
        raise CLIError(f"{where}: {key}: {kind} takes [lo, hi], {what} with lo < hi"
                       + (" and lo > 0" if kind == "loguniform" else "") + f", got {args!r}")
    return kind, list(args)


def _yaml_text(v: Any) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def validate_space(space: dict[str, Any], cls: type, algo: str, where: str,
                   build_with: Callable[[str], None] | None = None) -> dict[str, str]:
    """{key: distribution} after checking every name and every candidate value (the ends of a
    range, each choice) as ``--set`` and ``rl.ranges`` would; CLIError names the first bad one.
    A value of a mapping (``policy_kwargs.activation_fn``), which ``--set`` takes as it is and
    the model's constructor checks, is checked by ``build_with("key=value")`` building it."""
    from rlgrad.cli.build import BUDGET_KEY, parameters, parse_sets
    from rlgrad.rl.ranges import check_hyperparams

    params = parameters(cls)
    kinds = {}
    for key, spec in space.items():
        top = str(key).partition(".")[0]
        if top == BUDGET_KEY:
            raise CLIError(f"{where}: {BUDGET_KEY} is the budget, not a hyperparameter to "
                           "search: give each trial's with --steps")
        if top not in params:
            hint = did_you_mean(top, params) or f"; known: {', '.join(sorted(params))}"
            raise CLIError(f"{where}: {cls.__name__} has no hyperparameter {top!r}{hint}")
        kinds[key], values = _candidates(where, key, spec)
        for v in values:
            try:
                parsed = parse_sets([f"{key}={_yaml_text(v)}"], cls)
                check_hyperparams(cls.__name__, parsed)
                if build_with is not None and isinstance(parsed.get(top), dict):
                    build_with(f"{key}={_yaml_text(v)}")
            except CLIError as e:
                raise CLIError(f"{where}: {key}: {e.message.split(': ', 1)[-1]}") from None
            except ValueError as e:
                raise CLIError(f"{where}: {key}: {str(e).split(': ', 1)[-1]}") from None
    return kinds


def param_space(space: dict[str, Any]) -> dict[str, Any]:
    """Tune's search space; a choice of lists or mappings is offered as their YAML text (Optuna
    takes numbers and strings only) and read back by ``--set``."""
    from ray import tune

    out: dict[str, Any] = {}
    for key, spec in space.items():
        if not isinstance(spec, dict):
            out[key] = _yaml_text(spec) if isinstance(spec, list | dict) else spec
            continue
        kind, args = next(iter(spec.items()))
        if kind == "choice":
            out[key] = tune.choice([_yaml_text(a) if isinstance(a, list | dict) else a
                                    for a in args])
        elif kind == "randint":
            out[key] = tune.randint(args[0], args[1] + 1)  # Tune's upper end is excluded
        else:
            out[key] = getattr(tune, kind)(float(args[0]), float(args[1]))
    return out


# ---- one trial (in a Ray worker) -------------------------------------------------------------
class TuneReporter:
    """Logger writer: each row with a mean episode return is reported to Tune."""

    def __init__(self) -> None:
        self.last: float | None = None

    def write(self, row: dict[str, Any], step: int) -> None:
        from ray import tune

        v = row.get("rollout/ep_rew_mean")
        if isinstance(v, float) and math.isfinite(v):
            self.last = v
            tune.report({METRIC: v, TIME_ATTR: int(step)})

    def close(self) -> None:
        pass


def _fit_batch(settings: dict[str, Any], sets: list[str]) -> list[str]:
    """A sampled batch_size larger than the rollout (n_steps * n_envs) becomes the rollout."""
    from rlgrad.cli.build import resolve

    spec = resolve(settings["env_id"], settings["algo"], settings["seed"], settings["preset"],
                   settings["steps"], None, sets)
    hp = spec.hyperparams
    from rlgrad.rl.on_policy import OnPolicyAlgorithm

    # (off-policy n_steps is SB3's n-step returns, not a rollout)
    if {"batch_size", "n_steps"} <= set(hp) and issubclass(spec.cls, OnPolicyAlgorithm):
        rollout = int(hp["n_steps"]) * int(hp.get("n_envs", 1))
        if int(hp["batch_size"]) > rollout:
            sets = [*sets, f"batch_size={rollout}"]
    return sets


def run_trial(config: dict[str, Any], settings: dict[str, Any]) -> None:
    """Tune's trainable: ``rlgrad train`` (or ``rlgrad resume`` of an interrupted trial)."""
    from ray import tune

    from rlgrad.cli.env_ids import ModuleTrust
    from rlgrad.cli.run_dir import RunDir
    from rlgrad.cli.train import EXTRA_WRITERS, cmd_resume, cmd_train

    trial = tune.get_context().get_trial_id()
    sweep = Path(settings["sweep_dir"])
    run_dir = sweep / "runs" / trial
    sets = _fit_batch(settings, [f"{k}={v}" for k, v in config.items()])
    (sweep / "trials").mkdir(exist_ok=True)
    atomic_write_bytes(sweep / "trials" / f"{trial}.json", json.dumps(
        {"trial": trial, "run_dir": str(run_dir), "config": config}, default=str).encode())
    reporter = TuneReporter()
    EXTRA_WRITERS.append(lambda: reporter)
    try:
        if RunDir(run_dir).checkpoint_paths():  # a trial of an interrupted sweep: continue it
            what = "resume"
            # the sweep's own env id (typed on its command line) may import its module
            module = str(settings["env_id"]).rpartition(":")[0]
            code = cmd_resume(str(run_dir), None, False, None,
                              ModuleTrust((module,) if module else ()))
        else:
            what = "train"
            argv = ["train", settings["env_id"], "--algo", settings["algo"], "--seed",
                    str(settings["seed"]), "--run-dir", str(run_dir), "--steps",
                    str(settings["steps"])]
            argv += ["--preset", settings["preset"]] if settings["preset"] else []
            every = settings.get("checkpoint_every")
            argv += ["--checkpoint-every", str(every)] if every else []
            argv += [a for s in sets for a in ("--set", s)]
            code = cmd_train(settings["env_id"], settings["algo"], settings["seed"],
                             settings["preset"], settings["steps"], None, sets, str(run_dir),
                             every, True, False, argv=argv)
    except CLIError as e:
        raise RuntimeError(f"rlgrad {what}: error: {e.message}") from None
    finally:
        EXTRA_WRITERS.remove(EXTRA_WRITERS[-1])
    if code != 0:
        raise RuntimeError(f"rlgrad {what} exited with status {code}; see {run_dir}")


# ---- the sweep (driver) ----------------------------------------------------------------------
def _settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sweep's settings, its search space), all checked before Ray starts."""
    from rlgrad.cli.build import resolve

    if args.samples < 1:
        raise CLIError(f"--samples must be at least 1, got {args.samples}")
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be positive, got {args.steps}")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise CLIError(f"--checkpoint-every must be positive, got {args.checkpoint_every}")
    spec = resolve(args.env_id, args.algo, args.seed, args.preset, args.steps, None, [])
    path = space_path(spec.algo, args.space)
    space = read_space(path)
    validate_space(space, spec.cls, spec.algo, f"search space {path}",
                   lambda item: _build_once(args, item))
    safe_env = spec.env_id.replace("/", "_").replace(":", "_")
    sweep = Path(args.sweep_dir) if args.sweep_dir else Path("runs") / (
        f"{safe_env}__{spec.algo}__sweep__{time.strftime('%Y%m%d-%H%M%S')}")
    settings = {"env_id": spec.env_id, "algo": spec.algo, "seed": spec.seed,
                "preset": args.preset, "steps": spec.total_timesteps, "samples": args.samples,
                "search": args.search, "scheduler": args.scheduler, "space_file": str(path),
                "checkpoint_every": args.checkpoint_every,
                "sweep_dir": str(sweep.resolve())}
    return settings, space


def _build_once(args: argparse.Namespace, item: str) -> None:
    """Build the model of ``rlgrad train ... --set item``, as a trial would, and let it go."""
    from rlgrad.cli.build import build, resolve

    spec = resolve(args.env_id, args.algo, args.seed, args.preset, args.steps, None, [item])
    build(spec.cls, spec.env_id, spec.seed, spec.hyperparams).env.close()


def _resume_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved sweep's settings and space, read as untrusted files (bounded JSON) and the space
    validated again as a new sweep's is."""
    from rlgrad.cli.build import resolve_algo

    if not args.sweep_dir:
        raise CLIError("--resume needs --sweep-dir DIR: the sweep to continue")
    saved = Path(args.sweep_dir) / SETTINGS
    if not saved.exists():
        raise CLIError(f"'{args.sweep_dir}' holds no sweep ({SETTINGS} missing): start one "
                       "without --resume")
    settings, space = _read_json(saved), _read_json(Path(args.sweep_dir) / "space.json")
    if (settings.get("env_id"), settings.get("algo")) != (args.env_id, args.algo.lower()):
        raise CLIError(f"'{args.sweep_dir}' is a sweep of {settings.get('algo')} on "
                       f"{settings.get('env_id')}, not {args.algo} on {args.env_id}")
    algo, cls = resolve_algo(args.algo)
    validate_space(space, cls, algo, f"{args.sweep_dir}/space.json",
                   lambda item: _build_once(args, item))
    settings["sweep_dir"] = str(Path(args.sweep_dir).resolve())
    return settings, space


def _read_json(path: Path) -> dict[str, Any]:
    from rlgrad.cli.safe_files import read_bounded

    try:
        data = json.loads(read_bounded(path))
    except FileNotFoundError:
        raise CLIError(f"{path} is missing: the sweep cannot be continued") from None
    except (ValueError, RecursionError) as e:  # not JSON, or nested past the parser's reach
        raise CLIError(f"{path} is damaged: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict):
        raise CLIError(f"{path} is damaged: expected a JSON object")
    return data


def _tune_config(settings: dict[str, Any]) -> Any:
    from ray import tune

    search_alg = scheduler = None
    if settings["search"] == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(seed=settings["seed"])
    if settings["scheduler"] == "asha":
        from ray.tune.schedulers import ASHAScheduler

        steps = int(settings["steps"])
        scheduler = ASHAScheduler(time_attr=TIME_ATTR, max_t=steps,
                                  grace_period=max(steps // 4, 1), reduction_factor=2)
    return tune.TuneConfig(metric=METRIC, mode="max", num_samples=int(settings["samples"]),
                           search_alg=search_alg, scheduler=scheduler)


def _start_ray(address: str | None, cpus: int | None = None) -> bool:
    from rlgrad.rl.distributed.cluster import check_cpus, connect, import_ray

    # the trials' workers import this very rlgrad (a checkout may shadow an installed one)
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    try:
        import_ray()
        # the trials' output stays in their run directories: the driver prints its own lines
        return connect(address, check_cpus(cpus), log_to_driver=False)
    except (ImportError, ConnectionError, ValueError) as e:
        raise CLIError(str(e).replace("env runners need Ray", "rlgrad tune needs Ray")) from None


def cmd_tune(args: argparse.Namespace) -> int:
    from ray import tune

    from rlgrad.cli.tune_progress import Progress

    settings, space = _resume_settings(args) if args.resume else _settings(args)
    sweep = Path(settings["sweep_dir"])
    if not args.resume and sweep.exists() and any(sweep.iterdir()):
        raise CLIError(f"'{sweep}' is not empty: continue it with --resume, or choose another "
                       "--sweep-dir")
    started = _start_ray(args.ray_address, args.ray_cpus)  # unreachable: nothing written yet
    try:
        if not args.resume:
            sweep.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(sweep / SETTINGS, json.dumps(settings, indent=1).encode())
            atomic_write_bytes(sweep / "space.json", json.dumps(space, indent=1).encode())
        trainable = tune.with_resources(tune.with_parameters(run_trial, settings=settings),
                                        {"cpu": 1})
        exp = sweep / "tune"
        if args.resume:
            if not tune.Tuner.can_restore(str(exp)):
                raise CLIError(f"'{sweep}' has no Tune state to restore: start it again")
            tuner = tune.Tuner.restore(str(exp), trainable, resume_unfinished=True,
                                       resume_errored=True)
        else:
            progress = Progress(int(settings["samples"]), METRIC, TIME_ATTR)
            tuner = tune.Tuner(trainable, param_space=param_space(space),
                               tune_config=_tune_config(settings),
                               run_config=tune.RunConfig(name="tune", storage_path=str(sweep),
                                                         verbose=0, callbacks=[progress]))
        print(f"sweep of {settings['samples']} trials ({settings['algo']} on "
              f"{settings['env_id']}, {settings['steps']} steps each) under {sweep}", flush=True)
        with _Interruption() as stop, _legacy_output():
            grid = tuner.fit()
        errors = sum(1 for r in grid if r.error is not None)
    finally:
        if started:
            import ray

            ray.shutdown()
    code = summarize(sweep, settings, errors)
    if stop.interrupted:
        again = shlex.join(["rlgrad", "tune", settings["env_id"], "--algo", settings["algo"],
                            "--sweep-dir", str(sweep), "--resume"])
        print(f"rlgrad tune: interrupted; the sweep's state is saved: to continue: {again}",
              file=sys.stderr)
        return 130
    return code


@contextmanager
def _legacy_output() -> Iterator[None]:
    """Tune's older output, which ``verbose=0`` silences (the newer one prints its experiment
    table and a TensorBoard command at any verbosity): rlgrad prints its own lines."""
    old = os.environ.get(_NEW_OUTPUT)
    os.environ[_NEW_OUTPUT] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(_NEW_OUTPUT, None)
        else:
            os.environ[_NEW_OUTPUT] = old


class _Interruption:
    """Was the sweep interrupted? Tune's own Ctrl-C handler (installed by ``fit``: it saves the
    experiment and stops) puts back the handler it found, ours, when it fires; SIGTERM is made
    a Ctrl-C so that it stops the same way. A second signal stops at once."""

    def __init__(self) -> None:
        self.interrupted = False

    def _again(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    def _term(self, signum: int, frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self) -> _Interruption:
        self.main = threading.current_thread() is threading.main_thread()
        if self.main:
            self.old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            signal.signal(signal.SIGINT, self._again)
            signal.signal(signal.SIGTERM, self._term)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.main:
            self.interrupted = signal.getsignal(signal.SIGINT) == self._again
            for s, h in self.old.items():
                signal.signal(s, h)


# ---- results ---------------------------------------------------------------------------------
def _trial_rows(sweep: Path, steps: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """(one row per trial, best first; the runs for the plot)."""
    from rlgrad.cli.plot import load_run

    rows, runs = [], []
    for f in sorted((sweep / "trials").glob("*.json")):
        info = json.loads(f.read_text())
        row: dict[str, Any] = {"trial": info["trial"], "final_return": math.nan,
                               "best_return": math.nan, "steps": 0}
        try:
            run = load_run(info["run_dir"])
        except CLIError:
            run = None
        if run is not None:
            runs.append(run)
            if len(run.values):
                row.update(final_return=float(run.values[-1]),
                           best_return=float(run.values.max()), steps=int(run.steps[-1]))
        done = (Path(info["run_dir"]) / "checkpoint.safetensors").exists() and row["steps"] > 0
        row["status"] = "finished" if row["steps"] >= steps else (
            "stopped early" if done else "no result")
        row.update(info["config"])
        row["run_dir"] = info["run_dir"]
        rows.append(row)
    rows.sort(key=lambda r: -r["final_return"] if not math.isnan(r["final_return"]) else math.inf)
    return rows, runs


def summarize(sweep: Path, settings: dict[str, Any], errors: int = 0) -> int:
    """``results.csv`` (best first) and ``curves.png`` of the sweep; prints the best trial."""
    from rlgrad.cli.plot import short, write_curve

    rows, runs = _trial_rows(sweep, int(settings["steps"]))
    if not rows:
        raise CLIError(f"no trial of the sweep in '{sweep}' has started")
    fields = list(dict.fromkeys(k for r in rows for k in r))
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=["rank", *fields])
    w.writeheader()
    for i, r in enumerate(rows, 1):
        w.writerow({"rank": i, **r})
    atomic_write_bytes(sweep / "results.csv", table.getvalue().encode())
    title = (f"{settings['algo'].upper()} on {settings['env_id']}: {len(rows)} trials, "
             f"mean episode return")
    if any(len(r.steps) for r in runs):
        write_curve(runs, sweep / "curves.png", title=title)
    best = rows[0]
    shown = ", ".join(f"{k}={short(best[k])}" for k in best if k not in (
        "trial", "final_return", "best_return", "steps", "status", "run_dir"))
    print(f"best trial {best['trial']}: mean episode return {best['final_return']:.1f} ({shown})")
    print(f"results: {sweep / 'results.csv'}  curves: {sweep / 'curves.png'}")
    if errors:
        print(f"rlgrad tune: {errors} trial(s) failed: see their run directories", flush=True)
    return 1 if errors == len(rows) else 0
