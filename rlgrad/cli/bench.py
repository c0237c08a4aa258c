"""``rlgrad bench``: run the benchmark scripts of ``bench/`` and show their tables.

Each script runs in its own Python process (a benchmark should not share a heap, a JIT cache or
BLAS threads with another), with ``--quick`` passed to the scripts whose command line takes it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rlgrad.cli.errors import CLIError, did_you_mean

ORDER = ("engine", "nn", "gather", "distributions", "rl", "purejaxrl", "offpolicy_floor",
         "offpolicy_sb3", "qrdqn")


def bench_dir() -> Path | None:
    """bench/ of the source checkout rlgrad runs from, else of the current directory."""
    here = Path(__file__).resolve().parents[2] / "bench"
    for d in (here, Path.cwd() / "bench"):
        if d.is_dir():
            return d
    return None


def scripts(folder: Path) -> list[Path]:
    """The known benchmarks first, in their order, then any other bench/*.py."""
    found = {p.stem: p for p in folder.glob("*.py") if not p.stem.startswith("_")}
    return [found[n] for n in ORDER if n in found] + sorted(
        p for n, p in found.items() if n not in ORDER)


def takes_quick(script: Path) -> bool:
    try:
        return "--quick" in script.read_text()
    except OSError:
        return False


def cmd_bench(only: list[str] | None, quick: bool) -> int:
    folder = bench_dir()
    if folder is None:
        raise CLIError("no bench/ folder found: run rlgrad bench from a source checkout of rlgrad")
    todo = scripts(folder)
    if only:
        names = {p.stem: p for p in todo}
        for n in only:
            if n not in names:
                raise CLIError(f"unknown benchmark {n!r}{did_you_mean(n, names)} (available: "
                               f"{', '.join(names)})")
        todo = [names[n] for n in only]
    failed = []
    for script in todo:
        cmd = [sys.executable, str(script)]
        if quick and takes_quick(script):
            cmd.append("--quick")
        print(f"== {script.name} {'(quick)' if '--quick' in cmd else ''}".rstrip(), flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=folder.parent)
        print(f"-- {script.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in "
              f"{time.perf_counter() - t0:.1f} s\n", flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"rlgrad bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
