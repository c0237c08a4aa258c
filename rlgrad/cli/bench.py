"""``rlgrad bench``: run the benchmark scripts of ``bench/`` and show their tables.

Each script runs in its own Python process (a benchmark should not share a heap, a JIT cache or
BLAS threads with another), with ``--quick`` passed to the scripts whose command line takes it.
A script whose comparator (Stable-Baselines3, PureJaxRL's JAX stack, PyTorch) is not installed
measures rlgrad alone; after it, the latest comparison recorded in ``docs/benchmarks.md`` is
printed with its date, marked as recorded, not measured now. ``--goals`` prints the issues' speed
goals as last measured (the table of ``GOALS_HEADING``), which a whole run also prints at its end.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

from rlgrad.cli.errors import CLIError, did_you_mean

ORDER = ("engine", "nn", "gather", "distributions", "rl", "purejaxrl", "reinforce_torch",
         "offpolicy_floor", "offpolicy_sb3", "qrdqn")
# benchmark -> (the modules its comparator needs, the heading of its recorded tables)
COMPARED = {
    "rl": (("stable_baselines3", "torch"), "## RL: CartPole-v1 presets"),
    "purejaxrl": (("jax", "flax", "optax", "gymnax"), "## PPO with PureJaxRL's configuration"),
    "reinforce_torch": (("torch",), "### REINFORCE against the same loop in PyTorch"),
    "offpolicy_sb3": (("stable_baselines3", "torch"), "## Whole Pendulum-v1 runs vs Stable-Baselines3"),
}
GOALS_HEADING = "## Speed goals at a glance"
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def missing_comparator(name: str) -> list[str]:
    """The comparator modules of benchmark ``name`` that are not installed."""
    mods = COMPARED.get(name, ((), ""))[0]
    return [m for m in mods if importlib.util.find_spec(m) is None]


def recorded_table(doc: Path, heading: str) -> str | None:
    """The first dated table of the section of ``doc`` that starts with ``heading``: the
    paragraph that dates it, then the table; None if there is none."""
    try:
        lines = doc.read_text().splitlines()
    except OSError:
        return None
    start = next((i for i, x in enumerate(lines) if x.startswith(heading)), None)
    if start is None:
        return None
    level = len(heading) - len(heading.lstrip("#"))
    para: list[str] = []
    date: list[str] = []
    table: list[str] = []
    for x in lines[start + 1:]:
        if x.startswith("#") and len(x) - len(x.lstrip("#")) <= level:
            break  # the next section
        if x.startswith("|"):
            table.append(x)
        elif table:
            break
        else:
            para = para + [x] if x.strip() else []
            if any(_DATE.search(y) for y in para):
                date = para  # the latest paragraph that names a date
    if not table:
        return None
    return "\n".join([lines[start], *date, "", *table])


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


def cmd_bench(only: list[str] | None, quick: bool, goals: bool = False) -> int:
    folder = bench_dir()
    if folder is None:
        raise CLIError("no bench/ folder found: run rlgrad bench from a source checkout of rlgrad")
    doc = folder.parent / "docs" / "benchmarks.md"
    if goals:
        return show_goals(doc)
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
        elif missing_comparator(script.stem):
            show_recorded(script.stem, doc)
    if not only:
        show_goals(doc)
    if failed:
        print(f"rlgrad bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def show_recorded(name: str, doc: Path) -> None:
    """The latest recorded comparison of benchmark ``name``, said to be a record."""
    table = recorded_table(doc, COMPARED[name][1])
    missing = ", ".join(missing_comparator(name))
    if table is None:
        print(f"({missing} not installed: no recorded comparison in {doc})\n", flush=True)
        return
    print(f"({missing} not installed here, so the comparison above is rlgrad alone. The latest "
          f"comparison recorded in {doc.name}, not measured now:)\n{table}\n", flush=True)


def show_goals(doc: Path) -> int:
    """The speed goals of the issues with what was last measured against each, and the floor
    that bounds the ones not met: a record from ``doc``, not a measurement made now."""
    table = recorded_table(doc, GOALS_HEADING)
    if table is None:
        print(f"no speed-goal table recorded in {doc} (section {GOALS_HEADING!r})", flush=True)
        return 1
    print(f"The speed goals as last recorded in {doc.name} (not measured now):\n{table}\n",
          flush=True)
    return 0
