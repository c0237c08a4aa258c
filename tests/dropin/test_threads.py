"""rlgrad's BLAS thread policy: nothing on import, one thread once a training script builds its
first optimizer, the user's choice (set_num_threads or the usual variables) always wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlgrad.threads import openblas_libs

CODE = """
import rlgrad
before = rlgrad.get_num_threads()
{pre}
rlgrad.optim.Adam([rlgrad.zeros(2, requires_grad=True)], lr=1e-3)
print(before, rlgrad.get_num_threads())
"""

pytestmark = pytest.mark.skipif(not openblas_libs() and sys.platform != "linux",
                                reason="needs NumPy's OpenBLAS")


def run(pre: str = "", **env: str) -> tuple[int, int]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RLGRAD_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", CODE.format(pre=pre)], capture_output=True,
                         text=True, env={**clean, **env}, check=True, timeout=120)
    before, after = out.stdout.split()
    return int(before), int(after)


def test_import_changes_nothing_and_the_first_optimizer_picks_one_thread() -> None:
    before, after = run()
    assert before == len(os.sched_getaffinity(0)) or before >= 1  # OpenBLAS's own default
    assert after == 1


def test_the_users_choice_wins() -> None:
    before, after = run("rlgrad.set_num_threads(2)")
    assert after == 2
    assert run(RLGRAD_NUM_THREADS="2")[1] == 2
    before, after = run(OPENBLAS_NUM_THREADS="2")
    assert before == after == 2


def test_set_num_threads_rejects_nonsense() -> None:
    import rlgrad

    with pytest.raises(ValueError, match="positive integer"):
        rlgrad.set_num_threads(0)
    assert rlgrad.get_num_interop_threads() >= 1


def test_an_algorithm_built_with_blas_threads_none_leaves_blas_alone() -> None:
    pytest.importorskip("gymnasium")
    before, after = run("from rlgrad.rl import PPO\nPPO('CartPole-v1', n_steps=16, batch_size=16, "
                        "blas_threads=None)")
    assert after == before
    assert run("from rlgrad.rl import PPO\nPPO('CartPole-v1', n_steps=16, batch_size=16)")[1] == 1
