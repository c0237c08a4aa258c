"""Stable-Baselines3's logger: metrics under SB3's key names, written by output formats.

``logger.record("train/value_loss", x)`` stores a value for the current row; ``dump(step)``
closes the row, hands it to every output format and appends its plain values to
``logger.history`` (what plots and checkpoints read). SB3's formats are ``HumanOutputFormat``
(the ``verbose=1`` table), ``CSVOutputFormat``, ``JSONOutputFormat`` and
``TensorBoardOutputFormat`` (tensorboardX, loaded without torch), each a ``KVWriter``; any object
with ``write(row: dict, step: int)`` (and optionally ``close()``) is a writer too (the CLI's).
``configure(folder, ["stdout", "csv", ...])`` builds a Logger as SB3's does.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import itertools
import json
import os
import re
import sys
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rlgrad.serialization import atomic_replace

_FILE_IDS = itertools.count(1)


DEBUG, INFO, WARN, ERROR, DISABLED = 10, 20, 30, 40, 50


class Writer(Protocol):
    """rlgrad's writer: ``write(row, step)`` with the row's plain values (numbers, strings)."""

    def write(self, row: dict[str, Any], step: int) -> None: ...


# ---- values that only some formats can write (SB3's) ---------------------------------------------
class Video:
    """Frames (N, T, C, H, W), uint8 or floats in [0, 1], and frames per second."""

    def __init__(self, frames: Any, fps: float) -> None:
        self.frames, self.fps = frames, fps


class Figure:
    """A matplotlib figure (closed once written when ``close``)."""

    def __init__(self, figure: Any, close: bool) -> None:
        self.figure, self.close = figure, close


class Image:
    """An image array and its layout (``"HWC"``, ``"CHW"``, ...)."""

    def __init__(self, image: Any, dataformats: str) -> None:
        self.image, self.dataformats = image, dataformats


class HParam:
    """Hyperparameters and the metrics TensorBoard's HPARAMS tab shows beside them."""

    def __init__(self, hparam_dict: Mapping[str, Any], metric_dict: Mapping[str, float]) -> None:
        if not metric_dict:
            raise ValueError("HParam: `metric_dict` must not be empty to display hyperparameters "
                             "to the HPARAMS tensorboard tab.")
        self.hparam_dict, self.metric_dict = hparam_dict, metric_dict


_RICH = {Video: "video", Figure: "figure", Image: "image", HParam: "hparam"}


class FormatUnsupportedError(NotImplementedError):
    """A value (video, figure, image, hparam) logged to a format that cannot write it."""

    def __init__(self, unsupported_formats: Sequence[str], value_description: str) -> None:
        what = (f"formats {', '.join(unsupported_formats)} are" if len(unsupported_formats) > 1
                else f"format {unsupported_formats[0]} is")
        super().__init__(f"The {what} not supported for the {value_description} value logged; "
                         "exclude formats with the `exclude` parameter of the logger's `record`.")


def _refuse_rich(value: Any, formats: list[str]) -> None:
    for cls, name in _RICH.items():
        if isinstance(value, cls):
            raise FormatUnsupportedError(formats, name)


def _excluded(key_excluded: Mapping[str, Any] | None, key: str, fmt: str) -> bool:
    ex = None if key_excluded is None else key_excluded.get(key)
    return ex is not None and fmt in ex


class KVWriter:
    """SB3's key-value writer: ``write(key_values, key_excluded, step)``."""

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any], step: int = 0
              ) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define write()")

    def close(self) -> None:
        pass


class SeqWriter:
    """SB3's writer of text lines (``logger.info(...)``)."""

    def write_sequence(self, sequence: list[str]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define write_sequence()")


def _plain(value: Any) -> bool:
    return isinstance(value, int | float | str | np.number) and not isinstance(value, bool)


class Logger:
    """SB3's Logger (``record``, ``record_mean``, ``dump``, ``log``/``info``/..., levels) over
    its output formats, which also keeps every dumped row's plain values in ``history``."""

    def __init__(self, folder: str | None | list[Any] = None,
                 output_formats: list[Any] | None = None) -> None:
        if isinstance(folder, list):  # rlgrad's Logger(writers)
            folder, output_formats = None, folder
        self.dir = folder
        self.output_formats: list[Any] = list(output_formats or [])
        self.name_to_value: dict[str, Any] = defaultdict(float)
        self.name_to_count: dict[str, int] = defaultdict(int)
        self.name_to_excluded: dict[str, tuple[str, ...]] = {}
        self.level = INFO
        self.history: list[dict[str, Any]] = []
        self._learn_formats: list[Any] = []  # set by set_learn_formats at each learn

    @property
    def writers(self) -> list[Any]:
        return self.output_formats

    @staticmethod
    def to_tuple(string_or_tuple: str | tuple[str, ...] | None) -> tuple[str, ...]:
        if string_or_tuple is None:
            return ("",)
        return string_or_tuple if isinstance(string_or_tuple, tuple) else (string_or_tuple,)

    def record(self, key: str, value: Any, exclude: str | tuple[str, ...] | None = None) -> None:
        self.name_to_value[key] = value
        self.name_to_excluded[key] = self.to_tuple(exclude)

    def record_mean(self, key: str, value: float | None,
                    exclude: str | tuple[str, ...] | None = None) -> None:
        """As ``record``, the values of one row averaged."""
        if value is None:
            return
        old, count = self.name_to_value[key], self.name_to_count[key]
        self.name_to_value[key] = old * count / (count + 1) + value / (count + 1)
        self.name_to_count[key] = count + 1
        self.name_to_excluded[key] = self.to_tuple(exclude)

    def add_writer(self, writer: Any) -> None:
        self.output_formats.append(writer)

    def dump(self, step: int = 0) -> dict[str, Any]:
        """Close the row: every output format writes it, ``history`` keeps its plain values
        (and the step as ``time/total_timesteps``)."""
        if self.level == DISABLED:
            return {}
        values = dict(self.name_to_value)
        excluded = {k: self.name_to_excluded.get(k, ("",)) for k in values}
        row = {k: v for k, v in values.items() if _plain(v)}
        row.setdefault("time/total_timesteps", int(step))
        self.history.append(row)
        for w in self.output_formats:
            if isinstance(w, KVWriter):
                w.write(values, excluded, step)
            else:
                w.write(row, step)
        self.name_to_value.clear()
        self.name_to_count.clear()
        self.name_to_excluded.clear()
        return row

    def log(self, *args: Any, level: int = INFO) -> None:
        if self.level <= level:
            for w in self.output_formats:
                if isinstance(w, SeqWriter):
                    w.write_sequence([str(a) for a in args])

    def debug(self, *args: Any) -> None:
        self.log(*args, level=DEBUG)

    def info(self, *args: Any) -> None:
        self.log(*args, level=INFO)

    def warn(self, *args: Any) -> None:
        self.log(*args, level=WARN)

    def error(self, *args: Any) -> None:
        self.log(*args, level=ERROR)

    def set_level(self, level: int) -> None:
        self.level = level

    def get_dir(self) -> str | None:
        return self.dir

    def series(self, key: str) -> tuple[list[int], list[Any]]:
        """(steps, values) of ``key`` over the dumped rows that have it (for plots and tests)."""
        steps, vals = [], []
        for row in self.history:
            if key in row:
                steps.append(row["time/total_timesteps"])
                vals.append(row[key])
        return steps, vals

    def close(self) -> None:
        for w in self.output_formats:
            close = getattr(w, "close", None)
            if close is not None:
                close()

    # checkpoints: the history is plain numbers and strings
    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(r) for r in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(r) for r in state.get("history", [])]


class CSVOutputFormat(KVWriter):
    """One CSV row per dump; a key appearing later rewrites the file with the wider header
    (atomically: a crash leaves the old file or the new one). ``resume`` keeps the rows of an
    existing file (a run continued), else the file starts empty as SB3's does."""

    def __init__(self, filename: str, resume: bool = False) -> None:
        self.path = str(filename)
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        if resume and os.path.exists(self.path):
            try:
                with open(self.path, newline="", encoding="utf-8") as f:
                    r = csv.DictReader(f)
                    self.keys = list(r.fieldnames or [])
                    self.rows = list(r)
            except (UnicodeDecodeError, csv.Error) as e:
                raise ValueError(f"{self.path} is not a CSV table of metrics ({type(e).__name__}: "
                                 f"{e}); move it away or choose another path") from None
        elif not resume:
            open(self.path, "w").close()  # noqa: SIM115 - SB3 truncates at creation

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | int | None = None,
              step: int = 0) -> None:
        if not isinstance(key_excluded, Mapping):  # rlgrad's write(row, step)
            key_excluded = None
        row = {}
        for k, v in key_values.items():
            if _excluded(key_excluded, k, "csv"):
                continue
            _refuse_rich(v, ["csv"])
            row[k] = v
        self.rows.append(row)
        new = [k for k in row if k not in self.keys]
        if new or not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            self.keys += new
            with atomic_replace(self.path) as tmp, open(tmp, "w", newline="",
                                                        encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=self.keys)
                w.writeheader()
                w.writerows(self.rows)
            return
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


class CSVWriter(CSVOutputFormat):
    """The CLI's metrics table: an existing file is continued (a resumed run), and every row
    has its step as ``time/total_timesteps`` (the curves' x axis)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, resume=True)

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | int | None = None,
              step: int = 0) -> None:
        if not isinstance(key_excluded, Mapping):  # rlgrad's write(row, step)
            step, key_excluded = int(key_excluded or step), None
        super().write({**key_values, "time/total_timesteps": key_values.get(
            "time/total_timesteps", int(step))}, key_excluded, step)


class JSONOutputFormat(KVWriter):
    """One JSON object per dump, one per line; arrays as lists (a single value as a float)."""

    def __init__(self, filename: str) -> None:
        self.file = open(filename, "w")  # noqa: SIM115 - closed by close()

    @staticmethod
    def _json(value: Any) -> Any:
        _refuse_rich(value, ["json"])
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.detach().cpu().numpy() if hasattr(value, "detach") else value.numpy()
        if hasattr(value, "dtype"):
            value = np.asarray(value)
            return float(value.item()) if value.size == 1 else value.tolist()
        return value

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | None = None,
              step: int = 0) -> None:
        out = {k: self._json(v) for k, v in key_values.items()
               if not _excluded(key_excluded, k, "json")}
        self.file.write(json.dumps(out) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


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


def _numpy(value: Any) -> Any:
    """A torch or rlgrad tensor as a NumPy array (tensorboardX is loaded without torch)."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "cpu"):
        value = value.cpu()
    return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value


class TensorBoardOutputFormat(KVWriter):
    """TensorBoard event files through tensorboardX (imported on first use): numbers as scalars,
    strings as text, arrays and tensors as histograms, SB3's Video / Figure / Image / HParam;
    ``purge_step`` hides what earlier files logged from that step on (a resumed run)."""

    def __init__(self, folder: str, purge_step: int | None = None) -> None:
        with without_torch():
            from tensorboardX import SummaryWriter

        self.logdir = str(folder)
        # a run continued in the same folder within the same second must not overwrite the
        # file before it (tensorboardX names files by the second and host only)
        self.writer = SummaryWriter(self.logdir, purge_step=purge_step, flush_secs=10,
                                    filename_suffix=f".{os.getpid()}.{next(_FILE_IDS)}")
        self._is_closed = False

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | int | None = None,
              step: int = 0) -> None:
        if not isinstance(key_excluded, Mapping):  # rlgrad's write(row, step)
            step, key_excluded = int(key_excluded or step), None
        if self._is_closed:
            raise ValueError("TensorBoardOutputFormat: the SummaryWriter was closed; make a new one")
        for key, value in key_values.items():
            if _excluded(key_excluded, key, "tensorboard") or key == "time/total_timesteps":
                continue
            self._write_one(key, value, step)
        self.writer.flush()

    def _write_one(self, key: str, value: Any, step: int) -> None:
        w = self.writer
        if isinstance(value, str):
            w.add_text(key, value, step)
        elif isinstance(value, int | float | np.number) and not isinstance(value, bool):
            w.add_scalar(key, value, step)
        elif isinstance(value, np.ndarray) or hasattr(value, "numpy"):
            w.add_histogram(key, np.asarray(_numpy(value)), step)
        elif isinstance(value, Video):
            w.add_video(key, np.asarray(_numpy(value.frames)), step, fps=value.fps)
        elif isinstance(value, Figure):
            w.add_figure(key, value.figure, step, close=value.close)
        elif isinstance(value, Image):
            w.add_image(key, np.asarray(_numpy(value.image)), step, dataformats=value.dataformats)
        elif isinstance(value, HParam):
            from tensorboardX.summary import hparams

            for summary in hparams(dict(value.hparam_dict), dict(value.metric_dict)):
                w._get_file_writer().add_summary(summary)

    def close(self) -> None:
        if not self._is_closed:
            self.writer.close()
            self._is_closed = True


TensorBoardWriter = TensorBoardOutputFormat  # rlgrad's name


def next_run_dir(root: str, name: str, new: bool = True) -> str:
    """SB3's TensorBoard run folder ``<root>/<name>_<n>``: ``n`` one more than the largest there
    (from 1), or the largest itself when a run continues (``new=False``, SB3's
    ``reset_num_timesteps=False``; ``<name>_0`` if there is none, as SB3 names it)."""
    pattern = re.compile(re.escape(name) + r"_(\d+)$")
    ids = [int(m.group(1)) for f in (os.listdir(root) if os.path.isdir(root) else ())
           if (m := pattern.match(f))]
    last = max(ids, default=0)
    return os.path.join(root, f"{name}_{last + 1 if new else last}")


class HumanOutputFormat(KVWriter, SeqWriter):
    """SB3's ``verbose=1`` table: keys sorted and grouped by their prefix (``rollout/``,
    ``time/``, ``train/``), floats as ``%.3g``, keys and values cut at ``max_length`` characters
    (two keys cut to the same text raise). ``filename_or_file``: a path, a file, or None for the
    standard output of the moment."""

    def __init__(self, filename_or_file: Any = None, max_length: int = 36) -> None:
        self.max_length = max_length
        self.own_file = isinstance(filename_or_file, str | os.PathLike)
        if self.own_file:
            filename_or_file = open(filename_or_file, "w")  # noqa: SIM115 - closed by close()
        elif filename_or_file is not None and not hasattr(filename_or_file, "write"):
            raise ValueError(f"Expected file or str, got {filename_or_file}")
        self.file = filename_or_file

    def _out(self) -> Any:
        return self.file if self.file is not None else sys.stdout

    def _cut(self, s: str) -> str:
        return s if len(s) <= self.max_length else s[:self.max_length - 3] + "..."

    def _lines(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | None
               ) -> dict[tuple[str, str], str]:
        out: dict[tuple[str, str], str] = {}
        tag = ""
        for key, value in sorted(key_values.items()):
            if _excluded(key_excluded, key, "stdout") or _excluded(key_excluded, key, "log"):
                continue
            _refuse_rich(value, ["stdout", "log"])
            text = f"{value:<8.3g}" if isinstance(value, float) else str(value)
            if key.find("/") > 0:
                tag = key[:key.find("/") + 1]
                out[(tag, self._cut(tag))] = ""
            if tag and tag in key:
                key = "   " + key[len(tag):]
            cut = self._cut(key)
            if (tag, cut) in out:
                raise ValueError(f"Key '{key}' truncated to '{cut}' that already exists. "
                                 "Consider increasing `max_length`.")
            out[(tag, cut)] = self._cut(text)
        return out

    def write(self, key_values: dict[str, Any], key_excluded: Mapping[str, Any] | int | None = None,
              step: int = 0) -> None:
        if not isinstance(key_excluded, Mapping):  # rlgrad's write(row, step)
            key_excluded = None
        lines = self._lines(key_values, key_excluded)
        if not lines:
            warnings.warn("Tried to write empty key-value dict", stacklevel=2)
            return
        kw = max(len(k) for _, k in lines)
        vw = max(len(v) for v in lines.values())
        dashes = "-" * (kw + vw + 7)
        body = [f"| {k}{' ' * (kw - len(k))} | {v}{' ' * (vw - len(v))} |"
                for (_, k), v in lines.items()]
        out = self._out()
        out.write("\n".join([dashes, *body, dashes]) + "\n")
        out.flush()

    def format(self, row: dict[str, Any]) -> str:
        """The table of ``row`` as text (no exclusions)."""
        import io

        buf = io.StringIO()
        HumanOutputFormat(buf, self.max_length).write(row, {})
        return buf.getvalue().rstrip("\n")

    def write_sequence(self, sequence: list[str]) -> None:
        out = self._out()
        out.write(" ".join(sequence) + "\n")
        out.flush()

    def close(self) -> None:
        if self.own_file:
            self.file.close()


HumanWriter = HumanOutputFormat  # rlgrad's name


def set_learn_formats(logger: Logger, verbose: int, tensorboard_log: str | None,
                      tb_log_name: str, reset_num_timesteps: bool) -> list[KVWriter]:
    """What SB3's ``configure_logger`` sets at each ``learn``: the stdout table (``verbose >=
    1``) and TensorBoard (``tensorboard_log``, in ``<tensorboard_log>/<tb_log_name>_<n>``) first
    among ``logger``'s formats, replacing the previous ``learn``'s (others, the CLI's, stay);
    ``logger.dir`` the TensorBoard run folder, else ``$SB3_LOGDIR``."""
    previous = getattr(logger, "_learn_formats", [])
    for w in previous:
        if w in logger.output_formats:
            logger.output_formats.remove(w)
        w.close()
    formats: list[KVWriter] = [HumanOutputFormat()] if verbose >= 1 else []
    logger.dir = os.getenv("SB3_LOGDIR")
    if tensorboard_log is not None:
        logger.dir = next_run_dir(tensorboard_log, tb_log_name, new=reset_num_timesteps)
        formats.append(TensorBoardOutputFormat(logger.dir))
    logger.output_formats[0:0] = formats
    logger._learn_formats = formats
    return formats


def make_output_format(_format: str, log_dir: str, log_suffix: str = "") -> KVWriter:
    """One SB3 output format in folder ``log_dir``: stdout, log (``log.txt``), json
    (``progress.json``), csv (``progress.csv``) or tensorboard."""
    log_dir = str(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    makers = {"stdout": lambda: HumanOutputFormat(sys.stdout),
              "log": lambda: HumanOutputFormat(os.path.join(log_dir, f"log{log_suffix}.txt")),
              "json": lambda: JSONOutputFormat(os.path.join(log_dir, f"progress{log_suffix}.json")),
              "csv": lambda: CSVOutputFormat(os.path.join(log_dir, f"progress{log_suffix}.csv")),
              "tensorboard": lambda: TensorBoardOutputFormat(log_dir)}
    if _format not in makers:
        raise ValueError(f"Unknown format specified: {_format!r}; use one of {', '.join(makers)}")
    return makers[_format]()


def configure(folder: str | None = None, format_strings: list[str] | None = None) -> Logger:
    """SB3's ``configure``: a Logger writing to ``folder`` (default ``$SB3_LOGDIR``, else a new
    folder in the temporary directory) in the formats named (default ``$SB3_LOG_FORMAT``, else
    stdout, log and csv). Use it with ``model.set_logger``."""
    import datetime
    import tempfile

    folder = folder if folder is not None else os.getenv("SB3_LOGDIR")
    if folder is None:
        folder = os.path.join(tempfile.gettempdir(),
                              datetime.datetime.now().strftime("SB3-%Y-%m-%d-%H-%M-%S-%f"))
    os.makedirs(folder, exist_ok=True)
    if format_strings is None:
        format_strings = os.getenv("SB3_LOG_FORMAT", "stdout,log,csv").split(",")
    format_strings = [f for f in format_strings if f]
    logger = Logger(folder=folder, output_formats=[make_output_format(f, folder)
                                                   for f in format_strings])
    if format_strings and format_strings != ["stdout"]:
        logger.log(f"Logging to {folder}")
    return logger


def read_json(filename: str) -> Any:
    """A ``progress.json`` file as a pandas DataFrame."""
    import pandas

    with open(filename) as f:
        return pandas.DataFrame([json.loads(line) for line in f])


def read_csv(filename: str) -> Any:
    """A ``progress.csv`` file as a pandas DataFrame."""
    import pandas

    return pandas.read_csv(filename, index_col=None, comment="#")
