"""Stable-Baselines3's and sb3-contrib's own test suites, run against ``rlgrad.rl``.

    .venv/bin/python bench/sb3_tests.py [--suite sb3|contrib|both] [--files test_x.py ...]
                                        [--against rlgrad|sb3|both] [--workdir build/sb3tests]

Downloads the source distributions of the installed ``stable-baselines3`` and ``sb3-contrib``
versions with pip (``pip download --no-binary :all: --no-deps``), extracts their ``tests/``
folders, rewrites the imports (``stable_baselines3`` -> ``rlgrad.rl``, ``sb3_contrib`` ->
``rlgrad.rl.contrib``; ``torch`` stays: SB3's tests use ``th.nn.ReLU`` and such as a user's
script would) and runs each test file in its own pytest process against this checkout's
rlgrad. Prints a markdown table per file (passed / failed / errors / skipped), the table
``docs/dropin.md`` shows. ``--against sb3`` runs the same files unrewritten against SB3 itself:
the column the goal (95% of what SB3 passes) is measured against.

Nothing here is part of ``make test`` (``make sb3-tests`` runs it): it needs the network once
and takes tens of minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"sb3": "stable-baselines3", "contrib": "sb3-contrib"}
REWRITES = [(re.compile(r"\bstable_baselines3\b"), "rlgrad.rl"),
            (re.compile(r"\bsb3_contrib\b"), "rlgrad.rl.contrib")]


def download(package: str, dest: Path) -> Path:
    """The sdist of the installed version of ``package`` in ``dest`` (downloaded once)."""
    ver = version(package)
    stem = package.replace("-", "_")
    found = sorted(dest.glob(f"{stem}-{ver}.tar.gz")) + sorted(dest.glob(f"{package}-{ver}.tar.gz"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
                    "--no-deps", "--dest", str(dest), f"{package}=={ver}"], check=True)
    found = sorted(dest.glob(f"{stem}-{ver}.tar.gz")) + sorted(dest.glob(f"{package}-{ver}.tar.gz"))
    if not found:
        raise SystemExit(f"pip download left no sdist of {package}=={ver} in {dest}")
    return found[0]


def extract_tests(sdist: Path, out: Path, rewrite: bool) -> Path:
    """The sdist's ``tests/`` files in ``out`` (imports rewritten to rlgrad's when ``rewrite``)."""
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 3 or parts[1] != "tests" or not member.isfile():
                continue
            data = tar.extractfile(member)
            if data is None:
                continue
            text = data.read()
            target = out.joinpath(*parts[2:])
            target.parent.mkdir(parents=True, exist_ok=True)
            if rewrite and target.suffix == ".py":
                src = text.decode("utf-8")
                for pattern, new in REWRITES:
                    src = pattern.sub(new, src)
                text = src.encode("utf-8")
            target.write_bytes(text)
    return out


def run_file(folder: Path, name: str, against_rlgrad: bool, timeout: int) -> dict[str, int]:
    """pytest on one file (its own process: SB3 and contrib reuse file names); the counts of
    its junit report. A file that does not import counts as one error."""
    report = folder / f".{name}.xml"
    report.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(ROOT)} if against_rlgrad else {}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--timeout={timeout}", f"--junitxml={report}", "--rootdir", str(folder), name]
    subprocess.run(cmd, cwd=folder, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    if not report.exists():
        return {"passed": 0, "failed": 0, "errors": 1, "skipped": 0}
    suite = ET.parse(report).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    assert suite is not None
    tests, fail, err, skip = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    return {"passed": tests - fail - err - skip, "failed": fail, "errors": err, "skipped": skip}


def table(rows: list[tuple[str, dict[str, dict[str, int]]]], columns: list[str]) -> str:
    head = "| file | " + " | ".join(f"{c}: passed / failed / errors / skipped" for c in columns)
    lines = [head + " |", "|---|" + "---|" * len(columns)]
    totals = {c: {"passed": 0, "failed": 0, "errors": 0, "skipped": 0} for c in columns}
    for name, by in rows:
        cells = []
        for c in columns:
            r = by[c]
            cells.append(f"{r['passed']} / {r['failed']} / {r['errors']} / {r['skipped']}")
            for k in r:
                totals[c][k] += r[k]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(
        f"**{t['passed']}** / {t['failed']} / {t['errors']} / {t['skipped']}"
        for t in totals.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=["sb3", "contrib", "both"], default="both")
    ap.add_argument("--files", nargs="*", default=None, help="test file names (default: all)")
    ap.add_argument("--against", choices=["rlgrad", "sb3", "both"], default="rlgrad")
    ap.add_argument("--workdir", default=str(ROOT / "build" / "sb3tests"))
    ap.add_argument("--timeout", type=int, default=300, help="seconds per test")
    args = ap.parse_args()
    work = Path(args.workdir)
    columns = ["rlgrad", "sb3"] if args.against == "both" else [args.against]
    for suite in ["sb3", "contrib"] if args.suite == "both" else [args.suite]:
        sdist = download(PACKAGES[suite], work / "sdists")
        folders = {c: extract_tests(sdist, work / c / suite, rewrite=c == "rlgrad") for c in columns}
        names = sorted(p.name for p in folders[columns[0]].glob("test_*.py"))
        if args.files:
            names = [n for n in names if n in set(args.files)]
        rows = []
        for name in names:
            by = {c: run_file(folders[c], name, c == "rlgrad", args.timeout) for c in columns}
            print(f"{suite}/{name}: " + ", ".join(f"{c} {by[c]}" for c in columns), flush=True)
            rows.append((name, by))
        print(f"\n### {PACKAGES[suite]} {version(PACKAGES[suite])}\n")
        print(table(rows, columns), flush=True)


if __name__ == "__main__":
    main()
