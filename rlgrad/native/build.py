"""Build a generated C source into an extension module, once per machine: the compiler that
builds rlgrad's own C modules (``sysconfig``'s CC, as setup.py's), the result cached on disk by
the hash of the source and of everything else that shapes the binary, across processes.

The cache is ``$RLGRAD_CACHE_DIR/native`` or ``$XDG_CACHE_HOME/rlgrad/native`` (by default
``~/.cache/rlgrad/native``). A module is compiled into a temporary file in that folder and
renamed into place (``os.replace``: atomic), so a process never loads a half-written file, and
two processes building the same program at once both end with a whole one.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from types import ModuleType
from typing import Any

import numpy as np

# -ffp-contract=off: no FMA contraction, as setup.py's modules (products rounded as NumPy's);
# -fopenmp-simd: the `#pragma omp simd` loops call glibc's vector math (libmvec)
FLAGS = ["-O2", "-ffp-contract=off", "-fno-math-errno", "-fno-strict-aliasing", "-fopenmp-simd"]
_state: dict[str, Any] = {}  # what was found once per process: compiler, flags, BLAS
# rlgrad's own headers that a generated source includes (``#include "_adam.h"``: Adam's
# arithmetic, shared with rlgrad/optim/_fused.c) are found in the package's folder (-iquote) and
# hashed with the source, so a changed header builds anew
INCLUDE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


class BuildError(RuntimeError):
    """The compiler refused a generated source (a bug of a lowering: the message has its error)."""


class Unavailable(RuntimeError):
    """This machine cannot build native code (no compiler, headers or writable cache)."""


def cache_dir() -> str:
    root = os.environ.get("RLGRAD_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlgrad")
    return os.path.join(root, "native")


def compiler() -> list[str] | None:
    """The C compiler's command (``$CC``, else sysconfig's), or None when there is none."""
    if "cc" not in _state:
        cmd = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        _state["cc"] = cmd if cmd and shutil.which(cmd[0]) and sys.platform != "win32" else None
    return _state["cc"]


def _probe(cc: list[str], folder: str, link: list[str]) -> bool:
    """Whether ``cc`` builds a module that includes Python's and NumPy's headers, with ``link``."""
    fd, src = tempfile.mkstemp(suffix=".c", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write("#include <Python.h>\n#include <numpy/arrayobject.h>\n#include <math.h>\n"
                "__attribute__((simd(\"notinbranch\"))) float tanhf(float);\n"
                "float t[64]; void probe(void) {\n#pragma omp simd\nfor (int i = 0; i < 64; i++)"
                " t[i] = tanhf(t[i]); }\n")
    out = src[:-2] + ".so.tmp"
    try:
        return subprocess.run([*cc, *FLAGS, "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
                               "-I", np.get_include(), src, "-o", out, *link],
                              capture_output=True).returncode == 0
    finally:
        for p in (src, out):
            if os.path.exists(p):
                os.remove(p)


def _link_flags(cc: list[str], folder: str) -> list[str] | None:
    """The flags that build here, best first: for this machine's CPU (``-march=native``: glibc's
    vector math then takes 8 or 16 lanes, not SSE's 4) and with ``-lmvec`` (x86-64 glibc >= 2.35);
    without the vector declarations (scalar libm calls) where libmvec does not link; None when
    the compiler cannot build an extension module here (no Python headers)."""
    if "link" not in _state:
        tries = [["-march=native", "-lmvec", "-lm"], ["-lmvec", "-lm"],
                 ["-march=native", "-DRLGRAD_NO_MVEC", "-lm"], ["-DRLGRAD_NO_MVEC", "-lm"]]
        _state["link"] = next((t for t in tries if _probe(cc, folder, t)), None)
    return _state["link"]


def cpu_fingerprint() -> str:
    """What ``-march=native`` compiles for, in the cache key: a shared home on another CPU builds
    its own modules."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return platform.machine() + platform.processor() + flags


def build(source: str, name_hint: str = "step") -> ModuleType:
    """The extension module of ``source`` (which defines ``PyInit_@MODULE@``), from the cache
    when this source was built before, else compiled now and cached. Raises BuildError."""
    cc = compiler()
    if cc is None:
        raise Unavailable("no C compiler (sysconfig's CC) on this machine")
    folder = cache_dir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise Unavailable(f"the cache folder {folder} cannot be made ({e.strerror}); set "
                          "RLGRAD_CACHE_DIR to a writable folder") from None
    link = _link_flags(cc, folder)
    if link is None:
        raise Unavailable(f"{cc[0]} cannot build an extension module here (Python's or NumPy's "
                          "headers missing?)")
    key = "\0".join([source, *included(source), *cc, *FLAGS, *link, sys.version, np.__version__,
                     sysconfig.get_platform(), cpu_fingerprint()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    mod_name = f"rlgrad_native_{digest}"
    path = os.path.join(folder, mod_name + importlib.machinery.EXTENSION_SUFFIXES[0])
    _state["last_cached"] = os.path.exists(path)
    if not _state["last_cached"]:
        _compile(cc, source.replace("@MODULE@", mod_name), path, link, folder)
    return _load(mod_name, path)


def included(source: str) -> list[str]:
    """The text of each of rlgrad's headers that ``source`` includes (``#include "..."``), in
    order; Unavailable when one is missing (an install without rlgrad's headers)."""
    texts = []
    for name in _INCLUDE.findall(source):
        try:
            with open(os.path.join(INCLUDE_DIR, name)) as f:
                texts.append(f.read())
        except OSError:
            raise Unavailable(f"rlgrad's header {name} is missing from {INCLUDE_DIR} (an "
                              "incomplete install)") from None
    return texts


def _compile(cc: list[str], source: str, path: str, link: list[str], folder: str) -> None:
    try:
        fd, tmp_c = tempfile.mkstemp(suffix=".c", dir=folder)
    except OSError as e:
        raise Unavailable(f"the cache folder {folder} is not writable ({e.strerror}); set "
                          "RLGRAD_CACHE_DIR to a writable folder") from None
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_so = tmp_c[:-2] + ".so.tmp"
    cmd = [*cc, *FLAGS, "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
           "-I", np.get_include(), "-iquote", INCLUDE_DIR, tmp_c, "-o", tmp_so, *link]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr[:300])
            raise BuildError(f"the C compiler refused the generated source ({tmp_c} kept): {first}")
        os.replace(tmp_so, path)  # atomic: readers see no file or the whole one
        os.remove(tmp_c)
    finally:
        if os.path.exists(tmp_so):
            os.remove(tmp_so)


def _load(mod_name: str, path: str) -> ModuleType:
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sgemm, dgemm = blas_pointers()
    module.setup(sgemm, dgemm)
    sys.modules[mod_name] = module
    return module


def blas_pointers() -> tuple[int, int]:
    """The addresses of ``cblas_sgemm``/``cblas_dgemm`` (64-bit integers) in the OpenBLAS that
    NumPy's wheel bundles, the library NumPy's own matmul calls; (0, 0) where NumPy links another
    BLAS (the generated code then runs its own loops). ``RLGRAD_NATIVE_BLAS=0`` forces those."""
    if "blas" not in _state:
        found = (0, 0)
        libs = sorted(glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas64*")))
        if libs and os.environ.get("RLGRAD_NATIVE_BLAS", "1") != "0":
            try:
                lib = ctypes.CDLL(libs[0])
                found = tuple(ctypes.cast(getattr(lib, f"scipy_cblas_{t}gemm64_"), ctypes.c_void_p).value
                              for t in "sd")  # type: ignore[assignment]
            except (OSError, AttributeError):
                found = (0, 0)
        _state["blas"] = found
    return _state["blas"]


def last_was_cached() -> bool:
    return bool(_state.get("last_cached"))
