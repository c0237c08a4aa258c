"""Checkpoints of a run that someone else may have touched, and runs that end badly (issue 33):
the whole file checksummed (a changed hyperparameter falls back to the previous checkpoint),
config.yaml edits that disagree with the checkpoint said, a full disk in one line with the
previous checkpoints kept, an empty replay buffer said, and kill -9 of DQN (with its buffer) and
SAC resumed to the very curve of an uninterrupted run."""

from __future__ import annotations

import csv
import errno
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tensorboardX")
pytest.importorskip("matplotlib")
pytest.importorskip("safetensors")

import yaml  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["CartPole-v1", "--algo", "ppo", "--steps", "256", "--n-envs", "2", "--set", "n_steps=32",
         "--set", "batch_size=32", "--set", "n_epochs=1", "--set", "gamma=0.98",
         "--checkpoint-every", "64", "--no-progress"]


def _stderr_lines(capsys: pytest.CaptureFixture) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.strip().splitlines() if line]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trust") / "run"
    assert main(["train", *TRAIN, "--steps", "192", "--run-dir", str(path)]) == 0
    return path


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _gamma(path: Path) -> float:
    return rlgrad.load(path)["hyperparams"]["gamma"]


# ---- 3. checkpoint metadata ----------------------------------------------------------------------
def test_a_changed_hyperparameter_in_the_checkpoint_falls_back_and_says_so(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The issue's flip: gamma 0.98 -> 0.99 in the newest checkpoint's header. Before: resume
    trained with 0.99 silently."""
    run1 = _copy(run, tmp_path / "run1")
    ckpt = run1 / "checkpoint.safetensors"
    data = ckpt.read_bytes()
    assert data.count(b"0.98") == 1
    ckpt.write_bytes(data.replace(b"0.98", b"0.99"))
    assert main(["resume", str(run1), "--steps", "256"]) == 0
    err = _stderr_lines(capsys)
    assert any("whole-file checksum" in e and "checkpoint.1.safetensors" in e for e in err), err
    assert _gamma(run1 / "checkpoint.safetensors") == 0.98
    assert (run1 / "checkpoint.safetensors.damaged").exists()


def test_a_five_thousand_digit_integer_falls_back_to_the_previous_checkpoint(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: a ValueError traceback and no fallback."""
    run1 = _copy(run, tmp_path / "run1")
    ckpt = run1 / "checkpoint.safetensors"
    data = ckpt.read_bytes()
    n = 8 + int.from_bytes(data[:8], "little")
    header = data[8:n].replace(b'"file_crc32":', b'"big":' + b"9" * 5000 + b',"file_crc32":', 1)
    ckpt.write_bytes(len(header).to_bytes(8, "little") + header + data[n:])
    assert main(["eval", str(run1), "--episodes", "1"]) == 0
    err = _stderr_lines(capsys)
    assert len(err) == 1 and "checkpoint.1.safetensors" in err[0], err


def test_hand_edited_hyperparameters_in_config_yaml_are_said_and_set_right(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: the file was silently ignored and left wrong."""
    run1 = _copy(run, tmp_path / "run1")
    cfg = yaml.safe_load((run1 / "config.yaml").read_text())
    assert main(["resume", str(run1), "--steps", "256"]) == 0  # agreeing: nothing said
    assert not [e for e in _stderr_lines(capsys) if "disagrees" in e]
    cfg = yaml.safe_load((run1 / "config.yaml").read_text())
    cfg["hyperparams"]["gamma"] = 0.97
    (run1 / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert main(["resume", str(run1), "--steps", "320"]) == 0
    err = [e for e in _stderr_lines(capsys) if "disagrees" in e]
    assert len(err) == 1 and "gamma: 0.97 there, 0.98 in the checkpoint" in err[0], err
    assert "checkpoint's values are used" in err[0]
    assert yaml.safe_load((run1 / "config.yaml").read_text())["hyperparams"]["gamma"] == 0.98
    assert _gamma(run1 / "checkpoint.safetensors") == 0.98


# ---- 6. a full disk ------------------------------------------------------------------------------
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_checkpoints(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a 34-61 line traceback. safetensors reports ENOSPC as its own error type."""
    import safetensors.numpy

    run1 = _copy(run, tmp_path / "run1")
    newest = (run1 / "checkpoint.safetensors").read_bytes()

    def full(*a: object, **k: object) -> None:
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left "
                                          "on device (os error 28)")

    monkeypatch.setattr(safetensors.numpy, "save_file", full)
    assert main(["resume", str(run1), "--steps", "320"]) == 1
    err = _stderr_lines(capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"rlgrad: disk full: checkpoint '{run1 / 'checkpoint.safetensors'}' "
                             "needs about "), err
    assert "free" in err[0] and "the last checkpoint (step 192) is kept" in err[0]
    assert (run1 / "checkpoint.safetensors").read_bytes() == newest
    assert rlgrad.load(run1 / "checkpoint.1.safetensors")["run"]["num_timesteps"] == 192
    assert not list(run1.glob("*.tmp")) and not list(run1.glob(".*.tmp"))
    monkeypatch.undo()
    assert main(["resume", str(run1), "--steps", "320"]) == 0  # space again: it continues


def test_a_full_disk_while_logging_is_one_line(run: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rlgrad.rl.logger import CSVWriter

    run1 = _copy(run, tmp_path / "run1")

    def full(self: CSVWriter, *args: Any, **kwargs: Any) -> None:  # SB3's write(values, excluded, step)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    monkeypatch.setattr(CSVWriter, "write", full)
    assert main(["resume", str(run1), "--steps", "320"]) == 1
    err = _stderr_lines(capsys)
    assert err == [f"rlgrad: disk full: cannot write {run1 / 'metrics.csv'} (No space left on "
                   f"device); the last checkpoint (step 192) is kept: rlgrad resume {run1}"]


# ---- 6. an empty replay buffer is said -----------------------------------------------------------
def test_resume_without_the_buffer_in_the_checkpoint_says_it_starts_empty(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run1 = tmp_path / "dqn"
    args = ["CartPole-v1", "--algo", "dqn", "--steps", "300", "--set", "learning_starts=100",
            "--set", "buffer_size=1000", "--checkpoint-every", "100", "--no-progress"]
    assert main(["train", *args, "--no-buffer-in-checkpoint", "--run-dir", str(run1)]) == 0
    capsys.readouterr()
    assert main(["resume", str(run1), "--steps", "800"]) == 0
    err = [e for e in _stderr_lines(capsys) if "replay buffer" in e]
    assert len(err) == 1 and "starts with an empty buffer" in err[0], err
    run2 = tmp_path / "dqn-buffer"
    assert main(["train", *args, "--run-dir", str(run2)]) == 0
    assert main(["resume", str(run2), "--steps", "800"]) == 0
    assert not [e for e in _stderr_lines(capsys) if "replay buffer" in e]


# ---- 7. kill -9 of off-policy runs ---------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlgrad.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


def _curve(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k not in ("time/fps", "time/time_elapsed")}
            for r in rows]


def _kill_9_and_resume(tmp_path: Path, args: list[str], interval: int, seed: int,
                       replay: bool = True) -> None:
    """Train, kill -9 once a checkpoint past the first is written (and a random moment later),
    resume: the files are whole, at most one interval is lost, and the curve is the one of an
    uninterrupted run (replay buffer, RNG streams and env state all came back)."""
    ref, run1 = tmp_path / "ref", tmp_path / "killed"
    ref_proc = _cli("train", *args, "--run-dir", str(ref))
    proc = _cli("train", *args, "--run-dir", str(run1))
    t0 = time.time()
    while not (run1 / "checkpoint.1.safetensors").exists():
        assert proc.poll() is None, proc.communicate()
        # a hang guard, not a speed check: under a loaded host Ray's start alone takes minutes
        assert time.time() - t0 < 900, "no second checkpoint after 15 minutes"
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.0, 0.3))
    proc.kill()
    proc.communicate(timeout=30)
    out, err = ref_proc.communicate(timeout=300)
    assert ref_proc.returncode == 0, err
    ckpt = rlgrad.load(run1 / "checkpoint.safetensors")
    assert ("replay_buffer" in ckpt["state"]) == replay
    step = ckpt["run"]["num_timesteps"]
    rows = _curve(run1) if (run1 / "metrics.csv").exists() else []  # (none before a first log)
    assert not rows or int(rows[-1]["time/total_timesteps"]) - step <= interval + 64
    p = subprocess.run([sys.executable, "-m", "rlgrad.cli", "resume", str(run1)],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert _curve(run1) == _curve(ref) and _curve(ref)
    done, want = (rlgrad.load(r / "checkpoint.safetensors")["state"] for r in (run1, ref))
    for name, module in want["modules"].items():  # the very same networks, bit for bit
        for key, value in module.items():
            assert np.array_equal(done["modules"][name][key], value), (name, key)


def test_kill_9_of_dqn_with_its_replay_buffer_resumes_to_the_same_curve(tmp_path: Path) -> None:
    _kill_9_and_resume(tmp_path, [
        "CartPole-v1", "--algo", "dqn", "--steps", "1200", "--set", "learning_starts=200",
        "--set", "train_freq=4", "--set", "gradient_steps=1", "--set", "buffer_size=1000",
        "--set", "target_update_interval=100", "--checkpoint-every", "200", "--no-progress"],
        interval=200, seed=0)


def test_kill_9_of_sac_resumes_to_the_same_curve(tmp_path: Path) -> None:
    _kill_9_and_resume(tmp_path, [
        "Pendulum-v1", "--algo", "sac", "--steps", "1000", "--set", "learning_starts=100",
        "--set", "buffer_size=1000", "--set", "batch_size=32", "--set", "train_freq=2",
        "--set", "policy_kwargs.net_arch=[32,32]", "--checkpoint-every", "200",
        "--no-progress"], interval=200, seed=1)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed: pip install 'rlgrad[ray]' (make test installs it)")
def test_kill_9_of_a_driver_with_ray_runners_resumes_to_the_same_curve(tmp_path: Path) -> None:
    """PPO with two Ray env runners: the driver killed with SIGKILL (its local Ray goes down with
    it), then resumed on a new local Ray, ends on the uninterrupted run's curve and networks."""
    _kill_9_and_resume(tmp_path, [
        "CartPole-v1", "--algo", "ppo", "--steps", "1536", "--n-envs", "2", "--env-runners", "2",
        "--set", "n_steps=64", "--set", "batch_size=64", "--set", "n_epochs=1",
        "--checkpoint-every", "256", "--no-progress"], interval=256, seed=2, replay=False)
