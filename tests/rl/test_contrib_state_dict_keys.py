"""DQN's CnnPolicy, sb3-contrib's QR-DQN and TQC: the policy's state dict is SB3's /
sb3-contrib's, key for key and in order (``q_net.features_extractor.cnn.0.weight``,
``quantile_net.quantile_net.0.weight``, ``critic.qf0.0.weight``); their state dict loads with
``strict=True`` and gives their Q-values, quantiles and actions; the keys rlgrad wrote before
(``q_net.q_net.0.cnn.0.weight``, ``critic.q_networks.0.0.weight``) still load."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad.rl as rl
from rlgrad.rl.common.envs import FakeImageEnv
from rlgrad.rl.off_policy import PolicyView

sb3 = pytest.importorskip("stable_baselines3")
contrib = pytest.importorskip("sb3_contrib")
th = pytest.importorskip("torch")


def _image_env() -> FakeImageEnv:
    return FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                        discrete=True)


def _both(algo: str, policy: str, make_env, lib, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (getattr(rl, algo)(policy, make_env(), **kw),
                getattr(lib, algo)(policy, make_env(), **kw))


def _obs(model, n: int = 5) -> np.ndarray:
    space = model.observation_space
    space.seed(3)
    return np.stack([space.sample() for _ in range(n)])


Q_CASES = {
    "dqn-cnn": ("DQN", "CnnPolicy", _image_env, sb3, "q_net", dict(net_arch=[8])),
    "dqn-cnn-no-head": ("DQN", "CnnPolicy", _image_env, sb3, "q_net", {}),
    "qrdqn-mlp": ("QRDQN", "MlpPolicy", lambda: "CartPole-v1", contrib, "quantile_net",
                  dict(n_quantiles=7)),
    "qrdqn-cnn": ("QRDQN", "CnnPolicy", _image_env, contrib, "quantile_net",
                  dict(n_quantiles=5, net_arch=[8])),
}


@pytest.mark.parametrize("case", sorted(Q_CASES))
def test_q_network_keys_and_strict_load_are_sb3s(case):
    algo, policy, make_env, lib, name, pk = Q_CASES[case]
    mine, theirs = _both(algo, policy, make_env, lib, buffer_size=10, seed=0, policy_kwargs=pk)
    keys = list(theirs.policy.state_dict())
    assert list(mine.policy.state_dict()) == keys  # names and order
    assert (f"{name}.features_extractor.cnn.0.weight" in keys) == (policy == "CnnPolicy")
    assert list(mine.get_parameters()["policy"]) == keys
    assert getattr(mine.policy, name) is mine.q_net
    mine.policy.load_state_dict(theirs.policy.state_dict(), strict=True)
    obs = _obs(mine)
    with th.no_grad():
        want = getattr(theirs.policy, name)(theirs.policy.obs_to_tensor(obs)[0]).numpy()
    got = mine.q_values(obs)
    if algo == "QRDQN":  # sb3-contrib's (batch, n_quantiles, n_actions)
        np.testing.assert_allclose(mine.quantiles(obs), want.transpose(0, 2, 1),
                                   rtol=1e-5, atol=1e-6)
        want = want.mean(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mine.predict(obs, deterministic=True)[0],
                                  theirs.predict(obs, deterministic=True)[0])
    # the target network too, and a wrong key is refused in one line
    np.testing.assert_array_equal(mine.q_net_target.state_dict()["1.weight" if policy ==
                                  "CnnPolicy" else "0.weight"],
                                  theirs.policy.state_dict()[
                                      f"{name}_target.{name}.0.weight"].numpy())
    bad = {**theirs.policy.state_dict(), "q_net.extra": th.zeros(1)}
    with pytest.raises(Exception, match="unexpected keys.*q_net.extra"):
        mine.policy.load_state_dict(bad, strict=True)


def _older_policy_keys(view: PolicyView) -> dict[str, np.ndarray]:
    """The policy keys rlgrad wrote before: ``q_net.q_net.<the Sequential's own key>``."""
    mods = view._algo._modules()
    return {f"{prefix}.q_net.{k}": v.numpy().copy() for prefix in ("q_net", "q_net_target")
            for k, v in mods[prefix].state_dict().items()}


@pytest.mark.parametrize("algo,policy", [("DQN", "CnnPolicy"), ("QRDQN", "MlpPolicy"),
                                         ("QRDQN", "CnnPolicy")])
def test_policy_keys_of_the_older_layout_load(tmp_path, monkeypatch, algo, policy):
    make_env = _image_env if policy == "CnnPolicy" else (lambda: "CartPole-v1")
    pk = dict(n_quantiles=5) if algo == "QRDQN" else {}
    model = getattr(rl, algo)(policy, make_env(), buffer_size=10, seed=0,
                              policy_kwargs=dict(net_arch=[8], **pk))
    obs = _obs(model)
    want = model.q_values(obs)
    old = _older_policy_keys(model.policy)
    assert ("q_net.q_net.0.cnn.0.weight" in old) == (policy == "CnnPolicy")
    with monkeypatch.context() as m:  # saved as the older rlgrad did
        m.setattr(PolicyView, "state_dict", lambda self: _older_policy_keys(self))
        model.save(tmp_path / "old")
    fresh = getattr(rl, algo)(policy, make_env(), buffer_size=10, seed=1,
                              policy_kwargs=dict(net_arch=[8], **pk))
    assert not np.array_equal(fresh.q_values(obs), want)
    fresh.set_parameters(str(tmp_path / "old.zip"))
    np.testing.assert_array_equal(fresh.q_values(obs), want)
    other = getattr(rl, algo)(policy, make_env(), buffer_size=10, seed=2,
                              policy_kwargs=dict(net_arch=[8], **pk))
    other.policy.load_state_dict(old, strict=True)
    np.testing.assert_array_equal(other.q_values(obs), want)
    np.testing.assert_array_equal(getattr(rl, algo).load(tmp_path / "old.zip").q_values(obs), want)


@pytest.mark.parametrize("n_critics", [2, 3])
def test_tqc_keys_and_strict_load_are_sb3_contribs(n_critics):
    mine, theirs = _both("TQC", "MlpPolicy", lambda: "Pendulum-v1", contrib, buffer_size=10,
                         seed=0, policy_kwargs=dict(net_arch=[8], n_quantiles=4,
                                                    n_critics=n_critics))
    for name in ("actor", "critic", "critic_target", "policy"):
        assert list(getattr(mine, name).state_dict()) == list(getattr(theirs, name).state_dict())
    assert f"critic.qf{n_critics - 1}.2.bias" in mine.policy.state_dict()
    mine.policy.load_state_dict(theirs.policy.state_dict(), strict=True)
    obs = _obs(mine).astype(np.float32)
    acts = np.random.default_rng(4).uniform(-1, 1, (len(obs), 1)).astype(np.float32)
    with th.no_grad():  # sb3-contrib's (batch, n_critics, n_quantiles)
        want = theirs.critic(th.as_tensor(obs), th.as_tensor(acts)).numpy()
    got = mine.critic(obs, acts).detach().numpy()
    np.testing.assert_allclose(got, want.reshape(len(obs), -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mine.predict(obs, deterministic=True)[0],
                               theirs.predict(obs, deterministic=True)[0], rtol=1e-5, atol=1e-6)


def test_tqc_checkpoints_with_the_older_critic_keys_load():
    m = rl.TQC("MlpPolicy", "Pendulum-v1", buffer_size=10, seed=1,
               policy_kwargs=dict(net_arch=[8], n_quantiles=4, n_critics=3))
    state = m.get_state()
    for name in ("critic", "critic_target"):
        mods = state["modules"][name]
        state["modules"][name] = {k.replace("qf", "q_networks.", 1): v for k, v in mods.items()}
    assert "q_networks.2.0.weight" in state["modules"]["critic"]
    m2 = rl.TQC("MlpPolicy", "Pendulum-v1", buffer_size=10, seed=2,
                policy_kwargs=dict(net_arch=[8], n_quantiles=4, n_critics=3))
    m2.set_state(state)
    for a, b in zip(m.critic.parameters(), m2.critic.parameters(), strict=True):
        np.testing.assert_array_equal(a._value, b._value)
    for a, b in zip(m.critic_target.parameters(), m2.critic_target.parameters(), strict=True):
        np.testing.assert_array_equal(a._value, b._value)
