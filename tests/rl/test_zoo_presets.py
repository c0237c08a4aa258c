"""rl-baselines3-zoo's presets beyond classic control (MuJoCo v5, LunarLander): the zoo's numbers,
each preset builds its algorithm on its environment, and the CLI trains with one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlgrad.rl import ALGORITHMS, list_presets, load_preset, split_preset

gym = pytest.importorskip("gymnasium")
ROOT = Path(__file__).resolve().parents[2]
MUJOCO = ["HalfCheetah-v5", "Ant-v5", "Hopper-v5", "Walker2d-v5", "Humanoid-v5"]
NEW = [(algo, env) for algo, envs in sorted(list_presets().items()) for env in envs
       if env in MUJOCO or env == "LunarLanderContinuous-v3"]


def test_the_presets_are_there():
    """SAC, TD3, DDPG, A2C and PPO each have every MuJoCo task, and all but A2C (whose zoo
    entry needs gSDE) LunarLanderContinuous."""
    have = {(a, e) for a, e in NEW}
    for algo in ("sac", "td3", "ddpg", "a2c", "ppo"):
        for env in [*MUJOCO, "LunarLanderContinuous-v3"]:
            expected = (algo, env) != ("a2c", "LunarLanderContinuous-v3")
            assert ((algo, env) in have) == expected, (algo, env)


def test_the_zoo_numbers():
    """Spot checks against rl-baselines3-zoo's hyperparams/*.yml (its -v4 entries)."""
    ppo = load_preset("ppo", "HalfCheetah-v5")
    assert (ppo["learning_rate"], ppo["n_steps"], ppo["batch_size"], ppo["gamma"]) == (
        2.0633e-05, 512, 64, 0.98)
    assert ppo["policy_kwargs"] == {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
                                    "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
    assert ppo["normalize"] is True and "policy_kwargs" not in load_preset("ppo", "Walker2d-v5")
    assert load_preset("sac", "Humanoid-v5") == {"n_timesteps": 2000000, "learning_starts": 10000}
    td3 = load_preset("td3", "Hopper-v5")
    assert (td3["noise_std"], td3["learning_rate"], td3["policy_kwargs"]) == (
        0.1, 0.001, {"net_arch": [400, 300]})
    assert load_preset("sac", "LunarLanderContinuous-v3")["learning_rate"] == "lin_7.3e-4"


@pytest.mark.parametrize(("algo", "env_id"), NEW)
def test_each_preset_builds_its_algorithm(algo, env_id):
    """The preset's values are accepted by the algorithm on the real environment (networks of the
    preset's shape on the task's spaces)."""
    hp, env_cfg = split_preset(load_preset(algo, env_id))
    model = ALGORITHMS[algo](env_id, seed=0, n_envs=env_cfg.get("n_envs", 1),
                             normalize=env_cfg.get("normalize", False), **hp)
    space = gym.make(env_id).observation_space
    assert model.observation_space.shape == space.shape
    model.env.close()


def test_cli_trains_hopper_with_the_sac_preset(tmp_path):
    """``rlgrad train Hopper-v5 --algo sac`` names the preset it took and trains with it."""
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "rlgrad.cli", "train", "Hopper-v5", "--algo", "sac",
                           "--steps", "300", "--set", "learning_starts=100", "--run-dir", str(run)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["preset"] == "Hopper-v5"
    assert config["hyperparams"]["learning_starts"] == 100  # the override over the preset's 10000
    assert "trained 300 steps" in proc.stdout
