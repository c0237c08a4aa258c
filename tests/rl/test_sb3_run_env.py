"""The algorithm surface SB3's test_callbacks / test_utils / test_logger exercise, compared with
Stable-Baselines3 itself: ``model.env`` is SB3's VecEnv, ``set_env``'s checks and exception
types, ``stats_window_size`` with ``ep_info_buffer`` / ``ep_success_buffer``, callbacks that
stop with any false value, and ``EvalCallback``'s success rate."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad.rl as rl
from rlgrad.rl.callbacks import BaseCallback, EvalCallback
from rlgrad.rl.common.vec_env import DummyVecEnv, VecEnv

sb3 = pytest.importorskip("stable_baselines3")


class SuccessEnv(gym.Env):
    """Episodes of 5 steps; the k-th episode reports ``is_success = k % 3 == 0``."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.t, self.k = 0, 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        info: dict[str, Any] = {}
        done = self.t >= 5
        if done:
            info["is_success"] = self.k % 3 == 0
            self.k += 1
        return np.zeros(2, np.float32), 1.0, done, False, info


def _logged(model: Any) -> dict[str, Any]:
    """What the model's logger held at each dump (the last value of each key)."""
    seen: dict[str, Any] = {}
    dump = model.logger.dump

    def keep(step: int = 0) -> None:
        seen.update(model.logger.name_to_value)
        dump(step)

    model.logger.dump = keep
    return seen


def _successes(lib: Any, dummy: Any, monitor: Any) -> tuple[list[bool], int, Any]:
    model = lib.PPO("MlpPolicy", dummy([lambda: monitor(SuccessEnv())]), n_steps=20,
                    batch_size=20, n_epochs=1, stats_window_size=3, seed=0)
    model.learn(60)
    return list(model.ep_success_buffer), model.ep_info_buffer.maxlen, model.ep_info_buffer


def test_env_is_sb3_vec_env_like_sb3() -> None:
    for lib in (rl, sb3):
        model = lib.A2C("MlpPolicy", "Pendulum-v1", n_steps=4)
        env = model.env
        assert env is model.get_env()
        assert env.num_envs == 1
        assert env.observation_space == model.observation_space  # one copy's space, as SB3's
        obs = env.reset()
        assert obs.shape == (1, 3)
        assert env.observation_space.contains(obs[0])
        out = env.step(np.zeros((1, 1), np.float32))
        assert len(out) == 4 and out[1].shape == (1,) and isinstance(out[3], list)
    assert isinstance(rl.A2C("MlpPolicy", "CartPole-v1").env, VecEnv)


def test_env_passed_as_vec_env_is_model_env() -> None:
    venv = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    model = rl.PPO("MlpPolicy", venv, n_steps=8, batch_size=16)
    assert model.env is venv and model.n_envs == 2


def test_set_env_checks_like_sb3() -> None:
    for lib, dummy in ((rl, DummyVecEnv), (sb3, sb3.common.vec_env.DummyVecEnv)):
        model = lib.DQN("MlpPolicy", "CartPole-v1")
        two = dummy([lambda: gym.make("CartPole-v1")] * 2)
        with pytest.raises(AssertionError, match="number of environments"):
            model.set_env(two)
        with pytest.raises(ValueError):  # another observation space
            model.set_env(dummy([lambda: gym.make("Acrobot-v1")]))
        one = dummy([lambda: gym.make("CartPole-v1")])
        model.set_env(one)
        assert model.get_env() is one and model.env is one
    with pytest.raises(ValueError, match="number of environments"):  # one line, both types
        rl.DQN("MlpPolicy", "CartPole-v1").set_env(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2))


def test_stats_window_and_success_buffer_match_sb3() -> None:
    from stable_baselines3.common.monitor import Monitor as SB3Monitor

    from rlgrad.rl.common.monitor import Monitor

    mine, n_mine, infos = _successes(rl, DummyVecEnv, Monitor)
    theirs, n_theirs, infos_sb3 = _successes(sb3, sb3.common.vec_env.DummyVecEnv, SB3Monitor)
    assert n_mine == n_theirs == 3
    assert mine == theirs == [True, False, False]  # episodes 9, 10, 11 of 12
    assert [e["r"] for e in infos] == [e["r"] for e in infos_sb3] == [5.0] * 3
    assert [e["l"] for e in infos] == [e["l"] for e in infos_sb3] == [5] * 3
    assert rl.PPO("MlpPolicy", "CartPole-v1", stats_window_size=7).ep_success_buffer.maxlen == 7


def test_stats_window_logged_means() -> None:
    model = rl.PPO("MlpPolicy", DummyVecEnv([SuccessEnv]), n_steps=20, batch_size=20,
                   n_epochs=1, stats_window_size=3, seed=0)
    logged = _logged(model)
    model.learn(60, log_interval=1)
    assert logged["rollout/success_rate"] == pytest.approx(1 / 3)
    assert logged["rollout/ep_rew_mean"] == pytest.approx(5.0)


class GrowingEnv(SuccessEnv):
    """Episode k lasts k + 1 steps (returns 1, 2, 3, ...): each entry is told apart."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        done = self.t > self.k
        self.k += int(done)
        return np.zeros(2, np.float32), 1.0, done, False, {}


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_ep_info_buffer_is_one_deque_the_rollouts_fill_like_sb3s(algo: str) -> None:
    """SB3's ``ep_info_buffer``: one ``deque(maxlen=stats_window_size)`` of ``{"r", "l", "t"}``
    the rollouts append to (a reference kept across ``learn(reset_num_timesteps=False)`` sees
    the new episodes; a new run gets a new deque), and rollout/ep_rew_mean is its mean."""
    from stable_baselines3.common.monitor import Monitor as SB3Monitor

    from rlgrad.rl.common.monitor import Monitor

    kw: dict[str, Any] = (dict(n_steps=16, batch_size=16, n_epochs=1) if algo == "PPO"
                          else dict(learning_starts=8, buffer_size=100))
    got = {}
    for lib, dummy, monitor in ((rl, DummyVecEnv, Monitor),
                                (sb3, sb3.common.vec_env.DummyVecEnv, SB3Monitor)):
        model = getattr(lib, algo)("MlpPolicy", dummy([lambda: monitor(GrowingEnv())]),  # noqa: B023
                                   stats_window_size=4, seed=0, **kw)
        logged = _logged(model) if lib is rl else {}
        model.learn(48, log_interval=1)
        buf = model.ep_info_buffer
        assert buf is model.ep_info_buffer and buf.maxlen == 4
        first = [(e["r"], e["l"]) for e in buf]
        first_logged = dict(logged)
        model.learn(48, reset_num_timesteps=False)
        assert model.ep_info_buffer is buf  # the same deque, filled by the rollouts
        assert set(buf[-1]) >= {"r", "l", "t"}
        got[lib.__name__] = (first, [(e["r"], e["l"]) for e in buf])
        if lib is rl:
            assert first_logged["rollout/ep_rew_mean"] == pytest.approx(
                np.mean([r for r, _ in first]))
            buf.append({"r": 100.0, "l": 1, "t": 0.0})  # SB3 users append: it is averaged
            model._record_rollout_stats()
            assert model.logger.name_to_value["rollout/ep_rew_mean"] == pytest.approx(
                np.mean([e["r"] for e in buf]))
        model.learn(8)  # a new run: SB3 starts new buffers
        assert model.ep_info_buffer is not buf and model.ep_info_buffer.maxlen == 4
    mine, theirs = got["rlgrad.rl"], got["stable_baselines3"]
    assert mine == theirs
    assert mine[0] == [(float(k), k) for k in range(6, 10)]  # episodes 6..9 of 48 steps


def test_ep_info_buffer_survives_a_checkpoint() -> None:
    model = rl.PPO("MlpPolicy", DummyVecEnv([GrowingEnv]), n_steps=16, batch_size=16,
                   n_epochs=1, stats_window_size=3, seed=0)
    model.learn(48)
    saved = [dict(e) for e in model.ep_info_buffer]
    state = model.get_state()
    other = rl.PPO("MlpPolicy", DummyVecEnv([GrowingEnv]), n_steps=16, batch_size=16,
                   n_epochs=1, stats_window_size=3, seed=1)
    buf = other.ep_info_buffer
    other.set_state(state)
    assert other.ep_info_buffer is buf and list(buf) == saved
    del state["episode_infos"]  # a checkpoint written before it was saved: the statistics'
    other.set_state(state)
    assert [(e["r"], e["l"]) for e in buf] == [(e["r"], e["l"]) for e in saved]
    assert all(np.isnan(e["t"]) for e in buf)  # (times unknown)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_stats_window_size_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="stats_window_size"):
        rl.PPO("MlpPolicy", "CartPole-v1", stats_window_size=bad)


@pytest.mark.parametrize("false", [False, np.bool_(False), np.array(False)])
@pytest.mark.parametrize("algo", ["A2C", "SAC"])
def test_callback_false_values_stop(algo: str, false: Any) -> None:
    calls = {"mine": 0, "sb3": 0}
    for lib, base, key in ((rl, BaseCallback, "mine"),
                           (sb3, sb3.common.callbacks.BaseCallback, "sb3")):
        class Stop(base):  # type: ignore[misc, valid-type]
            def _on_step(self) -> Any:
                calls[key] += 1  # noqa: B023 - run at once
                return false

        kwargs = dict(n_steps=1) if algo == "A2C" else dict(learning_starts=1, buffer_size=10,
                                                              batch_size=1)
        env = "CartPole-v1" if algo == "A2C" else "Pendulum-v1"
        getattr(lib, algo)("MlpPolicy", env, policy_kwargs=dict(net_arch=[2]),
                           **kwargs).learn(10, callback=Stop())
    assert calls == {"mine": 1, "sb3": 1}


def test_callback_none_goes_on() -> None:
    """rlgrad's difference: a callback that returns nothing does not stop training."""
    class Quiet(BaseCallback):
        def _on_step(self) -> None:
            return None

    cb = Quiet()
    rl.A2C("MlpPolicy", "CartPole-v1", n_steps=2).learn(10, callback=cb)
    assert cb.n_calls == 10


def test_eval_callback_success_rate(tmp_path: Any) -> None:
    eval_env = DummyVecEnv([SuccessEnv])
    cb = EvalCallback(eval_env, eval_freq=10, n_eval_episodes=3, log_path=str(tmp_path),
                      warn=False, verbose=0)
    model = rl.PPO("MlpPolicy", DummyVecEnv([SuccessEnv]), n_steps=10, batch_size=10, n_epochs=1)
    logged = _logged(model)
    model.learn(10, callback=cb, log_interval=1)
    assert cb._is_success_buffer == [True, False, False]  # episodes 0, 1, 2 of the eval env
    assert logged["eval/success_rate"] == pytest.approx(1 / 3)
    data = np.load(tmp_path / "evaluations.npz")
    np.testing.assert_array_equal(data["successes"], [[True, False, False]])


@pytest.mark.parametrize("algo,env", [("SAC", "Pendulum-v1"), ("TD3", "Pendulum-v1"),
                                      ("DQN", "CartPole-v1")])
def test_tau_zero_and_no_gradient_steps(algo: str, env: str) -> None:
    """SB3 takes tau=0 (the targets keep their weights) and gradient_steps=0 (collect only)."""
    def snapshot(m: Any) -> dict[str, np.ndarray]:
        return {k: np.array(v) for k, v in m.policy.state_dict().items()}

    cls = getattr(rl, algo)
    m = cls("MlpPolicy", env, learning_starts=0, tau=0.0, target_update_interval=1,
            seed=1, policy_kwargs=dict(net_arch=[8])) if algo == "DQN" else cls(
        "MlpPolicy", env, learning_starts=0, tau=0.0, seed=1, policy_kwargs=dict(net_arch=[8]))
    before = snapshot(m)
    m.learn(60)
    after = snapshot(m)
    changed = {k for k in before if not np.array_equal(before[k], after[k])}
    assert changed and not any("target" in k for k in changed)
    m = cls("MlpPolicy", env, learning_starts=0, gradient_steps=0, seed=1,
            policy_kwargs=dict(net_arch=[8]))
    before = snapshot(m)
    m.learn(60)
    assert m._n_updates == 0 and m.replay_buffer.size() > 50  # (CartPole: no reset rows)
    assert all(np.array_equal(v, snapshot(m)[k]) for k, v in before.items())


def test_out_of_range_is_assertion_and_value_error() -> None:
    for exc in (AssertionError, ValueError):
        with pytest.raises(exc, match="clip_range_vf=-0.2 is out of range"):
            rl.PPO("MlpPolicy", "CartPole-v1", clip_range_vf=-0.2)
        with pytest.raises(exc, match="n_steps"):
            rl.PPO("MlpPolicy", "Pendulum-v1", n_steps=1)


def test_off_policy_policy_is_vectorized_observation_like_sb3() -> None:
    for lib in (rl, sb3):
        policy = lib.DQN("MlpPolicy", "CartPole-v1").policy
        policy.observation_space = spaces.Box(-1, 1, shape=(2,))
        assert policy.is_vectorized_observation(np.ones((1, 2)))
        assert not policy.is_vectorized_observation(np.ones(2))
        with pytest.raises(ValueError):
            policy.is_vectorized_observation(np.ones((1, 3)))


def test_polyak_update_on_torch_and_rlgrad_tensors() -> None:
    import torch

    import rlgrad
    from rlgrad.rl.common.utils import polyak_update

    src, dst = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(3))
    polyak_update([src], [dst], 0.1)
    np.testing.assert_allclose(dst.detach().numpy(), 0.1)  # 0.9 * 0 + 0.1 * 1
    a, b = rlgrad.tensor(np.full(3, 2.0)), rlgrad.tensor(np.zeros(3))
    polyak_update(iter([a]), iter([b]), 0.25)
    np.testing.assert_allclose(b._value, 0.5)


def test_predict_refuses_gymnasium_reset_tuple_like_sb3() -> None:
    env = gym.make("CartPole-v1")
    for lib in (rl, sb3):
        with pytest.raises(ValueError, match="mixing Gym API"):
            lib.PPO("MlpPolicy", env).predict(env.reset(seed=0))
