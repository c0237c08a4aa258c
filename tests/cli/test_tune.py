"""``rlgrad tune``: search spaces checked before anything starts, a small sweep on CartPole whose
trials are ordinary run directories, results.csv best first, curves.png, and ``--resume``.

Sweeps run ``rlgrad tune`` in a subprocess (a local Ray of 2 CPUs); tests that need Ray are
skipped, with the reason printed by ``pytest -rs``, only when Ray is not installed.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlgrad.cli import main
from rlgrad.cli.build import resolve_algo
from rlgrad.cli.errors import CLIError
from rlgrad.cli.tune import read_space, space_path, validate_space
from rlgrad.rl import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
try:
    import ray  # noqa: F401
    import ray.tune  # noqa: F401
except ImportError:
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="Ray Tune is not installed: pip install "
                               "'rlgrad[ray]' (make test installs it)")

TINY = """\
learning_rate: {loguniform: [3.0e-4, 3.0e-2]}
n_steps: {choice: [16, 32]}
batch_size: 64
n_epochs: 2
policy_kwargs.net_arch: {choice: [[16], [32, 32]]}
"""


# ---- no Ray needed ----------------------------------------------------------------------------
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_shipped_search_spaces_are_valid(algo):
    """Every registered algorithm ships a search space that fits its constructor."""
    name, cls = resolve_algo(algo)
    space = read_space(space_path(name, None))
    kinds = validate_space(space, cls, name, "space")
    assert set(kinds) == set(space) and "learning_rate" in kinds


def _tune(args, tmp_path, capsys):
    code = main(["tune", "CartPole-v1", "--algo", "ppo", "--samples", "2",
                 "--sweep-dir", str(tmp_path / "sweep"), *args])
    return code, capsys.readouterr().err


def test_unknown_hyperparameter_is_named_before_anything_starts(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(TINY + "learning_rat: {uniform: [0.1, 0.2]}\n")
    code, err = _tune(["--space", str(space)], tmp_path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "no hyperparameter 'learning_rat'" in err
    assert "did you mean: learning_rate" in err
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("line, said", [
    ("gamma: {uniform: [0.9, 1.5]}", "gamma=1.5 is out of range"),
    ("n_epochs: {choice: [4, 0]}", "n_epochs=0 is out of range"),
    ("learning_rate: {loguniform: [0.0, 0.1]}", "lo > 0"),
    ("gamma: {normal: [0.9, 0.1]}", "expected one of"),
    ("n_steps: {choice: [16, fast]}", "n_steps takes an integer"),
    ("policy_kwargs.net_arch: {choice: [[64], [0]]}", "layer sizes must be integers >= 1"),
    ("n_timesteps: {choice: [1000, 2000]}", "give each trial's with --steps"),
    ("batch_size: {randint: [0, 8]}", "batch_size=0 is out of range"),
])
def test_bad_ranges_are_one_line(tmp_path, capsys, line, said):
    space = tmp_path / "space.yaml"
    space.write_text(line + "\n")
    code, err = _tune(["--space", str(space)], tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and said in err, err


def test_importing_the_tune_command_does_not_import_ray():
    code = "import sys, rlgrad, rlgrad.cli.tune; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_validation_errors_are_cli_errors():
    _, cls = resolve_algo("ppo")
    with pytest.raises(CLIError, match="PPO has no hyperparameter 'tau'"):
        validate_space({"tau": 0.5}, cls, "ppo", "space")


def test_resume_needs_a_sweep(tmp_path, capsys):
    code, err = _tune(["--resume"], tmp_path, capsys)
    assert code == 2 and "holds no sweep" in err


@needs_ray
def test_unreachable_cluster_is_one_line_and_writes_nothing(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(TINY)
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    code, err = _tune(["--space", str(space), "--ray-address", f"127.0.0.1:{port}"], tmp_path,
                      capsys)
    assert code == 2 and err.count("\n") == 1 and "cannot reach the Ray cluster" in err
    assert time.monotonic() - t0 < 15
    assert not (tmp_path / "sweep").exists()


# ---- sweeps on Ray ----------------------------------------------------------------------------
def _cmd(sweep: Path, space: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlgrad.cli", "tune", "CartPole-v1", "--algo", "ppo",
            "--space", str(space), "--sweep-dir", str(sweep), "--ray-cpus", "2", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _read(sweep: Path) -> list[dict[str, str]]:
    with open(sweep / "results.csv") as f:
        return list(csv.DictReader(f))


def _last_return(run_dir: str) -> float:
    with open(Path(run_dir) / "metrics.csv") as f:
        vals = [r["rollout/ep_rew_mean"] for r in csv.DictReader(f) if r["rollout/ep_rew_mean"]]
    return float(vals[-1])


@needs_ray
def test_sweep_makes_runs_table_and_plot(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(TINY)
    sweep = tmp_path / "sweep"
    out = subprocess.run(_cmd(sweep, space, "--samples", "3", "--steps", "1024", "--search",
                              "optuna", "--scheduler", "asha"),
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = _read(sweep)
    assert len(rows) == 3
    finals = [float(r["final_return"]) for r in rows]
    assert finals == sorted(finals, reverse=True)  # best first
    assert [r["rank"] for r in rows] == ["1", "2", "3"]
    for r in rows:
        run = Path(r["run_dir"])
        assert run.parent == sweep / "runs"
        assert (run / "config.yaml").exists() and (run / "checkpoint.safetensors").exists()
        assert float(r["final_return"]) == pytest.approx(_last_return(r["run_dir"]), rel=1e-12)
        assert 3e-4 <= float(r["learning_rate"]) <= 3e-2 and r["n_steps"] in ("16", "32")
        assert r["policy_kwargs.net_arch"] in ("[16]", "[32, 32]")
        cfg = (run / "config.yaml").read_text()
        assert f"learning_rate: {float(r['learning_rate'])!r}" in cfg or r["learning_rate"] in cfg
    png = (sweep / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "best trial" in out.stdout
    assert {r["status"] for r in rows} <= {"finished", "stopped early"}  # ASHA may stop some
    # rlgrad's lines only: no Ray banner, table, colour code or worker prefix (they drowned it)
    for noise in ("\x1b[", "repeated", "View detailed results", "Configuration for experiment",
                  "tensorboard", "pid="):
        assert noise not in out.stdout + out.stderr, (noise, out.stdout, out.stderr[-2000:])
    lines = out.stdout.strip().splitlines()
    assert all(ln.startswith(("sweep of 3 trials", "trial ", "best trial", "results:"))
               for ln in lines), lines
    assert "(3/3 done)" in out.stdout and out.stdout.count(": started (learning_rate=") == 3
    best = next(ln for ln in lines if ln.startswith("best trial"))
    lr = best.split("learning_rate=")[1].split(",")[0]
    assert len(lr.replace("e-0", "")) <= 8, best  # 3 significant digits, not 0.00060794823...


@needs_ray
def test_interrupted_sweep_resumes(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(TINY)
    sweep = tmp_path / "sweep"
    cmd = _cmd(sweep, space, "--samples", "2", "--steps", "6000", "--checkpoint-every", "1000")
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while time.monotonic() < end and not list(sweep.glob("runs/*/checkpoint.safetensors")):
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()[1][-2000:]
    os.kill(p.pid, signal.SIGINT)  # Ctrl-C: Tune saves the experiment's state and stops
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "--resume" in err.splitlines()[-1]
    before = {r["trial"]: int(r["steps"]) for r in _read(sweep)}
    assert any(s < 6000 for s in before.values()), before
    out = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = _read(sweep)
    assert len(rows) == 2 and all(r["status"] == "finished" for r in rows), rows
    for r in rows:  # each trial's run went on from its checkpoint: one row per step, increasing
        with open(Path(r["run_dir"]) / "metrics.csv") as f:
            steps = [int(x["time/total_timesteps"]) for x in csv.DictReader(f)]
        assert steps == sorted(set(steps)) and steps[-1] >= 6000
        cfg = yaml.safe_load((Path(r["run_dir"]) / "config.yaml").read_text())
        assert cfg["checkpoint_interval"] == 1000
        b = before.get(r["trial"], 0)  # a trial not started yet: not in the table
        if 0 < b < 6000:  # not from scratch: from its last checkpoint (every 1000 steps or so)
            assert len(cfg["resumes"]) == 1, cfg.get("resumes")
            assert b - 1300 < cfg["resumes"][0]["from_step"] <= b, (b, cfg["resumes"])


def _kill_session(sid: int) -> None:
    """SIGKILL to every process of session ``sid`` (Ray's workers have process groups of their
    own, so ``killpg`` of the driver's would leave them running)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # (the process ended meanwhile)
            continue
        if int(fields[3]) == sid:  # after the name: state, ppid, pgrp, session
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.parent.name), signal.SIGKILL)


@needs_ray
def test_sweep_killed_with_sigkill_resumes(tmp_path):
    """kill -9 of the sweep's driver (no chance to save anything on the way out): ``--resume``
    finishes every trial, each run going on from a checkpoint of its own (steps never repeat)."""
    space = tmp_path / "space.yaml"
    space.write_text(TINY)
    sweep = tmp_path / "sweep"
    cmd = _cmd(sweep, space, "--samples", "2", "--steps", "6000", "--checkpoint-every", "1000")
    # its own session: the kill takes the driver and Ray's trial workers at once, as a lost
    # machine would (a worker left running could finish its trial before --resume starts)
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    end = time.monotonic() + 120
    while time.monotonic() < end and len(list(sweep.glob("runs/*/checkpoint.safetensors"))) < 2:
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()[1][-2000:]
    _kill_session(p.pid)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    out = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = _read(sweep)
    assert len(rows) == 2 and all(r["status"] == "finished" for r in rows), rows
    for r in rows:
        with open(Path(r["run_dir"]) / "metrics.csv") as f:
            steps = [int(x["time/total_timesteps"]) for x in csv.DictReader(f)]
        assert steps == sorted(set(steps)) and steps[-1] >= 6000, steps
    resumed = [yaml.safe_load((Path(r["run_dir"]) / "config.yaml").read_text()).get("resumes")
               for r in rows]
    assert all(resumed), resumed  # both had a checkpoint when killed: neither started over
