"""Metrics under Stable-Baselines3's key names, kept in memory and passed to pluggable writers.

``logger.record("train/value_loss", x)`` stores a value for the current row; ``dump(step)``
closes the row, appends it to ``logger.history`` and hands it to every writer. A writer is any
object with ``write(row: dict, step: int)`` (and optionally ``close()``): ``CSVWriter`` and
``TensorBoardWriter`` are provided; a command-line layer can add its own.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import itertools
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, Protocol

from rlgrad.serialization import atomic_replace

_FILE_IDS = itertools.count(1)


class Writer(Protocol):
    def write(self, row: dict[str, Any], step: int) -> None: ...


class Logger:
    def __init__(self, writers: list[Writer] | None = None) -> None:
        self.writers: list[Writer] = list(writers or [])
        self.name_to_value: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []

    def record(self, key: str, value: Any) -> None:
        self.name_to_value[key] = value

    def add_writer(self, writer: Writer) -> None:
        self.writers.append(writer)

    def dump(self, step: int) -> dict[str, Any]:
        row = dict(self.name_to_value)
        row["time/total_timesteps"] = int(step)
        self.name_to_value.clear()
        self.history.append(row)
        for w in self.writers:
            w.write(row, step)
        return row

    def series(self, key: str) -> tuple[list[int], list[Any]]:
        """(steps, values) of ``key`` over the dumped rows that have it (for plots and tests)."""
        steps, vals = [], []
        for row in self.history:
            if key in row:
                steps.append(row["time/total_timesteps"])
                vals.append(row[key])
        return steps, vals

    def close(self) -> None:
        for w in self.writers:
            close = getattr(w, "close", None)
            if close is not None:
                close()

    # checkpoints: the history is plain numbers and strings
    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(r) for r in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(r) for r in state.get("history", [])]


class CSVWriter:
    """One CSV row per dump; new keys appearing later rewrite the header (rows are few)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        if os.path.exists(path):  # resuming: keep what is there
            try:
                with open(path, newline="", encoding="utf-8") as f:
                    r = csv.DictReader(f)
                    self.keys = list(r.fieldnames or [])
                    self.rows = list(r)
            except (UnicodeDecodeError, csv.Error) as e:
                raise ValueError(f"{path} is not a CSV table of metrics ({type(e).__name__}: "
                                 f"{e}); move it away or choose another path") from None

    def write(self, row: dict[str, Any], step: int) -> None:
        self.rows.append(row)
        new = [k for k in row if k not in self.keys]
        if new or not os.path.exists(self.path):
            self.keys += new
            with atomic_replace(self.path) as tmp, open(tmp, "w", newline="",
                                                        encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=self.keys)
                w.writeheader()
                w.writerows(self.rows)
        else:
            # O_NOFOLLOW: rows are never appended to the target of a link put in the file's place
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise OSError(e.errno, f"{self.path} is a symbolic link; metrics are never "
                                  "written through links (replace it with the file)") from None
                raise
            with os.fdopen(fd, "a", newline="", encoding="utf-8") as f:
                csv.DictWriter(f, fieldnames=self.keys).writerow(row)


@contextlib.contextmanager
def without_torch() -> Iterator[None]:
    """tensorboardX imports torch when it is installed, only to accept torch tensors (2-5 s per
    process); rlgrad logs floats, so that import is made to fail fast while tensorboardX loads."""
    missing = "torch" not in sys.modules
    if missing:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if missing:
            sys.modules.pop("torch", None)


class TensorBoardWriter:
    """Scalars to TensorBoard event files through tensorboardX (imported on first use);
    ``purge_step`` hides what earlier files logged from that step on (a resumed run)."""

    def __init__(self, logdir: str, purge_step: int | None = None) -> None:
        with without_torch():
            from tensorboardX import SummaryWriter

        self.logdir = logdir
        # a run continued in the same folder within the same second must not overwrite the
        # file before it (tensorboardX names files by the second and host only)
        self.writer = SummaryWriter(logdir, purge_step=purge_step, flush_secs=10,
                                    filename_suffix=f".{os.getpid()}.{next(_FILE_IDS)}")

    def write(self, row: dict[str, Any], step: int) -> None:
        for k, v in row.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "time/total_timesteps":
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def next_run_dir(root: str, name: str, new: bool = True) -> str:
    """SB3's TensorBoard run folder ``<root>/<name>_<n>``: ``n`` one more than the largest there
    (from 1), or the largest itself when a run continues (``new=False``, SB3's
    ``reset_num_timesteps=False``; ``<name>_0`` if there is none, as SB3 names it)."""
    pattern = re.compile(re.escape(name) + r"_(\d+)$")
    ids = [int(m.group(1)) for f in (os.listdir(root) if os.path.isdir(root) else ())
           if (m := pattern.match(f))]
    last = max(ids, default=0)
    return os.path.join(root, f"{name}_{last + 1 if new else last}")


class HumanWriter:
    """Each row printed as SB3's ``verbose=1`` table: keys sorted and grouped by their prefix
    (``rollout/``, ``time/``, ``train/``), floats as ``%.3g``, keys and values cut at
    ``max_length`` characters."""

    def __init__(self, file: Any = None, max_length: int = 36) -> None:
        self.file = file
        self.max_length = max_length

    def _cut(self, s: str) -> str:
        return s if len(s) <= self.max_length else s[:self.max_length - 3] + "..."

    def format(self, row: dict[str, Any]) -> str:
        lines: list[tuple[str, str]] = []
        tag = ""
        for key, value in sorted(row.items()):
            text = f"{value:<8.3g}" if isinstance(value, float) else str(value)
            if "/" in key[1:]:
                new_tag = key[:key.index("/", 1) + 1]
                if new_tag != tag:
                    tag = new_tag
                    lines.append((self._cut(tag), ""))
                key = "   " + key[len(tag):]
            lines.append((self._cut(key), self._cut(text)))
        kw = max(len(k) for k, _ in lines)
        vw = max(len(v) for _, v in lines)
        dashes = "-" * (kw + vw + 7)
        body = [f"| {k}{' ' * (kw - len(k))} | {v}{' ' * (vw - len(v))} |" for k, v in lines]
        return "\n".join([dashes, *body, dashes])

    def write(self, row: dict[str, Any], step: int) -> None:
        if row:
            print(self.format(row), file=self.file or sys.stdout, flush=True)


def configure(folder: str | None = None, format_strings: list[str] | None = None) -> Logger:
    """SB3's ``configure``: a Logger writing to ``folder`` in the formats named: ``"stdout"``
    (SB3's table), ``"csv"`` (``progress.csv``), ``"tensorboard"``; ``"log"`` and ``"json"`` are
    not written (one line says so). Use it with ``model.set_logger``."""
    formats = ["stdout", "csv"] if format_strings is None else list(format_strings)
    unknown = sorted(set(formats) - {"stdout", "csv", "tensorboard"})
    if unknown:
        raise ValueError(f"configure: format {unknown[0]!r} is not written by rlgrad; use "
                         "'stdout', 'csv' or 'tensorboard'")
    if folder is None and set(formats) - {"stdout"}:
        raise ValueError("configure: the csv and tensorboard formats need a folder")
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
    make = {"stdout": HumanWriter, "csv": lambda: CSVWriter(os.path.join(folder, "progress.csv")),
            "tensorboard": lambda: TensorBoardWriter(folder)}
    return Logger([make[f]() for f in formats])
