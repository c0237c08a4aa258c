"""PyTorch's ``.pth`` files (what ``torch.save`` writes, what SB3's zip archives hold) without
torch, and the restricted unpickling SB3's archives need, without running a file's code.

* ``write_pth(obj)`` writes torch's zip layout (``<name>/data.pkl``, ``<name>/data/<key>``,
  ``byteorder``, ``version``) for nested dicts, lists, tuples, numbers, strings and arrays
  (NumPy or rlgrad Tensors, each saved as a torch tensor): ``torch.load(..., weights_only=True)``
  reads it. The pickle is written opcode by opcode, so nothing of torch is imported.
* ``read_pth(data)`` reads such a file into the same structure, with NumPy arrays for tensors.
* ``safe_loads(data)`` unpickles what SB3 cloudpickles into an archive's ``data`` (spaces,
  schedules, NumPy arrays, torch classes named in ``policy_kwargs``) through a table of the
  names it may build: any other name (a function's code, a class of SB3's) is not imported but
  becomes a ``Missing`` naming it, which the caller replaces or refuses in one line.
"""

from __future__ import annotations

import collections
import importlib
import io
import pickle
import struct
import zipfile
from typing import Any

import numpy as np

#: torch's storage class of each NumPy dtype (the names torch.save pickles)
STORAGE_OF_DTYPE = {np.dtype(k): v for k, v in {
    "float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
    "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage",
    "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage"}.items()}
DTYPE_OF_STORAGE = {v: k for k, v in STORAGE_OF_DTYPE.items()}


class PthError(ValueError):
    """A ``.pth`` file or an archive entry that cannot be read safely: one line."""


class Missing:
    """A name a file refers to that is not built on loading (code, or a class of a package that
    is not this one): its ``module.name`` for messages, and anything unpickled with it."""

    def __init__(self, module: str, name: str, args: tuple[Any, ...] | None = None) -> None:
        self.module, self.name, self.args = module, name, args
        self.state: Any = None

    @property
    def called(self) -> bool:
        """Whether the file builds something with it (code to run), not only names it."""
        return self.args is not None or self.state is not None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Missing:
        return Missing(self.module, self.name, args)

    def __setstate__(self, state: object) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<not loaded: {self.qualname}>"


# ---- writing: a protocol-2 pickle, opcode by opcode ----------------------------------------
class _PickleWriter:
    """The pickle of ``obj`` with arrays as torch tensors (their bytes go to ``storages``)."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.storages: list[np.ndarray] = []

    def dump(self, obj: Any) -> bytes:
        self.out.write(b"\x80\x02")
        self.save(obj)
        self.out.write(b".")
        return self.out.getvalue()

    def global_(self, module: str, name: str) -> None:
        self.out.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def save(self, obj: Any) -> None:  # noqa: C901 - one branch per pickled type
        w = self.out.write
        if hasattr(obj, "_value") and hasattr(obj, "requires_grad"):  # an rlgrad Tensor
            obj = np.asarray(obj._value)
        if obj is None:
            w(b"N")
        elif obj is True or obj is False or isinstance(obj, np.bool_):
            w(b"\x88" if obj else b"\x89")
        elif isinstance(obj, int | np.integer):
            self.save_int(int(obj))
        elif isinstance(obj, float | np.floating):
            w(b"G" + struct.pack(">d", float(obj)))
        elif isinstance(obj, str):
            data = obj.encode("utf-8")
            w(b"X" + struct.pack("<I", len(data)) + data)
        elif isinstance(obj, np.ndarray):
            self.save_tensor(obj)
        elif isinstance(obj, dict):
            if isinstance(obj, collections.OrderedDict):
                self.global_("collections", "OrderedDict")
                w(b")R")
            else:
                w(b"}")
            if obj:
                w(b"(")
                for k, v in obj.items():
                    self.save(k)
                    self.save(v)
                w(b"u")
        elif isinstance(obj, list):
            w(b"]")
            if obj:
                w(b"(")
                for v in obj:
                    self.save(v)
                w(b"e")
        elif isinstance(obj, tuple):
            w(b"(")
            for v in obj:
                self.save(v)
            w(b"t")
        else:
            raise PthError(f"write_pth: cannot store a {type(obj).__name__} in a .pth file "
                           "(arrays, numbers, strings, lists, tuples and dicts only)")

    def save_int(self, v: int) -> None:
        if -2**31 <= v < 2**31:
            self.out.write(b"J" + struct.pack("<i", v))
        else:
            data = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
            self.out.write(b"\x8a" + bytes([len(data)]) + data)

    def save_tensor(self, a: np.ndarray) -> None:
        a = a if a.flags.c_contiguous else a.copy(order="C")  # (0-d arrays stay 0-d)
        if a.dtype not in STORAGE_OF_DTYPE:
            raise PthError(f"write_pth: torch has no storage for arrays of {a.dtype}")
        key = str(len(self.storages))
        self.storages.append(a)
        w = self.out.write
        self.global_("torch._utils", "_rebuild_tensor_v2")
        w(b"((")
        self.save("storage")
        self.global_("torch", STORAGE_OF_DTYPE[a.dtype])
        self.save(key)
        self.save("cpu")
        self.save_int(a.size)
        w(b"tQ")  # the persistent id: torch reads the storage from data/<key>
        self.save_int(0)
        self.save(tuple(a.shape))
        self.save(tuple(s // a.itemsize for s in a.strides) if a.size else (1,) * a.ndim)
        w(b"\x89")  # requires_grad
        self.global_("collections", "OrderedDict")
        w(b")R")  # backward hooks
        w(b"tR")


def write_pth(obj: object, name: str = "archive") -> bytes:
    """``obj`` as the bytes of a ``.pth`` file (torch's zip layout)."""
    writer = _PickleWriter()
    pkl = writer.dump(obj)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", pkl)
        z.writestr(f"{name}/byteorder", "little")
        for i, a in enumerate(writer.storages):
            z.writestr(f"{name}/data/{i}", a.astype(a.dtype.newbyteorder("<")).tobytes())
        z.writestr(f"{name}/version", "3\n")
    return buf.getvalue()


# ---- reading: a restricted unpickler -------------------------------------------------------
def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple[int, ...],
                    stride: tuple[int, ...], *_: Any) -> np.ndarray:
    flat = storage[offset:]
    if not size:
        return flat[:1].reshape(()).copy()
    return np.lib.stride_tricks.as_strided(
        flat, shape=size, strides=[s * flat.itemsize for s in stride]).copy()


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    return data


class _StorageType:
    def __init__(self, name: str) -> None:
        self.dtype = DTYPE_OF_STORAGE[name]


def _torch_name(module: str, name: str) -> Any:
    """A torch name a file may refer to: storages and tensor rebuilding; classes of ``torch.nn``
    and ``torch.optim`` as rlgrad's classes of the same name (``th.nn.ReLU`` -> ``rlgrad.nn.ReLU``)."""
    if module == "torch" and name in DTYPE_OF_STORAGE:
        return _StorageType(name)
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
        return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
        return _rebuild_parameter
    if module.startswith(("torch.nn", "torch.optim")):
        import rlgrad.nn
        import rlgrad.optim

        pkg = rlgrad.nn if module.startswith("torch.nn") else rlgrad.optim
        found = getattr(pkg, name, None)
        if isinstance(found, type):
            return found
    return None


_BUILTINS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "dict": dict,
             "slice": slice, "complex": complex, "bytearray": bytearray, "range": range}


def _allowed(module: str, name: str) -> Any:
    """What ``module.name`` is built as on loading, or None (not built)."""
    if module == "collections" and name == "OrderedDict":
        return collections.OrderedDict
    if module == "builtins" and name in _BUILTINS:
        return _BUILTINS[name]
    if module == "collections" and name == "deque":
        return collections.deque
    if module.startswith("torch"):
        return _torch_name(module, name)
    if module.startswith("numpy"):
        return _numpy_name(module, name)
    if module.startswith("gymnasium.spaces"):
        from gymnasium import spaces

        found = getattr(spaces, name, None)
        return found if isinstance(found, type) and issubclass(found, spaces.Space) else None
    if module in ("stable_baselines3.common.type_aliases", "rlgrad.rl.common.type_aliases") \
            and name in ("TrainFreq", "TrainFrequencyUnit"):
        from rlgrad.rl.common import type_aliases

        return getattr(type_aliases, name)
    if module in ("stable_baselines3.common.utils", "rlgrad.rl.schedules") and name in (
            "FloatSchedule", "ConstantSchedule", "LinearSchedule"):
        from rlgrad.rl import schedules

        return getattr(schedules, name)
    return None


def _numpy_name(module: str, name: str) -> Any:
    """NumPy's array, dtype and generator reconstruction (what pickled arrays and spaces use)."""
    allowed = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("numpy.core.numeric", "_frombuffer"),
               ("numpy._core.numeric", "_frombuffer"), ("numpy.random._pickle", "__generator_ctor"),
               ("numpy.random._pickle", "__bit_generator_ctor"),
               ("numpy.random._pickle", "__randomstate_ctor"),
               # a space's generator keeps its SeedSequence (NumPy's own data class)
               ("numpy.random.bit_generator", "SeedSequence"),
               ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence")}
    bit_generators = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
    ok = ((module, name) in allowed
          or (module.startswith("numpy.random") and name in bit_generators)
          or (module in ("numpy", "numpy.dtypes") and name.endswith("DType")))
    return getattr(importlib.import_module(module), name, None) if ok else None


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, storage: Any = None) -> None:
        super().__init__(io.BytesIO(data))
        self._storage = storage

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed(module, name)
        return found if found is not None else Missing(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if self._storage is None or not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise PthError(f"unexpected persistent id {pid!r} in a pickle")
        kind, key = pid[1], pid[2]
        if not isinstance(kind, _StorageType):
            raise PthError(f"unsupported tensor storage {kind!r} in a .pth file")
        return self._storage(str(key), kind.dtype)


def safe_loads(data: bytes) -> object:
    """Unpickle ``data`` building only the names of the table above (no code runs)."""
    return _SafeUnpickler(data).load()


def read_pth(data: bytes | io.BufferedIOBase) -> object:
    """A ``.pth`` file's object (bytes or a binary file), tensors as NumPy arrays."""
    raw = data if isinstance(data, bytes) else data.read()
    try:
        z = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile:
        raise PthError("not a .pth file of torch's zip layout (torch >= 1.6 writes that; an "
                       "older file must be re-saved with a recent torch)") from None
    with z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pkl:
            raise PthError("a .pth file without data.pkl")
        prefix = pkl[0][: -len("data.pkl")]

        def storage(key: str, dtype: np.dtype) -> np.ndarray:
            return np.frombuffer(z.read(f"{prefix}data/{key}"), dtype=dtype.newbyteorder("<"))

        return _SafeUnpickler(z.read(pkl[0]), storage).load()


__all__ = ["Missing", "PthError", "read_pth", "safe_loads", "write_pth"]
