"""Every code block of README.md, CONTRIBUTING.md and docs/ runs (or is checked) here, so the docs
stay true; and the API site builds with ``mkdocs build --strict``.

What each fenced block gets, by its language:

- ``python``: run. The blocks of one file run in order in one namespace (a doctest session), in
  a temporary working directory; a line ``expr  # tensor(...)`` checks that ``expr`` shows so.
- ``sh``: each line is checked, not run: ``rlgrad ...`` is parsed by the CLI's own parser (and
  ``--algo`` must name a registered algorithm), ``make T`` needs a Makefile target ``T``,
  ``pip install 'rlgrad[X]'`` an extra ``X`` of pyproject.toml, ``python -m M`` / ``python F``
  a module or file of the repository. Any other command makes the block need a ``skip`` marker.
- ``yaml``: parsed.  ``text``: output shown to the reader, not run.

Markers are HTML comments right above a block (invisible on GitHub and on the site):

- ``<!-- test: setup`` ... ``-->``: hidden Python run before the block (the data a fragment
  uses, e.g. ``logits`` for a loss written on one line).
- ``<!-- test: replace OLD -> NEW -->``: run the block with ``OLD`` replaced by ``NEW``: a
  training budget made tiny (``100_000 -> 2_000``). The text shown keeps the real budget.
- ``<!-- test: excerpt PATH -->``: the block is a verbatim excerpt of the repository file PATH.
- ``<!-- test: skip: REASON -->``: not run, for the reason given. ``MAX_SKIPPED`` caps how many.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
DOCS = [p for p in DOCS if p.exists()]
MAX_SKIPPED = 3
LANGUAGES = {"python", "sh", "yaml", "text"}
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*test:\s*(.*?)\s*(-->)?$", re.S)


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    markers: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def marker(self, kind: str) -> list[str]:
        return [m[len(kind):].strip(" :") for m in self.markers if m.split(None, 1)[0].rstrip(":") == kind]


def _markers_above(lines: list[str], i: int) -> list[str]:
    """The ``<!-- test: ... -->`` comments directly above line ``i`` (blank lines between them
    allowed), oldest first."""
    found: list[str] = []
    j = i - 1
    while j >= 0:
        if not lines[j].strip():
            j -= 1
            continue
        if not lines[j].rstrip().endswith("-->"):
            break
        start = j
        while start >= 0 and "<!--" not in lines[start]:
            start -= 1
        m = _MARKER.match("\n".join(lines[start:j + 1]).strip())
        if start < 0 or not m:
            break
        found.insert(0, m.group(1).removesuffix("-->").rstrip())
        j = start - 1
    return found


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2)
        end = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "```")
        code = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        out.append(Block(path, i + 2, lang, code, _markers_above(lines, i)))
        i = end + 1
    return out


ALL = [b for p in DOCS for b in blocks(p)]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_block_says_what_it_is() -> None:
    """A block without a language (or with another one) would be neither run nor checked."""
    bad = [f"{b.where}: ```{b.lang}" for b in ALL if b.lang not in LANGUAGES]
    assert not bad, ("give each block one of the languages " + ", ".join(sorted(LANGUAGES))
                     + " (text: output, not run):\n" + "\n".join(bad))


def test_skips_are_few_and_say_why() -> None:
    skipped = [b for b in ALL if b.marker("skip")]
    assert all(r for b in skipped for r in b.marker("skip")), "a skip marker needs its reason"
    assert len(skipped) <= MAX_SKIPPED, [b.where for b in skipped]


_SHOWN = re.compile(r"^(\s*)([\w.\[\]()]+)\s+#\s*((?:tensor|array)\(.*\))\s*$", re.M)

# Runs in a fresh interpreter per file, so what the docs change (seeds, class attributes such as
# ApexSampler.rollout_fragment_length, BLAS threads, a Ray session) never reaches other tests.
_RUNNER = """
import json, sys
ns = {"__name__": "__docs__"}
for code, where, path, line in json.load(sys.stdin):
    print("running the block at " + where, file=sys.stderr, flush=True)
    exec(compile("\\n" * (line - 1) + code, path, "exec"), ns)
"""


def _program(path: Path) -> list[tuple[str, str, str, int]]:
    """(code, where, file, first line) of what runs for ``path``: each python block after its setup
    markers, with its replace markers applied and its shown values turned into asserts."""
    out = []
    for b in blocks(path):
        if b.lang != "python" or b.marker("skip") or b.marker("excerpt"):
            continue
        out += [(setup, b.where, str(path), b.line) for setup in b.marker("setup")]
        code = b.code
        for rule in b.marker("replace"):
            old, new = rule.split(" -> ", 1)
            assert old in code, f"{b.where}: replace marker: {old!r} is not in the block"
            code = code.replace(old, new)
        code = _SHOWN.sub(lambda m: f"{m[1]}assert repr({m[2]}) == {m[3]!r}, repr({m[2]})", code)
        out.append((code, b.where, str(path), b.line))
    return out


PY_FILES = [p for p in DOCS if _program(p)]


@pytest.mark.parametrize("path", PY_FILES, ids=_id)
def test_python_blocks_run(path: Path, tmp_path: Path) -> None:
    """The file's python blocks, in order, in one namespace, in a temporary directory."""
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(_program(path)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "MPLBACKEND": "Agg",
                               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, f"a code block of {_id(path)} fails:\n{proc.stderr[-3000:]}"


EXCERPTS = [b for b in ALL if b.marker("excerpt")]


@pytest.mark.parametrize("block", EXCERPTS, ids=lambda b: b.where)
def test_excerpts_are_the_code(block: Block) -> None:
    source = (ROOT / block.marker("excerpt")[0]).read_text()
    assert block.code.strip() in source, f"{block.where} no longer matches {block.marker('excerpt')[0]}"


def _commands(code: str) -> list[list[str]]:
    text = code.replace("\\\n", " ")
    return [argv for line in text.splitlines() if (argv := shlex.split(line, comments=True))]


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def _extras() -> set[str]:
    """The extras of pyproject.toml (tomllib is Python 3.11+; rlgrad supports 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))


def _check_rlgrad(argv: list[str]) -> None:
    from rlgrad.cli import build_parser
    from rlgrad.rl import ALGORITHMS

    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as e:
        raise AssertionError(f"`{shlex.join(argv)}` is refused by the CLI's parser") from e
    if getattr(args, "algo", None) is not None:
        assert args.algo in ALGORITHMS, f"`{shlex.join(argv)}`: no algorithm {args.algo!r}"


def _check_command(argv: list[str]) -> bool:
    """Check one documented command; False if it is not one this test knows how to check."""
    cmd, rest = argv[0], argv[1:]
    if cmd == "rlgrad":
        _check_rlgrad(argv)
    elif cmd == "make":
        assert set(rest) <= _makefile_targets(), f"`make {' '.join(rest)}`: no such Makefile target"
    elif cmd == "pip" and rest[:1] == ["install"] and all(a.startswith("rlgrad[") for a in rest[1:]):
        extras = {e for a in rest[1:] for e in a[len("rlgrad["):-1].split(",")}
        assert extras <= _extras(), f"`{shlex.join(argv)}`: no such extra in pyproject.toml"
    elif cmd.rsplit("/", 1)[-1] in ("python", "python3") and rest[:1] == ["-m"]:
        mod = rest[1].replace(".", "/")
        assert ((ROOT / f"{mod}.py").exists() or (ROOT / mod).is_dir()
                or importlib.util.find_spec(rest[1]) is not None), f"no module {rest[1]}"
    elif cmd.rsplit("/", 1)[-1] in ("python", "python3") and rest:
        assert (ROOT / rest[0]).exists(), f"no file {rest[0]}"
    else:
        return False
    missing = [a for a in rest if a.split("/")[0] in _TOP and not (ROOT / a).exists()]
    assert not missing, f"`{shlex.join(argv)}`: no such path {missing}"
    return True


_TOP = {"rlgrad", "tests", "bench", "examples", "docs"}

SH = [b for b in ALL if b.lang == "sh" and not b.marker("skip")]


@pytest.mark.parametrize("block", SH, ids=lambda b: b.where)
def test_shell_blocks_name_real_commands(block: Block) -> None:
    unknown = [shlex.join(a) for a in _commands(block.code) if not _check_command(a)]
    assert not unknown, (f"{block.where}: commands this test cannot check: {unknown}; "
                         "mark the block <!-- test: skip: REASON --> if they cannot be checked")


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "yaml"], ids=lambda b: b.where)
def test_yaml_blocks_parse(block: Block) -> None:
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(block.code) is not None


def test_api_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken reference, a missing page or a docstring mkdocstrings
    cannot render fails here (the ``docs`` extra installs mkdocs; ``make test`` installs it)."""
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]') is not installed")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_benchmarks_are_the_current_tables() -> None:
    """docs/benchmarks.md is what a user compares (the diary is benchmarks-history.md), and
    ``rlgrad bench`` finds there every table it prints as the latest recorded one."""
    from rlgrad.cli.bench import COMPARED, GOALS_HEADING, recorded_table

    doc = ROOT / "docs" / "benchmarks.md"
    assert len(doc.read_text().splitlines()) < 400
    for heading in [GOALS_HEADING, *(h for _, h in COMPARED.values())]:
        table = recorded_table(doc, heading)
        assert table is not None and re.search(r"\b20\d\d-\d\d-\d\d\b", table), heading
