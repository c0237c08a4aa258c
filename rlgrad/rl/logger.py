"""Metrics under Stable-Baselines3's key names, kept in memory and passed to pluggable writers.

``logger.record("train/value_loss", x)`` stores a value for the current row; ``dump(step)``
closes the row, appends it to ``logger.history`` and hands it to every writer. A writer is any
object with ``write(row: dict, step: int)`` (and optionally ``close()``): ``CSVWriter`` and
``TensorBoardWriter`` are provided; a command-line layer can add its own.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Protocol


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
            tmp = self.path + ".tmp"
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=self.keys)
                w.writeheader()
                w.writerows(self.rows)
            os.replace(tmp, self.path)
        else:
            with open(self.path, "a", newline="", encoding="utf-8") as f:
                csv.DictWriter(f, fieldnames=self.keys).writerow(row)


class TensorBoardWriter:
    """Scalars to TensorBoard event files through tensorboardX (imported on first use)."""

    def __init__(self, logdir: str) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir)

    def write(self, row: dict[str, Any], step: int) -> None:
        for k, v in row.items():
            if isinstance(v, int | float) and k != "time/total_timesteps":
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
