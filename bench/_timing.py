"""Timing shared by the benchmarks: one BLAS thread, calibrated loops, interleaved rounds.

Import this module before NumPy (it pins BLAS to one thread through the environment) and before
rlgrad (it puts this checkout's rlgrad first on the path).
Implementations are timed in turn within every round and rounds are repeated, so load that comes
and goes on a shared machine hits them alike; ratios are taken per round, then the median.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys

# The rlgrad of this checkout, not an installed one (an editable install points at another tree).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402


def calls_for(fn: Callable[[], Any], min_time: float = 0.02) -> int:
    """How many calls make a timing loop last at least ``min_time`` (after one warm-up call)."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= min_time or n >= 1 << 20:
            return n
        n *= 2


def interleaved(impls: dict[str, Callable[[], Any]], repeats: int, min_time: float = 0.02,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, np.ndarray]:
    """Seconds per call of every implementation: one sample per round, ``repeats`` rounds.
    ``clock=time.process_time``: CPU seconds (the process's, all threads), which grow much less
    than the wall clock on a host shared with other work."""
    counts = {name: calls_for(fn, min_time) for name, fn in impls.items()}
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, fn in impls.items():
            n = counts[name]
            t0 = clock()
            for _ in range(n):
                fn()
            times[name].append((clock() - t0) / n)
    return {name: np.array(ts) for name, ts in times.items()}


def paired(times: dict[str, np.ndarray], floor: str) -> dict[str, tuple[float, float]]:
    """name -> (median seconds per call, median of the per-round ratios to ``floor``)."""
    base = times[floor]
    return {name: (float(np.median(ts)), float(np.median(ts / base))) for name, ts in times.items()}


def comparators(modules: tuple[str, ...], skip: bool = False) -> bool:
    """Whether every comparator module imports (now, outside the timed runs); if one does not,
    one line says that the benchmark runs rlgrad alone."""
    if skip:
        return False
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        print(f"{' / '.join(modules)} not installed: rlgrad only", file=sys.stderr)
        return False
    return True


def torch_or_none() -> Any:
    """PyTorch pinned to one thread, or None when it is absent or its install is broken."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - an optional comparator must never break the benchmark
        return None
    torch.set_num_threads(1)
    return torch


def state_hash(model: Any, *extra: np.ndarray) -> str:
    """sha256 (16 hex digits) of an rlgrad model's modules (parameters and buffers), its
    optimizers' state and ``extra`` arrays: two checkouts train alike iff their hashes match (run
    both with the same version of this function)."""
    h = hashlib.sha256()

    def feed(tree: Any) -> None:
        if isinstance(tree, dict):
            for k in sorted(tree, key=str):
                feed(tree[k])
        elif isinstance(tree, list | tuple):
            for v in tree:
                feed(v)
        elif isinstance(tree, np.ndarray) or hasattr(tree, "_value"):
            h.update(np.ascontiguousarray(getattr(tree, "_value", tree)).tobytes())

    for _, m in sorted(model._modules().items()):
        feed(m.state_dict())
    for _, o in sorted(model._optimizers().items()):
        feed(o.state_dict()["state"])
    if getattr(model, "auto_ent", False):
        feed(model.log_ent_coef._value)
    feed(list(extra))
    return h.hexdigest()[:16]


def add_cpu_time(obj: Any, name: str, acc: dict[str, float], key: str) -> None:
    """Wrap ``obj.name`` (an attribute or bound method) to add its CPU time to ``acc[key]``."""
    fn = getattr(obj, name)
    clock = time.process_time

    def wrapper(*a: Any, **k: Any) -> Any:
        t = clock()
        try:
            return fn(*a, **k)
        finally:
            acc[key] += clock() - t
    setattr(obj, name, wrapper)


def learn_cpu(model: Any, steps: int, profile: bool = False) -> tuple[float, Any]:
    """``model.learn(steps)``'s CPU seconds, and its cProfile statistics if ``profile`` (else
    None)."""
    import cProfile
    import pstats

    prof = cProfile.Profile() if profile else None
    c = time.process_time()
    if prof is not None:
        prof.enable()
    model.learn(steps)
    if prof is not None:
        prof.disable()
    cpu = time.process_time() - c
    return cpu, (pstats.Stats(prof).sort_stats("tottime") if prof is not None else None)
