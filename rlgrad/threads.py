"""``rlgrad.set_num_threads`` / ``get_num_threads``: the threads of NumPy's BLAS, which does
rlgrad's matrix products (PyTorch's functions of the same names set its own intra-op pool).

The setting is process-wide, as PyTorch's is, and here it is shared with every NumPy product of
the process. ``import rlgrad`` changes nothing. The policy: the products of RL networks are small,
and on a busy machine a threaded BLAS makes them slower, up to 80x (``bench/threads.py``,
docs/dropin.md), so training runs on one thread. rlgrad's RL algorithms set it when they are
built (``blas_threads=``), and building the first ``rlgrad.optim`` optimizer sets it for scripts
that use only ``rlgrad.nn`` / ``rlgrad.optim`` -- unless the user chose: called
``set_num_threads`` before, or set ``RLGRAD_NUM_THREADS``, ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS`` (``RLGRAD_NUM_THREADS=0`` leaves BLAS alone).
OpenBLAS (NumPy's wheels) is found among the loaded libraries and told through its own entry
points; with another BLAS, set ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` before starting Python.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["set_num_threads", "get_num_threads", "set_num_interop_threads",
           "get_num_interop_threads"]

_SET = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads_64_",
        "openblas_set_num_threads64_", "openblas_set_num_threads")
_GET = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads_64_",
        "openblas_get_num_threads64_", "openblas_get_num_threads")
_found: dict[str, list] = {}


def openblas_libs() -> list[str]:
    """Paths of the OpenBLAS libraries loaded into this process (Linux: /proc/self/maps)."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.rsplit(" ", 1)[-1].strip()
                name = p.rsplit("/", 1)[-1].lower()
                if "openblas" in name and ".so" in name and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    return paths


def _entries(names: tuple[str, ...]) -> list:
    """One entry point per loaded OpenBLAS (NumPy's and SciPy's may be two copies)."""
    key = names[0]
    if key not in _found:
        import numpy  # noqa: F401 - NumPy's BLAS must be loaded to be found

        fns = []
        for path in openblas_libs():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for name in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fns.append(fn)
                    break
        _found[key] = fns
    return _found[key]


_ENV = ("RLGRAD_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_policy = {"applied": False, "user": False}


def set_num_threads(n: int) -> bool:
    """Use ``n`` BLAS threads for the products of this process; True if the BLAS was told
    (False: no OpenBLAS found, nothing changed). After this call rlgrad's optimizers leave the
    setting alone."""
    _policy["user"] = True
    return _set(n)


def leave_alone() -> None:
    """Record that the user chose the threads (an algorithm built with ``blas_threads=None``):
    the optimizers will not change them."""
    _policy["user"] = True


def apply_training_default() -> None:
    """One BLAS thread for a training script, once per process, unless the user chose (see the
    module's docstring). Called when an ``rlgrad.optim`` optimizer is built."""
    if _policy["applied"]:
        return
    _policy["applied"] = True
    if _policy["user"] or any(v in os.environ for v in _ENV):
        env = os.environ.get("RLGRAD_NUM_THREADS", "")
        if env.strip().isdigit() and int(env) > 0 and not _policy["user"]:
            _set(int(env))
        return
    _set(1)


def _set(n: int) -> bool:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_num_threads takes a positive integer, got {n!r}")
    fns = _entries(_SET)
    for fn in fns:
        fn.argtypes = [ctypes.c_int]
        fn(n)
    return bool(fns)


def get_num_threads() -> int:
    """The BLAS threads products use now (the CPU count when the BLAS cannot be asked)."""
    fns = _entries(_GET)
    if fns:
        fns[0].restype = ctypes.c_int
        return int(fns[0]())
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_interop = [1]


def set_num_interop_threads(n: int) -> None:
    """Accepted for PyTorch scripts; rlgrad runs ops one after another (no inter-op pool)."""
    _interop[0] = int(n)


def get_num_interop_threads() -> int:
    return _interop[0]
