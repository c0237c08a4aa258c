"""A run's TensorBoard event files read back: the scalars of every logged row, so that a damaged
metrics.csv can be rebuilt up to the checkpoint's step.

An event file is a sequence of TFRecords (length, its CRC, an ``Event`` protobuf, its CRC); a
torn or damaged record ends the file's reading. A resume asks tensorboardX for ``purge_step``,
which writes a ``SessionLog.START`` event at that step: as TensorBoard does, it hides the events
of earlier files at or after that step. Values come back as TensorBoard stores them (float32).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlgrad.rl.logger import without_torch  # noqa: F401 - it lived here; the CLI imports it from here

STEP_KEY = "time/total_timesteps"


def _records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    i = 0
    while i + 12 <= len(data):
        n = int.from_bytes(data[i:i + 8], "little")
        if i + 16 + n > len(data):
            return  # a record cut short by a kill: the end of what was written
        yield data[i + 12:i + 12 + n]
        i += 16 + n


def _written_at(path: Path) -> tuple[float, str]:
    """Event files are named events.out.tfevents.TIME.HOST: older files first."""
    parts = path.name.split(".")
    try:
        return float(parts[3]), path.name
    except (IndexError, ValueError):
        return path.stat().st_mtime, path.name


def event_rows(folder: Path, max_step: int) -> list[dict[str, Any]]:
    """The rows logged at steps up to ``max_step``, as TensorBoard shows them; [] when there
    are no event files or they cannot be read."""
    with without_torch():
        from tensorboardX.proto.event_pb2 import Event, SessionLog

    by_step: dict[int, dict[str, Any]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*"), key=_written_at):
        try:
            records = list(_records(path))
        except OSError:
            continue
        for rec in records:
            ev = Event()
            try:
                ev.ParseFromString(rec)
            except Exception:  # a damaged record: nothing after it in this file is trusted
                break
            if ev.HasField("session_log") and ev.session_log.status == SessionLog.START:
                for s in [s for s in by_step if s >= ev.step]:
                    del by_step[s]
            if ev.HasField("summary"):
                row = by_step.setdefault(int(ev.step), {})
                for v in ev.summary.value:
                    if v.WhichOneof("value") == "simple_value":
                        row[v.tag] = float(v.simple_value)
    return [{**row, STEP_KEY: step} for step, row in sorted(by_step.items())
            if row and step <= max_step]
