"""The RL layer's shape (cycles and function lengths: tests/project/test_structure.py): moved helpers
keep their old import paths, and the CLI names every registered algorithm."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "rlgrad"


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
    help_text = train.format_help()  # (the registry is written into it when it is printed)
    docs = (ROOT.parent / "docs" / "cli.md").read_text()
    for name in ALGORITHMS:
        assert name in help_text, name
        assert f"`{name}`" in docs, name


def _dqn_variant_section() -> str:
    text = (ROOT.parent / "docs" / "rl.md").read_text()
    start = text.index("### Adding a DQN variant")
    return text[start:text.index("\n## ", start)]


def test_docs_dqn_hook_table_lists_exactly_the_hooks_each_variant_overrides():
    """docs/rl.md's DQN hook table: its rows are DQN methods, and the class of each variant
    column (named by its file) overrides exactly those of DQN's methods."""
    import re

    from rlgrad.rl import ALGORITHMS, DQN

    lines = _dqn_variant_section().split("| DQN hook |", 1)[1].split("\n\n", 1)[0].splitlines()
    hooks = {re.match(r"\| `(\w+)\(", line).group(1) for line in lines[2:]}
    assert hooks and all(callable(getattr(DQN, h, None)) for h in hooks), hooks
    files = re.findall(r"\(`(\w+)\.py`\)", lines[0])
    by_file = {cls.__module__.rsplit(".", 1)[1]: cls for cls in ALGORITHMS.values()}
    assert len(files) >= 2 and all(issubclass(by_file[f], DQN) for f in files), files
    variants = {by_file[f] for f in files}
    assert variants == {c for c in ALGORITHMS.values() if issubclass(c, DQN) and c is not DQN}
    public = {n for n, v in vars(DQN).items() if callable(v) and not n.startswith("_")}
    for cls in variants:
        assert {n for n in vars(cls) if n in public} == hooks, cls.__name__


def test_docs_list_of_files_a_dqn_variant_touches_exists_for_c51():
    import re

    listed = _dqn_variant_section().split("The files a new variant touches", 1)[1]
    paths = re.findall(r"`((?:rlgrad|docs|tests)/[\w/<>.]+)`", listed)
    assert len(paths) >= 8, paths
    for p in paths:
        assert (ROOT.parent / p.replace("<name>", "c51")).exists(), p
