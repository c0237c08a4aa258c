"""``stable_baselines3.common.save_util``: SB3's archive layout and file helpers.

An SB3 archive is a zip of ``data`` (JSON of the model's attributes; those JSON cannot hold are
cloudpickled, base64, under ``":serialized:"``), ``policy.pth`` and the optimizers' ``.pth``
files (torch's format: ``rlgrad.rl.common.save_util_pth`` reads and writes it without torch),
``pytorch_variables.pth``, ``_stable_baselines3_version`` and ``system_info.txt``.

Loading runs no code from the file: the serialized entries are unpickled through a table of
what they may build (spaces, NumPy arrays, SB3's schedules, torch's layer classes as rlgrad's);
an entry that needs anything else (a lambda's code) is left out with SB3's warning, and
``custom_objects`` replaces it. ``save_to_pkl`` / ``load_from_pkl`` are plain pickle, as in SB3
(loading a pickle runs its code: only for files you trust).
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import pickle
import platform
import re
import warnings
import zipfile
from typing import IO, Any, TypeAlias

import numpy as np

from rlgrad.rl.common.save_util_pth import Missing, PthError, read_pth, safe_loads, write_pth
from rlgrad.typing import DeviceLike

#: the SB3 version whose layout rlgrad writes (SB3 reads its archives back from 1.x on)
SB3_LAYOUT_VERSION = "2.9.2"
_FILE_TYPES = (io.BufferedWriter, io.BufferedReader, io.BytesIO, io.BufferedRandom)
#: where a model is saved or loaded: a file name or an open binary file
PathOrFile: TypeAlias = "str | os.PathLike[str] | io.BufferedIOBase | IO[bytes]"


def recursive_getattr(obj: object, attr: str, *args: Any) -> object:
    """``getattr`` along a dotted path (``"policy.optimizer"``)."""
    for name in attr.split("."):
        obj = getattr(obj, name, *args)
    return obj


def recursive_setattr(obj: object, attr: str, val: object) -> None:
    """``setattr`` at the end of a dotted path."""
    head, _, last = attr.rpartition(".")
    setattr(recursive_getattr(obj, head) if head else obj, last, val)


def is_json_serializable(item: object) -> bool:
    try:
        json.dumps(item)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def serialize_item(item: object) -> dict[str, Any]:
    """SB3's entry for a value JSON cannot hold: its pickle (base64) and its type, with the
    attributes that JSON can hold beside them (for people reading the file)."""
    pickled = item if isinstance(item, PickledGlobal) else None
    raw = pickled.raw if pickled is not None else _dumps(item)
    entry: dict[str, Any] = {":type:": pickled.type_str if pickled else str(type(item)),
                             ":serialized:": base64.b64encode(raw).decode()}
    fields = item.items() if isinstance(item, dict) else getattr(item, "__dict__", {}).items()
    for k, v in fields:
        entry[str(k)] = v if is_json_serializable(v) else str(v)
    return entry


class PickledGlobal:
    """A reference by name to a class of another package (SB3's policy class, a torch layer),
    pickled as that name without importing the package: what an SB3 reader unpickles."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name
        self.raw = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"."
        self.type_str = "<class 'type'>"


class _GlobalsPickler(pickle._Pickler):  # (the Python pickler: its save can be extended)
    """pickle, with each ``PickledGlobal`` written as the name it stands for."""

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if isinstance(obj, PickledGlobal):
            # (typeshed omits the Python pickler's write and save, which it has)
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())  # type: ignore[attr-defined]
            return
        super().save(obj, save_persistent_id)  # type: ignore[misc]


def _dumps(item: Any) -> bytes:
    buf = io.BytesIO()
    _GlobalsPickler(buf, protocol=4).dump(item)
    return buf.getvalue()


def data_to_json(data: dict[str, Any]) -> str:
    """The ``data`` entry: JSON values as they are, the others serialized (``serialize_item``)."""
    out = {k: (v if is_json_serializable(v) else serialize_item(v)) for k, v in data.items()}
    return json.dumps(out, indent=4)


def json_to_data(json_string: str, custom_objects: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values of a ``data`` entry; a serialized one that would need code (or names this
    reader does not build) is left out with SB3's warning, unless ``custom_objects`` gives it."""
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise ValueError("custom_objects argument must be a dict or None")
    out: dict[str, Any] = {}
    for key, item in json.loads(json_string).items():
        if custom_objects is not None and key in custom_objects:
            out[key] = custom_objects[key]
        elif isinstance(item, dict) and ":serialized:" in item:
            value = _deserialize(key, item[":serialized:"])
            if value is not _SKIP:
                out[key] = value
        else:
            out[key] = item
    return out


_SKIP = object()


def _deserialize(key: str, text: str) -> Any:
    try:
        value = safe_loads(base64.b64decode(text.encode()))
    except Exception as e:  # noqa: BLE001 - any broken entry: SB3's warning, the rest loads
        warnings.warn(f"Could not deserialize object {key}. Consider using `custom_objects` "
                      f"argument to replace this object.\nException: {e}", stacklevel=3)
        return _SKIP
    missing = _first_missing(value)
    # a class named by reference (SB3's policy_class) stays a name; anything built with it
    # would need its code
    if missing is not None and (not isinstance(value, Missing) or value.called):
        warnings.warn(f"Could not deserialize object {key}: it needs {missing.qualname}, which "
                      "rlgrad does not build from a file. Consider using `custom_objects` "
                      "argument to replace this object.", stacklevel=3)
        return _SKIP
    return value


def _first_missing(value: Any, depth: int = 0) -> Missing | None:
    """The first ``Missing`` inside ``value`` (dicts, lists, tuples, attributes)."""
    if isinstance(value, Missing):
        return value
    if depth > 8:
        return None
    items: Any = ()
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    for v in items:
        found = _first_missing(v, depth + 1)
        if found is not None:
            return found
    return None


def get_system_info(print_info: bool = True) -> tuple[dict[str, str], str]:
    """The versions a bug report needs (SB3's keys, and rlgrad's version)
    as a dict and as the Markdown list SB3 prints (what an archive's system_info.txt holds)."""
    from importlib.metadata import PackageNotFoundError, version

    import rlgrad

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    env_info = {
        # "#42" -> "# 42": GitHub would link the kernel build number to an issue
        "OS": re.sub(r"#(\d)", r"# \1", f"{platform.platform()} {platform.version()}"),
        "Python": platform.python_version(),
        "rlgrad": rlgrad.__version__,
        # SB3's keys, which scripts and SB3's tests index: the SB3 release whose API and archive
        # layout rlgrad.rl follows (rlgrad.rl.__version__), and no PyTorch
        "Stable-Baselines3": SB3_LAYOUT_VERSION,
        "PyTorch": "not used (rlgrad's own engine)",
        "GPU Enabled": "False",
        "Numpy": np.__version__,
        "Cloudpickle": installed("cloudpickle"),
        "Gymnasium": installed("gymnasium"),
    }
    env_info_str = "".join(f"- {key}: {value}\n" for key, value in env_info.items())
    if print_info:
        print(env_info_str)
    return env_info, env_info_str


# ---- paths ----------------------------------------------------------------------------------
def _check_mode(mode: Any) -> str:
    modes = {"write": "w", "read": "r", "w": "w", "r": "r"}
    key = mode.lower() if isinstance(mode, str) else mode
    if key not in modes:
        raise ValueError(f"open_path: mode {mode!r}: expected mode to be either 'w' or 'r'")
    return modes[key]


def open_path(path: str | pathlib.Path | io.BufferedIOBase, mode: str, verbose: int = 0,
              suffix: str | None = None) -> io.BufferedIOBase:
    """An open binary file for ``path``: a string or Path is opened (for writing, missing
    folders are made, ``suffix`` is added to a name without one, a folder's name gets ``_2``;
    for reading, ``<path>.<suffix>`` is tried when ``path`` does not exist); an open file is
    checked for ``mode`` and returned as it is."""
    if isinstance(path, str | pathlib.Path):
        return _open_pathlib(pathlib.Path(path), _check_mode(mode), verbose, suffix)
    if not isinstance(path, _FILE_TYPES):
        raise TypeError(f"open_path: path {path!r} has an invalid type: expected a str, a "
                        "pathlib.Path or an open binary file")
    if path.closed:
        raise ValueError(f"open_path: file stream {path} is closed")
    mode = _check_mode(mode)
    if (mode == "w" and not path.writable()) or (mode == "r" and not path.readable()):
        raise ValueError(f"open_path: expected a {'writable' if mode == 'w' else 'readable'} "
                         "file")
    return path


def _open_pathlib(path: pathlib.Path, mode: str, verbose: int, suffix: str | None
                  ) -> io.BufferedIOBase:
    if mode == "r":
        try:
            return path.open("rb")
        except FileNotFoundError:
            if not suffix:
                raise
            newpath = pathlib.Path(f"{path}.{suffix}")
            if verbose >= 2:
                warnings.warn(f"Path '{path}' not found. Attempting {newpath}.", stacklevel=3)
            return _open_pathlib(newpath, mode, verbose, None)
    if path.suffix == "" and suffix:
        path = pathlib.Path(f"{path}.{suffix}")
    if path.is_dir():
        warnings.warn(f"Path '{path}' is a folder. Will save instead to {path}_2", stacklevel=3)
        return _open_pathlib(pathlib.Path(f"{path}_2"), mode, verbose, suffix)
    if not path.parent.exists():
        warnings.warn(f"Path '{path.parent}' does not exist. Will create it.", stacklevel=3)
        path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and verbose >= 2:
        warnings.warn(f"Path '{path}' exists, will overwrite it.", stacklevel=3)
    return path.open("wb")


def save_to_pkl(path: str | pathlib.Path | io.BufferedIOBase, obj: object, verbose: int = 0
                ) -> None:
    """Pickle ``obj`` to ``path`` (``.pkl`` added to a name without a suffix)."""
    file = open_path(path, "w", verbose=verbose, suffix="pkl")
    try:
        pickle.dump(obj, file, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        if isinstance(path, str | pathlib.Path):
            file.close()


def load_from_pkl(path: str | pathlib.Path | io.BufferedIOBase, verbose: int = 0) -> object:
    """Unpickle ``path`` (``<path>.pkl`` tried when it does not exist). A pickle runs code of
    the file's choosing: load only files you trust, as with SB3."""
    file = open_path(path, "r", verbose=verbose, suffix="pkl")
    try:
        return pickle.load(file)  # noqa: S301 - SB3's function, on the caller's own file
    finally:
        if isinstance(path, str | pathlib.Path):
            file.close()


# ---- archives --------------------------------------------------------------------------------
def save_to_zip_file(save_path: str | pathlib.Path | io.BufferedIOBase,
                     data: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
                     pytorch_variables: dict[str, Any] | None = None, verbose: int = 0,
                     extra: dict[str, bytes] | None = None) -> None:
    """SB3's archive: ``data`` as JSON, each of ``params`` as ``<name>.pth``, the variables as
    ``pytorch_variables.pth`` (arrays or rlgrad Tensors, stored as torch tensors); ``extra``:
    more entries by name (SB3 reads none but its own)."""
    file = open_path(save_path, "w", verbose=0, suffix="zip")
    try:
        with zipfile.ZipFile(file, mode="w") as archive:
            if data is not None:
                archive.writestr("data", data_to_json(data))
            if pytorch_variables is not None:
                archive.writestr("pytorch_variables.pth", write_pth(pytorch_variables,
                                                                    "pytorch_variables"))
            for name, state in (params or {}).items():
                archive.writestr(f"{name}.pth", write_pth(state, name.replace(".", "_")))
            for name, raw in (extra or {}).items():
                archive.writestr(name, raw)
            archive.writestr("_stable_baselines3_version", SB3_LAYOUT_VERSION)
            archive.writestr("system_info.txt", get_system_info(print_info=False)[1])
    finally:
        if isinstance(save_path, str | pathlib.Path):
            file.close()


def load_from_zip_file(load_path: str | pathlib.Path | io.BufferedIOBase, load_data: bool = True,
                       custom_objects: dict[str, Any] | None = None, device: DeviceLike = "auto",
                       verbose: int = 0, print_system_info: bool = False
                       ) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any] | None]:
    """``(data, params, pytorch_variables)`` of an SB3 archive, tensors as NumPy arrays."""
    file = open_path(load_path, "r", verbose=verbose, suffix="zip")
    try:
        with zipfile.ZipFile(file) as archive:
            return _read_archive(archive, load_data, custom_objects, print_system_info)
    except zipfile.BadZipFile:
        raise ValueError(f"Error: the file {load_path} wasn't a zip-file") from None
    finally:
        if isinstance(load_path, str | pathlib.Path):
            file.close()


def _read_archive(archive: zipfile.ZipFile, load_data: bool, custom_objects: Any,
                  print_system_info: bool) -> tuple[Any, dict[str, Any], Any]:
    names = archive.namelist()
    if print_system_info:
        if "system_info.txt" in names:
            print("== SAVED MODEL SYSTEM INFO ==")
            print(archive.read("system_info.txt").decode())
        else:
            warnings.warn("The model was saved with SB3 <= 1.2.0 and thus cannot print system "
                          "information.", UserWarning, stacklevel=3)
    data = None
    if "data" in names and load_data:
        data = json_to_data(archive.read("data").decode(), custom_objects=custom_objects)
    params: dict[str, Any] = {}
    variables = None
    for name in names:
        if os.path.splitext(name)[1] != ".pth":
            continue
        try:
            obj = read_pth(archive.read(name))
        except PthError as e:
            raise ValueError(f"{name} in the archive: {e}") from None
        if name in ("pytorch_variables.pth", "tensors.pth"):
            variables = obj
        else:
            params[os.path.splitext(name)[0]] = obj
    return data, params, variables


__all__ = ["PickledGlobal", "data_to_json", "get_system_info", "is_json_serializable", "json_to_data",
           "load_from_pkl", "load_from_zip_file", "open_path", "recursive_getattr",
           "recursive_setattr", "save_to_pkl", "save_to_zip_file"]
