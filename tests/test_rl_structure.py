"""The RL layer's shape: short functions, no import cycles, old import paths kept."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rlgrad"
PACKAGES = ("rl", "cli")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).glob("*.py")):
            name = f"rlgrad.{pkg}" + ("" if f.stem == "__init__" else f".{f.stem}")
            out[name] = f
    return out


def _imports(tree: ast.AST, mods: dict[str, Path]) -> set[str]:
    """Modules of ``mods`` imported anywhere in ``tree`` (module level or inside functions)."""
    deps = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            subs = [f"{node.module}.{a.name}" for a in node.names
                    if f"{node.module}.{a.name}" in mods]
            deps.update(subs)
            if node.module in mods and len(subs) < len(node.names):
                deps.add(node.module)
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name in mods)
    return deps


def test_no_function_over_80_lines():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert not long, long


def test_no_import_cycle():
    mods = _modules()
    graph = {m: _imports(ast.parse(p.read_text()), mods) - {m} for m, p in mods.items()}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for dep in graph[node]:
            if dep in path:
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif len(path) < len(graph):
                visit(dep, path + [dep])

    for m in graph:
        visit(m, [m])
    assert not cycles, sorted(set(cycles))[:5]


@pytest.mark.parametrize("module, names", [
    ("rlgrad.rl.base", ["BaseAlgorithm", "constructor_hyperparams", "get_schedule_fn",
                        "linear_schedule", "keep_freed_memory", "rng_state", "set_rng_state",
                        "set_grads"]),
    ("rlgrad.rl.threads", ["limit_blas_threads"]),
])
def test_moved_helpers_keep_their_old_import_path(module, names):
    import importlib

    mod = importlib.import_module(module)
    for n in names:
        assert callable(getattr(mod, n)), n


def test_cli_help_and_docs_list_every_algorithm():
    """--algo's help and docs/cli.md name every algorithm of the registry (the CLI does not import
    rlgrad.rl to build its parser, so this test keeps the list in step)."""
    from rlgrad.cli import build_parser
    from rlgrad.rl import ALGORITHMS

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    help_text = next(a.help for a in train._actions if "--algo" in a.option_strings)
    docs = (ROOT.parent / "docs" / "cli.md").read_text()
    for name in ALGORITHMS:
        assert name in help_text, name
        assert f"`{name}`" in docs, name
