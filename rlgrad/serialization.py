"""Safe checkpoints: ``rlgrad.save(obj, path)`` and ``rlgrad.load(path)``.

A checkpoint is **one safetensors file**. Its arrays are the safetensors tensors (named by their
dotted key path, e.g. ``model.0.weight``, so any safetensors reader can open them); everything
else (the nesting of dicts, lists and tuples, numbers, strings, bools, None) is a JSON tree in the
file's text metadata, next to a CRC-32 of every array; the tree records each array's dtype and
shape too, so a header whose dtype was changed (same bytes, another meaning) is caught. A CRC-32
of the whole file (header, structure record and arrays; its own 8 hex digits counted as zeros) is
in the metadata too, so a changed hyperparameter or counter is refused like a changed array (a
checksum finds damage; it is no signature against someone who rewrites the file). Loading parses
JSON and copies bytes: it never executes code (there is no pickle anywhere).

Writes are atomic: the file is written under a temporary name in the same folder, fsynced, then
renamed over the target (and the folder fsynced), so a crash at any moment leaves either the old
checkpoint or the new one, never a mixture.

A file that is truncated, damaged, hostile (malformed header entries, JSON nested past
``MAX_DEPTH``), a directory, or not a checkpoint raises ``CheckpointError``: one line naming the
file and, when it can be told, the key.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from rlgrad.device import check_device
from rlgrad.tensor import Tensor, _leaf

__all__ = ["save", "load", "CheckpointError", "StateDictError", "CheckpointDict"]

FORMAT = "rlgrad.checkpoint"
FORMAT_VERSION = "1"
_MAX_HEADER = 100_000_000  # safetensors' own limit on the JSON header
# The whole-file CRC-32: 8 hex digits in the metadata, zeros while it is computed
_FILE_CRC = "file_crc32"
_UNSEALED = b"00000000"
_METADATA = {"format", "format_version", "tree", "crc32", _FILE_CRC}
# Nesting of dicts/lists/tuples a checkpoint may hold (a training checkpoint needs about 6):
# a bound that save and load share keeps both far from Python's recursion limit.
MAX_DEPTH = 100


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: truncated, damaged, or not an rlgrad checkpoint."""


class DiskFullError(OSError):
    """A checkpoint that did not fit on the disk (ENOSPC or a quota): the file it was to replace
    is untouched. The message says where, how much it needs and how much is free."""


class StateDictError(CheckpointError, RuntimeError):
    """A state dict that does not fit the model or optimizer it is loaded into (wrong keys or
    shapes). A ``RuntimeError`` as in PyTorch, and a ``CheckpointError``."""


class CheckpointDict(dict):
    """A dict read from a checkpoint; ``source`` is ``(path, key)`` so that a later
    ``load_state_dict`` error can name the file and the key it came from."""

    __slots__ = ("source",)

    def __init__(self, *args: Any, source: tuple[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source = source


def _source_of(state_dict: Any) -> str:
    """Where a state dict came from, when it was read by ``rlgrad.load`` (for error messages)."""
    src = getattr(state_dict, "source", None)
    if not src:
        return ""
    path, key = src
    return f" (from checkpoint '{path}'" + (f", key '{key}')" if key else ")")


# Checkpoints store arrays exactly; these are the dtypes safetensors' NumPy API round-trips.
_SAVABLE = {np.dtype(t) for t in (
    np.float64, np.float32, np.float16, np.int64, np.uint64, np.int32, np.uint32, np.int16,
    np.uint16, np.int8, np.uint8, np.bool_, np.complex64,
)}


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


class _Encoder:
    """Turn a nested object into a JSON tree plus named arrays."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _add_array(self, arr: np.ndarray, path: str) -> str:
        dt = arr.dtype
        if dt.newbyteorder("=") not in _SAVABLE:
            raise TypeError(
                f"rlgrad.save: the array at key '{path or '<root>'}' has dtype {dt}, which a "
                f"checkpoint cannot hold; supported are bool, (u)int8-64, float16/32/64 and "
                f"complex64. Convert it first (e.g. .astype(np.float32))"
            )
        if not dt.isnative:
            arr = arr.astype(dt.newbyteorder("="))
        name = path or "<root>"
        if name in self.arrays:  # e.g. keys "a.b" and ("a" -> "b") meet: keep names unique
            i = 2
            while f"{name}#{i}" in self.arrays:
                i += 1
            name = f"{name}#{i}"
        self.arrays[name] = np.ascontiguousarray(arr)
        return name

    def _record(self, tag: str, arr: np.ndarray, path: str) -> dict[str, Any]:
        # the dtype is recorded too: the CRC covers an array's bytes, not the header's dtype
        name = self._add_array(arr, path)
        return {tag: name, "dtype": self.arrays[name].dtype.name}

    def encode(self, obj: Any, path: str, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(
                f"rlgrad.save: the value at key '{path or '<root>'}' nests dicts/lists/tuples "
                f"more than {MAX_DEPTH} levels deep, which a checkpoint cannot hold"
            )
        if obj is None or isinstance(obj, bool | str):
            return obj
        if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
            return self._record("$scalar", np.asarray(obj), path)
        if isinstance(obj, int | float):
            return obj  # JSON keeps 1 and 1.0 apart; nan/inf use JSON5 tokens Python reads back
        # Shapes are kept in the tree too: safetensors' file writer stores a 0-d array as (1,).
        if isinstance(obj, np.ndarray):
            return {**self._record("$array", obj, path), "shape": list(obj.shape)}
        if isinstance(obj, Tensor):
            return {**self._record("$tensor", obj._value, path), "shape": list(obj.shape),
                    "requires_grad": obj.requires_grad}
        if isinstance(obj, Mapping):
            items = []
            for k, v in obj.items():
                if isinstance(k, np.integer):
                    k = int(k)
                if isinstance(k, bool) or not isinstance(k, str | int):
                    raise TypeError(
                        f"rlgrad.save: the dict at key '{path or '<root>'}' has a key {k!r} of type "
                        f"{type(k).__name__}; checkpoint keys must be str or int"
                    )
                items.append([k, self.encode(v, _join(path, k), depth + 1)])
            return {"$dict": items}
        if isinstance(obj, list):
            return [self.encode(v, _join(path, i), depth + 1) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"$tuple": [self.encode(v, _join(path, i), depth + 1)
                               for i, v in enumerate(obj)]}
        hint = ""
        if hasattr(obj, "state_dict"):
            hint = "; save its state instead: rlgrad.save(x.state_dict(), path)"
        raise TypeError(
            f"rlgrad.save: cannot save a {type(obj).__name__} at key '{path or '<root>'}'. A "
            f"checkpoint holds dicts, lists, tuples, str, int, float, bool, None, NumPy arrays "
            f"and scalars, and rlgrad Tensors{hint}"
        )


def _crc(arr: np.ndarray) -> int:
    return zlib.crc32(arr.reshape(-1).view(np.uint8)) if arr.size else 0


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` (nested dicts/lists/tuples of arrays, Tensors, numbers, str, bool, None)
    to ``path`` as one safetensors file, atomically."""
    import safetensors.numpy as stn

    path = os.fspath(path)
    enc = _Encoder()
    tree = enc.encode(obj, "")
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tree": json.dumps(tree, separators=(",", ":")),
        "crc32": json.dumps({k: _crc(a) for k, a in enc.arrays.items()}, separators=(",", ":")),
        _FILE_CRC: _UNSEALED.decode(),
    }
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"rlgrad.save: folder '{folder}' does not exist (for '{path}')")
    try:
        with atomic_replace(path) as tmp:
            try:
                stn.save_file(enc.arrays, tmp, metadata=metadata)
            except Exception as e:  # safetensors reports the OS's I/O errors as its own type
                raise _as_os_error(e) from None
            _seal(tmp)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        need = 1024 + sum(len(v) for v in metadata.values()) + sum(
            a.nbytes for a in enc.arrays.values())
        free = shutil.disk_usage(folder).free
        raise DiskFullError(e.errno, f"disk full: checkpoint '{path}' needs about "
                            f"{_mib(need)} and '{folder}' has {_mib(free)} free (the file it "
                            "was to replace is untouched); free some space") from None


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _as_os_error(e: Exception) -> BaseException:
    """safetensors' "... (os error 28)" as the OSError it stands for; other errors unchanged."""
    m = re.search(r"os error (\d+)", str(e))
    return OSError(int(m.group(1)), " ".join(str(e).split())) if m else e


def _checksum_at(header: bytes, value: bytes) -> int | None:
    """Offset in the file of the 8 digits of ``"file_crc32":"<value>"`` in the raw header (one
    such entry: inside the JSON-encoded tree every quote is escaped), else None."""
    marker = b'"' + _FILE_CRC.encode() + b'":"' + value + b'"'
    if header.count(marker) != 1:
        return None
    return 8 + header.index(marker) + len(marker) - 9


def _file_crc(f: Any, at: int) -> int:
    """CRC-32 of the open file ``f`` with the 8 bytes at ``at`` read as zeros."""
    f.seek(0)
    crc = zlib.crc32(_UNSEALED, zlib.crc32(f.read(at)))
    f.seek(at + len(_UNSEALED))
    chunk = bytearray(1 << 18)  # one small buffer, reused: a checkpoint's save stays far below
    view = memoryview(chunk)  # the size of what it saves (a replay buffer left out included)
    while n := f.readinto(chunk):
        crc = zlib.crc32(view[:n], crc)
    return crc


def _seal(path: str) -> None:
    """Write the whole-file CRC-32 into the zeros ``save`` left for it (same length: no offset
    moves)."""
    with open(path, "rb+") as f:
        n = int.from_bytes(f.read(8), "little")
        at = _checksum_at(f.read(n), _UNSEALED)
        if at is None:  # pragma: no cover - safetensors wrote its header in another form
            raise RuntimeError(f"rlgrad.save: cannot place the file checksum in '{path}'")
        crc = _file_crc(f, at)
        f.seek(at)
        f.write(f"{crc:08x}".encode())


def _check_file_crc(path: str, raw_header: bytes, meta: dict) -> None:
    """The whole-file checksum holds (absent in checkpoints of an rlgrad before it)."""
    value = meta.get(_FILE_CRC)
    if value is None:
        return
    at = None
    if len(value) == 8 and all(c in "0123456789abcdef" for c in value):
        at = _checksum_at(raw_header, value.encode())
    if at is not None:
        with open(path, "rb") as f:
            if _file_crc(f, at) == int(value, 16):
                return
    raise CheckpointError(
        f"checkpoint '{path}' is corrupt: it fails its whole-file checksum (its header, "
        "structure record or arrays changed after it was written). Use an earlier checkpoint."
    )


@contextlib.contextmanager
def atomic_replace(path: str | os.PathLike) -> Iterator[str]:
    """Write a file atomically: yields a temporary path in the same folder; when the block ends
    the file is fsynced and renamed over ``path`` (and the rename made durable). If the block
    raises, or the process dies, ``path`` still holds its previous content."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)  # mkstemp creates 0600; keep the usual permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(folder)  # make the rename itself durable


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Make ``dst`` a copy of ``src``, crash-safely: a hard link where the file system allows it
    (no bytes copied; ``src`` is only ever replaced by a rename, so the link keeps the old
    content), else a byte copy; either way under a temporary name renamed over ``dst``."""
    src, dst = os.fspath(src), os.fspath(dst)
    folder = os.path.dirname(os.path.abspath(dst))
    tmp = os.path.join(folder, f".{os.path.basename(dst)}.{os.getpid()}.link.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.link(src, tmp)
    except OSError:  # no hard links here (FAT, some network file systems): copy the bytes
        with atomic_replace(dst) as t:
            shutil.copyfile(src, t)
        return
    try:
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder; the rename is enough there
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
def _is_count(x: Any) -> bool:
    """A non-negative JSON integer (bool is an int in Python, not in JSON)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _parse_json(text: str | bytes, path: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError) as e:  # not JSON, not UTF-8, or an integer of thousands
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its {what} is not valid JSON "
                              f"({e})") from None  # of digits, past Python's conversion limit
    except RecursionError:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its {what} nests deeper than "
                              "any checkpoint does (a hostile or damaged file)") from None


def _open_header(path: str) -> tuple[bytes, int, int]:
    """(raw JSON header, its length, file size)."""
    try:
        # O_NONBLOCK: a FIFO in a checkpoint's place is refused below instead of waited on
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(path)
            if not stat.S_ISREG(mode):
                raise CheckpointError(f"checkpoint '{path}' is not a regular file (a FIFO or "
                                      "device in its place)")
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"checkpoint '{path}' is truncated or empty ({size} bytes): not even the "
                    "header length is there. Use an earlier checkpoint."
                )
            n = int.from_bytes(head, "little")
            if n > _MAX_HEADER or n > size - 8:
                raise CheckpointError(
                    f"checkpoint '{path}' is truncated or not a checkpoint: its header claims "
                    f"{n} bytes but the file has {size} bytes"
                )
            return f.read(n), n, size
    except FileNotFoundError:
        raise FileNotFoundError(f"no checkpoint at '{path}'") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint '{path}' is a directory, not a checkpoint file") from None


def _read_header(path: str) -> tuple[dict, bytes]:
    """(header, its raw bytes): parsed and checked ourselves, so damage is reported by key."""
    raw, n, size = _open_header(path)
    header = _parse_json(raw, path, "header")
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its header is not a JSON object")
    data_len = size - 8 - n
    for name, spec in header.items():
        if name == "__metadata__":
            if not isinstance(spec, dict) or not all(isinstance(v, str) for v in spec.values()):
                raise CheckpointError(f"checkpoint '{path}' is corrupt: its metadata is not a "
                                      "mapping of strings")
            continue
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))
                and offsets[0] <= offsets[1] and isinstance(spec.get("dtype"), str)
                and isinstance(spec.get("shape"), list) and all(map(_is_count, spec["shape"]))):
            raise CheckpointError(
                f"checkpoint '{path}' is corrupt: the entry for key '{name}' is malformed (it "
                "needs a dtype, a shape of non-negative integers and two ordered data offsets)"
            )
        start, end = offsets
        if end > data_len:
            raise CheckpointError(
                f"checkpoint '{path}' is truncated: the array at key '{name}' needs bytes "
                f"{start}..{end} of the data but the file holds only {data_len} "
                "(the write was interrupted or the copy is incomplete). Use an earlier checkpoint."
            )
    return header, raw


def load(path: str | os.PathLike, map_location: Any = None, weights_only: Any = None) -> Any:
    """Read a checkpoint written by ``rlgrad.save``; dicts come back as ``CheckpointDict``.

    A plain safetensors file (not written by rlgrad) loads as a dict of arrays. Anything wrong
    with the file (truncated, damaged, hostile, a directory) raises ``CheckpointError``.
    ``map_location`` (a CPU device) and ``weights_only`` are accepted as PyTorch's ``load`` takes
    them: a checkpoint holds only data, never code, so it is always "weights only".
    """
    check_device(map_location if not callable(map_location) and not isinstance(map_location, dict)
                 else None)

    path = os.fspath(path)
    for attempt in range(3):
        before = _identity(path)
        try:
            return _load_once(path)
        except CheckpointError:
            # a writer renamed a new file over ``path`` between our opens of it (a run being
            # trained rotates its checkpoint): read the new one, instead of calling it corrupt
            if attempt == 2 or _identity(path) == before:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _identity(path: str) -> tuple[int, ...] | None:
    """Which file ``path`` names now (a rename over it changes this)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _load_once(path: str) -> Any:
    import safetensors.numpy as stn

    header, raw = _read_header(path)
    meta = header.get("__metadata__") or {}
    try:
        arrays = stn.load_file(path)
    except Exception as e:  # the library's own error type varies across versions
        msg = " ".join(str(e).split())
        raise CheckpointError(f"checkpoint '{path}' could not be read by safetensors: {msg}") from None
    if meta.get("format") != FORMAT:  # a plain safetensors file: name -> array
        _check_file_crc(path, raw, meta)  # (or an rlgrad one whose format tag was damaged)
        return CheckpointDict(arrays, source=(path, ""))
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{path}' has format version {meta.get('format_version')!r}; this "
            f"rlgrad reads version {FORMAT_VERSION}. Upgrade rlgrad to read it."
        )
    if "tree" not in meta or "crc32" not in meta:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its structure record is missing")
    unknown = sorted(set(meta) - _METADATA)
    if unknown:  # e.g. the checksum's own name damaged, which would hide the checksum
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its metadata has an entry "
                              f"{unknown[0]!r} that rlgrad never writes")
    tree = _parse_json(meta["tree"], path, "structure record")
    crcs = _parse_json(meta["crc32"], path, "checksum record")
    if not isinstance(crcs, dict):
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its checksum record is damaged")
    for name, arr in arrays.items():
        if name not in crcs:
            raise CheckpointError(f"checkpoint '{path}' is corrupt: array '{name}' has no checksum")
        if _crc(arr) != crcs[name]:
            raise CheckpointError(
                f"checkpoint '{path}' is corrupt: the array at key '{name}' fails its checksum "
                "(the file was damaged after it was written). Use an earlier checkpoint."
            )
    _check_file_crc(path, raw, meta)  # after the arrays' own checks, which name the key
    return _Decoder(path, arrays).decode(tree, "", 0)


class _Decoder:
    def __init__(self, path: str, arrays: dict[str, np.ndarray]) -> None:
        self.path = path
        self.arrays = arrays

    def _bad(self, key: str, what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint '{self.path}' is corrupt: {what} under key "
                               f"'{key or '<root>'}'")

    def _array(self, node: dict, tag: str, key: str) -> np.ndarray:
        name, shape, dtype = node[tag], node.get("shape"), node.get("dtype")
        arr = self.arrays.get(name) if isinstance(name, str) else None
        if arr is None:
            raise CheckpointError(
                f"checkpoint '{self.path}' is corrupt: the array for key '{key or '<root>'}' is missing"
            )
        if dtype is not None and dtype != arr.dtype.name:  # absent in older checkpoints
            raise CheckpointError(
                f"checkpoint '{self.path}' is corrupt: the array at key '{key or '<root>'}' has "
                f"dtype {arr.dtype.name} in the header, its record says {dtype!r}"
            )
        if shape is not None and not (isinstance(shape, list) and all(map(_is_count, shape))):
            raise self._bad(key, f"a malformed shape {shape!r}")
        if shape is not None and arr.shape != tuple(shape):
            if arr.size != int(np.prod(shape)):
                raise CheckpointError(
                    f"checkpoint '{self.path}' is corrupt: the array at key '{key}' has shape "
                    f"{arr.shape}, its record says {tuple(shape)}"
                )
            arr = arr.reshape(shape)
        if not arr.flags.writeable:
            arr = arr.copy()
        return arr

    def _items(self, node: dict, tag: str, key: str) -> list:
        items = node[tag]
        if not isinstance(items, list):
            raise self._bad(key, f"a malformed {tag} record")
        return items

    def decode(self, node: Any, key: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self._bad(key, f"a structure nested more than {MAX_DEPTH} levels deep "
                            "(a hostile or damaged file)")
        if isinstance(node, list):
            return [self.decode(v, _join(key, i), depth + 1) for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        if "$dict" in node:
            out = CheckpointDict(source=(self.path, key))
            for item in self._items(node, "$dict", key):
                if not (isinstance(item, list) and len(item) == 2
                        and isinstance(item[0], str | int) and not isinstance(item[0], bool)):
                    raise self._bad(key, "a malformed entry")
                k, v = item
                out[k] = self.decode(v, _join(key, k), depth + 1)
            return out
        if "$tuple" in node:
            return tuple(self.decode(v, _join(key, i), depth + 1)
                         for i, v in enumerate(self._items(node, "$tuple", key)))
        if "$array" in node:
            return self._array(node, "$array", key)
        if "$tensor" in node:
            arr = self._array(node, "$tensor", key)
            grad = node.get("requires_grad", False) is True
            if grad and arr.dtype.kind not in "fc":
                raise self._bad(key, f"a {arr.dtype} tensor marked as requiring grad")
            return _leaf(arr, requires_grad=grad)
        if "$scalar" in node:
            arr = self._array(node, "$scalar", key)
            if arr.size != 1:
                raise self._bad(key, f"a scalar record holding {arr.size} values")
            return arr.reshape(())[()]
        raise self._bad(key, f"an unknown record {sorted(node)}")
