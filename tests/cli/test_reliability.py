"""Bad input to the Python API is one line that names the real culprit (issue 33): learn's
budget, sizes that cannot fit in memory, environments that break Gymnasium's API, predict's
input, a policy whose actions are NaN, render modes."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from rlgrad.rl import DQN, PPO, SAC
from rlgrad.rl import layers as policies_mod
from rlgrad.rl.evaluation import evaluate, evaluate_policy
from rlgrad.rl.finite import NonFiniteError


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ---- learn's budget, n_epochs, net_arch ----------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 1.5, "100", True, math.nan, math.inf, None, np.float64(2.5)])
def test_learn_refuses_a_budget_that_is_not_a_whole_number(bad):
    model = PPO("CartPole-v1", n_steps=32, batch_size=32, seed=0)
    with pytest.raises(ValueError, match=r"PPO.learn\(total_timesteps=.*\): total_timesteps "
                       "must be a whole number of environment steps >= 0") as e:
        model.learn(bad)
    _one_line(e)
    assert model.num_timesteps == 0


def test_learn_takes_whole_floats_and_numpy_integers_as_sb3_does():
    model = PPO("CartPole-v1", n_steps=32, batch_size=32, seed=0)
    model.learn(64.0)
    assert model.num_timesteps == 64
    model.learn(np.int64(32), reset_num_timesteps=False)
    assert model.num_timesteps == 96
    assert model.learn(0).num_timesteps == 0  # SB3: no iteration


def test_n_epochs_is_bounded():
    with pytest.raises(ValueError, match=r"n_epochs=1000000000 is out of range: n_epochs must be "
                       r"an integer in \[1, 10000\]"):
        PPO("CartPole-v1", n_epochs=10**9)
    assert PPO("CartPole-v1", n_epochs=10_000, n_steps=32, batch_size=32).n_epochs == 10_000


@pytest.mark.parametrize("algo", [PPO, DQN, SAC])
def test_a_net_arch_larger_than_memory_is_refused_before_allocating(algo):
    env = "Pendulum-v1" if algo is SAC else "CartPole-v1"
    with pytest.raises(ValueError, match=r"policy_kwargs.net_arch: layers \[\d+, 1000000, "
                       r"1000000.*\] .* parameters, [\d,.]+ GiB .* more than this machine's") as e:
        algo(env, policy_kwargs={"net_arch": [1_000_000, 1_000_000]})
    _one_line(e)


def test_the_memory_estimate_counts_weights_biases_gradients_and_adam(monkeypatch):
    # [4, 10, 2]: 4*10 + 10 + 10*2 + 2 = 72 parameters, 16 bytes each while training
    monkeypatch.setattr(policies_mod, "physical_memory", lambda: 72 * 16)
    policies_mod.check_mlp_memory([4, 10, 2])  # exactly fits
    monkeypatch.setattr(policies_mod, "physical_memory", lambda: 72 * 16 - 1)
    with pytest.raises(ValueError, match="have 72 parameters"):
        policies_mod.check_mlp_memory([4, 10, 2])
    monkeypatch.setattr(policies_mod, "physical_memory", lambda: None)  # unknown: no check
    policies_mod.check_mlp_memory([4, 10**7, 10**7])


# ---- environments that break Gymnasium's API -----------------------------------------------------
class _WrongShape(gym.Wrapper):
    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return np.zeros(7, np.float32), r, term, trunc, info


class _BareReset(gym.Wrapper):
    def reset(self, **kwargs):
        return self.env.reset(**kwargs)[0]


class _OldStep(gym.Wrapper):
    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return obs, r, term or trunc, info


@pytest.mark.parametrize("n_envs", [1, 2])
def test_wrong_shaped_observations_blame_the_environment(n_envs):
    make = lambda: _WrongShape(gym.make("CartPole-v1"))  # noqa: E731
    model = PPO(make() if n_envs == 1 else make, n_envs=n_envs, n_steps=32, batch_size=32)
    with pytest.raises(ValueError, match=r"the environment's step\(\) returned an observation "
                       r"that does not fit its observation_space Box\(shape=\(4,\), "
                       r"dtype=float32\) .*: fix its step\(\)") as e:
        model.learn(64)
    _one_line(e)


def test_reset_and_step_of_the_old_api_are_named():
    with pytest.raises(ValueError, match=r"the environment's reset\(\) must return "
                       r"\(observation, info\) \(Gymnasium's API\)"):
        PPO(_BareReset(gym.make("CartPole-v1")), n_steps=32, batch_size=32).learn(64)
    with pytest.raises(ValueError, match=r"the environment's step\(\) must return \(observation, "
                       r"reward, terminated, truncated, info\)"):
        PPO(_OldStep(gym.make("CartPole-v1")), n_steps=32, batch_size=32).learn(64)


def test_predict_of_none_or_a_wrong_shape_names_the_input():
    model = PPO("CartPole-v1", n_steps=32, batch_size=32, seed=0)
    with pytest.raises(ValueError, match=r"predict: got None; the observation space is "
                       r"Box\(shape=\(4,\), dtype=float32\): pass one observation of numbers"):
        model.predict(None)
    for shape in ((7,), (3, 5), (2, 2, 4)):
        with pytest.raises(ValueError, match=rf"predict: got an array of shape "
                           rf"{re_shape(shape)} \(float64\).*shape \(4,\) or a batch of shape "
                           r"\(n, 4\)"):
            model.predict(np.zeros(shape))
    assert model.predict(np.zeros(4))[0].shape == ()
    assert model.predict(np.zeros((3, 4)))[0].shape == (3,)
    dqn = DQN(gym.make("FrozenLake-v1"), learning_starts=0)
    assert dqn.predict(3)[0].shape == () and dqn.predict(np.array([1, 2]))[0].shape == (2,)
    with pytest.raises(ValueError, match="an integer or a 1-D batch of integers"):
        dqn.predict(np.zeros((2, 2), int))


def re_shape(shape: tuple[int, ...]) -> str:
    return str(shape).replace("(", r"\(").replace(")", r"\)")


# ---- a policy's NaN actions --------------------------------------------------------------------
def _nan_sac() -> SAC:
    model = SAC("Pendulum-v1", learning_starts=10, batch_size=8, buffer_size=100, seed=0)
    for p in model.actor.parameters():
        p.data[...] = np.nan
    return model


def test_nan_actions_blame_the_policy_not_the_environment():
    model = _nan_sac()
    with pytest.raises(NonFiniteError, match=r"SAC on Pendulum-v1, after 10 timesteps: the "
                       r"policy produced a non-finite action \(nan\) for environment 0 .*the "
                       r"environment is not at fault") as e:
        model.learn(40)
    assert "Fix the environment" not in _one_line(e)


def test_evaluation_of_nan_actions_raises_instead_of_returning_nan():
    model = _nan_sac()
    for run in (lambda: evaluate_policy(model, model.get_env(), n_eval_episodes=1, warn=False),
                lambda: evaluate_policy(model, "Pendulum-v1", n_eval_episodes=1, warn=False),
                lambda: evaluate(model, n_episodes=1)):
        with pytest.raises(NonFiniteError, match=r"the model's predict produced a non-finite "
                           r"action \(nan\) for environment 0 at vector step 1"):
            run()


class _Unregistered(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.full(3, np.nan, np.float32), 0.0, False, False, {}


def test_an_unregistered_env_instance_is_named_by_its_class():
    with pytest.raises(NonFiniteError, match=r"^SAC on _Unregistered, after 0 timesteps: "
                       r"environment 0 returned a non-finite observation"):
        SAC(_Unregistered(), learning_starts=10, batch_size=8, buffer_size=100).learn(20)


# ---- render modes ------------------------------------------------------------------------------
def test_an_unknown_render_mode_is_refused():
    msg = (r"CartPole-v1: render_mode='bogus' is not one of its render modes \['human', "
           r"'rgb_array'\] \(or None, no rendering\)")
    with pytest.raises(ValueError, match=msg):
        PPO("CartPole-v1", env_kwargs={"render_mode": "bogus"})
    with pytest.warns(UserWarning, match="render_mode='bogus'"):  # Gymnasium's own, at make
        env = gym.make("CartPole-v1", render_mode="bogus")
    with pytest.raises(ValueError, match=msg):
        PPO(env)
    assert PPO("CartPole-v1", env_kwargs={"render_mode": "rgb_array"}).env.render_mode == \
        "rgb_array"


# ---- hints -------------------------------------------------------------------------------------
def test_a_missing_module_of_a_gymnasium_family_names_its_extra(monkeypatch, capsys):
    """``pip install mujoco`` alone leaves imageio out: the hint is Gymnasium's extra."""
    from rlgrad.cli import main
    from rlgrad.cli.build import env_creation_error

    e = env_creation_error("HalfCheetah-v5", ModuleNotFoundError("No module named 'imageio'"))
    assert e.message == ("cannot create environment 'HalfCheetah-v5': ModuleNotFoundError: No "
                         "module named 'imageio'; install its dependencies with: pip install "
                         "\"gymnasium[mujoco]\"")
    e = env_creation_error("LunarLander-v3", ImportError("no Box2D"))
    assert e.message.endswith('pip install "gymnasium[box2d]"')
    assert "pip install" not in env_creation_error("CartPole-v1", ValueError("bad")).message
    real_make = gym.make

    def make(env_id, *args, **kwargs):
        if env_id == "HalfCheetah-v5":
            raise ModuleNotFoundError("No module named 'imageio'")
        return real_make(env_id, *args, **kwargs)

    monkeypatch.setattr(gym, "make", make)
    assert main(["train", "HalfCheetah-v5", "--algo", "sac", "--steps", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith('pip install "gymnasium[mujoco]"'), err


def test_the_demo_names_tensorboard_with_its_install_when_it_is_missing(monkeypatch):
    from pathlib import Path

    from rlgrad.cli import demo

    monkeypatch.setattr(demo.importlib.util, "find_spec", lambda name: None)
    assert demo.tensorboard_hint(Path("runs")) == "pip install tensorboard && tensorboard " \
        "--logdir runs"
    monkeypatch.setattr(demo.importlib.util, "find_spec", lambda name: object())
    assert demo.tensorboard_hint(Path("runs")) == "tensorboard --logdir runs"


# ---- memory at the end of a run ------------------------------------------------------------------
class _Frames(gym.Env):
    """Random 36x36 uint8 frames (NatureCNN's smallest input), episodes of 50 steps."""

    observation_space = gym.spaces.Box(0, 255, (36, 36), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (36, 36), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = self.np_random.integers(0, 256, (36, 36), dtype=np.uint8)
        return frame, 1.0, self.t >= 50, False, {}


def test_a_checkpoint_without_the_buffer_allocates_no_copy_of_it(tmp_path):
    """The end of an Atari run held a second buffer-sized copy: ``get_state`` built the replay
    buffer's state (a copy of every frame) and then dropped it when the buffer was not to be
    saved. Measured with tracemalloc on a full 20k-frame buffer (27 MB)."""
    import tracemalloc

    from gymnasium.wrappers import FrameStackObservation

    from rlgrad.cli.run_dir import RunDir
    from rlgrad.cli.train import save_checkpoint
    from rlgrad.rl.frame_replay import FrameReplayBuffer

    model = DQN("CnnPolicy", FrameStackObservation(_Frames(), 4), buffer_size=20_000,
                learning_starts=10**6, seed=0)
    model.learn(20_000)
    buf = model.replay_buffer
    assert isinstance(buf, FrameReplayBuffer) and buf.frames_added >= 20_000
    size = buf.frames.nbytes  # 20k frames of 36x36 and the stacks' spare frames

    def peak(fn) -> int:
        tracemalloc.start()
        try:
            fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(lambda: model.get_state(include_replay_buffer=False)) < size / 10  # was 1.01x
    assert peak(lambda: model.get_state(include_replay_buffer=True)) > 0.9 * size  # its copy
    (tmp_path / "run").mkdir()
    cfg = {"algo": "dqn", "total_timesteps": 20_000, "checkpoint_replay_buffer": False}
    assert peak(lambda: save_checkpoint(model, RunDir(tmp_path / "run"), cfg)) < size / 10
    state = model.get_state(include_replay_buffer=True)
    assert np.array_equal(state["replay_buffer"]["frames"], buf.frames[:len(
        state["replay_buffer"]["frames"])])  # the saved buffer is still the whole buffer


# ---- plots -------------------------------------------------------------------------------------
def _run(env_id: str, algo: str, seed: int, hp: dict, n: int = 20):
    from pathlib import Path

    from rlgrad.cli.plot import Run

    steps = np.arange(1, n + 1, dtype=np.float64) * 1000
    values = np.sin(steps / 5000 + seed) * 10 + seed
    return Run(Path(f"/runs/{env_id}-{seed}"), {"env_id": env_id, "algo": algo, "seed": seed,
                                                 "hyperparams": hp}, steps, values)


def test_runs_of_different_environments_get_a_titled_panel_each():
    from rlgrad.cli.plot import figure

    hp = {"learning_rate": 0.0006079482304086112, "gamma": 0.9933228533798497,
          "batch_size": 64, "clip_range": 0.2, "ent_coef": 0.004837790077249271,
          "gae_lambda": 0.93265924989623, "n_epochs": 10, "vf_coef": 0.5}
    runs = [_run("CartPole-v1", "ppo", s, hp) for s in (0, 1)]
    runs += [_run("CartPole-v1", "ppo", 0, {**hp, "learning_rate": 3e-4})]
    runs += [_run("Pendulum-v1", "sac", 0, {"learning_rate": 1e-3})]
    fig = figure(runs, title="my runs")
    assert [ax.get_title() for ax in fig.axes] == ["PPO on CartPole-v1", "SAC on Pendulum-v1"]
    assert fig._suptitle.get_text() == "my runs"
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # the usual suspect first, floats to 3 digits, not "PPO on CartPole-v1" in every entry
    assert labels == ["learning_rate=0.000608, 2 seeds (mean \u00b1 std)",
                      "learning_rate=0.0003, seed 0"]
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["seed 0"]
    fig.canvas.draw()
    box = fig.bbox
    for ax in fig.axes:  # every legend inside the figure (it ran off it)
        leg = ax.get_legend().get_window_extent()
        assert box.x0 <= leg.x0 and leg.x1 <= box.x1 and box.y0 <= leg.y0, (leg, box)


def test_a_legend_wider_than_the_figure_widens_it():
    from rlgrad.cli.plot import figure

    long = {f"k{i}": "x" * 60 for i in range(5)}
    runs = [_run("CartPole-v1", "ppo", 0, {**long, "k0": "a" * 200}),
            _run("CartPole-v1", "ppo", 0, {**long, "k0": "b" * 200})]
    fig = figure(runs)
    fig.canvas.draw()
    leg = fig.axes[0].get_legend().get_window_extent()
    assert fig.get_figwidth() > 8 and fig.bbox.x0 <= leg.x0 and leg.x1 <= fig.bbox.x1


def test_a_one_point_curve_is_drawn_with_a_marker():
    from rlgrad.cli.plot import figure

    fig = figure([_run("CartPole-v1", "ppo", 0, {}, n=1)])
    (line,) = fig.axes[0].get_lines()
    assert line.get_marker() == "o" and len(line.get_xdata()) == 1
