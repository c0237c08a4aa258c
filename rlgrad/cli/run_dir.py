"""The run directory: what a training run leaves behind, and how to read it back.

::

    runs/CartPole-v1__ppo__0__20250101-120000/
        config.yaml              resolved hyperparameters, seed, budget, versions
        metrics.csv              one row per logged iteration (Stable-Baselines3 key names)
        events.out.tfevents.*    the same scalars for TensorBoard
        learning_curve.png       episode return against steps (end of training, every checkpoint)
        checkpoint.safetensors   the newest checkpoint (rlgrad.save: atomic, checksummed)
        checkpoint.1.safetensors the one before it (``keep_checkpoints`` of them are kept, 2 by
                                 default); a damaged newest one is replaced by the previous

Every file that is rewritten is written under a temporary name and renamed over the old one, so a
``kill -9`` at any moment leaves the old version or the new one, never half of each. metrics.csv
is appended to (one small write per row); a resume cuts it back to the checkpoint's step.

A run directory may come from someone else: a symbolic link where a run file belongs is refused
(``check_no_links``; the lock and the metrics writer also open with ``O_NOFOLLOW``), and
config.yaml is read bounded (``rlgrad.cli.safe_files``).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fnmatch
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

from rlgrad.cli.errors import CLIError
from rlgrad.cli.safe_files import NOFOLLOW, link_error, load_yaml, open_regular, read_bounded
from rlgrad.serialization import atomic_copy, atomic_replace

CONFIG = "config.yaml"
METRICS = "metrics.csv"
CHECKPOINT = "checkpoint.safetensors"
CURVE = "learning_curve.png"
LOCK = "run.lock"
STEP_KEY = "time/total_timesteps"
DEFAULT_KEEP = 2  # checkpoints kept: the newest and the one before it
# the names rlgrad reads and writes in a run directory: none of them may be a link
RUN_FILES = (CONFIG, METRICS, CURVE, LOCK, "checkpoint*.safetensors*", "metrics.damaged-*.csv",
             "events.out.tfevents.*", "*.tmp", ".*.tmp", ".write-test")


class DamagedMetrics(CLIError):
    """metrics.csv cannot be read as the CSV table rlgrad writes."""


class DamagedCheckpoint(CLIError):
    """A checkpoint file that cannot be used (missing, truncated, corrupt, not a training
    checkpoint, or state that does not fit): an earlier checkpoint may stand in for it."""


def run_inside(path: str | os.PathLike) -> RunDir:
    """The run directory ``path``, or the one run in the folder ``path`` (``runs/`` holding a
    single run: it is named on stdout); a folder of several runs is refused, naming them."""
    rd = RunDir(path)
    if not rd.path.is_dir() or rd.config.exists():
        return rd
    runs = sorted(p for p in rd.path.iterdir() if (p / CONFIG).is_file())
    if len(runs) == 1:
        print(f"{rd.path}: using the one run inside it, {runs[0]}")
        return RunDir(runs[0])
    if len(runs) > 1:
        shown = ", ".join(str(p) for p in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise CLIError(f"'{rd.path}' holds {len(runs)} runs; name one: {shown}")
    return rd


def default_run_dir(env_id: str, algo: str, seed: int, root: str = "runs") -> Path:
    """``runs/ENV__ALGO__SEED__TIMESTAMP`` (a suffix is added if two runs start in one second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe_env = env_id.replace("/", "_").replace(":", "_")
    base = Path(root) / f"{safe_env}__{algo}__{seed}__{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def versions() -> dict[str, str]:
    import gymnasium

    import rlgrad

    return {"rlgrad": rlgrad.__version__, "numpy": np.__version__,
            "gymnasium": gymnasium.__version__, "python": platform.python_version()}


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (crash-safe; the rename
    replaces a link, never writes through it, and a link there is refused first)."""
    if os.path.islink(path):
        raise link_error(path)
    with atomic_replace(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def plain(x: Any) -> Any:
    """A YAML/JSON-safe copy: tuples to lists, NumPy scalars and arrays to Python values."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if x is None or isinstance(x, bool | int | float | str):
        return x
    return str(x)


class RunDir:
    """Paths and file formats of one run directory."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    config = property(lambda self: self.path / CONFIG)
    metrics = property(lambda self: self.path / METRICS)
    checkpoint = property(lambda self: self.path / CHECKPOINT)
    curve = property(lambda self: self.path / CURVE)

    # ---- creation ------------------------------------------------------------------------------
    def create(self) -> None:
        """Make the directory and prove it can be written, or raise a one-line CLIError."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.check_no_links()
            probe = self.path / ".write-test"
            probe.unlink(missing_ok=True)
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600))
            probe.unlink()
        except OSError as e:
            reason = e.strerror or type(e).__name__
            raise CLIError(f"cannot write the run directory '{self.path}': {reason}") from None

    def check_no_links(self) -> None:
        """A one-line ``CLIError`` for a symbolic link where a run file should be: rlgrad reads
        and writes a run's files only as files of the run directory itself."""
        if not self.path.is_dir():
            return
        for entry in os.scandir(self.path):
            if entry.is_symlink() and any(fnmatch.fnmatch(entry.name, p) for p in RUN_FILES):
                raise link_error(entry.path)

    def remove_stale_temporaries(self) -> None:
        """Temporary files a kill left behind (the files they were meant to replace are whole)."""
        for p in self.path.glob("*.tmp"):
            p.unlink(missing_ok=True)
        for p in self.path.glob(".*.tmp"):
            p.unlink(missing_ok=True)

    def clear_outputs(self) -> None:
        """Remove what a run that never reached a checkpoint left (before training it anew)."""
        for p in [self.config, self.metrics, self.curve, *self.path.glob("events.out.tfevents.*")]:
            p.unlink(missing_ok=True)
        self.remove_stale_temporaries()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One process at a time trains a run directory: it holds an exclusive ``flock`` on
        ``run.lock`` (which says its pid). The kernel drops the lock when the process ends, even
        by kill -9, so there is no stale lock to judge and no window between checking and taking
        it (a pid check could take a zombie or a reused pid for the trainer)."""
        path = self.path / LOCK
        if path.is_dir():
            raise CLIError(f"'{path}' is a directory where rlgrad keeps its lock file; remove it "
                           "(no rlgrad process uses a directory there)")
        self.check_no_links()  # before a byte is written
        if fcntl is None:  # pragma: no cover - no flock on this platform
            with self._pid_lock(path):
                yield
            return
        fd = self._take_flock(path)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while holding it: a newcomer's lock is on a new file
            os.close(fd)

    def _take_flock(self, path: Path) -> int:
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
            except OSError as e:
                if e.errno == errno.ELOOP:  # a link: its target would be truncated
                    raise link_error(path) from None
                raise CLIError(f"cannot write the run directory '{self.path}': "
                               f"{e.strerror or e}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                other = _pid_in(fd)
                os.close(fd)
                who = f"process {other}" if other else "another process"
                raise CLIError(f"'{self.path}' is being trained by {who} right now; wait for it "
                               "or stop it (Ctrl-C checkpoints it) before resuming") from None
            try:  # the file we locked may have been unlinked by its last holder as it ended
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    @contextlib.contextmanager
    def _pid_lock(self, path: Path) -> Iterator[None]:
        """Where there is no flock: ``run.lock`` holds the trainer's pid (a dead one's is taken
        over)."""
        try:
            other = int(path.read_text().strip() or 0)
        except (OSError, ValueError):
            other = 0
        if other and other != os.getpid() and _alive(other):
            raise CLIError(f"'{self.path}' is being trained by process {other} right now; wait "
                           "for it or stop it (Ctrl-C checkpoints it) before resuming")
        try:
            atomic_write_bytes(path, f"{os.getpid()}\n".encode())
        except OSError as e:
            raise CLIError(f"cannot write the run directory '{self.path}': "
                           f"{e.strerror or e}") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)

    def write_config(self, config: dict[str, Any]) -> None:
        import yaml

        text = yaml.safe_dump(plain(config), sort_keys=False, default_flow_style=False)
        atomic_write_bytes(self.config, text.encode())

    # ---- reading back ------------------------------------------------------------------------
    def require(self) -> None:
        if not self.path.is_dir():
            raise CLIError(f"no run directory at '{self.path}'")

    def read_config(self) -> dict[str, Any]:
        """config.yaml, read as an untrusted file (bounded, no link, no alias bomb) and checked."""
        self.require()
        self.check_no_links()
        if not self.config.exists() and not self.config.is_symlink():
            raise CLIError(f"'{self.path}' is not a run directory: it has no {CONFIG}")
        try:
            cfg = load_yaml(read_bounded(self.config), str(self.config))
        except OSError as e:
            raise CLIError(f"cannot read {self.config}: {type(e).__name__}: {e}") from None
        if not isinstance(cfg, dict) or "env_id" not in cfg or "algo" not in cfg:
            raise CLIError(f"{self.config} is not an rlgrad run configuration")
        _check_config(cfg, self.config)
        return cfg

    # ---- checkpoints: the newest is checkpoint.safetensors, older ones checkpoint.N.safetensors
    def checkpoint_path(self, age: int) -> Path:
        """The checkpoint ``age`` saves before the newest (0: the newest)."""
        return self.checkpoint if age == 0 else self.path / f"checkpoint.{age}.safetensors"

    def checkpoint_paths(self) -> list[Path]:
        """The checkpoints there are, newest first."""
        ages = [0] if self.checkpoint.exists() else []
        for p in self.path.glob("checkpoint.*.safetensors"):
            mid = p.name[len("checkpoint."):-len(".safetensors")]
            if mid.isdigit() and int(mid) > 0:
                ages.append(int(mid))
        return [self.checkpoint_path(a) for a in sorted(ages)]

    def save_checkpoint(self, obj: dict[str, Any], keep: int = DEFAULT_KEEP) -> None:
        """Write ``obj`` as the newest checkpoint and keep the ``keep - 1`` before it. Every step
        is a rename or an atomic write, so a kill -9 anywhere leaves checkpoint.safetensors whole
        (the older ones may then be one save behind, never broken)."""
        import rlgrad

        for p in self.checkpoint_paths():  # a smaller --keep-checkpoints than before
            if p != self.checkpoint and int(p.name.split(".")[1]) >= keep:
                p.unlink(missing_ok=True)
        if keep > 1 and self.checkpoint.exists():
            try:
                for age in range(keep - 1, 1, -1):
                    older = self.checkpoint_path(age - 1)
                    if older.exists():
                        os.replace(older, self.checkpoint_path(age))
                atomic_copy(self.checkpoint, self.checkpoint_path(1))
            except OSError as e:  # e.g. a folder in the way: the new checkpoint matters more
                print(f"rlgrad: warning: the previous checkpoint could not be kept: {e}",
                      file=sys.stderr)
        rlgrad.save(obj, self.checkpoint)

    def set_aside_newer_than(self, used: Path) -> list[Path]:
        """Rename the checkpoints newer than ``used`` (they failed their checks) to
        NAME.damaged: out of the rotation, so later saves keep ``used``, yet not deleted."""
        moved = []
        for p in self.checkpoint_paths():
            if p == used:
                break
            dst = p.with_name(p.name + ".damaged")
            os.replace(p, dst)
            moved.append(dst)
        return moved

    def load_checkpoint(self, path: Path | None = None) -> dict[str, Any]:
        """A checkpoint (the newest by default) as a dict; ``DamagedCheckpoint`` (one line) when
        it is missing, damaged or not a training checkpoint."""
        import rlgrad
        from rlgrad.serialization import CheckpointError

        self.require()
        path = self.checkpoint if path is None else path
        if not path.exists():
            if path != self.checkpoint or len(self.checkpoint_paths()) > 0:
                raise DamagedCheckpoint(f"{path.name} is missing")
            again = "rlgrad train ..."
            try:
                again = str(self.read_config().get("command") or again)
            except CLIError:
                pass
            raise DamagedCheckpoint(
                f"no checkpoint in '{self.path}' ({CHECKPOINT} is missing): the run stopped before "
                f"its first checkpoint; start it again: {again}"
            )
        try:
            ckpt = rlgrad.load(path)
        except (CheckpointError, OSError) as e:
            raise DamagedCheckpoint(f"corrupt checkpoint: {e}") from None
        if not isinstance(ckpt, dict) or not {"algo", "state", "hyperparams"} <= set(ckpt) or not (
                isinstance(ckpt["state"], dict) and isinstance(ckpt["hyperparams"], dict)):
            raise DamagedCheckpoint(f"corrupt checkpoint: '{path}' is not an rlgrad training "
                                    "checkpoint (no algo/state/hyperparams)")
        return ckpt

    def read_metrics(self) -> list[dict[str, Any]]:
        """metrics.csv as rows of floats (empty cells dropped); [] when there is none yet."""
        return read_metrics_csv(self.metrics)

    def truncate_metrics(self, max_step: int) -> int:
        """Keep only the rows logged at or before ``max_step`` (and drop a torn last line, which
        only a kill in the middle of an append can leave); returns how many rows were dropped."""
        if not self.metrics.exists():
            return 0
        header, rows = _read_table(self.metrics)
        if not header:
            self.metrics.unlink()
            return len(rows)
        keep = []
        col = header.index(STEP_KEY)
        for r in rows:
            if len(r) != len(header):
                continue
            try:
                step = int(float(r[col]))
            except ValueError:
                continue
            if step <= max_step:
                keep.append(r)
        dropped = len(rows) - len(keep)
        if dropped:
            lines: list[str] = []

            class _Sink:  # csv.writer wants a file; collect the lines for an atomic write
                def write(self, s: str) -> None:
                    lines.append(s)

            w = csv.writer(_Sink())
            w.writerow(header)
            w.writerows(keep)
            atomic_write_bytes(self.metrics, "".join(lines).encode())
        return dropped

    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` as metrics.csv (atomically), columns in order of first appearance."""
        keys = list(dict.fromkeys(k for r in rows for k in r))
        lines: list[str] = []

        class _Sink:
            def write(self, s: str) -> None:
                lines.append(s)

        w = csv.DictWriter(_Sink(), fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
        atomic_write_bytes(self.metrics, "".join(lines).encode())

    def set_aside_metrics(self) -> Path:
        """Rename a damaged metrics.csv to metrics.damaged-N.csv (kept, never overwritten)."""
        i = 1
        while (dst := self.path / f"metrics.damaged-{i}.csv").exists():
            i += 1
        os.replace(self.metrics, dst)
        return dst


def _not_text(e: UnicodeDecodeError) -> str:
    return (f"it is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}), "
            "as if overwritten with other data")


def _read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a metrics CSV; ``DamagedMetrics`` when it is not one."""
    if path.is_symlink():
        raise link_error(path)
    try:
        fd = open_regular(path)
    except CLIError as e:  # a folder or FIFO in its place: damaged, set aside like any damage
        raise DamagedMetrics(e.message) from None
    try:
        with os.fdopen(fd, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None) or []
            rows = list(reader)
    except UnicodeDecodeError as e:
        raise DamagedMetrics(f"{path} is damaged: {_not_text(e)}") from None
    except csv.Error as e:
        raise DamagedMetrics(f"{path} is damaged: it is not a CSV table ({e})") from None
    if (header or rows) and STEP_KEY not in header:
        raise DamagedMetrics(f"{path} is damaged: its first line is not a header with a "
                             f"{STEP_KEY} column")
    return header, rows


def _check_config(cfg: dict[str, Any], path: Path) -> None:
    """The fields a resume relies on have the types rlgrad wrote (a hand edit may break them)."""
    def count(v: Any, low: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= low

    checks = {"env_id": (lambda v: isinstance(v, str) and v, "an environment id"),
              "algo": (lambda v: isinstance(v, str) and v, "an algorithm name"),
              "seed": (lambda v: count(v, 0), "a non-negative integer"),
              "total_timesteps": (lambda v: count(v, 1), "a positive integer"),
              "checkpoint_interval": (lambda v: count(v, 1), "a positive integer"),
              "keep_checkpoints": (lambda v: count(v, 1), "a positive integer"),
              "hyperparams": (lambda v: isinstance(v, dict), "a mapping")}
    for key, (ok, want) in checks.items():
        if key in cfg and not ok(cfg[key]):
            raise CLIError(f"{path} is damaged: {key} is {cfg[key]!r}, expected {want}")
    if not isinstance(cfg.get("resumes", []), list):
        raise CLIError(f"{path} is damaged: resumes is {cfg['resumes']!r}, expected a list")


def _pid_in(fd: int) -> int:
    """The pid a lock file says (0 if it says none)."""
    try:
        return int(os.pread(fd, 32, 0).decode("ascii", "replace").strip() or 0)
    except (OSError, ValueError):
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def space_signature(space: Any) -> dict[str, Any]:
    """What a network's shape depends on in a Gymnasium space, as plain data: kind, shape,
    dtype, and the number of choices of a discrete space (bounds may differ: they only scale)."""
    sig: dict[str, Any] = {"type": type(space).__name__}
    if getattr(space, "shape", None) is not None:
        sig["shape"] = [int(d) for d in space.shape]
    if getattr(space, "dtype", None) is not None:
        sig["dtype"] = str(space.dtype)
    for attr in ("n", "nvec"):
        if getattr(space, attr, None) is not None:
            sig[attr] = plain(np.asarray(getattr(space, attr)))
    return sig


def peek_step(path: Path) -> int | None:
    """The step a checkpoint was saved at, from its header alone (which outlives damage to the
    arrays after it); None when even that cannot be read."""
    if path.is_symlink() or not path.is_file():  # a FIFO would never answer
        return None
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(min(n, 10_000_000)))
        node = json.loads(header["__metadata__"]["tree"])
        for key in ("run", "num_timesteps"):
            node = dict(node["$dict"])[key]
    except Exception:  # any damage at all: the step is unknown
        return None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def read_metrics_csv(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics CSV as floats (empty cells dropped); [] when there is none yet;
    ``DamagedMetrics`` (one line) when the file is not such a table."""
    if not path.exists():
        return []
    header, rows = _read_table(path)
    out = []
    for row in rows:
        clean: dict[str, Any] = {}
        for k, v in zip(header, row):
            if v == "":
                continue
            try:
                clean[k] = float(v)
            except ValueError:
                clean[k] = v
        if isinstance(clean.get(STEP_KEY), float):
            out.append(clean)
    return out
