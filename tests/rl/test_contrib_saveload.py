"""Save/load cases of SB3's and sb3-contrib's test_save_load on rlgrad's own terms: the
networks of an off-policy algorithm predict, save and load on their own (SB3's ``Actor`` /
``QNetwork`` methods), the replay buffer's SB3 names (``dones``, ``timeouts``, ``extend``) give
SB3's values for the same transitions, CrossQ's keys are sb3-contrib's."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import rlgrad
from rlgrad.rl import DQN, SAC, TD3
from rlgrad.rl.buffers import ReplayBuffer
from rlgrad.rl.c51 import C51
from rlgrad.rl.contrib import QRDQN, TQC, CrossQ

OBS = np.random.default_rng(0).uniform(-1, 1, size=(7, 3)).astype(np.float32)  # Pendulum's
CART = np.random.default_rng(1).uniform(-1, 1, size=(7, 4)).astype(np.float32)


def _network(cls: type, tmp: Path):
    if cls in (DQN, QRDQN):
        kw = {"n_quantiles": 5} if cls is QRDQN else {}
        m = cls("MlpPolicy", "CartPole-v1", seed=0, learning_starts=10,
                policy_kwargs={"net_arch": [8], **kw})
        m.learn(40)
        return m, m.q_net, CART
    m = cls("MlpPolicy", "Pendulum-v1", seed=0, learning_starts=10, policy_kwargs={"net_arch": [8]})
    m.learn(20)
    return m, m.actor, OBS


@pytest.mark.parametrize("cls", [SAC, TD3, TQC, CrossQ, DQN, QRDQN])
def test_a_network_predicts_saves_and_loads_as_the_model(cls: type, tmp_path: Path) -> None:
    """``net.predict`` is the model's deterministic action (a Box's rescaled onto its bounds:
    Pendulum's [-2, 2]); ``type(net).load`` of ``net.save`` gives the same parameters and
    actions."""
    model, net, obs = _network(cls, tmp_path)
    want = model.predict(obs, deterministic=True)[0]
    got, state = net.predict(obs, deterministic=True)
    assert state is None and got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(net.predict(obs[0], deterministic=True)[0], want[0], atol=1e-6)
    if cls in (SAC, TD3):  # the closed form of the rescaling, from the network's own output
        mu = net.numpy(obs, None) if cls is SAC else net.numpy(obs)
        np.testing.assert_allclose(got, -2.0 + 0.5 * (mu + 1.0) * 4.0, rtol=1e-6, atol=1e-6)
    net.save(tmp_path / "net.pkl")
    back = type(net).load(tmp_path / "net.pkl")
    assert back is not net and list(back.state_dict()) == list(net.state_dict())
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k], v)
    np.testing.assert_array_equal(back.predict(obs, deterministic=True)[0], got)
    assert model.policy.to("cpu") is not None and model.policy.to("cpu").predict(obs)[0].shape


def test_loading_another_network_or_a_user_network_is_one_line(tmp_path: Path) -> None:
    sac = SAC("MlpPolicy", "Pendulum-v1", seed=0, policy_kwargs={"net_arch": [8]})
    dqn = DQN("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs={"net_arch": [8]})
    sac.actor.save(tmp_path / "actor.pkl")
    with pytest.raises(ValueError, match=r"holds no QNetworkMLP \(it holds SACActor\)") as e:
        type(dqn.q_net).load(tmp_path / "actor.pkl")
    assert "\n" not in str(e.value)
    c51 = C51("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs={"net_arch": [8]})
    assert not hasattr(c51.q_net, "predict")  # its head is a distribution: model.predict acts


def test_sample_predictions_stay_in_the_bounds() -> None:
    sac = SAC("MlpPolicy", "Pendulum-v1", seed=0, policy_kwargs={"net_arch": [8]})
    a = sac.actor.predict(OBS, deterministic=False)[0]
    assert a.shape == (7, 1) and np.all(np.abs(a) <= 2.0)
    assert not np.allclose(a, sac.actor.predict(OBS, deterministic=True)[0])


def _transitions(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    term = rng.random(n) < 0.3
    trunc = (rng.random(n) < 0.3) & ~term
    return {"obs": rng.normal(size=(n, 3)).astype(np.float32),
            "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
            "actions": rng.normal(size=(n, 1)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32), "term": term, "trunc": trunc}


def test_replay_buffer_dones_timeouts_and_extend_as_sb3s() -> None:
    """SB3's buffer given the same transitions (``done``, ``TimeLimit.truncated``) holds the
    same ``dones`` and ``timeouts``; ``extend`` with SB3's arguments adds the same rows."""
    sb3_buffers = pytest.importorskip("stable_baselines3.common.buffers")
    from gymnasium import spaces

    t = _transitions(12)
    box = spaces.Box(-5, 5, (3,), np.float32)
    theirs = sb3_buffers.ReplayBuffer(16, box, spaces.Box(-1, 1, (1,), np.float32), device="cpu")
    for i in range(12):
        done = np.array([t["term"][i] or t["trunc"][i]])
        theirs.add(t["obs"][i:i + 1], t["next_obs"][i:i + 1], t["actions"][i:i + 1],
                   t["rewards"][i:i + 1], done, [{"TimeLimit.truncated": bool(t["trunc"][i])}])
    ours = ReplayBuffer(16, 3, (1,))
    ours.add(t["obs"], t["next_obs"], t["actions"], t["rewards"], t["term"], t["trunc"])
    np.testing.assert_array_equal(ours.dones[:12], theirs.dones[:12, 0])
    np.testing.assert_array_equal(ours.timeouts[:12], theirs.timeouts[:12, 0])
    assert ours.dones.dtype == theirs.dones.dtype and ours.device.type == "cpu"
    again = ReplayBuffer(16, 3, (1,))
    infos = [[{"TimeLimit.truncated": bool(x)}] for x in theirs.timeouts[:12, 0]]
    again.extend(theirs.observations[:12], theirs.next_observations[:12], theirs.actions[:12],
                 theirs.rewards[:12], theirs.dones[:12], infos)
    for k in ("observations", "next_observations", "actions", "rewards", "terminated",
              "truncated"):
        np.testing.assert_array_equal(getattr(again, k), getattr(ours, k), err_msg=k)
    with pytest.raises(ValueError, match="2 infos for 12 rows"):
        again.extend(t["obs"], t["next_obs"], t["actions"], t["rewards"], t["term"], infos[:2])


def test_load_replay_buffer_takes_the_models_device(tmp_path: Path) -> None:
    m = SAC("MlpPolicy", "Pendulum-v1", seed=0, buffer_size=100, policy_kwargs={"net_arch": [8]})
    m.learn(30)
    m.save_replay_buffer(tmp_path / "rb")
    m.device = "a device the user set"  # SB3's test sets th.device("cuda") here
    m.load_replay_buffer(tmp_path / "rb")
    assert m.replay_buffer.device == "a device the user set"


def test_crossq_keys_are_sb3_contribs() -> None:
    """The critics' Linear layers under sb3-contrib's keys (``critic.qf0.1.weight`` ...), no
    target network among the saved parameters (sb3-contrib's CrossQ has none)."""
    contrib = pytest.importorskip("sb3_contrib")
    theirs = contrib.CrossQ("MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [8]})
    ours = CrossQ("MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [8]})
    lin = {k for k, v in theirs.policy.state_dict().items()
           if k.startswith("critic.") and k.endswith((".weight", ".bias")) and v.dim() == 2}
    mine = set(ours.get_parameters()["policy"])
    assert lin and {k for k in lin} <= mine
    assert not any(k.startswith("critic_target") for k in mine)
    assert set(ours.get_parameters()) == set(theirs.get_parameters())
    pickle.dumps(ours.critic)  # (a plain module: no lambdas)


def test_crossq_without_batch_norm_has_sb3_contribs_keys(tmp_path: Path) -> None:
    """``batch_norm=False``: the policy's keys are sb3-contrib's exactly, its weights load into
    sb3-contrib's CrossQ and give the same Q-values, and the model saves and loads as it is."""
    contrib = pytest.importorskip("sb3_contrib")
    torch = pytest.importorskip("torch")
    theirs = contrib.CrossQ("MlpPolicy", "Pendulum-v1",
                            policy_kwargs={"net_arch": [8], "batch_norm": False})
    ours = CrossQ("MlpPolicy", "Pendulum-v1", seed=0,
                  policy_kwargs={"net_arch": [8], "batch_norm": False})
    weights = ours.get_parameters()["policy"]
    assert set(weights) == set(theirs.policy.state_dict())
    theirs.set_parameters({"policy": weights}, exact_match=False)
    obs, act = np.ones((2, 3), np.float32), np.full((2, 1), 0.5, np.float32)
    theirs.policy.set_training_mode(False)
    with torch.no_grad():
        want = theirs.critic(torch.tensor(obs), torch.tensor(act))[0].numpy()[:, 0]
    np.testing.assert_allclose(np.asarray(ours.critic(obs, act)[0]._value), want, rtol=1e-6)
    ours.save(tmp_path / "m")
    again = CrossQ.load(tmp_path / "m")
    assert not again.batch_norm and isinstance(again.critic.qf0[0], rlgrad.nn.Linear)
