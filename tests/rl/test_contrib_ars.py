"""ARS (rlgrad.rl.ars): the policies against sb3-contrib's (same weights, same actions), the
update against sb3-contrib's ``_do_one_update`` and its closed form, the options (n_top,
alive_bonus_offset, zero_policy), save/load, errors, learning CartPole and the CLI name."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl import ALGORITHMS, PPO, evaluate_policy
from rlgrad.rl.ars import ARSPolicy
from rlgrad.rl.common.env_util import make_vec_env
from rlgrad.rl.contrib import ARS
from rlgrad.rl.contrib.ars import LinearPolicy, MlpPolicy
from rlgrad.rl.envs import preprocess_obs

BOX_OBS = spaces.Box(-5.0, 5.0, (3,), np.float32)
CASES = [
    ("MlpPolicy", spaces.Box(-2.0, 2.0, (2,), np.float32)),
    ("LinearPolicy", spaces.Box(-2.0, 2.0, (2,), np.float32)),
    ("MlpPolicy", spaces.Discrete(4)),
    ("LinearPolicy", spaces.Discrete(4)),
]


def _ours(name: str, action_space: spaces.Space) -> ARSPolicy:
    cls = MlpPolicy if name == "MlpPolicy" else LinearPolicy
    kw = {"net_arch": [8, 8]} if name == "MlpPolicy" else {}
    return cls(BOX_OBS, action_space, **kw)


@pytest.mark.parametrize("name, action_space", CASES)
def test_policy_matches_sb3_contrib(name: str, action_space: spaces.Space) -> None:
    """The same weights act the same: keys, the parameter vector's order, squashing to the box
    (MLP), clipping (linear), the argmax (Discrete); the engine's forward is the reference of
    the NumPy acting path."""
    th = pytest.importorskip("torch")
    sb3_ars = pytest.importorskip("sb3_contrib.ars.policies")
    th.manual_seed(0)
    kw = {"net_arch": [8, 8]} if name == "MlpPolicy" else {}
    theirs = getattr(sb3_ars, name)(BOX_OBS, action_space, **kw)
    ours = _ours(name, action_space)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    vec = th.nn.utils.parameters_to_vector(theirs.parameters()).detach().numpy() * 3.0
    ours.load_from_vector(vec)
    theirs.load_from_vector(th.as_tensor(vec))
    np.testing.assert_array_equal(ours.parameters_to_vector(), vec)
    obs = np.random.default_rng(0).uniform(-5, 5, (32, 3)).astype(np.float32)
    want, _ = theirs.predict(obs, deterministic=True)
    got, _ = ours.predict(obs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with rlgrad.no_grad():
        ref = np.asarray(ours(preprocess_obs(obs, BOX_OBS))._value)
    np.testing.assert_array_equal(ours.to_env(ref) if ours.box else ref, got)


def _one_update(model: ARS, returns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights before, the directions drawn, weights after) of one update whose candidates
    score ``returns``."""
    w0 = model.weights.copy()
    state = model.rng.bit_generator.state
    gen = np.random.Generator(type(model.rng.bit_generator)())
    gen.bit_generator.state = state
    deltas = gen.standard_normal((model.n_delta, model.n_params)).astype(np.float32)
    seen = []
    model._candidate_returns = lambda cands, cb, eps: (seen.append(cands), returns)[1]
    model._iteration(None)
    std = np.float32(model.delta_std)
    np.testing.assert_allclose(seen[0], np.concatenate([w0 + std * deltas, w0 - std * deltas]),
                               rtol=1e-6)
    return w0, deltas, model.weights.copy()


def test_update_is_the_closed_form() -> None:
    model = ARS("LinearPolicy", "CartPole-v1", n_delta=3, n_top=2, zero_policy=False, seed=0)
    returns = np.array([5.0, 1.0, 9.0, 2.0, 7.0, 3.0], np.float32)  # plus: 5 1 9, minus: 2 7 3
    w0, d, w1 = _one_update(model, returns)
    # best of each pair: 5, 7, 9 -> directions 2 and 1; std of [9, 1, 3, 7] (unbiased)
    plus, minus = np.array([9.0, 1.0]), np.array([3.0, 7.0])
    step = 0.02 / (2 * np.std([9.0, 1.0, 3.0, 7.0], ddof=1) + 1e-6)
    np.testing.assert_allclose(w1, w0 + step * ((plus - minus) @ d[[2, 1]]), rtol=1e-5)


def test_update_matches_sb3_contrib() -> None:
    """sb3-contrib's ``_do_one_update`` with the same weights, directions and returns."""
    th = pytest.importorskip("torch")
    sb3_ars = pytest.importorskip("sb3_contrib")
    from stable_baselines3.common.logger import configure

    kw = {"n_delta": 4, "n_top": 3, "learning_rate": 0.03, "delta_std": 0.1, "zero_policy": False}
    model = ARS("MlpPolicy", "Pendulum-v1", seed=1, policy_kwargs={"net_arch": [4]}, **kw)
    theirs = sb3_ars.ARS("MlpPolicy", "Pendulum-v1", seed=1, policy_kwargs={"net_arch": [4]},
                         **kw)
    theirs.set_logger(configure(None, []))
    returns = np.array([-3.0, -1.0, -9.0, -2.0, -4.0, -8.0, -1.5, -0.5], np.float32)
    w0, deltas, ours = _one_update(model, returns)
    theirs.weights = th.as_tensor(w0)
    theirs.evaluate_candidates = lambda *a: th.as_tensor(returns)
    real_normal = th.normal
    th.normal = lambda **k: th.as_tensor(deltas)
    try:
        theirs._do_one_update(None, None)
    finally:
        th.normal = real_normal
    np.testing.assert_allclose(ours, theirs.weights.numpy(), rtol=1e-5, atol=1e-7)


def test_alive_bonus_offset_enters_the_returns() -> None:
    """CartPole pays 1 per step: with an offset of -1 every candidate scores 0, so the returns'
    spread and the step are 0; without it the weights move."""
    for offset, moves in ((-1.0, False), (0.0, True)):
        model = ARS("LinearPolicy", "CartPole-v1", n_delta=2, alive_bonus_offset=offset,
                    zero_policy=False, seed=1)  # (seed 0's start balances 500 steps already)
        w0 = model.weights.copy()
        model.learn(300)
        assert model._n_updates >= 1
        assert (not np.array_equal(model.weights, w0)) == moves, offset


def test_n_top_and_zero_policy() -> None:
    with pytest.warns(UserWarning, match="n_top = 8 > n_delta = 3, setting n_top = n_delta"):
        model = ARS("MlpPolicy", "Pendulum-v1", n_delta=3, n_top=8, seed=0)
    assert model.n_top == 3 and not model.weights.any()
    model = ARS("MlpPolicy", "Pendulum-v1", zero_policy=False, seed=0)
    assert model.weights.any()
    assert model.n_params == 3 * 64 + 64 + 64 * 64 + 64 + 64 + 1


def test_same_seed_same_training_and_save_load(tmp_path) -> None:
    runs = []
    for _ in range(2):
        model = ARS("MlpPolicy", "Pendulum-v1", n_delta=2, seed=3,
                    policy_kwargs={"net_arch": [16]}).learn(1000)
        runs.append(model.weights.copy())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0].any() and model.num_timesteps == 1600  # 2 updates of 4 episodes of 200 steps
    obs = np.random.default_rng(1).uniform(-1, 1, (5, 3)).astype(np.float32)
    want, _ = model.predict(obs, deterministic=True)
    assert want.shape == (5, 1) and np.all(np.abs(want) <= 2.0)
    model.save(tmp_path / "ars")
    loaded = ARS.load(tmp_path / "ars")  # SB3's archive, ars.zip
    np.testing.assert_array_equal(loaded.weights, model.weights)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], want)
    assert loaded.n_delta == 2 and loaded.policy.net_arch == [16]
    loaded.learn(400, reset_num_timesteps=False)
    assert loaded.num_timesteps == 2400


def test_errors_are_one_line() -> None:
    with pytest.raises(ValueError, match="n_delta=0 is out of range") as e:
        ARS("CartPole-v1", n_delta=0)
    with pytest.raises(AssertionError, match="ARS supports Discrete or Box action spaces"):
        ARS("MlpPolicy", _multi_discrete_env())
    with pytest.raises(ValueError, match="LinearPolicy is ARS's policy") as e:
        PPO("LinearPolicy", "CartPole-v1")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="policy_kwargs has no key 'ortho_init'"):
        ARS("MlpPolicy", "CartPole-v1", policy_kwargs={"ortho_init": False})


def _multi_discrete_env() -> object:
    import gymnasium as gym

    class MultiDiscreteEnv(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = spaces.MultiDiscrete([2, 3])

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, True, False, {}

    return MultiDiscreteEnv()


def test_ars_learns_cartpole() -> None:
    model = ARS("LinearPolicy", "CartPole-v1", seed=0).learn(10_000)
    mean, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=1, seed=100),
                              n_eval_episodes=10, warn=False)
    assert mean >= 475.0, mean


def test_cli_trains_ars(tmp_path, capsys) -> None:
    from rlgrad.cli import main

    assert ALGORITHMS["ars"] is ARS
    code = main(["train", "CartPole-v1", "--algo", "ars", "--steps", "600",
                 "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "trained" in out.out


def test_async_eval_gives_the_returns_of_its_environments() -> None:
    """Candidate i runs on AsyncEval's environment i % 2: the returns are those of
    evaluate_policy on twin environments seeded alike, in the same order."""
    from rlgrad.rl.common.vec_env import VecNormalize
    from rlgrad.rl.contrib.common.vec_env import AsyncEval

    def make():
        return make_vec_env("CartPole-v1", n_envs=1)

    model = ARS("LinearPolicy", "CartPole-v1", n_delta=2, zero_policy=False, seed=1)
    ae = AsyncEval([make, make], model.policy)
    ae.seed(7)
    seen: list = []
    real = model._async_returns
    model._async_returns = lambda c, cb, ep: (seen.append((c.copy(), r := real(c, cb, ep))), r)[1]
    model.learn(10, async_eval=ae)
    assert ae.closed and len(seen) == 1
    cands, got = seen[0]
    twins = [make(), make()]
    for i, env in enumerate(twins):
        env.seed(7 + i)
    policy = ARSPolicy(model.observation_space, model.action_space, net_arch=[], with_bias=False,
                       squash_output=False)
    for k, w in enumerate(cands):
        policy.load_from_vector(w)
        rewards, _ = evaluate_policy(policy, twins[k % 2], n_eval_episodes=1,
                                     return_episode_rewards=True, warn=False)
        assert got[k] == sum(rewards), k
    assert model.num_timesteps == sum(got)  # CartPole: one step, one reward

    # VecNormalize: the workers' statistics are merged into the training env's and synced back
    train_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1))
    model = ARS("MlpPolicy", train_env, n_delta=2, seed=0, policy_kwargs={"net_arch": [8]})
    ae = AsyncEval([lambda: VecNormalize(make_vec_env("Pendulum-v1", n_envs=1))] * 2, model.policy)
    ae.seed(0)
    model.learn(800, async_eval=ae)
    assert model._n_updates == 1 and model.num_timesteps == 800
    want = train_env.obs_rms
    assert want.count > 800  # 4 episodes of 200 steps (and the epsilon start)
    for env in ae.envs:
        np.testing.assert_allclose(env.obs_rms.mean, want.mean)
        np.testing.assert_allclose(env.obs_rms.var, want.var)
