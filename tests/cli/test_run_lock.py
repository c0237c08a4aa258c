"""The run directory's lock: one trainer at a time, released by the kernel when it ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlgrad.cli.errors import CLIError
from rlgrad.cli.run_dir import RunDir

HOLD = """
import sys, time
from rlgrad.cli.run_dir import RunDir
with RunDir(sys.argv[1]).lock():
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_held_lock_refuses_a_second_trainer_and_names_its_pid(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with run.lock():
        assert (tmp_path / "run.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(CLIError, match=f"being trained by process {os.getpid()} right now"):
            with RunDir(tmp_path).lock():
                pass
    assert not (tmp_path / "run.lock").exists()
    with run.lock():  # free again
        pass


def test_a_live_pid_in_an_unheld_lock_file_is_not_a_trainer(tmp_path: Path) -> None:
    """Before: the file's pid was checked for life, so a reused pid (or a killed trainer not yet
    reaped) blocked every resume."""
    (tmp_path / "run.lock").write_text(f"{os.getppid()}\n")
    with RunDir(tmp_path).lock():
        assert (tmp_path / "run.lock").read_text() == f"{os.getpid()}\n"


def test_a_killed_trainers_lock_is_released(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(CLIError, match=f"being trained by process {proc.pid} right now"):
            with RunDir(tmp_path).lock():
                pass
    finally:
        proc.kill()
        proc.wait()
    assert (tmp_path / "run.lock").exists()  # kill -9 left the file, not the lock
    with RunDir(tmp_path).lock():
        pass
