"""Image observations beyond the plain CnnPolicy: VecNormalize over images (SB3's image-like
input: normalised floats, ``normalize_images=False``) and the off-policy CNN policies."""

import numpy as np
import pytest

from rlgrad.rl import PPO
from rlgrad.rl.common.envs import FakeImageEnv
from rlgrad.rl.common.vec_env import DummyVecEnv, VecNormalize
from rlgrad.rl.normalize import Normalizer


def _image_env(discrete: bool = True) -> VecNormalize:
    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                       discrete=discrete)
    return VecNormalize(DummyVecEnv([lambda: env]))


def test_normalizer_takes_image_batches_as_flat_rows():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 2, 3, 4)).astype(np.uint8)
    n = Normalizer(2 * 3 * 4, 5)
    n.update_obs(imgs)
    rows = imgs.reshape(5, -1).astype(np.float64)
    np.testing.assert_allclose(n.obs_rms.mean, rows.mean(0), rtol=1e-3)  # epsilon's prior
    out = n.normalize_obs(imgs)
    assert out.shape == imgs.shape and out.dtype == np.float32
    expect = np.clip((rows - n.obs_rms.mean) / np.sqrt(n.obs_rms.var + 1e-8), -10, 10)
    np.testing.assert_allclose(out.reshape(5, -1), expect, rtol=1e-5)


def test_vecnormalize_images_train_a_cnn_on_normalised_floats():
    venv = _image_env()
    model = PPO("CnnPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0,
                policy_kwargs=dict(normalize_images=False,
                                   features_extractor_kwargs=dict(features_dim=8)))
    model.learn(16)
    rms = venv.obs_rms
    assert rms.mean.size == 36 * 36
    assert rms.count == pytest.approx(17 + 1e-4)  # the reset and 16 steps, each seen once
    raw = model._last_obs  # the env's last raw image, (1, 1, 36, 36) uint8
    got = venv.normalize_obs(raw)
    expect = np.clip((raw.reshape(1, -1) - rms.mean) / np.sqrt(rms.var + 1e-8), -10, 10)
    np.testing.assert_allclose(got.reshape(1, -1), expect, rtol=1e-5)
    # the policy reads those floats as they are (no second division by 255)
    x = got.astype(np.float32)
    a, _ = model.predict(x, deterministic=True)
    logits = model.policy.action_net(model.policy.extract_features(x)).detach().numpy()
    assert int(a[0]) == int(np.argmax(logits[0]))


def test_vecnormalize_images_with_image_scaling_refused_as_sb3():
    with pytest.raises(AssertionError, match="normalize_images=False"):
        PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=0)
    with pytest.raises(ValueError, match="normalize_images=False"):
        PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=0,
            policy_kwargs=dict(normalize_images=True))


# ---- off-policy CNN and Dict-image policies (SAC, TD3, DDPG, TQC) ------------------------------
sb3 = pytest.importorskip("stable_baselines3")
th = pytest.importorskip("torch")


def _copy_into_sb3(mine, theirs) -> None:
    theirs.load_state_dict({k: th.tensor(np.asarray(v))  # SB3's keys (NatureCNN's cnn, linear)
                            for k, v in mine.state_dict().items()}, strict=True)


@pytest.mark.parametrize("algo", ["SAC", "TD3", "DDPG"])
@pytest.mark.parametrize("share", [False, True])
def test_offpolicy_cnn_policy_acts_and_values_as_sb3(algo, share):
    import rlgrad.rl as rl

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                       discrete=False)
    kw = dict(buffer_size=10, seed=0, policy_kwargs=dict(
        share_features_extractor=share, features_extractor_kwargs=dict(features_dim=16),
        net_arch=[8]))
    mine = getattr(rl, algo)("CnnPolicy", env, **kw)
    theirs = getattr(sb3, algo)("CnnPolicy", env, **kw)
    assert (mine.actor.features_extractor is mine.critic.features_extractor) == share
    assert (mine.critic_target.features_extractor is not mine.critic.features_extractor)
    _copy_into_sb3(mine.actor, theirs.actor)
    _copy_into_sb3(mine.critic, theirs.critic)
    obs = np.random.default_rng(1).integers(0, 256, (5, 1, 36, 36)).astype(np.uint8)
    a_mine, _ = mine.predict(obs, deterministic=True)
    a_theirs, _ = theirs.predict(obs, deterministic=True)
    np.testing.assert_allclose(a_mine, a_theirs, rtol=1e-4, atol=1e-5)
    acts = np.random.default_rng(2).uniform(-1, 1, (5, 5)).astype(np.float32)
    q_mine = [q._value for q in mine.critic(obs, acts)]
    with th.no_grad():
        x = th.as_tensor(obs)
        q_theirs = [q.numpy()[:, 0] for q in theirs.critic(x, th.as_tensor(acts))]
    np.testing.assert_allclose(np.stack(q_mine), np.stack(q_theirs), rtol=1e-4, atol=1e-5)
    # the critic's optimizer trains its own extractor, not the actor's shared one (SB3's)
    n_fx = len(list(mine.actor.features_extractor.parameters()))
    n_critic = len(list(mine.critic.parameters()))
    n_opt = sum(len(g["params"]) for g in mine.critic_optimizer.param_groups)
    assert n_opt == (n_critic - n_fx if share else n_critic)


def test_shared_extractor_gets_no_critic_gradient_but_the_actor_moves_it():
    from rlgrad.rl import TD3

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                       discrete=False)
    m = TD3("CnnPolicy", env, buffer_size=64, learning_starts=0, batch_size=8, seed=0,
            policy_delay=2, policy_kwargs=dict(share_features_extractor=True,
                                               features_extractor_kwargs=dict(features_dim=8)))
    assert m.actor_target.features_extractor is m.critic_target.features_extractor
    m.learn(16)
    fx = [p._value.copy() for p in m.actor.features_extractor.parameters()]
    head = [p._value.copy() for p in m.critic.qf0.parameters()]
    m.tau = 0.0
    m._n_updates = 0
    m.train(gradient_steps=1, batch_size=8)  # update 1: the critics only (policy_delay=2)
    assert all(np.array_equal(a, p._value) for a, p in
               zip(fx, m.actor.features_extractor.parameters(), strict=True))
    assert not all(np.array_equal(a, p._value) for a, p in
                   zip(head, m.critic.qf0.parameters(), strict=True))
    m.train(gradient_steps=1, batch_size=8)  # update 2: the actor too, through the extractor
    assert not all(np.array_equal(a, p._value) for a, p in
                   zip(fx, m.actor.features_extractor.parameters(), strict=True))


@pytest.mark.parametrize("algo", ["SAC", "TQC"])
def test_offpolicy_dict_images_through_combined_extractor(algo):
    import rlgrad.rl as rl
    from rlgrad.rl.common.envs import SimpleMultiObsEnv
    from rlgrad.rl.envs import preprocess_obs
    from rlgrad.rl.layers import CombinedExtractor

    m = getattr(rl, algo)("MultiInputPolicy", SimpleMultiObsEnv(discrete_actions=False),
                          buffer_size=100, learning_starts=10, batch_size=8, seed=0,
                          policy_kwargs=dict(net_arch=[16]))
    assert isinstance(m.actor.features_extractor, CombinedExtractor)
    assert m.critic.features_extractor is not m.actor.features_extractor
    m.learn(20)
    obs = {k: np.stack([v] * 3) for k, v in m.observation_space.sample().items()}
    a, _ = m.predict(obs, deterministic=True)
    rows = preprocess_obs(obs, m.observation_space)
    mean = m.actor.distribution(rows).mode._value  # the graph path, from the same rows
    np.testing.assert_allclose(a, m.unscale_action(mean), rtol=1e-5, atol=1e-6)


def test_qrdqn_networks_under_sb3_contrib_names():
    from rlgrad.rl import QRDQN

    m = QRDQN("MlpPolicy", "CartPole-v1", buffer_size=100, seed=0,
              policy_kwargs=dict(n_quantiles=5))
    assert m.quantile_net is m.q_net and m.quantile_net_target is m.q_net_target
    obs = np.zeros((2, 4), np.float32)
    np.testing.assert_allclose(m.quantile_net(obs)._value, m.quantiles(obs).reshape(2, -1),
                               rtol=1e-6)


def test_policy_parameters_count_a_shared_extractor_once():
    from rlgrad.rl import SAC

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                       discrete=False)
    kw = dict(buffer_size=10, seed=0, policy_kwargs=dict(features_extractor_kwargs=dict(
        features_dim=8), net_arch=[8]))
    shared = SAC("CnnPolicy", env, **{**kw, "policy_kwargs": {**kw["policy_kwargs"],
                                                             "share_features_extractor": True}})
    separate = SAC("CnnPolicy", env, **kw)
    n_fx = sum(p.numel() for p in shared.actor.features_extractor.parameters())
    count = [sum(p.numel() for p in m.policy.parameters()) for m in (shared, separate)]
    assert count[1] - count[0] == n_fx  # the critic's own extractor (the targets' copies alike)
