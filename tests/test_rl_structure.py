"""The RL layer's shape (cycles and function lengths: tests/test_structure.py): moved helpers
keep their old import paths, and the CLI names every registered algorithm."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rlgrad"


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
