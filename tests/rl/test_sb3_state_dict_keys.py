"""The policies' state dicts are SB3's, key for key and in order (PyTorch's ``state_dict``
lists a shared features extractor under each of its names; SB3's NatureCNN has ``cnn`` and
``linear``): SB3's state dict loads into rlgrad's policy strictly and gives SB3's outputs, SB3's
documented filter ``"policy" in k`` selects what it selects in SB3, and checkpoints written in
the older layout (a shared child once, the CNN as one Sequential) still load."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad.rl as rl
from rlgrad import nn
from rlgrad.rl.common.envs import FakeImageEnv, SimpleMultiObsEnv

sb3 = pytest.importorskip("stable_baselines3")
th = pytest.importorskip("torch")


def _image_env(discrete: bool = True) -> FakeImageEnv:
    return FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                        discrete=discrete)


def _both(algo: str, policy: str, make_env, **kw):
    """rlgrad's and SB3's model of the same configuration."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (getattr(rl, algo)(policy, make_env(), **kw),
                getattr(sb3, algo)(policy, make_env(), **kw))


ON_POLICY = {
    "mlp-shared": ("MlpPolicy", lambda: "CartPole-v1", True),
    "mlp-separate": ("MlpPolicy", lambda: "Pendulum-v1", False),
    "cnn-shared": ("CnnPolicy", _image_env, True),
    "cnn-separate": ("CnnPolicy", _image_env, False),
    "multi-input": ("MultiInputPolicy", SimpleMultiObsEnv, True),
}


def _torch_obs(obs):
    if isinstance(obs, dict):
        return {k: th.as_tensor(v) for k, v in obs.items()}
    return th.as_tensor(obs)


def _obs(model, n: int = 4):
    space = model.observation_space
    space.seed(3)
    samples = [space.sample() for _ in range(n)]
    if isinstance(samples[0], dict):
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}
    return np.stack(samples)


@pytest.mark.parametrize("case", sorted(ON_POLICY))
def test_actor_critic_policy_keys_and_strict_load_are_sb3s(case):
    policy, make_env, share = ON_POLICY[case]
    mine, theirs = _both("PPO", policy, make_env, n_steps=16, batch_size=16, seed=0,
                         policy_kwargs=dict(share_features_extractor=share))
    keys = list(theirs.policy.state_dict())
    assert list(mine.policy.state_dict()) == keys  # names and order
    assert ("pi_features_extractor.cnn.0.weight" in keys) == (policy == "CnnPolicy")
    assert len(list(mine.policy.parameters())) == len(list(theirs.policy.parameters()))
    # SB3's documented filter selects the same tensors
    sel = [k for k in mine.get_parameters()["policy"] if "policy" in k]
    assert sel == [k for k in theirs.get_parameters()["policy"] if "policy" in k]
    assert all(k.startswith("mlp_extractor.policy_net.") for k in sel)
    assert bool(sel) == (policy != "CnnPolicy")  # (SB3's CnnPolicy: heads on the CNN)
    # SB3's state dict, strictly: SB3's actions, values and log-probabilities
    assert mine.policy.load_state_dict(theirs.policy.state_dict(), strict=True) == ([], [])
    obs = _obs(mine)
    a_mine, _ = mine.predict(obs, deterministic=True)
    a_theirs, _ = theirs.predict(obs, deterministic=True)
    np.testing.assert_allclose(a_mine, a_theirs, rtol=1e-5, atol=1e-5)
    x_mine, _ = mine.policy.obs_to_tensor(obs)
    x_theirs, _ = theirs.policy.obs_to_tensor(obs)
    with th.no_grad():
        v_theirs = theirs.policy.predict_values(x_theirs).detach().numpy()
        acts = th.as_tensor(a_theirs)
        _, lp_theirs, _ = theirs.policy.evaluate_actions(x_theirs, acts)
    np.testing.assert_allclose(mine.policy.predict_values(x_mine).detach().numpy(), v_theirs,
                               rtol=1e-5, atol=1e-5)
    _, lp_mine, _ = mine.policy.evaluate_actions(x_mine, a_mine)
    np.testing.assert_allclose(lp_mine.detach().numpy(), lp_theirs.detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("algo", ["SAC", "TD3"])
@pytest.mark.parametrize("policy", ["MlpPolicy", "CnnPolicy"])
@pytest.mark.parametrize("share", [False, True])
def test_off_policy_actor_and_critic_keys_and_strict_load_are_sb3s(algo, policy, share):
    make_env = (lambda: _image_env(False)) if policy == "CnnPolicy" else (lambda: "Pendulum-v1")
    mine, theirs = _both(algo, policy, make_env, buffer_size=10, seed=0,
                         policy_kwargs=dict(share_features_extractor=share, net_arch=[8]))
    for name in ("actor", "critic", "critic_target", "policy"):
        assert list(getattr(mine, name).state_dict()) == list(getattr(theirs, name).state_dict())
    mine.policy.load_state_dict(theirs.policy.state_dict(), strict=True)
    obs = _obs(mine)
    a_mine, _ = mine.predict(obs, deterministic=True)
    a_theirs, _ = theirs.predict(obs, deterministic=True)
    np.testing.assert_allclose(a_mine, a_theirs, rtol=1e-5, atol=1e-5)
    acts = np.random.default_rng(4).uniform(-1, 1, (len(a_mine), 1 if policy == "MlpPolicy" else 5))
    acts = acts.astype(np.float32)
    with th.no_grad():
        q_theirs = theirs.critic(theirs.policy.obs_to_tensor(obs)[0], th.as_tensor(acts))
    for q, want in zip(mine.critic(obs, acts), q_theirs, strict=True):
        np.testing.assert_allclose(q.detach().numpy().reshape(-1), want.detach().numpy().reshape(-1),
                                   rtol=1e-5, atol=1e-5)


def _older_layout(module):
    """The state dict rlgrad wrote before: each shared child once (under its first name),
    the Nature CNN as one Sequential (0, 2, 4, 7)."""
    once = {n for n, _ in module.named_parameters()}
    return {k.replace(".cnn.", ".").replace(".linear.0.", ".7."): v.numpy().copy()
            for k, v in nn.Module.state_dict(module).items() if k in once}


def test_checkpoints_of_the_older_layout_load(tmp_path, monkeypatch):
    """A PPO CnnPolicy with separate extractors saved in the older layout: ``load`` (SB3's
    warning for a policy without pi_features_extractor entries), ``set_parameters`` from the
    file and the policy's own ``save``/``load`` give the saved model's outputs."""
    model = rl.PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=0,
                   policy_kwargs=dict(share_features_extractor=False,
                                      features_extractor_kwargs=dict(features_dim=8)))
    old = _older_layout(model.policy)
    assert "features_extractor.7.weight" in old and "vf_features_extractor.0.bias" in old
    assert not any(k.startswith("pi_features_extractor.") for k in old)
    obs = _obs(model)
    want = model.predict(obs, deterministic=True)[0]
    want_v = model.policy.predict_values(model.policy.obs_to_tensor(obs)[0]).detach().numpy()
    cls = type(model.policy)
    with monkeypatch.context() as m:  # save as the older rlgrad did
        m.setattr(cls, "state_dict", lambda self, *a, **k: dict(_older_layout(self)))
        model.save(tmp_path / "old")
        model.policy.save(tmp_path / "old_policy.pkl")
    with pytest.warns(UserWarning, match="pi_features_extractor"):
        loaded = rl.PPO.load(tmp_path / "old.zip")
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], want)
    np.testing.assert_array_equal(
        loaded.policy.predict_values(loaded.policy.obs_to_tensor(obs)[0]).detach().numpy(), want_v)
    fresh = rl.PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=1,
                   policy_kwargs=dict(share_features_extractor=False,
                                      features_extractor_kwargs=dict(features_dim=8)))
    fresh.set_parameters(str(tmp_path / "old.zip"))
    np.testing.assert_array_equal(fresh.predict(obs, deterministic=True)[0], want)
    pol = cls.load(tmp_path / "old_policy.pkl")
    np.testing.assert_array_equal(
        pol.predict_values(pol.obs_to_tensor(obs)[0]).detach().numpy(), want_v)
    # what it writes now is SB3's layout, which loads without a warning
    loaded.save(tmp_path / "new")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = rl.PPO.load(tmp_path / "new.zip")
    assert list(again.policy.state_dict()) == list(model.policy.state_dict())


def test_a_missing_key_that_is_no_alias_is_still_refused(tmp_path, monkeypatch):
    model = rl.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0)
    cls = type(model.policy)
    with monkeypatch.context() as m:
        m.setattr(cls, "state_dict", lambda self, *a, **k: {
            n: v.detach().numpy() for n, v in self.named_parameters() if n != "value_net.bias"})
        model.save(tmp_path / "broken")
    with pytest.raises(Exception, match='Missing key.*"value_net.bias"'):
        rl.PPO.load(tmp_path / "broken.zip")
