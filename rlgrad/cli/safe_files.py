"""Reading files that may come from someone else (a shared run directory, a search space) without
trusting them: no link followed where rlgrad keeps its own files, no FIFO or device read (a hang),
a bounded size, and YAML whose nesting, alias expansion and keys are checked before use.

Every refusal is a ``CLIError``: one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from rlgrad.cli.errors import CLIError

#: flags that make ``os.open`` refuse a symbolic link (ELOOP) and not wait on a FIFO
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: a config.yaml is a few KB (it grows by a few lines per resume); a search space less
MAX_YAML_BYTES = 1_000_000
#: values of a YAML document once its aliases are expanded, and its nesting
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 64


def link_error(path: Path | str) -> CLIError:
    try:
        where = f" (to {os.readlink(path)})"
    except OSError:
        where = ""
    return CLIError(f"{path} is a symbolic link{where} where rlgrad keeps a run file; rlgrad "
                    "never reads or writes a run's files through links (a shared run could point "
                    "them at any file of yours): replace it with the file itself, or remove it")


def open_regular(path: Path | str, follow_links: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` (never a link unless
    ``follow_links``, never a FIFO or a device: reading those could hang or never end)."""
    flags = os.O_RDONLY | _NONBLOCK | (0 if follow_links else NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_error(path) from None
        if isinstance(e, FileNotFoundError):
            raise
        raise CLIError(f"cannot read {path}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise CLIError(f"{path} is a directory, not a file")
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CLIError(f"{path} is not a regular file (a FIFO, device or folder where a file "
                       "should be); remove it")
    return fd


def read_bounded(path: Path | str, limit: int = MAX_YAML_BYTES, follow_links: bool = False
                 ) -> bytes:
    """The bytes of ``path``, refused in one line (before reading) when it holds more than
    ``limit``."""
    fd = open_regular(path, follow_links)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise CLIError(f"{path} is {max(size, len(data))} bytes; rlgrad reads at most {limit} "
                       "from such a file (it is damaged or not what it should be)")
    return data


def _loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice (YAML keeps the last one silently)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            if isinstance(node, yaml.MappingNode):
                self.flatten_mapping(node)
                seen: set = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    try:
                        again = key in seen
                        seen.add(key)
                    except TypeError:  # an unhashable key: SafeLoader refuses it below
                        continue
                    if again:
                        raise CLIError(f"duplicate key {key!r} (line "
                                       f"{key_node.start_mark.line + 1}): give each key once")
            return super().construct_mapping(node, deep)

    return Loader


def _expanded_size(obj: Any, memo: dict[int, int], depth: int) -> int:
    """Values of ``obj`` counted as a tree (an alias counts again wherever it is used), computed
    once per shared object; bounded by ``MAX_YAML_DEPTH`` (a self-referencing alias too)."""
    if not isinstance(obj, dict | list):
        return 1
    if depth > MAX_YAML_DEPTH:
        raise RecursionError
    if id(obj) in memo:
        return memo[id(obj)]
    children = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    n = 1 + sum(_expanded_size(c, memo, depth + 1) for c in children)
    memo[id(obj)] = n
    return n


def load_yaml(text: bytes | str, where: str) -> Any:
    """A YAML document read safely: no Python objects (safe_load's types only), no duplicate key,
    at most ``MAX_YAML_DEPTH`` deep and ``MAX_YAML_VALUES`` values with its aliases expanded;
    anything else is a one-line ``CLIError`` naming ``where``."""
    import yaml

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CLIError(f"{where} is damaged: it is not UTF-8 text (byte "
                           f"0x{e.object[e.start]:02x} at offset {e.start})") from None
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
        size = _expanded_size(data, {}, 0)
    except CLIError as e:
        raise CLIError(f"{where}: {e.message}") from None
    except RecursionError:
        raise CLIError(f"{where} nests lists or mappings more than {MAX_YAML_DEPTH} deep (or "
                       "an alias refers to itself): refused as damaged or hostile") from None
    except yaml.YAMLError as e:
        raise CLIError(f"cannot read {where}: {type(e).__name__}: {e}") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise CLIError(f"cannot read {where}: {e}") from None
    if size > MAX_YAML_VALUES:
        raise CLIError(f"{where} holds {size} values once its YAML aliases (*name) are expanded, "
                       f"more than the {MAX_YAML_VALUES} rlgrad reads: refused as damaged or "
                       "hostile (an alias bomb)")
    return data
