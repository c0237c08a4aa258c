"""Issue 20, part 3: Stable-Baselines3 scripts run on rlgrad with ``stable_baselines3`` changed to
``rlgrad.rl`` in their imports and nothing else.

The scripts in ``tests/sb3_scripts/`` are written as SB3's documentation writes its examples,
with rlgrad's imports; each leaves a ``results`` dict. Where SB3 is cheap to run, the same file
with the imports changed back runs on SB3 and the two ``results`` are compared (shapes, files,
call counts: what does not depend on the numbers of a training run).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlgrad.rl import A2C, C51, DDPG, DQN, PPO, QRDQN, REINFORCE, SAC, TD3, CrossQ

SCRIPTS = Path(__file__).resolve().parents[1] / "sb3_scripts"


def run_script(name: str, cwd: Path, library: str = "rlgrad.rl") -> dict[str, Any]:
    """Run ``sb3_scripts/<name>`` in ``cwd`` with its imports from ``library``; its ``results``."""
    src = (SCRIPTS / name).read_text()
    assert "stable_baselines3" not in src
    src = src.replace("rlgrad.rl", library)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        scope: dict[str, Any] = {"__name__": "__main__"}
        exec(compile(src, str(SCRIPTS / name), "exec"), scope)
    finally:
        os.chdir(old)
    return scope["results"]


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


needs_sb3 = pytest.mark.skipif(not sb3_available(), reason="stable-baselines3 not installed")


# ---- the scripts --------------------------------------------------------------------------------
def test_quickstart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run_script("quickstart.py", tmp_path)
    # what SB3 2.9 gives for the same script (the shapes of its VecEnv interface)
    assert r["obs_shape"] == (1, 4) and r["reward_shape"] == (1,) and r["done_dtype"] == "bool"
    assert r["action_shape"] == (1,) and r["n_envs"] == 1 and r["steps"] == 300
    assert r["dones"] >= 1  # episodes ended and reset inside the step (terminal_observation)
    assert (tmp_path / "ppo_cartpole.zip").exists()
    out = capsys.readouterr().out
    assert out.startswith("Using cpu device\n")
    assert re.search(r"^\| rollout/ +\| +\|$", out, re.M)
    assert re.search(r"^\|    ep_rew_mean +\| [0-9.]+ +\|$", out, re.M)
    assert re.search(r"^\|    total_timesteps +\| 1024 +\|$", out, re.M)


@needs_sb3
def test_eval_callback_files_and_counts_match_sb3(tmp_path: Path) -> None:
    (tmp_path / "rlgrad").mkdir()
    (tmp_path / "sb3").mkdir()
    ours = run_script("eval_callback.py", tmp_path / "rlgrad")
    theirs = run_script("eval_callback.py", tmp_path / "sb3", "stable_baselines3")
    for k in ("keys", "timesteps", "results_shape", "ep_lengths_shape", "n_calls",
              "n_evals_after", "num_timesteps", "best_is_dqn"):
        assert ours[k] == theirs[k], k
    assert ours["keys"] == ["ep_lengths", "results", "timesteps"]
    assert ours["timesteps"] == [250, 500, 750, 1000]
    ckpts = sorted(p.name for p in (tmp_path / "rlgrad" / "logs" / "checkpoints").iterdir())
    assert ckpts == ["rl_model_1000_steps.zip", "rl_model_500_steps.zip"]


@needs_sb3
def test_custom_callback_hooks_are_called_as_in_sb3(tmp_path: Path) -> None:
    ours = run_script("custom_callback.py", tmp_path)
    theirs = run_script("custom_callback.py", tmp_path, "stable_baselines3")
    assert ours == theirs
    assert ours["counts"] == {"init": 1, "training_start": 1, "rollout_start": 10, "step": 640,
                              "rollout_end": 10, "training_end": 1}


def test_vecnormalize_save_load(tmp_path: Path) -> None:
    r = run_script("vecnormalize.py", tmp_path)
    # the loaded statistics are the saved ones and stay frozen (training=False)
    assert r["same_stats"] and r["training"] is False
    assert r["count"] == pytest.approx(1024 + 4 + 1e-4)  # 1024 steps + the first reset's 4 rows
    assert r["obs_abs_max"] <= 10.0 and r["raw_reward_negative"]  # norm_reward off: raw rewards


def test_evaluate_policy_shapes(tmp_path: Path) -> None:
    # SB3 2.9 on the same script: floats, 7 returns and 7 lengths (CartPole: return == length)
    r = run_script("evaluate.py", tmp_path)
    assert r == {"floats": True, "n_rewards": 7, "n_lengths": 7, "rewards_equal_lengths": True}


def test_ppo_cartpole_sb3_style_reaches_475(tmp_path: Path) -> None:
    r = run_script("learn_ppo.py", tmp_path)
    assert r["before"] < 200 and r["after"] >= 475  # seen: untrained 123.7, trained 500


def test_dqn_cartpole_sb3_style_improves(tmp_path: Path) -> None:
    r = run_script("learn_dqn.py", tmp_path)
    assert r["before"] < 30 and r["after"] >= 80  # seen: untrained 9.0, trained 120.8


def test_reinforce_on_one_env_instance_uses_one_copy() -> None:
    """REINFORCE's own default is 8 copies of an id; an instance (as SB3 scripts pass) is one."""
    model = REINFORCE("MlpPolicy", gym.make("CartPole-v1"), seed=0)
    assert model.n_envs == 1 and model.get_hyperparams()["n_envs"] == 1
    assert REINFORCE("MlpPolicy", "CartPole-v1", seed=0).n_envs == 8
    with pytest.raises(ValueError, match="instance is one environment; got n_envs=8"):
        REINFORCE("MlpPolicy", gym.make("CartPole-v1"), n_envs=8)


# ---- the constructor: SB3's order and keywords, for every algorithm ------------------------------
ENVS = {A2C: "CartPole-v1", PPO: "CartPole-v1", REINFORCE: "CartPole-v1", DQN: "CartPole-v1",
        QRDQN: "CartPole-v1", C51: "CartPole-v1", DDPG: "Pendulum-v1", TD3: "Pendulum-v1", SAC: "Pendulum-v1"}


@pytest.mark.parametrize("cls", list(ENVS), ids=lambda c: c.__name__)
def test_sb3_call_forms_build_the_same_algorithm(cls: type) -> None:
    env = ENVS[cls]
    kw = {"buffer_size": 1000} if cls in (DQN, QRDQN, C51, DDPG, TD3, SAC) else {}
    a = cls("MlpPolicy", env, seed=3, **kw)
    b = cls(policy="MlpPolicy", env=env, seed=3, **kw)
    c = cls(env, seed=3, **kw)
    d = cls("MlpPolicy", gym.make(env), seed=3, **kw)
    assert a.get_hyperparams() == b.get_hyperparams() == c.get_hyperparams()
    obs = np.stack([a.observation_space.sample() for _ in range(4)])
    ref = c.predict(obs, deterministic=True)[0]
    for m in (a, b, d):  # same seed, same networks
        np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0], ref)


def test_policy_names_that_cannot_be_used_say_so_in_one_line() -> None:
    cases = [(("CnnPolicy", "CartPole-v1"), "PPO: CnnPolicy needs image observations"),
             (("MultiInputPolicy", "CartPole-v1"), "PPO: MultiInputPolicy is for Dict "
                                                   "observation spaces"),
             (("MlpLstmPolicy", "CartPole-v1"), "PPO: MlpLstmPolicy is RecurrentPPO's policy")]
    for args, says in cases:
        with pytest.raises(ValueError) as e:
            PPO(*args)
        assert str(e.value).startswith(says) and "\n" not in str(e.value)
    with pytest.raises(TypeError, match=r"^PPO\('MlpPolicy'\) needs an environment"):
        PPO("MlpPolicy")


def test_cnn_policy_is_taken_by_the_algorithms_with_a_cnn_and_refused_by_the_others() -> None:
    class Pixels(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (3, 84, 84), np.uint8)
        action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    with pytest.raises(ValueError, match="^CrossQ has MLP networks only"):
        CrossQ("CnnPolicy", Pixels())
    assert SAC("CnnPolicy", Pixels(), buffer_size=10).policy_name == "CnnPolicy"
    assert PPO("CnnPolicy", "MinAtar/Breakout-v1").policy_name == "CnnPolicy"
    assert PPO("MinAtar/Breakout-v1").policy_name == "CnnPolicy"  # chosen from the space


def test_device_cpu_and_auto_are_accepted_cuda_is_one_line() -> None:
    for device in ("cpu", "auto", "cpu:0"):
        assert PPO("MlpPolicy", "CartPole-v1", device=device).device == "cpu"
    with pytest.raises(ValueError) as e:
        PPO("MlpPolicy", "CartPole-v1", device="cuda")
    assert str(e.value) == ("PPO: device='cuda' is out of range: device must be 'auto' or 'cpu' "
                            "(rlgrad computes on the CPU)")


def test_seed_none_is_a_fresh_seed_and_a_given_seed_repeats() -> None:
    seeds = {PPO("MlpPolicy", "CartPole-v1").seed for _ in range(3)}
    assert len(seeds) == 3  # before: every unseeded run was seed 0
    obs = np.zeros((8, 4), dtype=np.float32)
    a = PPO("MlpPolicy", "CartPole-v1", seed=5).learn(256).predict(obs, deterministic=True)[0]
    b = PPO("MlpPolicy", "CartPole-v1", seed=5).learn(256).predict(obs, deterministic=True)[0]
    np.testing.assert_array_equal(a, b)


def test_predict_samples_by_default_as_sb3() -> None:
    m = PPO("MlpPolicy", "CartPole-v1", seed=0)
    obs = np.zeros((2000, 4), dtype=np.float32)
    sampled = m.predict(obs)[0]
    mode = m.predict(obs, deterministic=True)[0]
    assert len(set(mode.tolist())) == 1 and len(set(sampled.tolist())) == 2  # untrained: p ~ 0.5
    single, state = m.predict(obs[0], state=None, episode_start=None, deterministic=True)
    assert np.ndim(single) == 0 and state is None


# ---- save / load / env methods ------------------------------------------------------------------
def test_save_adds_the_extension_and_load_finds_it(tmp_path: Path) -> None:
    m = PPO("MlpPolicy", "CartPole-v1", seed=0)
    m.save(tmp_path / "model")
    assert (tmp_path / "model.zip").exists()
    m2 = PPO.load(tmp_path / "model", device="cpu")
    m.save(tmp_path / "other.ckpt")  # an extension of its own is kept
    assert (tmp_path / "other.ckpt").exists()
    obs = np.zeros((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0],
                                  m2.predict(obs, deterministic=True)[0])


def test_load_with_another_env_checks_its_spaces(tmp_path: Path) -> None:
    PPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64, batch_size=64).save(tmp_path / "m")
    m = PPO.load(tmp_path / "m", env=gym.make("CartPole-v1"))
    assert m.n_envs == 1 and m.num_timesteps == 0
    with pytest.raises(ValueError) as e:
        PPO.load(tmp_path / "m", env="Acrobot-v1")
    msg = str(e.value)
    assert "the environment's observation space Box(" in msg and "is not the model's" in msg
    assert "\n" not in msg


def test_schedule_functions_are_refused_unless_saved_as_their_value(tmp_path: Path) -> None:
    """Before: saved as the starting value with a warning, so the loaded model trained with
    another schedule. Now an arbitrary function needs an explicit choice."""
    m = PPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64, batch_size=64,
            learning_rate=lambda p: 1e-3 * p)
    m.learn(128)
    with pytest.raises(ValueError, match="'learning_rate' is a function .* "
                       "function_hyperparams='start'") as e:
        m.save(tmp_path / "m")
    assert "\n" not in str(e.value) and not list(tmp_path.iterdir())
    with pytest.warns(UserWarning, match="'learning_rate' is a function; saved as its starting"):
        m.save(tmp_path / "m", function_hyperparams="start")
    m2 = PPO.load(tmp_path / "m")
    assert m2.get_hyperparams()["learning_rate"] == 1e-3
    m3 = PPO.load(tmp_path / "m", custom_objects={"learning_rate": 3e-4})
    assert m3.get_hyperparams()["learning_rate"] == 3e-4


@needs_sb3
def test_sb3s_standard_schedules_are_saved_as_data(tmp_path: Path) -> None:
    """SB3's LinearSchedule / ConstantSchedule / FloatSchedule (and rlgrad's linear_schedule)
    come back as the same schedules, value for value, and train as before the save."""
    from stable_baselines3.common.utils import ConstantSchedule, FloatSchedule, LinearSchedule

    from rlgrad.rl.schedules import linear_schedule

    lr, clip = LinearSchedule(1e-3, 1e-4, 0.5), FloatSchedule(ConstantSchedule(0.1))
    m = PPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64, batch_size=64, learning_rate=lr,
            clip_range=clip, clip_range_vf=linear_schedule(0.3, 0.1, 0.8))
    m.learn(128)
    m.save(tmp_path / "m")
    m2 = PPO.load(tmp_path / "m")
    hp = m2.get_hyperparams()
    for p in np.linspace(0.0, 1.0, 41):
        assert hp["learning_rate"](p) == lr(p) and hp["clip_range"](p) == clip(p)
        assert hp["clip_range_vf"](p) == linear_schedule(0.3, 0.1, 0.8)(p)
    m.learn(128, reset_num_timesteps=False)
    m2.learn(128, reset_num_timesteps=False)
    for a, b in zip(m.policy.parameters(), m2.policy.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_get_env_set_env_and_set_random_seed() -> None:
    from rlgrad.rl.common.env_util import make_vec_env

    m = PPO("MlpPolicy", "CartPole-v1", n_envs=8, n_steps=16, batch_size=64, seed=0)
    view = m.get_env()  # Gymnasium's one-array CartPole: an SB3 view of the same id
    assert view.num_envs == 8 and view.reset().shape == (8, 4) and view is m.get_env()
    venv = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    m.set_env(venv)
    assert m.get_env() is venv
    m.learn(256)
    with pytest.raises(ValueError, match="the env has 2 copies, the model was built for 8"):
        m.set_env(make_vec_env("CartPole-v1", n_envs=2))
    with pytest.raises(ValueError, match="observation space"):
        m.set_env(make_vec_env("Acrobot-v1", n_envs=8))
    obs = np.zeros((500, 4), dtype=np.float32)
    m.set_random_seed(7)
    a = m.predict(obs)[0]
    m.set_random_seed(7)
    np.testing.assert_array_equal(m.predict(obs)[0], a)


# ---- logging: SB3's table and TensorBoard runs ----------------------------------------------------
@needs_sb3
def test_verbose_table_is_sb3s() -> None:
    import io

    from stable_baselines3.common.logger import HumanOutputFormat

    from rlgrad.rl.logger import HumanWriter

    row = {"rollout/ep_rew_mean": 21.375, "rollout/ep_len_mean": 21.375, "time/fps": 1432,
           "time/total_timesteps": 2048, "train/learning_rate": 0.0003,
           "train/a_very_long_key_name_that_is_cut_somewhere": 1.5e-7, "train/n_updates": 10}
    theirs = io.StringIO()
    HumanOutputFormat(theirs).write(row, dict.fromkeys(row), 0)
    ours = io.StringIO()
    HumanWriter(ours).write(row, 0)
    assert ours.getvalue() == theirs.getvalue()


def test_tensorboard_log_run_dirs_follow_sb3(tmp_path: Path) -> None:
    from rlgrad.cli.events import event_rows

    m = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0,
            tensorboard_log=str(tmp_path))
    m.learn(128)
    m.learn(128, tb_log_name="run")
    m.learn(128, tb_log_name="run", reset_num_timesteps=False)  # continues run_1
    m.learn(64, tb_log_name="run")
    m.learn(64, tb_log_name="cont", reset_num_timesteps=False)  # SB3 names it cont_0
    assert sorted(os.listdir(tmp_path)) == ["PPO_1", "cont_0", "run_1", "run_2"]
    rows = event_rows(tmp_path / "run_1", 10**9)
    assert [r["time/total_timesteps"] for r in rows] == [64, 128, 192, 256]
    assert all("train/value_loss" in r for r in rows)


# ---- helpers compared with SB3's own, number for number -----------------------------------------
class _Balance:
    """A fixed policy (push toward the pole's lean): the same actions under either library."""

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return (np.asarray(obs)[:, 2] > 0).astype(np.int64), state


@needs_sb3
def test_evaluate_policy_equals_sb3s_episode_for_episode() -> None:
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate_policy

    from rlgrad.rl.common.env_util import make_vec_env
    from rlgrad.rl.common.evaluation import evaluate_policy

    for n_envs, n_episodes in ((1, 3), (3, 7)):
        ours = evaluate_policy(_Balance(), make_vec_env("CartPole-v1", n_envs=n_envs, seed=4),
                               n_eval_episodes=n_episodes, return_episode_rewards=True)
        theirs = sb3_evaluate_policy(_Balance(), sb3_make_vec_env("CartPole-v1", n_envs=n_envs,
                                                                  seed=4),
                                     n_eval_episodes=n_episodes, return_episode_rewards=True)
        assert ours[0] == [float(r) for r in theirs[0]] and ours[1] == list(theirs[1])
        mean, std = evaluate_policy(_Balance(), make_vec_env("CartPole-v1", n_envs=n_envs, seed=4),
                                    n_eval_episodes=n_episodes)
        assert (mean, std) == pytest.approx((np.mean(theirs[0]), np.std(theirs[0])), abs=1e-12)


@needs_sb3
def test_vec_normalize_equals_sb3s() -> None:
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize as SB3VecNormalize

    from rlgrad.rl.common.env_util import make_vec_env
    from rlgrad.rl.common.vec_env import VecNormalize

    ours = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0), gamma=0.9)
    theirs = SB3VecNormalize(sb3_make_vec_env("CartPole-v1", n_envs=2, seed=0), gamma=0.9)
    o1, o2 = ours.reset(), theirs.reset()
    np.testing.assert_allclose(o1, o2, rtol=1e-5, atol=1e-6)
    for t in range(120):  # through several episode ends (resets inside the step)
        a = (np.asarray(ours.get_original_obs())[:, 2] > 0).astype(np.int64)
        o1, r1, d1, i1 = ours.step(a)
        o2, r2, d2, i2 = theirs.step(a)
        np.testing.assert_array_equal(d1, d2)
        np.testing.assert_allclose(o1, o2, rtol=1e-5, atol=1e-5, err_msg=f"step {t}")
        np.testing.assert_allclose(r1, r2, rtol=1e-5, atol=1e-6)
        for a_info, b_info in zip(i1, i2):
            assert ("terminal_observation" in a_info) == ("terminal_observation" in b_info)
            if "terminal_observation" in a_info:
                np.testing.assert_allclose(a_info["terminal_observation"],
                                           b_info["terminal_observation"], rtol=1e-5, atol=1e-5)
                assert a_info["TimeLimit.truncated"] == b_info["TimeLimit.truncated"]
                assert a_info["episode"]["l"] == b_info["episode"]["l"]
    np.testing.assert_allclose(ours.obs_rms.mean, theirs.obs_rms.mean, rtol=1e-6)
    np.testing.assert_allclose(ours.ret_rms.var, theirs.ret_rms.var, rtol=1e-6)
    assert d1.dtype == d2.dtype and r1.dtype == r2.dtype


def test_vec_check_nan_and_monitor_file(tmp_path: Path) -> None:
    from rlgrad.rl.common.env_util import make_vec_env
    from rlgrad.rl.common.vec_env import VecCheckNan

    env = VecCheckNan(make_vec_env("Pendulum-v1", n_envs=1, seed=0, monitor_dir=str(tmp_path)),
                      raise_exception=True)
    env.reset()
    with pytest.raises(ValueError, match="VecCheckNan: NaN in actions"):
        env.step(np.array([[np.nan]], dtype=np.float32))
    for _ in range(200):  # Pendulum's time limit ends one episode
        env.step(np.zeros((1, 1), dtype=np.float32))
    lines = (tmp_path / "0.monitor.csv").read_text().splitlines()
    assert lines[0].startswith('#{"t_start": ') and '"env_id": "Pendulum-v1"' in lines[0]
    assert lines[1] == "r,l,t" and lines[2].split(",")[1] == "200"


def test_callback_locals_and_stop_on_max_episodes() -> None:
    from rlgrad.rl.common.callbacks import BaseCallback, StopTrainingOnMaxEpisodes

    class Dones(BaseCallback):
        def __init__(self):
            super().__init__()
            self.episodes = 0
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            self.episodes += int(np.sum(self.locals["dones"]))
            assert self.locals["rewards"].shape == (4,)
            for info in self.locals["infos"]:  # SB3's way to read finished episodes
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            return True

    dones = Dones()
    m = PPO("MlpPolicy", "CartPole-v1", n_envs=4, n_steps=16, batch_size=64, seed=0)
    m.learn(100_000, callback=[dones, StopTrainingOnMaxEpisodes(max_episodes=5)])
    assert dones.episodes == 20 and m.num_timesteps < 100_000  # 5 per copy, as SB3 counts
    assert dones.returns == list(m._ep_stats.return_queue)  # the episodes' returns, in order
    calls = []  # an SB3-style function of (locals, globals) is accepted too
    m.learn(64, callback=lambda locals_, globals_: calls.append(len(locals_)) or True)
    assert len(calls) == 16


def test_sb3_action_noise_and_torch_activation_are_translated() -> None:
    import torch

    from rlgrad.rl.common.noise import NormalActionNoise

    noise = NormalActionNoise(mean=np.zeros(1), sigma=0.1 * np.ones(1))
    m = TD3("MlpPolicy", gym.make("Pendulum-v1"), action_noise=noise, buffer_size=1000,
            policy_kwargs=dict(activation_fn=torch.nn.ReLU, net_arch=[32, 32]))
    hp = m.get_hyperparams()
    assert hp["noise_type"] == "normal" and hp["noise_std"] == 0.1
    with pytest.raises(ValueError, match="mean 0 and one sigma for every action"):
        TD3("MlpPolicy", "Pendulum-v1", action_noise=NormalActionNoise(np.ones(1), np.ones(1)))
    sac = SAC("MlpPolicy", "Pendulum-v1", action_noise=noise, buffer_size=1000)  # SB3's SAC too
    assert sac.get_hyperparams()["noise_type"] == "normal" and sac.action_noise is not None
    with pytest.raises(ValueError, match="^DQN: action_noise is not supported"):
        DQN("MlpPolicy", "CartPole-v1", action_noise=noise)


# Gymnasium's checker warns about CartPole itself (wrapped, infinite observation bounds)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_configure_set_logger_and_check_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    import csv

    from rlgrad.rl.common.env_checker import check_env
    from rlgrad.rl.common.logger import configure

    check_env(gym.make("CartPole-v1"))
    m = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0)
    m.set_logger(configure(str(tmp_path), ["stdout", "csv", "tensorboard"]))
    m.learn(192)
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["time/total_timesteps"]) for r in rows] == [64, 128, 192]
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    # SB3's order: each row is written before its update, so the first one has no train/ values
    assert capsys.readouterr().out.count("|    value_loss ") == 2
    with pytest.raises(ValueError, match="Unknown format specified: 'yaml'"):
        configure(str(tmp_path), ["yaml"])


def test_every_n_timesteps_and_progress_bar_callback() -> None:
    from rlgrad.rl.common.callbacks import BaseCallback, EveryNTimesteps, ProgressBarCallback

    class Count(BaseCallback):
        def _on_step(self) -> bool:
            return True

    count = Count()
    bar = ProgressBarCallback()
    PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0).learn(
        320, callback=[EveryNTimesteps(n_steps=100, callback=count), bar])
    assert count.n_calls == 3 and bar.bar is None  # at 100, 200, 300; the bar closed at the end


def test_the_loop_fills_locals_only_for_callbacks_that_read_them() -> None:
    from rlgrad.rl.common.callbacks import (
        BaseCallback,
        CallbackList,
        EvalCallback,
        StopTrainingOnMaxEpisodes,
        StopTrainingOnRewardThreshold,
    )

    class Mine(BaseCallback):
        pass

    stop = StopTrainingOnMaxEpisodes(1000)
    assert not CallbackList([stop, StopTrainingOnMaxEpisodes(5)]).wants_locals()
    assert CallbackList([stop, Mine()]).wants_locals()
    assert not EvalCallback("CartPole-v1", StopTrainingOnRewardThreshold(1.0)).wants_locals()
    assert EvalCallback("CartPole-v1", callback_after_eval=Mine()).wants_locals()
    PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0).learn(64, callback=stop)
    assert stop.locals.keys() <= {"self", "total_timesteps", "callback", "log_interval",
                                  "tb_log_name", "reset_num_timesteps", "progress_bar",
                                  "writers", "cb"}  # learn's own, not the per-step ones


def test_replay_buffer_save_and_load(tmp_path: Path) -> None:
    from rlgrad.rl.common.callbacks import CheckpointCallback

    m = DQN("MlpPolicy", "CartPole-v1", learning_starts=50, buffer_size=500, seed=0)
    m.learn(300, callback=CheckpointCallback(150, str(tmp_path), save_replay_buffer=True))
    assert (tmp_path / "rl_model_replay_buffer_300_steps.safetensors").exists()
    m.save_replay_buffer(tmp_path / "rb")
    m2 = DQN("MlpPolicy", "CartPole-v1", learning_starts=50, buffer_size=500, seed=1)
    m2.load_replay_buffer(tmp_path / "rb")
    a, b = m.replay_buffer.state_dict(), m2.replay_buffer.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
