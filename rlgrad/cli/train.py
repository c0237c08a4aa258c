"""``rlgrad train`` and ``rlgrad resume``: a training run that survives Ctrl-C, SIGTERM and kill -9.

Checkpoints are taken after an iteration (``on_iteration_end``), the one point where the whole
training state is consistent; one is written before the first iteration too, so a run can always
be resumed once it has started. A checkpoint holds the algorithm's ``get_state()`` (networks,
optimizers, counters, RNG streams, normaliser, optionally the replay buffer) plus the vector
environment's own state (``envstate``), so a resumed run continues the very same episodes and
ends with the same metrics as an uninterrupted one.

Ctrl-C / SIGTERM set a flag; the current iteration finishes, a checkpoint is written and the
process exits with 128 + the signal number and a one-line message saying how to resume. A second
signal stops at once (the last checkpoint is kept). ``kill -9`` loses at most the steps since the
last checkpoint: every rewritten file goes through a temporary name and a rename, metrics.csv is
appended row by row, and a resume cuts metrics.csv (and hides TensorBoard events) back to the
checkpoint's step.
"""

from __future__ import annotations

import errno
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from rlgrad.cli import envstate
from rlgrad.cli.build import (
    TrainSpec,
    build,
    env_creation_error,
    resolve,
    resolve_algo,
)
from rlgrad.cli.env_ids import ModuleTrust, check_file_env_id
from rlgrad.cli.errors import CLIError
from rlgrad.cli.run_dir import (
    DEFAULT_KEEP,
    DamagedCheckpoint,
    DamagedMetrics,
    RunDir,
    default_run_dir,
    peek_step,
    plain,
    space_signature,
    versions,
)
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.finite import NonFiniteError

DEFAULT_CHECKPOINT_INTERVAL = 10_000
#: factories of further logger writers (``write(row, step)``) for every run this process trains:
#: ``rlgrad tune`` adds one that reports the mean episode return to Ray Tune
EXTRA_WRITERS: list[Any] = []


class _ForcedStop(BaseException):
    """A second signal: stop now, keep the last checkpoint."""


class SignalGuard:
    """SIGINT/SIGTERM -> a flag the training loop polls; a second one stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise _ForcedStop(signum)
        self.signum = signum

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # a run in a thread (a Ray Tune trial): signals reach the main thread only
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def save_checkpoint(algo: Any, rd: RunDir, cfg: dict[str, Any]) -> None:
    state = algo.get_state(include_replay_buffer=bool(cfg.get("checkpoint_replay_buffer")))
    env_state = None
    if algo._last_obs is not None:
        # the environment's own state, unless the algorithm's state already carries it; either
        # way ``exact`` says whether all of it could be saved (resume starts new episodes if not)
        env_state = envstate.capture(algo.vector_env)
        if state.get("env", {}).get("vector_env"):  # empty for envs outside Gymnasium's own
            env_state["objects"] = {}
    rd.save_checkpoint({
        "algo": type(algo).__name__, "env_id": algo.env_id or "", "seed": algo.seed,
        "hyperparams": algo.get_hyperparams(), "state": state, "env_state": env_state,
        # what the networks' shapes depend on: a resume checks them against the environment
        "spaces": {"observation": space_signature(algo.observation_space),
                   "action": space_signature(algo.action_space)},
        "run": {"algo": cfg["algo"], "num_timesteps": algo.num_timesteps,
                "total_timesteps": cfg["total_timesteps"], "saved_at": time.time()},
    }, keep=int(cfg.get("keep_checkpoints") or DEFAULT_KEEP))


class CheckpointCallback(BaseCallback):
    """Checkpoints every ``interval`` steps (at iteration ends), refreshes the PNG, obeys signals."""

    uses_locals = False

    def __init__(self, rd: RunDir, cfg: dict[str, Any], guard: SignalGuard, last_step: int) -> None:
        super().__init__()
        self.rd, self.cfg, self.guard = rd, cfg, guard
        self.interval = int(cfg["checkpoint_interval"])
        self.last_step = last_step
        self.stopped_by: int | None = None

    def checkpoint(self) -> None:
        save_checkpoint(self.model, self.rd, self.cfg)
        self.last_step = self.model.num_timesteps
        refresh_curve(self.rd)

    def on_iteration_end(self) -> bool:
        n = self.model.num_timesteps
        if self.guard.signum is not None:
            self.checkpoint()
            self.stopped_by = self.guard.signum
            return False
        if n - self.last_step >= self.interval:
            self.checkpoint()
        return True


def disk_full(e: OSError) -> str:
    """One line for ENOSPC: the checkpoint's own message (where, how much it needs), else the
    file that could not be written."""
    from rlgrad.serialization import DiskFullError

    if isinstance(e, DiskFullError):
        return str(e.strerror)
    return f"disk full: cannot write {e.filename or 'a file of the run'} ({e.strerror})"


def refresh_curve(rd: RunDir) -> None:
    from rlgrad.cli.plot import run_curve

    try:
        run_curve(rd)
    except CLIError as e:  # a plot that cannot be written must not stop training
        print(f"rlgrad: warning: {e.message}", file=sys.stderr)


def _add_writers(algo: Any, rd: RunDir, purge_step: int | None) -> None:
    from rlgrad.rl.logger import CSVWriter, TensorBoardWriter

    algo.logger.add_writer(CSVWriter(str(rd.metrics)))
    algo.logger.add_writer(TensorBoardWriter(str(rd.path), purge_step))
    for make in EXTRA_WRITERS:
        algo.logger.add_writer(make())


def _train_loop(algo: Any, rd: RunDir, cfg: dict[str, Any], progress: bool, resumed: bool,
                summary: bool = True) -> int:
    total = int(cfg["total_timesteps"])
    start_step = algo.num_timesteps
    cmd = f"rlgrad resume {shlex.quote(str(rd.path))}"
    with SignalGuard() as guard:
        cb = CheckpointCallback(rd, cfg, guard, last_step=start_step)
        cb.init_callback(algo)
        t0 = time.perf_counter()
        try:
            if not resumed:  # a checkpoint before the first iteration: resumable from the start
                save_checkpoint(algo, rd, cfg)
            try:
                algo.learn(total - start_step, callback=cb, progress_bar=progress,
                           reset_num_timesteps=not resumed)
            finally:
                algo.logger.close()
                algo.close_env_runners()  # Ray actors (env_runners > 0) end with the run
            elapsed = time.perf_counter() - t0
            if cb.stopped_by is not None and algo.num_timesteps < total:
                name = signal.Signals(cb.stopped_by).name
                print(f"rlgrad: {name}: stopped at step {algo.num_timesteps}/{total} with a "
                      f"checkpoint; to continue: {cmd}", file=sys.stderr)
                return 128 + cb.stopped_by
            if cb.last_step != algo.num_timesteps:
                save_checkpoint(algo, rd, cfg)
            refresh_curve(rd)
        except NonFiniteError as e:  # nothing is saved: the last good checkpoint stays
            print(f"rlgrad: {e}. The last checkpoint (step {cb.last_step}) is kept: {cmd}",
                  file=sys.stderr)
            return 1
        except OSError as e:  # a full disk: one line; the saves are atomic, so nothing is lost
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            print(f"rlgrad: {disk_full(e)}; the last checkpoint (step {cb.last_step}) is kept: "
                  f"{cmd}", file=sys.stderr)
            return 1
        except _ForcedStop as e:  # a second signal, wherever it landed (saves are atomic)
            signum = int(e.args[0])
            print(f"rlgrad: stopped at once by a second {signal.Signals(signum).name}; the last "
                  f"checkpoint (step {cb.last_step}) is kept: {cmd}", file=sys.stderr)
            return 128 + signum
    if not summary:
        return 0
    _, rets = algo.logger.series("rollout/ep_rew_mean")
    ret = f", mean episode return {rets[-1]:.1f}" if rets else ""
    steps = algo.num_timesteps - start_step
    print(f"trained {algo.num_timesteps} steps ({steps / max(elapsed, 1e-9):.0f} steps/s){ret}")
    print(f"run directory: {rd.path}")
    print(f"learning curve: {rd.curve}")
    return 0


def cmd_train(env_id: str, algo_name: str, seed: int, preset: str | None, steps: int | None,
              n_envs: int | None, sets: list[str], run_dir: str | None,
              checkpoint_interval: int | None, save_buffer: bool, progress: bool,
              argv: list[str] | None = None, summary: bool = True,
              keep_checkpoints: int | None = None) -> int:
    spec: TrainSpec = resolve(env_id, algo_name, seed, preset, steps, n_envs, sets)
    rd = RunDir(run_dir) if run_dir else RunDir(default_run_dir(spec.env_id, spec.algo, spec.seed))
    if rd.checkpoint_paths():
        raise CLIError(f"'{rd.path}' already holds a run: continue it with rlgrad resume "
                       f"{rd.path}, or choose another --run-dir")
    if checkpoint_interval is not None and checkpoint_interval < 1:
        raise CLIError(f"--checkpoint-every must be positive, got {checkpoint_interval}")
    if keep_checkpoints is not None and keep_checkpoints < 1:
        raise CLIError(f"--keep-checkpoints must be at least 1, got {keep_checkpoints}")
    made = not rd.path.exists()
    rd.create()  # before building: an unwritable directory is reported before any work
    try:
        with rd.lock():
            if rd.config.exists():  # a run killed before its first checkpoint: start it over
                rd.clear_outputs()
            return _train_new(spec, rd, checkpoint_interval, save_buffer, progress, argv,
                              summary, keep_checkpoints or DEFAULT_KEEP)
    except CLIError:
        if made and not any(rd.path.iterdir()):  # bad input leaves no empty run directory
            rd.path.rmdir()
        raise


def _build(cls: type, env_id: str, seed: int, hp: dict[str, Any]) -> Any:
    """``build``, with Gymnasium's own errors (a missing dependency such as Box2D or MuJoCo, an
    environment that refuses its arguments) said in one line."""
    from gymnasium.error import Error as GymError

    try:
        return build(cls, env_id, seed, hp)
    except (GymError, ImportError) as e:
        raise env_creation_error(env_id, e) from None


def _train_new(spec: TrainSpec, rd: RunDir, checkpoint_interval: int | None, save_buffer: bool,
               progress: bool, argv: list[str] | None, summary: bool, keep: int = DEFAULT_KEEP
               ) -> int:
    algo = _build(spec.cls, spec.env_id, spec.seed, spec.hyperparams)
    cfg = {
        "env_id": spec.env_id, "algo": spec.algo, "seed": spec.seed,
        "total_timesteps": spec.total_timesteps, "preset": spec.preset,
        "checkpoint_interval": int(checkpoint_interval or DEFAULT_CHECKPOINT_INTERVAL),
        "checkpoint_replay_buffer": bool(save_buffer),
        "keep_checkpoints": int(keep),
        "overrides": spec.overrides,
        "hyperparams": algo.get_hyperparams(),
        "versions": versions(),
        "command": shlex.join(["rlgrad", *(argv or [])]),
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    rd.write_config(cfg)
    _add_writers(algo, rd, purge_step=None)
    print(f"run directory: {rd.path}  ({spec.algo} on {spec.env_id}, seed {spec.seed}, "
          f"{spec.total_timesteps} steps)")
    return _train_loop(algo, rd, plain(cfg), progress, resumed=False, summary=summary)


def _env_name(env_id: str) -> str:
    """The registered id of ``module:EnvId`` (the module part only says where it is defined)."""
    return env_id.rpartition(":")[2]


def _restore_from(rd: RunDir, path: Path, cfg: dict[str, Any], cls: type, env_id: str
                  ) -> tuple[Any, dict[str, Any]]:
    """(algorithm, checkpoint) of one checkpoint file. ``DamagedCheckpoint`` if the file cannot
    be used (an earlier one may stand in); ``CLIError`` if it belongs to another run."""
    from rlgrad.serialization import CheckpointError

    ckpt = rd.load_checkpoint(path)
    other = "it belongs to another run (put this run's own checkpoint back)"
    if ckpt["algo"] != cls.__name__:
        raise CLIError(f"{path} holds a {ckpt['algo']} checkpoint but {rd.config} says "
                       f"{cfg['algo']}: {other}")
    ckpt_env = ckpt.get("env_id")
    if isinstance(ckpt_env, str) and ckpt_env and _env_name(ckpt_env) != _env_name(env_id):
        raise CLIError(f"{path} holds a {ckpt['algo']} checkpoint of {ckpt_env} but {rd.config} "
                       f"says {env_id}: {other}")
    seed = ckpt.get("seed")
    seed = seed if isinstance(seed, int) else int(cfg.get("seed") or 0)
    hp = dict(ckpt["hyperparams"])
    if hp.pop("tensorboard_log", None) is not None:  # a folder a file chose: never written
        print(f"rlgrad: note: {path.name}'s tensorboard_log is ignored: the run's TensorBoard "
              "events go to its own directory", file=sys.stderr)
    algo = _build(cls, env_id, seed, hp)
    spaces = ckpt.get("spaces")  # older checkpoints lack it: then set_state checks the shapes
    for kind in ("observation", "action") if isinstance(spaces, dict) else ():
        now, then = space_signature(getattr(algo, f"{kind}_space")), spaces.get(kind)
        if then is not None and plain(then) != now:
            algo.vector_env.close()
            raise CLIError(f"{path} was trained with the {kind} space {plain(then)} but {env_id} "
                           f"has {now}: {other}")
    try:
        algo.set_state(ckpt["state"])
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, CheckpointError) as e:
        algo.vector_env.close()
        raise DamagedCheckpoint(f"corrupt checkpoint: {path} does not fit {cls.__name__} on "
                                f"{env_id}: {e}") from None
    return algo, ckpt


def _warn_fallback(damaged: list[tuple[Path, str]], used: Path, step: int, purpose: str) -> None:
    reason = damaged[0][1].removeprefix("corrupt checkpoint: ").replace(
        " Use an earlier checkpoint.", "").rstrip(". ")
    if len(damaged) > 1:
        reason += f" (and {', '.join(p.name for p, _ in damaged[1:])} unusable too)"
    lost_to = peek_step(damaged[0][0])
    act = "resuming from" if purpose == "resume" else "evaluating"
    if lost_to is not None and lost_to > step:
        lost = (f"the {lost_to - step} steps from {step} to {lost_to} are lost"
                + (" and will be trained again" if purpose == "resume" else " (not in this policy)"))
    else:
        lost = f"whatever was trained after step {step} is lost"
    msg = f"rlgrad: warning: {reason}; {act} {used.name} (step {step}) instead: {lost}"
    print(" ".join(msg.split()), file=sys.stderr)


def restore(rd: RunDir, purpose: str = "resume", trust: ModuleTrust | None = None
            ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(algorithm with the state of the newest usable checkpoint, config, checkpoint) of a run
    directory. A damaged newest checkpoint gives way to the one before it, with a warning that
    says how many steps are lost; a checkpoint of another algorithm, environment or spaces is
    refused (it is no damage but a file from another run). The module of a ``module:EnvId`` in
    config.yaml is imported only if ``trust`` names it (``--env-module``, ``--trust-run``)."""
    cfg = rd.read_config()
    _, cls = resolve_algo(str(cfg["algo"]))
    env_id = str(cfg["env_id"])
    trust = trust or ModuleTrust()
    trust.import_named()
    check_file_env_id(env_id, str(rd.config), trust, f"rlgrad {purpose} {shlex.quote(str(rd.path))}")
    paths = [rd.checkpoint, *(p for p in rd.checkpoint_paths() if p != rd.checkpoint)]
    damaged: list[tuple[Path, str]] = []
    for path in paths:
        try:
            algo, ckpt = _restore_from(rd, path, cfg, cls, env_id)
        except DamagedCheckpoint as e:
            damaged.append((path, e.message))
            continue
        if damaged:
            _warn_fallback(damaged, path, algo.num_timesteps, purpose)
        _config_disagrees(rd, cfg, ckpt, path, purpose)
        return algo, cfg, ckpt
    more = len(damaged) - 1
    raise CLIError(damaged[0][1] + (f" (and the {more} earlier checkpoint{'s' * (more > 1)} "
                                    f"{'are' if more > 1 else 'is'} unusable too)" if more else ""))


def _config_disagrees(rd: RunDir, cfg: dict[str, Any], ckpt: dict[str, Any], path: Path,
                      purpose: str) -> None:
    """config.yaml's hyperparameters edited by hand (or damaged): the checkpoint's win, as its
    networks and optimizer state were made with them; one line says so, and ``cfg`` takes them
    (a resume rewrites config.yaml with them)."""
    mine, theirs = plain(cfg.get("hyperparams") or {}), plain(ckpt["hyperparams"])
    if mine == theirs:
        return
    keys = sorted(k for k in {*mine, *theirs} if mine.get(k, ...) != theirs.get(k, ...))

    def shown(d: dict[str, Any], k: str) -> str:
        return repr(d[k]) if k in d else "absent"

    diff = "; ".join(f"{k}: {shown(mine, k)} there, {shown(theirs, k)} in the checkpoint"
                     for k in keys[:3]) + ("; ..." if len(keys) > 3 else "")
    fix = (f"; {rd.config.name} is rewritten with them" if purpose == "resume" else "")
    print(f"rlgrad: note: {rd.config} disagrees with {path.name} ({diff}): the checkpoint's "
          f"values are used, as its networks and optimizer were trained with them{fix}",
          file=sys.stderr)
    cfg["hyperparams"] = theirs


def _metrics_back_to(rd: RunDir, step: int) -> int:
    """Cut metrics.csv back to ``step`` (rows dropped); a damaged one is not lost but renamed, and
    a new one begins: a resume never fails for the sake of its log."""
    try:
        return rd.truncate_metrics(step)
    except DamagedMetrics as e:
        from rlgrad.cli.events import event_rows

        kept = rd.set_aside_metrics()
        try:
            rows = event_rows(rd.path, step)
        except Exception as err:  # damaged event files too: begin a new table
            rows, why = [], f" (the TensorBoard event files cannot be read either: {err})"
        else:
            why = "" if rows else " (the TensorBoard event files hold none)"
        if rows:
            rd.write_metrics(rows)
            new = (f"its {len(rows)} rows up to step {step} were rebuilt from the TensorBoard "
                   "event files (with their float32 values)")
        else:
            new = f"a new metrics.csv begins after step {step}{why}"
        print(f"rlgrad: warning: {e.message}; it is kept as {kept.name}, and {new}",
              file=sys.stderr)
        return 0


def cmd_resume(run_dir: str, steps: int | None, progress: bool,
               keep_checkpoints: int | None = None, trust: ModuleTrust | None = None) -> int:
    rd = RunDir(run_dir)
    if steps is not None and steps < 1:
        raise CLIError(f"--steps must be positive, got {steps}")
    if keep_checkpoints is not None and keep_checkpoints < 1:
        raise CLIError(f"--keep-checkpoints must be at least 1, got {keep_checkpoints}")
    rd.read_config()  # a run directory: its lock file is made in nothing else
    with rd.lock():  # before the checkpoint is read: a live trainer may be rotating it
        algo, cfg, ckpt = restore(rd, trust=trust)
        if steps is not None:
            cfg["total_timesteps"] = int(steps)
        if keep_checkpoints is not None:
            cfg["keep_checkpoints"] = int(keep_checkpoints)
        return _resume(rd, algo, cfg, ckpt, progress)


def _resume(rd: RunDir, algo: Any, cfg: dict[str, Any], ckpt: dict[str, Any], progress: bool
            ) -> int:
    total = int(cfg["total_timesteps"])
    step = algo.num_timesteps
    st = ckpt.get("env_state")
    if isinstance(st, dict):
        if st.get("exact"):
            try:
                envstate.restore(algo.vector_env, st)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise CLIError(f"corrupt checkpoint: the environment state in {rd.checkpoint} "
                               f"does not fit {cfg['env_id']}: {e}") from None
        else:
            # The env keeps state we cannot save (a physics engine): start new episodes, seeded
            # from the step so that the resumed run is still reproducible.
            algo._last_obs = algo._adapter.reset(seed=int(algo.seed) + step)
            algo._on_reset()
            print(f"rlgrad: note: the state of {cfg['env_id']} cannot be checkpointed "
                  f"({st.get('unknown')}); the resumed run starts new episodes", file=sys.stderr)
    if hasattr(algo, "replay_buffer") and "replay_buffer" not in ckpt["state"] and step < total:
        print("rlgrad: note: this run's checkpoints leave the replay buffer out "
              "(--no-buffer-in-checkpoint): the resumed run starts with an empty buffer, which "
              "fills again from the next step on", file=sys.stderr)
    if step >= total:
        print(f"run already complete: step {step} of {total} (rlgrad resume {rd.path} --steps N "
              "trains it further)")
        return 0
    try:
        rd.create()
        rd.remove_stale_temporaries()
        used = Path((getattr(ckpt, "source", None) or (rd.checkpoint,))[0])
        for moved in rd.set_aside_newer_than(used):
            print(f"rlgrad: note: the unusable checkpoint is kept as {moved}", file=sys.stderr)
        dropped = _metrics_back_to(rd, step)
    except OSError as e:
        raise CLIError(f"cannot write the run directory '{rd.path}': {e.strerror or e}") from None
    # the logger's in-memory history (series(), the final message) continues from the CSV
    algo.logger.history = [dict(r) for r in rd.read_metrics()]
    _add_writers(algo, rd, purge_step=step + 1)
    cfg.setdefault("resumes", []).append({"from_step": step, "at": time.strftime(
        "%Y-%m-%d %H:%M:%S"), "metrics_rows_dropped": dropped, "versions": versions()})
    rd.write_config(cfg)
    print(f"resuming {rd.path} at step {step} of {total}")
    return _train_loop(algo, rd, plain(cfg), progress, resumed=True)
