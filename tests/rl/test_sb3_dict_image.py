"""Dict and image observations as SB3 handles them: ``preprocess_obs`` (torch in, torch out, and
rlgrad Tensors for arrays) against SB3's own on every space."""

import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl.common.preprocessing import preprocess_obs

th = pytest.importorskip("torch")
sb3_pre = pytest.importorskip("stable_baselines3.common.preprocessing")

IMAGE = spaces.Box(0, 255, (3, 8, 8), np.uint8)
SPACES = [spaces.Discrete(3), spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3),
          spaces.MultiBinary([3, 2]), spaces.Box(-2, 2, (3, 2)), IMAGE,
          spaces.Dict({"img": IMAGE, "vec": spaces.Box(-1, 1, (2,)), "d": spaces.Discrete(4)})]


def _batch(space, n=4):
    space.seed(0)
    if isinstance(space, spaces.Dict):
        return {k: _batch(s, n) for k, s in space.spaces.items()}
    return np.stack([np.asarray(space.sample()) for _ in range(n)])


def _torch(x):
    return {k: _torch(v) for k, v in x.items()} if isinstance(x, dict) else th.as_tensor(x)


def _check(mine, ref):
    if isinstance(ref, dict):
        assert set(mine) == set(ref)
        for k in ref:
            _check(mine[k], ref[k])
        return
    assert mine.dtype == th.float32 if isinstance(mine, th.Tensor) else mine.dtype == np.float32
    np.testing.assert_allclose(np.asarray(mine), ref.numpy(), rtol=1e-7)


@pytest.mark.parametrize("space", SPACES, ids=str)
@pytest.mark.parametrize("normalize_images", [True, False])
def test_preprocess_obs_matches_sb3(space, normalize_images):
    obs = _batch(space)
    ref = sb3_pre.preprocess_obs(_torch(obs), space, normalize_images)
    out = preprocess_obs(_torch(obs), space, normalize_images)
    if not isinstance(space, spaces.Dict):  # torch in, torch out
        assert isinstance(out, th.Tensor)
    _check(out, ref)
    arrays = preprocess_obs(obs, space, normalize_images)  # arrays in: rlgrad Tensors
    leaves = arrays.values() if isinstance(arrays, dict) else [arrays]
    assert all(isinstance(t, rlgrad.Tensor) for t in leaves)
    _check({k: v._value for k, v in arrays.items()} if isinstance(arrays, dict)
           else arrays._value, ref)


# ---- Dict observations with image entries in A2C / PPO (CombinedExtractor) ------------------
MULTI = spaces.Dict({"img": spaces.Box(0, 255, (1, 36, 36), np.uint8),
                     "vec": spaces.Box(0, 1, (5,), np.float64), "d": spaces.Discrete(3)})


def test_combined_extractor_flat_rows_match_dicts_and_sb3():
    from rlgrad.rl.envs import preprocess_obs as flat_rows
    from rlgrad.rl.layers import CombinedExtractor

    sb3_layers = pytest.importorskip("stable_baselines3.common.torch_layers")
    ext = CombinedExtractor(MULTI, cnn_output_dim=16)
    ref = sb3_layers.CombinedExtractor(MULTI, cnn_output_dim=16)
    ref.load_state_dict({f"extractors.{k}": th.tensor(np.asarray(v))  # SB3's keys, as they are
                         for k, v in ext.extractors.state_dict().items()}, strict=True)
    obs = _batch(MULTI, n=5)
    from_dict = ext(obs)._value
    from_rows = ext(flat_rows(obs, MULTI))._value  # the loops' flat rows
    np.testing.assert_allclose(from_rows, from_dict, rtol=1e-6)
    with th.no_grad():
        expected = ref(sb3_pre.preprocess_obs(_torch(obs), MULTI)).numpy()
    np.testing.assert_allclose(from_dict, expected, rtol=1e-4, atol=1e-5)
    assert ext.features_dim == ref.features_dim == 16 + 5 + 3


def test_ppo_multi_input_policy_learns_simple_multi_obs_env():
    """Images (channels last: transposed as SB3's VecTransposeImage does) and vectors through
    CombinedExtractor in PPO's loop: the return is well above the untrained policy's."""
    from rlgrad.rl import PPO, evaluate_policy
    from rlgrad.rl.common.envs import SimpleMultiObsEnv
    from rlgrad.rl.common.vec_env import VecTransposeImage, is_vecenv_wrapped

    np.random.seed(0)  # the env's observations are drawn from NumPy's global generator
    env = SimpleMultiObsEnv(random_start=True)
    model = PPO("MultiInputPolicy", env, n_steps=512, batch_size=128, n_epochs=4, seed=0,
                gamma=0.95, learning_rate=1e-3, ent_coef=0.01,
                policy_kwargs=dict(net_arch=[32], features_extractor_kwargs=dict(cnn_output_dim=16)))
    assert is_vecenv_wrapped(model.get_env(), VecTransposeImage)
    assert model.observation_space["img"].shape == (1, 64, 64)
    assert type(model.policy.features_extractor).__name__ == "CombinedExtractor"
    np.random.seed(1)
    before, _ = evaluate_policy(model, env, n_eval_episodes=30, deterministic=False)
    model.learn(2048)
    np.random.seed(1)
    after, _ = evaluate_policy(model, env, n_eval_episodes=30, deterministic=False)
    assert after > before + 2.5, (before, after)
    obs, _ = env.reset()
    action, _ = model.predict(obs, deterministic=True)  # channels last, as the env gives it
    assert action.shape == ()


@pytest.mark.parametrize("algo", ["CrossQ"])
def test_off_policy_dict_images_refused_in_one_line(algo):
    import rlgrad.rl as rl
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    env = SimpleMultiObsEnv(discrete_actions=False)
    with pytest.raises(ValueError, match="image entries need a CNN extractor") as e:
        getattr(rl, algo)("MultiInputPolicy", env)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("algo", ["DQN", "QRDQN", "C51"])
def test_dqn_family_dict_images_through_combined_extractor(algo):
    """The Q head on CombinedExtractor's features: the NumPy Q-values (acting) are the
    network's own on the loop's flat rows, which are its features of the dicts."""
    import rlgrad
    import rlgrad.rl as rl
    from rlgrad.rl.common.envs import SimpleMultiObsEnv
    from rlgrad.rl.envs import preprocess_obs as flat_rows

    env = SimpleMultiObsEnv(channel_last=False)
    model = getattr(rl, algo)("MultiInputPolicy", env, buffer_size=200, learning_starts=0,
                              train_freq=8, seed=0, policy_kwargs=dict(
                                  net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=8)))
    ext = model.q_net[0]
    assert type(ext).__name__ == "CombinedExtractor" and ext.features_dim == 8 + 5
    model.learn(64)
    obs = _batch(model.observation_space, n=3)
    rows = flat_rows(obs, model.observation_space)
    with rlgrad.no_grad():
        graph = model.q_net(rlgrad.as_tensor(rows))._value
    if algo == "DQN":  # (QRDQN's and C51's heads give quantiles / atoms per action)
        np.testing.assert_allclose(model.q_values(rows), graph, rtol=1e-5, atol=1e-6)
    assert model.q_values(rows).shape == (3, 4)
    np.testing.assert_allclose(ext(rows)._value, ext(obs)._value, rtol=1e-6)
    action, _ = model.predict({k: v[0] for k, v in obs.items()}, deterministic=True)
    assert action.shape == ()


def test_nested_dict_raises_not_implemented_as_sb3():
    from rlgrad.rl import PPO
    from rlgrad.rl.envs import NestedSpaceError

    space = spaces.Dict({"a": spaces.Dict({"b": spaces.Box(0, 1, (2,))})})
    import gymnasium as gym

    class Nested(gym.Env):
        observation_space, action_space = space, spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return space.sample(), {}

        def step(self, action):
            return space.sample(), 0.0, False, False, {}

    with pytest.raises(NotImplementedError, match="nested observation spaces"):
        PPO("MultiInputPolicy", Nested())
    assert issubclass(NestedSpaceError, ValueError)


# ---- image observations (test_cnn's checks) --------------------------------------------------
def test_channels_last_images_wrapped_and_predicted_as_sb3():
    from rlgrad.rl import A2C
    from rlgrad.rl.common.envs import FakeImageEnv
    from rlgrad.rl.common.vec_env import VecTransposeImage, is_vecenv_wrapped

    env = FakeImageEnv(screen_height=40, screen_width=40, n_channels=1, discrete=True)
    model = A2C("CnnPolicy", env, n_steps=8, seed=0,
                policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=16)))
    assert is_vecenv_wrapped(model.get_env(), VecTransposeImage)
    assert model.observation_space.shape == (1, 40, 40)
    model.learn(16)
    obs, _ = env.reset()  # (40, 40, 1): transposed for the policy, as SB3's predict does
    a_last = model.predict(obs, deterministic=True)[0]
    a_first = model.predict(np.transpose(obs, (2, 0, 1)), deterministic=True)[0]
    assert a_last == a_first
    first = FakeImageEnv(screen_height=40, screen_width=40, n_channels=1, channel_first=True)
    model = A2C("CnnPolicy", first, n_steps=8, seed=0)
    assert not is_vecenv_wrapped(model.get_env(), VecTransposeImage)


def test_dqn_cnn_takes_sb3_features_extractor_kwargs_and_train_default():
    from rlgrad.rl import DQN
    from rlgrad.rl.common.envs import FakeImageEnv

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True)
    model = DQN("CnnPolicy", env, buffer_size=100, learning_starts=20, seed=0, batch_size=8,
                policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=8)))
    assert model.q_net[0].features_dim == 8
    model.learn(30)
    before = [np.array(p._value) for p in model.q_net.parameters()]
    model.train(gradient_steps=1)  # SB3's default batch_size (100)
    assert any(not np.array_equal(b, p._value) for b, p in zip(before, model.q_net.parameters()))
