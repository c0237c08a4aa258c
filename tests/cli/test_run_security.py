"""Run directories and checkpoints shared by someone else (issue 33, "Security"): rlgrad imports
no module a file names, writes through no link, reads bounded YAML, and validates a tune space as
it validates ``--set`` values. Each test here failed before the fix it names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tensorboardX")
pytest.importorskip("matplotlib")
pytest.importorskip("safetensors")

import yaml  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad.cli import main  # noqa: E402
from rlgrad.cli.errors import CLIError  # noqa: E402
from rlgrad.cli.run_dir import RunDir  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["CartPole-v1", "--algo", "ppo", "--steps", "128", "--n-envs", "2", "--set", "n_steps=32",
         "--set", "batch_size=32", "--set", "n_epochs=1", "--checkpoint-every", "64",
         "--no-progress"]
EVIL = "import pathlib\npathlib.Path('EVIL_MARKER').write_text('ran')\n"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlgrad.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=_env(), timeout=timeout)


def one_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def _main_error(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sec") / "run"
    assert main(["train", *TRAIN, "--run-dir", str(path)]) == 0
    return path


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _set_config(run: Path, **values: object) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.update(values)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


# ---- 1. code from a file -------------------------------------------------------------------------
def test_a_module_named_by_config_yaml_is_never_imported(run: Path, tmp_path: Path) -> None:
    """The issue's repro: run1/config.yaml says rt_evilmod:CartPole-v1 and rt_evilmod.py sits in
    the working directory (on sys.path under ``python -m``). Before: the marker was written."""
    work = tmp_path / "shared"
    work.mkdir()
    (work / "rt_evilmod.py").write_text(EVIL)
    run1 = _copy(run, work / "run1")
    _set_config(run1, env_id="rt_evilmod:CartPole-v1")
    for cmd in ("eval", "resume"):
        line = one_line(cli(cmd, "run1", cwd=work))
        assert not (work / "EVIL_MARKER").exists(), cmd
        assert "rt_evilmod" in line and "--env-module rt_evilmod" in line and "--trust-run" in line
    # named by the user on the command line: imported (and the run evaluates)
    p = cli("eval", "run1", "--episodes", "1", "--env-module", "rt_evilmod", cwd=work)
    assert p.returncode == 0, p.stderr
    assert (work / "EVIL_MARKER").read_text() == "ran"
    (work / "EVIL_MARKER").unlink()
    p = cli("eval", "run1", "--episodes", "1", "--trust-run", cwd=work)
    assert p.returncode == 0 and (work / "EVIL_MARKER").exists(), p.stderr
    (work / "EVIL_MARKER").unlink()
    # --env-module names one module: another one in the file is still refused
    line = one_line(cli("eval", "run1", "--env-module", "json", cwd=work))
    assert "--env-module rt_evilmod" in line and not (work / "EVIL_MARKER").exists()


def test_an_installed_module_named_by_a_file_is_refused_too(run: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """``env_id: this:CartPole-v1`` imports any installed module (``this`` prints a poem)."""
    run1 = _copy(run, tmp_path / "run1")
    _set_config(run1, env_id="this:CartPole-v1")
    sys.modules.pop("this", None)
    line = _main_error(capsys, "eval", str(run1))
    assert "'this'" in line and "this" not in sys.modules
    # a module already imported runs no code when named again: accepted
    _set_config(run1, env_id="json:CartPole-v1")
    assert main(["eval", str(run1), "--episodes", "1"]) == 0


def test_load_refuses_a_module_named_by_the_checkpoint(tmp_path: Path) -> None:
    """``PPO.load`` of a checkpoint whose env_id is ``module:EnvId``: the module is imported only
    when the caller names it (``env=``)."""
    from rlgrad.rl import PPO

    (tmp_path / "rt_evilmod_load.py").write_text(
        EVIL.replace("EVIL_MARKER", str(tmp_path / "EVIL_MARKER")))
    model = PPO("CartPole-v1", n_steps=32, batch_size=32, seed=0)
    path = tmp_path / "m.safetensors"
    model.save(str(path))
    ckpt = rlgrad.load(path)
    ckpt["env_id"] = "rt_evilmod_load:CartPole-v1"
    rlgrad.save(ckpt, path)
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ValueError, match="env='rt_evilmod_load:CartPole-v1'") as e:
            PPO.load(str(path))
        assert "\n" not in str(e.value) and not (tmp_path / "EVIL_MARKER").exists()
        loaded = PPO.load(str(path), env="rt_evilmod_load:CartPole-v1")  # named in code
        assert (tmp_path / "EVIL_MARKER").exists() and loaded.num_timesteps == 0
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("rt_evilmod_load", None)


# ---- 2. writes through links ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["run.lock", "metrics.csv", "config.yaml", "learning_curve.png",
                                  "checkpoint.1.safetensors"])
def test_no_run_file_is_written_through_a_link(run: Path, tmp_path: Path, name: str,
                                               capsys: pytest.CaptureFixture) -> None:
    """Before: a run.lock linked to a file had that file replaced by the pid, and a linked
    metrics.csv had rows appended to its target."""
    run1 = _copy(run, tmp_path / "run1")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = run1 / name
    target.unlink(missing_ok=True)
    target.symlink_to(victim)
    for cmd in (["resume", str(run1), "--steps", "192"], ["eval", str(run1), "--episodes", "1"],
                ["plot", str(run1)]):
        line = _main_error(capsys, *cmd)
        assert f"{target}" in line and "symbolic link" in line, line
        assert victim.read_text() == "precious\n", cmd
    assert target.is_symlink()


def test_the_lock_and_the_metrics_writer_refuse_links_themselves(tmp_path: Path) -> None:
    """The lower layers too (a link made after the directory was checked)."""
    from rlgrad.rl.logger import CSVWriter

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "run.lock").symlink_to(victim)
    with pytest.raises(CLIError, match="symbolic link"):
        with RunDir(tmp_path).lock():
            pass
    w = CSVWriter(str(tmp_path / "m.csv"))
    w.write({"a": 1}, 1)
    (tmp_path / "m.csv").unlink()
    (tmp_path / "m.csv").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        w.write({"a": 2}, 2)
    assert victim.read_text() == "precious\n"


def test_a_fifo_where_config_yaml_should_be_is_one_line_not_a_hang(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run1 = _copy(run, tmp_path / "run1")
    (run1 / "config.yaml").unlink()
    os.mkfifo(run1 / "config.yaml")
    assert "not a regular file" in _main_error(capsys, "eval", str(run1))


# ---- 4. resource exhaustion ----------------------------------------------------------------------
ALIAS_BOMB = "\n".join(["a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"] + [
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")])


def test_a_yaml_alias_bomb_in_config_yaml_is_refused_at_once(run: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """Before: resume expanded the aliases while rewriting config.yaml (+16 MB/s, unbounded)."""
    assert len(ALIAS_BOMB) < 1300
    run1 = _copy(run, tmp_path / "run1")
    text = (run1 / "config.yaml").read_text()
    (run1 / "config.yaml").write_text(text + "bomb:\n  " + ALIAS_BOMB.replace("\n", "\n  ") + "\n")
    line = _main_error(capsys, "resume", str(run1))  # before: never ended
    assert "alias" in line and "config.yaml" in line, line


def test_a_huge_or_deep_config_yaml_is_refused_in_one_line(run: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    run1 = _copy(run, tmp_path / "run1")
    cfg = run1 / "config.yaml"
    good = cfg.read_bytes()
    with open(cfg, "ab") as f:  # 200 MB, sparse: refused by its size without being read
        f.truncate(200_000_000)
    line = _main_error(capsys, "eval", str(run1))
    assert "200000000 bytes" in line and "at most" in line, line
    cfg.write_bytes(good + b"deep: " + b"[" * 5000 + b"]" * 5000 + b"\n")
    assert "nest" in _main_error(capsys, "eval", str(run1))
    cfg.write_bytes(good + b"seed: 1\n")
    assert "duplicate key 'seed'" in _main_error(capsys, "eval", str(run1))
    cfg.write_bytes(good.replace(b"seed: 3", b"seed: " + b"9" * 5000) if b"seed: 3" in good
                    else good + b"big: " + b"9" * 5000 + b"\n")
    assert "config.yaml" in _main_error(capsys, "eval", str(run1))  # before: ValueError


# ---- 5. tune --space -----------------------------------------------------------------------------
@pytest.mark.parametrize("text,expect", [
    ("policy_kwargs.activation_fn: {choice: [os.system]}\n", "activation_fn must be one of"),
    ("policy_kwargs.activation_fn: os.system\n", "activation_fn must be one of"),
    ("learning_rate: 0.001\nlearning_rate: {loguniform: [0.0001, 0.01]}\n",
     "duplicate key 'learning_rate'"),
    ("policy_kwargs.net_arch: {choice: [[64, 64], [-1]]}\n", "net_arch"),
])
def test_the_search_space_is_validated_as_set_values_are(tmp_path: Path, text: str, expect: str,
                                                         capsys: pytest.CaptureFixture) -> None:
    """Before: a choice of os.system and duplicate keys passed; ``--set`` refuses the first."""
    space = tmp_path / "space.yaml"
    space.write_text(text)
    line = _main_error(capsys, "tune", "CartPole-v1", "--algo", "ppo", "--samples", "1",
                       "--space", str(space), "--sweep-dir", str(tmp_path / "sw"))
    assert expect in line and str(space) in line, line
    assert not (tmp_path / "sw").exists()
    line = _main_error(capsys, "train", "CartPole-v1", "--algo", "ppo", "--set",
                       "policy_kwargs.activation_fn=os.system", "--run-dir", str(tmp_path / "r"))
    assert "activation_fn must be one of" in line


def test_a_folder_named_by_the_checkpoint_is_never_written(run: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """A checkpoint's tensorboard_log would make resume write events wherever the file says."""
    run1 = _copy(run, tmp_path / "run1")
    elsewhere = tmp_path / "elsewhere"
    for ckpt in run1.glob("checkpoint*.safetensors"):
        state = rlgrad.load(ckpt)
        state["hyperparams"]["tensorboard_log"] = str(elsewhere)
        rlgrad.save(state, ckpt)
    assert main(["resume", str(run1), "--steps", "192"]) == 0
    assert "tensorboard_log is ignored" in capsys.readouterr().err
    assert not elsewhere.exists()


def test_a_fifo_where_the_checkpoint_should_be_gives_way_to_the_previous_one(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: eval waited forever on the FIFO."""
    run1 = _copy(run, tmp_path / "run1")
    (run1 / "checkpoint.safetensors").unlink()
    os.mkfifo(run1 / "checkpoint.safetensors")
    assert main(["eval", str(run1), "--episodes", "1"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a regular file" in err[0] and "checkpoint.1" in err[0], err



def test_a_sweeps_results_are_never_written_through_a_link(tmp_path: Path) -> None:
    """``rlgrad tune`` writes results.csv (and its trials' and settings' files) through a
    temporary file and a rename: a link put in results.csv's place is refused in one line and
    its target is left as it was."""
    from rlgrad.cli.tune import summarize

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    sweep = tmp_path / "sweep"
    (sweep / "trials").mkdir(parents=True)
    (sweep / "trials" / "t0.json").write_text(
        '{"trial": "t0", "run_dir": "%s", "config": {}}' % (tmp_path / "no-run"))
    (sweep / "results.csv").symlink_to(victim)
    with pytest.raises(CLIError, match="link"):
        summarize(sweep, {"steps": 100, "algo": "ppo", "env_id": "CartPole-v1"})
    assert victim.read_text() == "keep me"
