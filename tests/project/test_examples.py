"""Every example runs as `python examples/NAME.py` and exits 0 (each asserts its own results)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
WITH_PICTURE = {"saliency.py", "a2c_losses.py"}


def test_the_issue_examples_are_all_here() -> None:
    names = {p.name for p in EXAMPLES}
    for name in ("gather_policy_gradient.py", "dqn_backward_from_output.py", "saliency.py",
                 "a2c_losses.py", "curvature.py", "optimize_input.py",
                 "reinforce_vs_reparam.py", "ddpg_vs_reinforce.py", "custom_function.py",
                 "per_sample_gradients.py"):
        assert name in names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, str(path.relative_to(ROOT))]
    if path.name in WITH_PICTURE:
        cmd += ["--out", str(tmp_path / f"{path.stem}.png")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip()
    if path.name in WITH_PICTURE:
        assert (tmp_path / f"{path.stem}.png").stat().st_size > 0
