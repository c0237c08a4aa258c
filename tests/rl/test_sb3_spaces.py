"""Observation and action spaces beyond flat Box / Discrete, against Stable-Baselines3 2.9:
MultiDiscrete, MultiBinary and Dict observations (flattened as SB3's CombinedExtractor joins
vector entries), MultiDiscrete / MultiBinary actions (PPO, A2C), rank-2 and float64 Box actions
in the off-policy algorithms, and SB3's exception types for refused spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl import A2C, DQN, PPO, SAC, TD3, action_dists
from rlgrad.rl.common.envs import IdentityEnvMultiBinary, IdentityEnvMultiDiscrete
from rlgrad.rl.common.evaluation import evaluate_policy
from rlgrad.rl.envs import flat_obs_dim, preprocess_obs

torch = pytest.importorskip("torch")
sb3_pre = pytest.importorskip("stable_baselines3.common.preprocessing")
sb3_dist = pytest.importorskip("stable_baselines3.common.distributions")

BOX = spaces.Box(-1, 1, (2,), np.float32)
BOX64 = spaces.Box(-1, 1, (2,), np.float64)


class DummyEnv(gym.Env):
    """Random observations of ``obs_space``, reward 0, episodes of 50 steps."""

    def __init__(self, obs_space: spaces.Space, act_space: spaces.Space) -> None:
        self.observation_space, self.action_space = obs_space, act_space
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action: np.ndarray) -> tuple:
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype))
        self._t += 1
        return self.observation_space.sample(), 0.0, False, self._t >= 50, {}


OBS_SPACES = [spaces.MultiDiscrete([4, 3]), spaces.MultiBinary(8), spaces.MultiBinary((3, 2)),
              spaces.Discrete(5), spaces.Dict({"b": BOX64, "a": spaces.MultiDiscrete([2, 3])})]


def _sb3_flat(obs: object, space: spaces.Space) -> np.ndarray:
    """SB3's preprocessing of a batch, each entry flattened and joined in the space's key
    order (what its FlattenExtractor / CombinedExtractor feed to the MLP)."""
    def t(x: np.ndarray) -> object:
        return torch.as_tensor(np.asarray(x))
    if isinstance(space, spaces.Dict):
        parts = sb3_pre.preprocess_obs({k: t(v) for k, v in obs.items()}, space)
        return np.concatenate([parts[k].flatten(1).numpy() for k in space.spaces], axis=1)
    return sb3_pre.preprocess_obs(t(obs), space).flatten(1).numpy()


@pytest.mark.parametrize("space", OBS_SPACES, ids=str)
def test_preprocessed_observations_are_sb3s(space: spaces.Space) -> None:
    space.seed(0)
    batch = [space.sample() for _ in range(6)]
    if isinstance(space, spaces.Dict):
        obs = {k: np.stack([b[k] for b in batch]) for k in space.spaces}
    else:
        obs = np.stack(batch)
    got = preprocess_obs(obs, space)
    assert got.dtype == np.float32 and got.shape == (6, flat_obs_dim(space))
    np.testing.assert_array_equal(got, _sb3_flat(obs, space))
    assert flat_obs_dim(space) == sb3_pre.get_flattened_obs_dim(space) or isinstance(
        space, spaces.Dict)


def test_refused_observation_spaces_say_so_in_one_line() -> None:
    img = spaces.Box(0, 255, (1, 16, 16), np.uint8)
    for space, says in [(spaces.Dict({"a": spaces.Dict({"b": BOX})}), "nested observation"),
                        (spaces.Tuple([BOX, BOX]), "Tuple observation spaces")]:
        with pytest.raises(ValueError, match=says) as e:
            flat_obs_dim(space)
        assert "\n" not in str(e.value)
    # an image entry is flattened to its pixels (CombinedExtractor reshapes them for its CNN)
    assert flat_obs_dim(spaces.Dict({"img": img, "v": BOX})) == 16 * 16 + flat_obs_dim(BOX)


# ---- MultiDiscrete / MultiBinary heads: NumPy acting, Tensor loss, SB3's distributions ------
HEADS = [spaces.MultiDiscrete([3, 2, 4]), spaces.MultiBinary(5)]


def _sb3_head(space: spaces.Space, logits: np.ndarray) -> object:
    if isinstance(space, spaces.MultiDiscrete):
        d = sb3_dist.MultiCategoricalDistribution(list(space.nvec))
    else:
        d = sb3_dist.BernoulliDistribution(space.n)
    return d.proba_distribution(torch.as_tensor(logits))


@pytest.mark.parametrize("space", HEADS, ids=str)
def test_multi_heads_match_sb3_log_prob_entropy_and_gradients(space: spaces.Space) -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((7, action_dists.action_net_dim(space)))
    actions, lp_np = action_dists.sample_numpy(space, logits, rng)
    ref = _sb3_head(space, logits)
    # (float64 bits for torch: its Bernoulli computes in the actions' dtype)
    t_actions = torch.as_tensor(actions if actions.dtype == np.int64 else actions.astype(float))
    np.testing.assert_allclose(lp_np, ref.log_prob(t_actions).numpy(), rtol=1e-12)
    np.testing.assert_array_equal(action_dists.mode_numpy(space, logits),
                                  ref.mode().numpy())
    # the Tensor form: values and gradients of sum(log_prob + entropy), float64, vs torch
    x = rlgrad.tensor(logits, requires_grad=True)
    d = action_dists.distribution(space, x)
    obj = (d.log_prob(rlgrad.tensor(actions)) + d.entropy()).sum()
    obj.backward()
    tx = torch.tensor(logits, requires_grad=True)
    td = _sb3_head(space, tx)
    tobj = (td.log_prob(t_actions) + td.entropy()).sum()
    tobj.backward()
    np.testing.assert_allclose(float(obj.item()), float(tobj.item()), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("space", HEADS, ids=str)
def test_multi_head_samples_follow_the_probabilities(space: spaces.Space) -> None:
    rng = np.random.default_rng(1)
    logits = np.tile(rng.standard_normal((1, action_dists.action_net_dim(space))), (40000, 1))
    actions, _ = action_dists.sample_numpy(space, logits, rng)
    if isinstance(space, spaces.MultiBinary):
        p = 1 / (1 + np.exp(-logits[0]))
        np.testing.assert_allclose(actions.mean(0), p, atol=0.01)
        return
    bounds = np.concatenate([[0], np.cumsum(space.nvec)])
    for i, n in enumerate(space.nvec):
        z = logits[0, bounds[i]:bounds[i + 1]]
        p = np.exp(z) / np.exp(z).sum()
        np.testing.assert_allclose(np.bincount(actions[:, i], minlength=n) / len(actions), p,
                                   atol=0.01)


def test_multidimensional_multibinary_actions_are_refused_as_sb3_does() -> None:
    env = DummyEnv(BOX, spaces.MultiBinary([2, 3]))
    with pytest.raises(AssertionError, match=r"Multi-dimensional MultiBinary\(.*\) action space "
                                             r"is not supported"):
        A2C("MlpPolicy", env)


@pytest.mark.parametrize("cls,env_cls", [(A2C, IdentityEnvMultiDiscrete),
                                         (PPO, IdentityEnvMultiBinary)])
def test_on_policy_learns_multi_action_identity(cls: type, env_cls: type) -> None:
    env = env_cls(dim=4, ep_length=10) if env_cls is IdentityEnvMultiBinary else env_cls(
        dim=2, ep_length=10)
    kw = {"n_steps": 64} if cls is PPO else {}
    model = cls("MlpPolicy", env, seed=0, **kw)
    before = evaluate_policy(model, env, n_eval_episodes=10, warn=False)[0]
    # PPO on MultiBinary: 8000 steps reach 7.2, 9.1, 8.1 on seeds 0-2 (the env stepped
    # SAME_STEP, as SB3's DummyVecEnv), 16000 reach 9.1, 9.6, 10.0
    model.learn(16000 if cls is PPO else 8000)
    after = evaluate_policy(model, env, n_eval_episodes=10, warn=False)[0]
    assert before < 5 and after >= 8  # 10 = every step right; random: ~2 (MD) or ~0.6 (MB)
    act = model.predict(env.reset(seed=0)[0], deterministic=True)[0]
    assert act.dtype == env.action_space.dtype and env.action_space.contains(act)


# ---- observations of every kind, through every algorithm -----------------------------------
@pytest.mark.parametrize("space", OBS_SPACES, ids=str)
@pytest.mark.parametrize("cls", [SAC, DQN, PPO])
def test_algorithms_take_the_observation_spaces(cls: type, space: spaces.Space) -> None:
    act = spaces.Discrete(3) if cls is DQN else BOX
    env = DummyEnv(space, act)
    policy = "MultiInputPolicy" if isinstance(space, spaces.Dict) else "MlpPolicy"
    kw = ({"n_steps": 32, "batch_size": 32} if cls is PPO
          else {"learning_starts": 20, "buffer_size": 500})
    model = cls(policy, env, seed=1, policy_kwargs={"net_arch": [16]}, **kw)
    model.learn(64)
    obs = env.reset(seed=2)[0]
    single = model.predict(obs, deterministic=True)[0]
    assert single.shape == act.shape
    if isinstance(space, spaces.Dict):
        batch = {k: np.stack([v, v]) for k, v in obs.items()}
    else:
        batch = np.stack([obs, obs])
    # (a batch of 2 rows and 1 row: float32 matmuls that may round differently)
    np.testing.assert_allclose(model.predict(batch, deterministic=True)[0], [single, single],
                               rtol=1e-5, atol=1e-6)


def test_dict_observations_need_multi_input_policy_as_in_sb3() -> None:
    env = DummyEnv(spaces.Dict({"a": BOX}), BOX)
    with pytest.raises(ValueError, match="You must use `MultiInputPolicy`"):
        PPO("MlpPolicy", env)
    with pytest.raises(ValueError, match="MultiInputPolicy is for Dict observation spaces"):
        PPO("MultiInputPolicy", DummyEnv(BOX, BOX))


class DictTarget(gym.Env):
    """Reward 1 for the action that matches the one-hot ``"target"`` entry; a noise entry."""

    observation_space = spaces.Dict({"noise": spaces.Box(-1, 1, (3,), np.float32),
                                     "target": spaces.MultiBinary(3)})
    action_space = spaces.Discrete(3)

    def _obs(self) -> dict:
        self._k = int(self.np_random.integers(3))
        return {"noise": self.np_random.uniform(-1, 1, 3).astype(np.float32),
                "target": np.eye(3, dtype=np.int8)[self._k]}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple:
        r = float(int(action) == self._k)
        self._t += 1
        return self._obs(), r, False, self._t >= 20, {}


def test_ppo_learns_from_dict_observations() -> None:
    env = DictTarget()
    model = PPO("MultiInputPolicy", env, seed=0, n_steps=128)
    before = evaluate_policy(model, env, n_eval_episodes=10, warn=False)[0]
    model.learn(5000)
    after = evaluate_policy(model, env, n_eval_episodes=10, warn=False)[0]
    assert after >= 19 > before  # 20 steps a episode


# ---- Box actions of rank 2 and float64 in the off-policy algorithms -------------------------
@pytest.mark.parametrize("cls", [SAC, TD3])
def test_rank2_box_actions_in_off_policy_updates(cls: type) -> None:
    space = spaces.Box(np.array([[-1, 0], [2, -3]], np.float32),
                       np.array([[1, 4], [3, 0]], np.float32))
    env = DummyEnv(BOX, space)
    model = cls("MlpPolicy", env, seed=0, learning_starts=8, train_freq=8, buffer_size=100,
                policy_kwargs={"net_arch": [8]})
    model.learn(32)
    acts = model.predict(np.zeros((5, 2), np.float32))[0]
    assert acts.shape == (5, 2, 2)
    assert all(space.contains(a) for a in acts)
    assert model.replay_buffer.actions.shape[1:] == (4,)


@pytest.mark.parametrize("cls", [SAC, TD3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_off_policy_actions_have_the_space_dtype(cls: type, dtype: type) -> None:
    env = DummyEnv(BOX, spaces.Box(-2, 2, (2,), dtype))
    model = cls("MlpPolicy", env, seed=0, learning_starts=8, buffer_size=100,
                policy_kwargs={"net_arch": [8]})
    model.learn(16)
    assert model.predict(env.reset(seed=0)[0])[0].dtype == dtype


@pytest.mark.parametrize("cls", [SAC, DQN])
def test_buffer_smaller_than_batch_is_sampled_with_replacement(cls: type) -> None:
    env = "Pendulum-v1" if cls is SAC else "CartPole-v1"
    model = cls("MlpPolicy", env, seed=0, buffer_size=10, batch_size=64, learning_starts=12,
                policy_kwargs={"net_arch": [8]})
    model.learn(20)  # SB3 accepts it: a minibatch repeats the rows of the ring
    assert model.replay_buffer.size() == 10
    batch = model.replay_buffer.sample(64, model.rng)
    assert len(batch.rewards) == 64 and len(np.unique(batch.rewards)) <= 10


def test_unsupported_action_space_is_catchable_as_sb3s_assertion() -> None:
    for catch in (AssertionError, ValueError):
        with pytest.raises(catch, match="DQN needs a discrete"):
            DQN("MlpPolicy", "Pendulum-v1")


def test_dqn_warns_as_sb3_when_envs_outnumber_the_target_interval() -> None:
    with pytest.warns(UserWarning, match=r"greater than the target network update interval "
                                         r"\(4 > 2\)"):
        DQN("MlpPolicy", "CartPole-v1", n_envs=4, target_update_interval=2, buffer_size=100)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DQN("MlpPolicy", "CartPole-v1", n_envs=4, target_update_interval=4, buffer_size=100)
