"""RecurrentPPO (rlgrad.rl.recurrent_ppo): the NumPy LSTM step against nn.LSTM and torch, the
padded-sequence minibatches against the rollout, predict's state, sb3-contrib's checks, and a
short learning run on CartPole with the velocities hidden."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad import nn
from rlgrad.rl import PPO, evaluate_policy
from rlgrad.rl.contrib import RecurrentPPO
from rlgrad.rl.contrib.ppo_recurrent import MlpLstmPolicy
from rlgrad.rl.recurrent_policies import lstm_numpy

torch = pytest.importorskip("torch")



@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_numpy_step_matches_nn_lstm_and_torch(layers: int) -> None:
    rng = np.random.default_rng(0)
    lstm = nn.LSTM(5, 7, num_layers=layers)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    h = rng.standard_normal((layers, 3, 7)).astype(np.float32)
    c = rng.standard_normal((layers, 3, 7)).astype(np.float32)
    out, h2, c2 = lstm_numpy(lstm, x, h, c)
    with rlgrad.no_grad():
        ref, (rh, rc) = lstm(x[None], (h, c))
    np.testing.assert_allclose(out, np.asarray(ref._value)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h2, np.asarray(rh._value), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c2, np.asarray(rc._value), rtol=1e-5, atol=1e-6)
    t = torch.nn.LSTM(5, 7, num_layers=layers)
    t.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in lstm.state_dict().items()})
    with torch.no_grad():
        tout, (th_, tc) = t(torch.tensor(x[None]), (torch.tensor(h), torch.tensor(c)))
    np.testing.assert_allclose(out, tout.numpy()[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c2, tc.numpy(), rtol=1e-5, atol=1e-6)


POLICY_KWARGS = [{}, {"shared_lstm": True, "enable_critic_lstm": False},
                 {"enable_critic_lstm": False, "n_lstm_layers": 2, "lstm_hidden_size": 8}]


def _replayed(m: RecurrentPPO) -> Any:
    """Each sequence minibatch of the collected rollout with its real rows and the
    log-probabilities and values the policy gives it now, without a graph."""
    for b, real in m._minibatches():
        with rlgrad.no_grad():
            d, v = m._distribution_and_value(b)
            lp = np.asarray(d.log_prob(b["actions"])._value)
        yield b, real, lp, v


@pytest.mark.parametrize("kw", POLICY_KWARGS)
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_sequences_reproduce_the_rollout(env: str, kw: dict) -> None:
    """Before any update, the LSTMs run over the padded sequences of every minibatch give the
    log-probabilities and values computed step by step while acting (the stored states, the
    resets at episode starts and the sequence cuts are right)."""
    m = RecurrentPPO("MlpLstmPolicy", env, n_steps=64, n_envs=3, batch_size=50, seed=0,
                     policy_kwargs=kw)
    m._setup_learn(1000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    if env == "CartPole-v1":
        assert m.rollout_buffer.episode_starts[1:].any()  # episodes end inside the rollout
    n_real = 0
    for b, real, lp, v in _replayed(m):
        np.testing.assert_allclose(lp[real], b["old_log_prob"][real], atol=2e-6)
        np.testing.assert_allclose(np.asarray(v._value)[real], b["old_values"][real], atol=2e-6)
        assert np.isclose(b["weights"].sum(), 1.0) and (b["weights"][~real] == 0).all()
        n_real += int(real.sum())
    assert n_real == int(m.rollout_buffer.valid.sum())  # every real row once


def test_sequence_minibatches_cover_rows_and_cut_at_starts() -> None:
    m = RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=40, n_envs=2, batch_size=32,
                     seed=1, policy_kwargs={"lstm_hidden_size": 4})
    m._setup_learn(1000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    buf = m.rollout_buffer
    seen = []
    for mb in buf.sequence_minibatches(32, np.random.default_rng(0)):
        n_seq = mb["init"][0].shape[1]
        rows = mb["rows"].reshape(-1, n_seq)
        for j in range(n_seq):
            col = rows[:, j][rows[:, j] >= 0]
            assert (np.diff(col) == buf.n_envs).all()  # one env copy, consecutive steps
            assert not buf.episode_starts.reshape(-1)[col[1:]].any()  # starts only at the head
            t0, e0 = divmod(int(col[0]), buf.n_envs)
            np.testing.assert_array_equal(mb["init"][0][:, j], buf.states[t0, 0, :, e0])
            seen.extend(col.tolist())
    assert sorted(seen) == list(range(buf.n_steps * buf.n_envs))


def test_predict_carries_and_resets_the_state() -> None:
    m = RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=16, seed=0,
                     policy_kwargs={"lstm_hidden_size": 6})
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    a, state = m.predict(obs, deterministic=True)
    assert a.shape == (5,) and state[0].shape == (1, 5, 6) and state[1].shape == (1, 5, 6)
    # two calls with the state passed back == the LSTM over both steps
    _, s2 = m.predict(obs, state=state, episode_start=np.zeros(5, bool), deterministic=True)
    with rlgrad.no_grad():
        _, (h, c) = m.policy.lstm_actor(np.stack([obs, obs]))
    np.testing.assert_allclose(s2[0], np.asarray(h._value), rtol=1e-5, atol=1e-6)
    # episode_start zeroes the state: the same as starting from None
    _, s3 = m.predict(obs, state=state, episode_start=np.ones(5, bool), deterministic=True)
    np.testing.assert_allclose(s3[0], state[0], atol=1e-7)
    a1, s1 = m.predict(obs[0], deterministic=True)  # one observation: one action
    assert np.ndim(a1) == 0 and s1[0].shape == (1, 1, 6)
    with pytest.raises(ValueError, match="state must be a pair"):
        m.predict(obs, state=(np.zeros((1, 2, 6)), np.zeros((1, 2, 6))))


def test_sb3_contrib_checks_and_policy_names() -> None:
    for kw in ({"shared_lstm": True, "enable_critic_lstm": True},
               {"shared_lstm": True, "enable_critic_lstm": False,
                "share_features_extractor": False}):
        with pytest.raises(AssertionError):
            RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=16, policy_kwargs=kw)
        with pytest.raises(ValueError, match="shared_lstm"):
            RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=16, policy_kwargs=kw)
    with pytest.raises(ValueError, match="RecurrentPPO's policy"):
        PPO("MlpLstmPolicy", "CartPole-v1")
    m = RecurrentPPO(MlpLstmPolicy, "CartPole-v1", n_steps=16, seed=0)  # the class, as SB3
    assert m.n_steps == 16 and m.batch_size == 128  # sb3-contrib's default batch_size
    m.learn(32)  # a batch_size above the rollout: the whole rollout, as sb3-contrib


def test_policy_kwargs_of_sb3_contrib_train(tmp_path) -> None:
    from rlgrad.rl.common.envs import FakeImageEnv

    m = RecurrentPPO("CnnLstmPolicy", FakeImageEnv(screen_height=40, screen_width=40,
                                                   n_channels=3), n_steps=16, seed=0, n_epochs=2,
                     policy_kwargs={"enable_critic_lstm": False, "lstm_hidden_size": 4,
                                    "share_features_extractor": False,
                                    "features_extractor_kwargs": {"features_dim": 32}})
    m.learn(32)
    assert m.policy.vf_features_extractor is not None
    m = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=16, seed=0, clip_range_vf=0.1,
                     policy_kwargs={"n_lstm_layers": 2, "lstm_hidden_size": 4,
                                    "lstm_kwargs": {"dropout": 0.5}})
    m.learn(64)
    obs = np.zeros((2, 3), np.float32)
    a, s = m.predict(obs, deterministic=True)
    m.save(tmp_path / "rppo")
    m2 = RecurrentPPO.load(tmp_path / "rppo")
    a2, s2 = m2.predict(obs, deterministic=True)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(s[1], s2[1])


def test_learns_cartpole_without_velocities(seeded_eval_env: Callable[[str], Any]) -> None:
    """A short run of the zoo's preset is clearly above an untrained policy (~10-30 steps per
    episode); the full solve (500) is bench/contrib.py's."""
    from rlgrad.rl import make_from_preset

    m, _ = make_from_preset("ppo_lstm", "CartPoleNoVel-v1", seed=0)
    untrained, _ = evaluate_policy(m, seeded_eval_env("CartPoleNoVel-v1"), n_eval_episodes=5,
                                   deterministic=True, warn=False)
    m.learn(12_000)
    mean, _ = evaluate_policy(m, seeded_eval_env("CartPoleNoVel-v1"), n_eval_episodes=5,
                              deterministic=True, warn=False)
    assert untrained < 60 and mean > 150, (untrained, mean)


def test_sde_acts_as_sb3_contribs_policy_with_the_same_matrices() -> None:
    """gSDE in the LSTM policy: sb3-contrib's RecurrentActorCriticPolicy with the same weights
    and exploration matrices gives the same actions, values, log-probabilities and states over
    steps with episode starts (the noise reads the policy tower's output on the LSTM's)."""
    sb3c = pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    from rlgrad.rl.recurrent_policies import LSTMStates

    kw = dict(lstm_hidden_size=8, net_arch=[16], log_std_init=-0.5)
    m = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", use_sde=True, n_steps=16, batch_size=16,
                     n_envs=2, seed=0, policy_kwargs=kw)
    ref = sb3c.RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", use_sde=True, n_steps=16,
                            batch_size=16, seed=0, device="cpu", policy_kwargs=kw).policy
    pol = m.policy
    rng = np.random.default_rng(0)
    pol.log_std._value[...] = rng.uniform(-1.5, 0.0, pol.log_std.shape)
    assert pol.log_std.shape == (16, 1)  # (the tower's output, the action)
    ref.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in pol.state_dict().items()})
    pol.reset_noise(2, np.random.default_rng(1))
    ref.action_dist.exploration_matrices = torch.tensor(pol.sde_std() * pol.sde_weights)
    states = pol.initial_states(2)
    t_states = RNNStates(*((torch.zeros(1, 2, 8), torch.zeros(1, 2, 8)) for _ in range(2)))
    for t in range(4):
        obs = rng.standard_normal((2, 3)).astype(np.float32)
        starts = np.array([t == 0, t == 2])
        keep = (~starts).astype(np.float32)[None, :, None]
        st = LSTMStates(*((h * keep, c * keep) for h, c in states))
        a, v, lp, states = pol.act_recurrent(obs, st, np.random.default_rng(9))
        with torch.no_grad():
            ta, tv, tlp, t_states = ref(torch.tensor(obs), t_states,
                                        torch.tensor(starts, dtype=torch.float32))
        np.testing.assert_allclose(a, ta.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v, tv.numpy()[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lp, tlp.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(states.pi[1], t_states.pi[1].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(states.vf[0], t_states.vf[0].numpy(), rtol=1e-5, atol=1e-6)
    # deterministic: the mean, as sb3-contrib's predict
    obs = rng.standard_normal((2, 3)).astype(np.float32)
    a, (h, _) = pol.predict(obs, states.pi, np.zeros(2, bool), deterministic=True)
    ta, (th_, _) = ref.predict(obs, tuple(s.numpy() for s in t_states.pi), np.zeros(2, bool),
                               deterministic=True)
    np.testing.assert_allclose(a, ta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, th_, rtol=1e-5, atol=1e-6)


def test_sde_rollout_resamples_and_sequences_reproduce_it(monkeypatch) -> None:
    """The exploration matrices are drawn per rollout and every ``sde_sample_freq`` steps, one
    per env copy (the non-recurrent path's collection), and the padded LSTM sequences give the
    gSDE log-probabilities computed while acting."""
    m = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", use_sde=True, sde_sample_freq=4,
                     n_steps=16, n_envs=2, batch_size=20, seed=0,
                     policy_kwargs=dict(lstm_hidden_size=8, net_arch=[16], log_std_init=-1.0))
    seen = []
    real = m.policy.reset_noise

    def spy(n_envs: int = 1, rng: Any = None) -> None:
        real(n_envs, rng)
        seen.append(m.policy.sde_weights.copy())

    monkeypatch.setattr(m.policy, "reset_noise", spy)
    m._setup_learn(1000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    assert len(seen) == 4 and all(w.shape == (2, 16, 1) for w in seen)  # steps 0, 4, 8, 12
    assert not any(np.array_equal(a, b) for a, b in zip(seen, seen[1:]))
    n_real = 0
    for b, real_rows, lp, _ in _replayed(m):
        np.testing.assert_allclose(lp[real_rows], b["old_log_prob"][real_rows], atol=2e-5)
        n_real += int(real_rows.sum())
    assert n_real == 32
    m.learn(64)
    assert m.logger.name_to_value["train/std"] == pytest.approx(float(m.policy.sde_std().mean()))


class _Reach(gym.Env):
    """x in [-1, 1] moved by 0.2 a each step, reward -|x|, 20 steps: a random policy scores
    about -10, one that steers to 0 about -1."""

    observation_space = spaces.Box(-1, 1, (1,), np.float32)
    action_space = spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.x, self.t = self.np_random.uniform(-1, 1), 0
        return np.array([self.x], np.float32), {}

    def step(self, a: Any) -> Any:
        self.x = float(np.clip(self.x + 0.2 * float(np.clip(a[0], -1, 1)), -1, 1))
        self.t += 1
        return np.array([self.x], np.float32), -abs(self.x), False, self.t >= 20, {}


def test_sde_learns_to_reach() -> None:
    m = RecurrentPPO("MlpLstmPolicy", _Reach(), use_sde=True, sde_sample_freq=4, n_steps=64,
                     batch_size=64, n_epochs=4, learning_rate=3e-3, seed=0,
                     policy_kwargs=dict(log_std_init=-1, net_arch=[32], lstm_hidden_size=16))
    env = _Reach()
    env.reset(seed=5)
    before, _ = evaluate_policy(m, env, n_eval_episodes=20, deterministic=False, warn=False)
    m.learn(5000)  # seeds 0-3 reach -1.24 to -1.44 from -11.4 to -15.1
    after, _ = evaluate_policy(m, env, n_eval_episodes=20, deterministic=False, warn=False)
    assert before < -8 and after > -2.5, (before, after)
