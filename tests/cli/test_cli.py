"""The ``rlgrad`` command line driven as a user would: real subprocesses (``python -m rlgrad.cli``)
on a tiny PPO CartPole run, the files they leave checked for content, Ctrl-C / SIGTERM / kill -9
in the middle of training, resume giving the same metrics as an uninterrupted run, and every kind
of bad input answered with one line on stderr and exit status 2.
"""

from __future__ import annotations

import csv
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

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
TOTAL = 2048
# 2 envs x 32 steps = 64 steps per iteration, 2 epochs of 2 minibatches: about 1-3 s of training
TRAIN_ARGS = ["CartPole-v1", "--algo", "ppo", "--steps", str(TOTAL), "--seed", "3", "--n-envs", "2",
              "--set", "n_steps=32", "--set", "batch_size=32", "--set", "n_epochs=2",
              "--checkpoint-every", "256", "--no-progress"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlgrad.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=_env(), timeout=timeout)


def popen(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlgrad.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=_env())


def curve(run: Path) -> list[dict[str, str]]:
    """metrics.csv without the wall-clock columns (fps, elapsed time differ between runs)."""
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    wall = {"time/fps", "time/time_elapsed"}
    return [{k: v for k, v in r.items() if k not in wall} for r in rows]


def wait_for_rows(run: Path, proc: subprocess.Popen, n: int = 1, timeout: float = 60) -> None:
    """Until metrics.csv has ``n`` rows (training has started: signal handlers are in place)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()}")
        p = run / "metrics.csv"
        if p.exists() and len(p.read_text().splitlines()) > n:
            return
        time.sleep(0.02)
    raise AssertionError("training did not start")


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000
    assert data[-8:-4] == b"IEND", "PNG cut short"


def tfrecords(path: Path) -> list[bytes]:
    """The records of a TensorBoard event file (TFRecord framing), each read in full."""
    data, out, i = path.read_bytes(), [], 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        rec = data[i + 12:i + 12 + n]
        assert len(rec) == n and i + 16 + n <= len(data), "torn TensorBoard record"
        out.append(rec)
        i += 16 + n
    return out


def one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def check_files_whole(run: Path) -> None:
    """Every file of a run directory parses (what must hold after a kill -9 at any moment)."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["env_id"] == "CartPole-v1"
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    step = ckpt["run"]["num_timesteps"]
    assert 0 <= step <= TOTAL + 64
    with open(run / "metrics.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table and all(len(r) == len(table[0]) for r in table), "torn metrics.csv row"
    if (run / "learning_curve.png").exists():
        check_png(run / "learning_curve.png")
    for ev in run.glob("events.out.tfevents.*"):
        tfrecords(ev)


# ---- a reference run, shared ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def ref_run(work: Path) -> Path:
    run = work / "ref"
    p = cli("train", *TRAIN_ARGS, "--run-dir", str(run))
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert str(run) in p.stdout and "learning_curve.png" in p.stdout
    return run


def test_train_leaves_a_complete_run_directory(ref_run: Path) -> None:
    import gymnasium

    cfg = yaml.safe_load((ref_run / "config.yaml").read_text())
    assert cfg["env_id"] == "CartPole-v1" and cfg["algo"] == "ppo" and cfg["seed"] == 3
    assert cfg["total_timesteps"] == TOTAL and cfg["checkpoint_interval"] == 256
    hp = cfg["hyperparams"]
    assert hp["n_steps"] == 32 and hp["batch_size"] == 32 and hp["n_envs"] == 2
    assert hp["gamma"] == 0.98  # from the CartPole-v1 preset
    assert cfg["versions"]["rlgrad"] == rlgrad.__version__
    assert cfg["versions"]["numpy"] == np.__version__
    assert cfg["versions"]["gymnasium"] == gymnasium.__version__

    rows = curve(ref_run)
    assert len(rows) == TOTAL // 64
    for key in ("train/policy_loss", "train/value_loss", "train/entropy_loss", "train/loss",
                "train/learning_rate", "rollout/ep_rew_mean", "time/total_timesteps"):
        assert key in rows[0], key
    steps = [int(r["time/total_timesteps"]) for r in rows]
    assert steps == list(range(64, TOTAL + 1, 64))
    # SB3's order: a row is written before its update (the first one has no train/ values yet)
    assert rows[0]["train/value_loss"] == ""
    assert all(np.isfinite(float(r["train/value_loss"])) for r in rows[1:])

    events = list(ref_run.glob("events.out.tfevents.*"))
    assert len(events) == 1
    blob = b"".join(tfrecords(events[0]))
    for tag in (b"train/policy_loss", b"train/value_loss", b"train/entropy_loss",
                b"rollout/ep_rew_mean"):
        assert tag in blob

    check_png(ref_run / "learning_curve.png")

    ckpt = rlgrad.load(ref_run / "checkpoint.safetensors")
    assert ckpt["algo"] == "PPO" and ckpt["run"]["num_timesteps"] == TOTAL
    from rlgrad.rl import PPO

    model = PPO.load(str(ref_run / "checkpoint.safetensors"))
    action, _ = model.predict(np.zeros(4, dtype=np.float32), deterministic=True)
    assert int(action) in (0, 1)


def test_eval_plot_and_resume_of_a_finished_run(ref_run: Path, work: Path) -> None:
    p = cli("eval", str(ref_run), "--episodes", "3")
    assert p.returncode == 0, p.stderr
    assert "mean return" in p.stdout and "over 3 episodes" in p.stdout

    p = cli("resume", str(ref_run))
    assert p.returncode == 0, p.stderr
    assert "already complete" in p.stdout

    twin = work / "twin"  # a second seed of the same configuration: drawn as mean and spread
    shutil.copytree(ref_run, twin)
    cfg = yaml.safe_load((twin / "config.yaml").read_text())
    cfg["seed"] = 4
    (twin / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = work / "curves.png"
    p = cli("plot", str(ref_run), str(twin), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "2 run(s) in 1 configuration(s)" in p.stdout
    check_png(out)
    p = cli("plot", str(work / "nothing-here"))
    assert "no run directory" in one_error_line(p)


def _interrupt_and_resume(work: Path, ref_run: Path, name: str, sig: int) -> None:
    run = work / name
    proc = popen("train", *TRAIN_ARGS, "--run-dir", str(run))
    wait_for_rows(run, proc)
    time.sleep(random.uniform(0.0, 0.2))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"rlgrad resume {run}" in lines[0], err
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    step = ckpt["run"]["num_timesteps"]
    assert 0 < step < TOTAL
    assert int(curve(run)[-1]["time/total_timesteps"]) == step  # metrics end at the checkpoint
    check_files_whole(run)

    p = cli("resume", str(run))
    assert p.returncode == 0, p.stderr
    assert f"at step {step} of {TOTAL}" in p.stdout
    assert curve(run) == curve(ref_run)  # the same learning curve as the uninterrupted run


def test_ctrl_c_checkpoints_and_resume_gives_the_same_curve(ref_run: Path, work: Path) -> None:
    _interrupt_and_resume(work, ref_run, "sigint", signal.SIGINT)


def test_sigterm_checkpoints_and_resume_gives_the_same_curve(ref_run: Path, work: Path) -> None:
    _interrupt_and_resume(work, ref_run, "sigterm", signal.SIGTERM)


def test_kill_9_loses_at_most_one_interval_and_leaves_no_file_corrupt(ref_run: Path,
                                                                        work: Path) -> None:
    run = work / "kill9"
    proc = popen("train", *TRAIN_ARGS, "--run-dir", str(run))
    wait_for_rows(run, proc)
    p = cli("resume", str(run))  # a second process may not train the same run directory
    if proc.poll() is None:
        assert "is being trained by process" in one_error_line(p)
    time.sleep(random.uniform(0.0, 0.8))  # any moment: mid-rollout, mid-update, mid-save
    proc.kill()
    proc.communicate(timeout=30)
    check_files_whole(run)
    ckpt_step = rlgrad.load(run / "checkpoint.safetensors")["run"]["num_timesteps"]
    last_row = int(curve(run)[-1]["time/total_timesteps"])
    assert last_row - ckpt_step <= 256 + 64  # at most one checkpoint interval (+ one iteration)

    p = cli("resume", str(run))
    assert p.returncode == 0, p.stderr
    check_files_whole(run)
    assert curve(run) == curve(ref_run)  # rows past the checkpoint were dropped, then redone


# ---- bad input: one line, exit status 2, no traceback -------------------------------------------
def test_bad_input_is_one_line_and_exit_status_2(ref_run: Path, work: Path) -> None:
    blocker = work / "a-file"
    blocker.write_text("not a folder")
    no_ckpt = work / "no-ckpt"
    no_ckpt.mkdir()
    shutil.copy(ref_run / "config.yaml", no_ckpt / "config.yaml")
    corrupt = work / "corrupt"
    corrupt.mkdir()
    shutil.copy(ref_run / "config.yaml", corrupt / "config.yaml")
    data = (ref_run / "checkpoint.safetensors").read_bytes()
    (corrupt / "checkpoint.safetensors").write_bytes(data[: len(data) // 2])
    flipped = work / "flipped"
    shutil.copytree(corrupt, flipped)
    bad = bytearray(data)
    bad[-100] ^= 0xFF  # one damaged byte inside an array: the checksum catches it
    (flipped / "checkpoint.safetensors").write_bytes(bytes(bad))

    base = ["--steps", "64", "--no-progress"]
    cases = {
        "env": (["train", "CartPol-v1", "--algo", "ppo", *base], ["CartPol-v1", "CartPole-v1"]),
        "algo": (["train", "CartPole-v1", "--algo", "ppx", *base], ["unknown algorithm", "ppo"]),
        "space": (["train", "Pendulum-v1", "--algo", "dqn", *base], ["dqn"]),
        "key": (["train", "CartPole-v1", "--algo", "ppo", "--set", "n_step=3", *base],
                ["n_step", "n_steps"]),
        "type": (["train", "CartPole-v1", "--algo", "ppo", "--set", "n_steps=abc", *base],
                 ["n_steps", "integer"]),
        "flag": (["train", "CartPole-v1", *base], ["--algo"]),
        "dir": (["train", "CartPole-v1", "--algo", "ppo", "--run-dir", str(blocker / "x"), *base],
                ["cannot write the run directory"]),
        "missing": (["resume", str(no_ckpt)], ["no checkpoint"]),
        "nodir": (["eval", str(work / "does-not-exist")], ["no run directory"]),
        "truncated": (["resume", str(corrupt)], ["corrupt checkpoint", "truncated"]),
        "damaged": (["eval", str(flipped)], ["corrupt checkpoint"]),
        "video": (["eval", str(ref_run), "--video", str(work / "v.avi")], [".gif or .mp4"]),
        "taken": (["train", *TRAIN_ARGS, "--run-dir", str(ref_run)], ["already holds a run"]),
    }
    procs = {k: popen(*args) for k, (args, _) in cases.items()}  # all at once: ~1 s each
    for k, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        line = one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        for word in cases[k][1]:
            if k == "space" and "unknown algorithm" in line:
                continue  # an rlgrad without DQN: still a one-line usage error
            assert word.lower() in line.lower(), (k, line)
    assert not (blocker / "x").exists()


def test_space_mismatch_names_the_action_space() -> None:
    from rlgrad.cli.build import algorithms

    if "dqn" not in algorithms():
        pytest.skip("no DQN in this rlgrad")
    p = cli("train", "Pendulum-v1", "--algo", "dqn", "--steps", "64")
    line = one_error_line(p)
    assert "discrete" in line and "Box" in line


# ---- in-process: presets, bench, --set parsing, video writers ------------------------------------
def test_presets_lists_algorithms_and_environments(capsys: pytest.CaptureFixture) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "ppo" in out and "CartPole-v1" in out


def test_bench_runs_the_scripts_in_order_and_passes_quick(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture) -> None:
    from rlgrad.cli import bench

    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "nn.py").write_text("import sys; print('NN table', sys.argv[1:])\n")
    (folder / "engine.py").write_text(
        "import argparse, sys\np = argparse.ArgumentParser(); p.add_argument('--quick', "
        "action='store_true')\nprint('ENGINE table quick=%s' % p.parse_args().quick)\n")
    monkeypatch.setattr(bench, "bench_dir", lambda: folder)
    assert main(["bench", "--quick"]) == 0
    out = capfd.readouterr().out
    assert out.index("ENGINE table quick=True") < out.index("NN table []")
    assert main(["bench", "--only", "engin"]) == 2
    assert "did you mean: engine" in capfd.readouterr().err


def test_bench_prints_the_recorded_comparison_when_the_comparator_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    from rlgrad.cli import bench

    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "reinforce_torch.py").write_text("print('rlgrad alone')\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text(
        "## RL: CartPole-v1 presets\n\nold prose\n\n"
        "### REINFORCE against the same loop in PyTorch (`bench/reinforce_torch.py`)\n\n"
        "2026-11-25, a quiet host:\n\n| impl | CPU (s) |\n|---|---|\n| rlgrad | 2.0 |\n\n"
        "| older | 9 |\n\n## Next section\n| other | 1 |\n")
    monkeypatch.setattr(bench, "bench_dir", lambda: folder)
    monkeypatch.setattr(bench, "missing_comparator", lambda name: ["torch"])
    assert main(["bench", "--only", "reinforce_torch"]) == 0
    out = capfd.readouterr().out
    assert out.index("rlgrad alone") < out.index("torch not installed")
    assert "2026-11-25, a quiet host:" in out and "| rlgrad | 2.0 |" in out
    assert "| older | 9 |" not in out and "| other | 1 |" not in out
    monkeypatch.setattr(bench, "missing_comparator", lambda name: [])
    assert main(["bench", "--only", "reinforce_torch"]) == 0
    assert "not installed" not in capfd.readouterr().out


def test_bench_goals_prints_the_recorded_goal_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture) -> None:
    from rlgrad.cli import bench

    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "nn.py").write_text("print('NN table')\n")
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    monkeypatch.setattr(bench, "bench_dir", lambda: folder)
    assert main(["bench", "--goals"]) == 1  # no table recorded yet: said, not a traceback
    assert "no speed-goal table recorded" in capfd.readouterr().out
    doc.write_text("# Benchmarks\n\n## Speed goals at a glance\n\nLead, 2026-11-25, quiet host:\n\n"
                   "| goal | target | measured |\n|---|---|---|\n| PPO | 1.0x | 1.2x |\n\n"
                   "## Engine\n| other | 1 |\n")
    assert main(["bench", "--goals"]) == 0
    out = capfd.readouterr().out
    assert "| PPO | 1.0x | 1.2x |" in out and "Lead, 2026-11-25" in out and "NN table" not in out
    assert "| other | 1 |" not in out
    assert main(["bench"]) == 0  # a whole run ends with the goals
    out = capfd.readouterr().out
    assert out.index("NN table") < out.index("| PPO | 1.0x | 1.2x |")


def test_set_values_are_typed() -> None:
    from rlgrad.cli.build import parse_sets
    from rlgrad.cli.errors import CLIError
    from rlgrad.rl import PPO

    got = parse_sets(["n_steps=64", "learning_rate=lin_1e-3", "gamma=1", "normalize=true",
                      "policy_kwargs.net_arch=[32, 32]", "target_kl=null"], PPO)
    assert got == {"n_steps": 64, "learning_rate": "lin_1e-3", "gamma": 1.0, "normalize": True,
                   "policy_kwargs": {"net_arch": [32, 32]}, "target_kl": None}
    assert isinstance(got["gamma"], float)
    for bad in ("n_steps=1.5", "gamma=fast", "learning_rate=fast", "ent_coef=[1]", "nope=1",
                "n_steps"):
        with pytest.raises(CLIError):
            parse_sets([bad], PPO)


def test_gif_writer_and_missing_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    from rlgrad.cli import evaluate
    from rlgrad.cli.errors import CLIError

    frames = [np.full((40, 60, 3), 20 * i, dtype=np.uint8) for i in range(5)]
    evaluate.write_gif(frames, tmp_path / "a.gif", fps=50)
    im = Image.open(tmp_path / "a.gif")
    assert im.format == "GIF" and im.n_frames == 5 and im.size == (60, 40)

    monkeypatch.setattr(evaluate, "_ffmpeg_exe", lambda: None)
    with pytest.raises(CLIError, match=r"\.gif"):
        evaluate.check_video_path(str(tmp_path / "a.mp4"))


def test_eval_of_a_folder_holding_one_run_uses_it(ref_run: Path, tmp_path: Path) -> None:
    """Issue 20: ``rlgrad eval runs/`` with one run inside evaluates it (and names it) instead of
    refusing the folder; with two runs it names them in one line."""
    runs = tmp_path / "runs"
    shutil.copytree(ref_run, runs / "only", ignore=shutil.ignore_patterns("*.lock"))
    p = cli("eval", str(runs), "--episodes", "2")
    assert p.returncode == 0, p.stderr
    assert f"using the one run inside it, {runs / 'only'}" in p.stdout
    assert "mean return" in p.stdout
    shutil.copytree(runs / "only", runs / "second")
    line = one_error_line(cli("eval", str(runs), "--episodes", "2"))
    assert "holds 2 runs; name one" in line and str(runs / "only") in line


def test_eval_video_gif(ref_run: Path, work: Path) -> None:
    pytest.importorskip("pygame")  # Gymnasium's classic-control rendering
    out = work / "episode.gif"
    p = cli("eval", str(ref_run), "--episodes", "1", "--video", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:6] == b"GIF89a" and "video:" in p.stdout


def test_off_policy_resume_with_replay_buffer_gives_the_same_curve(work: Path) -> None:
    from rlgrad.cli.build import algorithms

    if "dqn" not in algorithms():
        pytest.skip("no DQN in this rlgrad")
    args = ["CartPole-v1", "--algo", "dqn", "--steps", "1500", "--set", "learning_starts=300",
            "--set", "train_freq=16", "--set", "gradient_steps=2", "--set", "buffer_size=2000",
            "--set", "target_update_interval=200", "--checkpoint-every", "300", "--no-progress"]
    ref, run = work / "dqn-ref", work / "dqn-int"
    proc = popen("train", *args, "--run-dir", str(run))
    wait_for_rows(run, proc)
    proc.send_signal(signal.SIGINT)
    ref_proc = popen("train", *args, "--run-dir", str(ref))  # the uninterrupted reference
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "rlgrad resume" in err, (out, err)
    ref_out, ref_err = ref_proc.communicate(timeout=120)
    assert ref_proc.returncode == 0, ref_err
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    assert "replay_buffer" in ckpt["state"]  # off-policy checkpoints keep the buffer by default
    p = cli("resume", str(run))
    assert p.returncode == 0, p.stderr
    assert curve(run) == curve(ref)


def test_resume_starts_new_episodes_when_the_env_state_cannot_be_saved(ref_run: Path,
                                                                       work: Path) -> None:
    # what a physics-engine environment's checkpoint looks like: its env state is not exact
    run = work / "inexact"
    shutil.copytree(ref_run, run)
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    ckpt["env_state"] = {"exact": False, "unknown": "World.world (b2World)", "objects": {}}
    rlgrad.save(ckpt, run / "checkpoint.safetensors")
    p = cli("resume", str(run), "--steps", str(TOTAL + 128))
    assert p.returncode == 0, p.stderr
    assert "starts new episodes" in p.stderr and "Traceback" not in p.stderr
    assert int(curve(run)[-1]["time/total_timesteps"]) == TOTAL + 128


def test_mp4_writer_when_ffmpeg_is_there(tmp_path: Path) -> None:
    from rlgrad.cli import evaluate

    if evaluate._ffmpeg_exe() is None:
        pytest.skip("no ffmpeg (imageio-ffmpeg or system)")
    frames = [np.full((41, 61, 3), 20 * i, dtype=np.uint8) for i in range(10)]  # odd sizes
    evaluate.write_mp4(frames, tmp_path / "a.mp4", fps=50)
    data = (tmp_path / "a.mp4").read_bytes()
    assert data[4:8] == b"ftyp" and len(data) > 500


# ---- hostile and damaged run directories ----------------------------------------------------------
def _flip_last_array_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside an array: the checksum catches it
    path.write_bytes(bytes(data))


def test_a_checkpoint_of_another_environment_is_refused_in_one_line(ref_run: Path,
                                                                     work: Path) -> None:
    acro = work / "acrobot"
    p = cli("train", "Acrobot-v1", "--algo", "ppo", "--steps", "64", "--n-envs", "2", "--set",
            "n_steps=32", "--set", "batch_size=32", "--no-progress", "--run-dir", str(acro))
    assert p.returncode == 0, p.stderr
    mixed = work / "mixed"
    shutil.copytree(ref_run, mixed)
    shutil.copy(acro / "checkpoint.safetensors", mixed / "checkpoint.safetensors")
    before = (mixed / "metrics.csv").read_bytes()
    for cmd in ("resume", "eval"):  # before: resume trained Acrobot; eval, a broadcast traceback
        line = one_error_line(cli(cmd, str(mixed), "--steps" if cmd == "resume" else "--episodes",
                                  str(TOTAL + 64) if cmd == "resume" else "2"))
        assert "Acrobot-v1" in line and "CartPole-v1" in line and "another run" in line, line
    assert (mixed / "metrics.csv").read_bytes() == before  # nothing was touched

    # the same id but other spaces (a custom environment that changed): the spaces are checked
    ckpt = rlgrad.load(acro / "checkpoint.safetensors")
    ckpt["env_id"] = "CartPole-v1"
    rlgrad.save(ckpt, mixed / "checkpoint.safetensors")
    line = one_error_line(cli("eval", str(mixed), "--episodes", "2"))
    assert "observation space" in line and "[6]" in line and "[4]" in line, line


def test_old_checkpoints_without_spaces_still_resume(ref_run: Path, work: Path) -> None:
    run = work / "old-format"
    shutil.copytree(ref_run, run)
    for p in run.glob("checkpoint*.safetensors"):
        ckpt = rlgrad.load(p)
        assert ckpt["spaces"] == {"observation": {"type": "Box", "shape": [4], "dtype": "float32"},
                                  "action": {"type": "Discrete", "shape": [], "dtype": "int64",
                                             "n": 2}}
        del ckpt["spaces"]
        rlgrad.save(ckpt, p)
    p = cli("eval", str(run), "--episodes", "2")
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_the_last_two_checkpoints_are_kept_and_a_damaged_newest_gives_way(ref_run: Path,
                                                                          work: Path) -> None:
    newest, prev = ref_run / "checkpoint.safetensors", ref_run / "checkpoint.1.safetensors"
    assert sorted(p.name for p in ref_run.glob("checkpoint*")) == [prev.name, newest.name]
    assert rlgrad.load(newest)["run"]["num_timesteps"] == TOTAL
    assert rlgrad.load(prev)["run"]["num_timesteps"] == TOTAL - 256

    run = work / "damaged-newest"
    shutil.copytree(ref_run, run)
    _flip_last_array_byte(run / newest.name)
    p = cli("eval", str(run), "--episodes", "2")
    assert p.returncode == 0, p.stderr
    assert f"at step {TOTAL - 256}" in p.stdout
    warn = p.stderr.strip().splitlines()
    assert len(warn) == 1 and "warning" in warn[0] and "checksum" in warn[0], p.stderr
    assert f"the 256 steps from {TOTAL - 256} to {TOTAL} are lost" in warn[0]

    p = cli("resume", str(run))
    assert p.returncode == 0, p.stderr
    assert f"at step {TOTAL - 256} of {TOTAL}" in p.stdout
    assert "will be trained again" in p.stderr and "Traceback" not in p.stderr
    assert (run / "checkpoint.safetensors.damaged").exists()  # set aside, not deleted
    assert rlgrad.load(run / newest.name)["run"]["num_timesteps"] == TOTAL
    assert rlgrad.load(run / prev.name)["run"]["num_timesteps"] == TOTAL - 256
    assert curve(run) == curve(ref_run)  # the lost steps were trained again, alike

    # both damaged: one line that says so
    _flip_last_array_byte(run / newest.name)
    _flip_last_array_byte(run / prev.name)
    line = one_error_line(cli("resume", str(run), "--steps", str(TOTAL + 128)))
    assert "corrupt checkpoint" in line and "the 1 earlier checkpoint is unusable too" in line


def test_keep_checkpoints_is_configurable(work: Path) -> None:
    run = work / "keep3"
    args = ["CartPole-v1", "--algo", "ppo", "--steps", "512", "--n-envs", "2", "--set",
            "n_steps=32", "--set", "batch_size=32", "--set", "n_epochs=1", "--checkpoint-every",
            "128", "--no-progress"]
    p = cli("train", *args, "--keep-checkpoints", "3", "--run-dir", str(run))
    assert p.returncode == 0, p.stderr
    steps = [rlgrad.load(run / n)["run"]["num_timesteps"] for n in
             ("checkpoint.safetensors", "checkpoint.1.safetensors", "checkpoint.2.safetensors")]
    assert steps == [512, 384, 256] and yaml.safe_load(
        (run / "config.yaml").read_text())["keep_checkpoints"] == 3
    p = cli("resume", str(run), "--steps", "576", "--keep-checkpoints", "1")
    assert p.returncode == 0, p.stderr
    assert sorted(q.name for q in run.glob("checkpoint*")) == ["checkpoint.safetensors"]
    assert "at least 1" in one_error_line(cli("resume", str(run), "--keep-checkpoints", "0"))


def test_checkpoint_rotation_is_crash_safe_at_every_step(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between any two file operations of a save leaves every checkpoint whole and the
    newest one either the previous save or the new one."""
    from rlgrad.cli import run_dir as rd_mod
    from rlgrad.cli.run_dir import RunDir

    class Crash(Exception):
        pass

    real = {"replace": os.replace, "link": os.link}
    for crash_at in range(8):
        rd = RunDir(tmp_path / f"r{crash_at}")
        rd.create()
        for step in (1, 2, 3):
            rd.save_checkpoint({"step": step}, keep=3)
        calls = [0]  # file operations so far, shared by both patched functions

        def counted(name: str, calls: list[int] = calls, crash_at: int = crash_at):
            def f(*a, **k):
                calls[0] += 1
                if calls[0] > crash_at:
                    raise Crash
                return real[name](*a, **k)
            return f

        monkeypatch.setattr(rd_mod.os, "replace", counted("replace"))
        monkeypatch.setattr(os, "link", counted("link"))
        try:
            rd.save_checkpoint({"step": 4}, keep=3)
        except Crash:
            pass
        monkeypatch.setattr(rd_mod.os, "replace", real["replace"])
        monkeypatch.setattr(os, "link", real["link"])
        steps = [rlgrad.load(p)["step"] for p in rd.checkpoint_paths()]
        assert steps[0] in (3, 4) and steps == sorted(steps, reverse=True), (crash_at, steps)
        assert len(steps) >= 2, (crash_at, steps)  # a previous one survives every crash


def _same_in_float32(rebuilt: list[dict[str, str]], ref: list[dict[str, str]]) -> None:
    """Rows rebuilt from TensorBoard (float32 values) against the CSV's float64 ones."""
    assert len(rebuilt) == len(ref)
    for a, b in zip(rebuilt, ref):
        for k, v in b.items():
            if v != "":
                assert np.float32(float(a[k])) == np.float32(float(v)), (k, a[k], v)


def test_random_bytes_in_metrics_csv_neither_stop_resume_nor_lose_data(ref_run: Path,
                                                                       work: Path) -> None:
    run = work / "garbled-metrics"
    shutil.copytree(ref_run, run)
    garbage = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    (run / "metrics.csv").write_bytes(garbage)
    line = one_error_line(cli("plot", str(run)))  # before: a UnicodeDecodeError traceback
    assert "metrics.csv is damaged" in line and "not UTF-8" in line, line
    twin = work / "garbled-twin"
    shutil.copytree(ref_run, twin)
    p = cli("plot", str(run), str(twin), "-o", str(work / "two.png"))  # the readable one is drawn
    assert p.returncode == 0 and "left out" in p.stderr and "Traceback" not in p.stderr, p.stderr

    p = cli("resume", str(run), "--steps", str(TOTAL + 64))  # before: a traceback, no training
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "metrics.damaged-1.csv" in p.stderr, p.stderr
    assert f"{TOTAL // 64} rows up to step {TOTAL} were rebuilt" in p.stderr, p.stderr
    assert (run / "metrics.damaged-1.csv").read_bytes() == garbage  # kept as it was
    rows = curve(run)
    assert [int(r["time/total_timesteps"]) for r in rows] == list(range(64, TOTAL + 65, 64))
    _same_in_float32(rows[:-1], curve(ref_run))
    assert rlgrad.load(run / "checkpoint.safetensors")["run"]["num_timesteps"] == TOTAL + 64

    # again, now from two event files (the resume wrote a second one)
    (run / "metrics.csv").write_bytes(garbage)
    p = cli("resume", str(run), "--steps", str(TOTAL + 128))
    assert p.returncode == 0 and "metrics.damaged-2.csv" in p.stderr, p.stderr
    again = curve(run)
    assert [int(r["time/total_timesteps"]) for r in again] == list(range(64, TOTAL + 129, 64))
    _same_in_float32(again[:-1], rows)


def test_event_rows_follow_tensorboard_purge_semantics(tmp_path: Path) -> None:
    from rlgrad.cli.events import event_rows, without_torch

    with without_torch():
        from tensorboardX import SummaryWriter

    first = SummaryWriter(str(tmp_path), filename_suffix=".a")
    for step in (10, 20, 30, 40):  # a run killed after logging 40, checkpointed at 20
        first.add_scalar("x", step + 0.5, step)
        first.add_scalar("y", -step, step)
    first.close()
    second = SummaryWriter(str(tmp_path), purge_step=21, filename_suffix=".b")  # the resume
    second.add_scalar("x", 1.25, 30)
    second.close()
    assert event_rows(tmp_path, 1000) == [
        {"x": 10.5, "y": -10.0, "time/total_timesteps": 10},
        {"x": 20.5, "y": -20.0, "time/total_timesteps": 20},
        {"x": 1.25, "time/total_timesteps": 30}]
    assert [r["time/total_timesteps"] for r in event_rows(tmp_path, 20)] == [10, 20]
    events = sorted(tmp_path.glob("events.out.tfevents.*"))
    events[0].write_bytes(events[0].read_bytes()[:-7])  # a torn last record: the rest is read
    assert [r["time/total_timesteps"] for r in event_rows(tmp_path, 1000)] == [10, 20, 30]


DAMAGE = {
    "random": lambda p: p.write_bytes(np.random.default_rng(1).integers(
        0, 256, 3000, dtype=np.uint8).tobytes()),
    "empty": lambda p: p.write_bytes(b""),
    "half": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "directory": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_run_directory_never_gives_a_traceback(ref_run: Path, work: Path, kind: str,
                                                         capsys: pytest.CaptureFixture) -> None:
    """Every file of a run damaged in turn; resume, eval and plot through the CLI entry point
    end in exit status 0 (used what could be used, with a warning) or 2 and one line; never an
    exception (before: UnicodeDecodeError, TypeError, RecursionError, IsADirectoryError)."""
    names = ["config.yaml", "metrics.csv", "checkpoint.safetensors", "checkpoint.1.safetensors",
             "learning_curve.png", "run.lock", next(ref_run.glob("events.out.tfevents.*")).name]
    for name in names:
        run = work / f"damaged-{kind}-{name}"
        shutil.copytree(ref_run, run)
        (run / "run.lock").write_text("0\n")
        DAMAGE[kind](run / name)
        for args in (["eval", str(run), "--episodes", "1"], ["plot", str(run)],
                     ["resume", str(run), "--steps", str(TOTAL + 64), "--no-progress"]):
            status = main(args)
            err = capsys.readouterr().err
            assert status in (0, 2), (name, args, err)
            lines = err.strip().splitlines()
            if status == 2:
                assert len(lines) == 1 and "error" in lines[0], (name, args, err)
            assert "Traceback" not in err
        if name in ("checkpoint.safetensors", "metrics.csv", "learning_curve.png") or (
                name == "run.lock" and kind != "directory"):
            assert status == 0, (name, err)  # these never stop a resume


# ---- custom environments: Gymnasium's module:EnvId -----------------------------------------------
TINY_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Tiny(gym.Env):
    """Reward 1 for the action that matches the sign of the first observation; 20 steps."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        reward = float(int(action) == int(self.obs[0] > 0))
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs, reward, False, self.t >= 20, {}


gym.register("TinyRlgradTest-v0", entry_point=Tiny)
'''


def test_module_colon_env_id_trains_resumes_and_evaluates(tmp_path: Path) -> None:
    pkg = tmp_path / "mods" / "tinypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "envs.py").write_text(TINY_ENV)
    (pkg / "broken.py").write_text("raise RuntimeError('no display')\n")
    (pkg / "needs.py").write_text(  # registers an env whose dependency is missing
        "import gymnasium as gym\n"
        "def make(**kw):\n"
        "    raise gym.error.DependencyNotInstalled('needs the foo engine: pip install foo')\n"
        "gym.register('TinyNeedsRlgradTest-v0', entry_point=make)\n")
    env = _env()
    env["PYTHONPATH"] = str(tmp_path / "mods") + os.pathsep + env["PYTHONPATH"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rlgrad.cli", *args], capture_output=True,
                              text=True, env=env, timeout=120, cwd=tmp_path)

    run_dir, ref = tmp_path / "run", tmp_path / "ref"
    args = ["tinypkg.envs:TinyRlgradTest-v0", "--algo", "ppo", "--n-envs", "2", "--set",
            "n_steps=32", "--set", "batch_size=32", "--checkpoint-every", "64", "--no-progress"]
    procs = [subprocess.Popen([sys.executable, "-m", "rlgrad.cli", "train", *args, "--steps",
                               steps, "--run-dir", str(d)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for steps, d in (("128", run_dir), ("192", ref))]  # side by side
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err  # before: "unknown environment id"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["env_id"] == (
        "tinypkg.envs:TinyRlgradTest-v0")
    p = run("resume", str(run_dir), "--steps", "192", "--no-progress")  # a module config.yaml
    assert "--env-module tinypkg.envs" in one_error_line(p)  # names is not imported on its own
    p = run("resume", str(run_dir), "--steps", "192", "--no-progress", "--env-module",
            "tinypkg.envs")  # a new process: the module is imported again, as the user says
    assert p.returncode == 0, p.stderr
    assert int(curve(run_dir)[-1]["time/total_timesteps"]) == 192
    assert curve(run_dir) == curve(ref)  # the environment's own state was restored too
    p = run("eval", str(run_dir), "--episodes", "2", "--trust-run")
    assert p.returncode == 0 and "over 2 episodes" in p.stdout, p.stderr

    cases = {"nopkg_rlgrad.envs:TinyRlgradTest-v0": ["cannot import module 'nopkg_rlgrad.envs'",
                                                     "PYTHONPATH"],
             "tinypkg.broken:TinyRlgradTest-v0": ["importing module 'tinypkg.broken' failed",
                                                  "RuntimeError: no display"],
             "tinypkg.envs:TinyRlgradTst-v0": ["registered no such id", "TinyRlgradTest-v0"],
             "a:b:TinyRlgradTest-v0": ["one ':'"],
             "tinypkg.needs:TinyNeedsRlgradTest-v0": [  # before: a traceback
                 "cannot create environment", "DependencyNotInstalled", "pip install foo"]}
    procs = {env_id: subprocess.Popen(  # all at once: about a second each
        [sys.executable, "-m", "rlgrad.cli", "train", env_id, "--algo", "ppo", "--steps", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        for env_id in cases}
    for env_id, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        line = one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        assert all(w in line for w in cases[env_id]), (env_id, line)


def test_make_vec_env_accepts_module_colon_env_id(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rlgrad.rl.envs import make_vec_env

    (tmp_path / "tiny_rlgrad_envs.py").write_text(TINY_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    venv = make_vec_env("tiny_rlgrad_envs:TinyRlgradTest-v0", n_envs=2, seed=0)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (2, 3)
    venv.close()
    with pytest.raises(ModuleNotFoundError, match="cannot import module 'no_such_rlgrad_mod'"):
        make_vec_env("no_such_rlgrad_mod:TinyRlgradTest-v0")


def test_module_env_ids_are_also_looked_up_in_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``rlgrad`` console script, unlike ``python -m``, has no current directory on sys.path:
    it is appended (last, so that it never shadows an installed package)."""
    import gymnasium as gym

    from rlgrad.cli.env_ids import check_env_id
    from rlgrad.cli.errors import CLIError

    (tmp_path / "tiny_cwd_rlgrad_envs.py").write_text(
        TINY_ENV.replace("TinyRlgradTest-v0", "TinyCwdRlgradTest-v0"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "tiny_cwd_rlgrad_envs", raising=False)
    check_env_id("tiny_cwd_rlgrad_envs:TinyCwdRlgradTest-v0")
    assert sys.path[-1] == str(tmp_path) and "TinyCwdRlgradTest-v0" in gym.registry
    gym.registry.pop("TinyCwdRlgradTest-v0")
    with pytest.raises(CLIError, match="cannot import module 'no_such_rlgrad_mod'"):
        check_env_id("no_such_rlgrad_mod:X-v0")


def _hostile_checkpoints(good: bytes) -> dict[str, bytes]:
    """The hostile files of issue 19, each a checkpoint.safetensors a run could hold."""
    import json

    def framed(header: bytes, data: bytes = b"") -> bytes:
        return len(header).to_bytes(8, "little") + header + data

    n = 8 + int.from_bytes(good[:8], "little")
    header = json.loads(good[8:n])
    deep_tree = dict(header, __metadata__=dict(header["__metadata__"],
                                               tree="[" * 900 + "]" * 900))
    name = next(k for k in header if k != "__metadata__")
    return {
        "string offsets": framed(json.dumps(dict(header, **{name: dict(
            header[name], data_offsets=["0", "8"])})).encode(), good[n:]),
        "null offsets": framed(json.dumps(dict(header, **{name: dict(
            header[name], data_offsets=None)})).encode(), good[n:]),
        "JSON nested 100,000 deep": framed(b"{\"a\":" + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        "tree nested 900 deep": framed(json.dumps(deep_tree).encode(), good[n:]),
    }


def test_hostile_checkpoints_are_one_line_for_resume_and_eval(ref_run: Path, work: Path,
                                                               capsys: pytest.CaptureFixture
                                                               ) -> None:
    good = (ref_run / "checkpoint.safetensors").read_bytes()
    for i, (what, data) in enumerate(_hostile_checkpoints(good).items()):
        run = work / f"hostile-{i}"
        shutil.copytree(ref_run, run)
        (run / "checkpoint.1.safetensors").unlink()  # nothing to fall back to
        (run / "checkpoint.safetensors").write_bytes(data)
        for cmd in ("resume", "eval"):
            assert main([cmd, str(run)]) == 2, what  # before: TypeError, RecursionError
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "corrupt checkpoint" in err[0], (what, err)
    (run / "checkpoint.safetensors").unlink()
    (run / "checkpoint.safetensors").mkdir()  # a directory: before, IsADirectoryError
    assert main(["resume", str(run)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_a_connection_lost_during_a_command_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Ray's local node that does not come up (or a cluster that goes away) once a command
    runs: one line and exit status 1, not a traceback."""
    import rlgrad.cli as cli

    def lost(*_a: object) -> int:
        raise ConnectionError("Ray's local node did not start within 30 s, 2 times")

    monkeypatch.setattr(cli, "_dispatch", lost)
    assert main(["train", "CartPole-v1", "--algo", "ppo"]) == 1
    err = capsys.readouterr().err
    assert err == "rlgrad train: error: Ray's local node did not start within 30 s, 2 times\n"
