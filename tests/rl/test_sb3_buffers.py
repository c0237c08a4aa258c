"""``rlgrad.rl.common.buffers`` against Stable-Baselines3 2.9's buffers: the same transitions
added, NumPy's global generator seeded the same, must give the same stored arrays, the same
samples (values, shapes, dtypes, named-tuple fields), the same GAE and n-step returns."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rlgrad.rl.common import buffers as rb
from rlgrad.rl.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples

torch = pytest.importorskip("torch")
sb3b = pytest.importorskip("stable_baselines3.common.buffers")

BOX = spaces.Box(-5, 5, (3,), np.float32)
DICT = spaces.Dict({"obs": BOX, "goal": spaces.Box(0, 255, (2,), np.uint8)})
N_ENVS = 2


def _obs(space: spaces.Space, rng: np.random.Generator) -> object:
    if isinstance(space, spaces.Dict):
        return {k: _obs(s, rng) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, N_ENVS)
    return rng.uniform(0, 5, (N_ENVS, *space.shape)).astype(space.dtype)


def _arr(x: object) -> object:
    if isinstance(x, dict):
        return {k: _arr(v) for k, v in x.items()}
    return None if x is None else np.asarray(x.detach().numpy() if hasattr(x, "detach") else x)


def _assert_same(a: object, b: object) -> None:
    a, b = _arr(a), _arr(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif a is None:
        assert b is None
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def _fill_replay(bufs: list, space: spaces.Space, act: spaces.Space, steps: int) -> None:
    rng = np.random.default_rng(0)
    obs = _obs(space, rng)
    for t in range(steps):
        nxt = _obs(space, rng)
        action = rng.uniform(-1, 1, (N_ENVS, *act.shape)).astype(act.dtype)
        reward = rng.standard_normal(N_ENVS).astype(np.float32)
        done = rng.random(N_ENVS) < 0.2
        infos = [{"TimeLimit.truncated": bool(d and t % 2)} for d in done]
        for b in bufs:
            b.add(obs, nxt, action, reward, done, infos)
        obs = nxt


@pytest.mark.parametrize("steps", [5, 23])  # part-filled, and wrapped around the ring
@pytest.mark.parametrize("kind", ["ReplayBuffer", "DictReplayBuffer", "memory", "NStep"])
def test_replay_buffers_store_and_sample_as_sb3(kind: str, steps: int) -> None:
    space = DICT if kind == "DictReplayBuffer" else BOX
    act = spaces.Box(-1, 1, (2, 2), np.float64)  # rank 2, float64: stored as float32 rows
    kw: dict = {"n_envs": N_ENVS}
    name = kind
    if kind == "memory":
        name, kw = "ReplayBuffer", {**kw, "optimize_memory_usage": True,
                                    "handle_timeout_termination": False}
    if kind == "NStep":
        name, kw = "NStepReplayBuffer", {**kw, "n_steps": 3, "gamma": 0.9}
    ours = getattr(rb, name)(32, space, act, **kw)
    ref = getattr(sb3b, name)(32, space, act, **kw)
    _fill_replay([ours, ref], space, act, steps)
    for attr in ("observations", "actions", "rewards", "dones", "timeouts", "pos", "full"):
        _assert_same(getattr(ours, attr), getattr(ref, attr))
    np.random.seed(3)
    got = ours.sample(64)
    np.random.seed(3)
    want = ref.sample(64)
    assert type(got).__name__ == type(want).__name__ and got._fields == want._fields
    for field in got._fields:
        _assert_same(getattr(got, field), getattr(want, field))
    cls = DictReplayBufferSamples if kind == "DictReplayBuffer" else ReplayBufferSamples
    assert isinstance(got, cls)


def _fill_rollout(bufs: list, space: spaces.Space, act: spaces.Space, steps: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    for _ in range(steps):
        obs = _obs(space, rng)
        action = (rng.integers(0, act.n, N_ENVS) if isinstance(act, spaces.Discrete)
                  else rng.uniform(-1, 1, (N_ENVS, *act.shape)).astype(act.dtype))
        reward = rng.standard_normal(N_ENVS).astype(np.float32)
        start = (rng.random(N_ENVS) < 0.3).astype(np.float32)
        value = torch.as_tensor(rng.standard_normal((N_ENVS, 1)).astype(np.float32))
        log_prob = torch.as_tensor(rng.standard_normal(N_ENVS).astype(np.float32))
        for b in bufs:
            b.add(obs, action, reward, start, value, log_prob)
    return rng.random(N_ENVS) < 0.5


@pytest.mark.parametrize("space,act", [(BOX, spaces.Discrete(4)),
                                       (DICT, spaces.Box(-1, 1, (2,), np.float64)),
                                       (spaces.Discrete(5), spaces.MultiDiscrete([2, 3]))])
def test_rollout_buffers_compute_gae_and_minibatches_as_sb3(space: spaces.Space,
                                                           act: spaces.Space) -> None:
    name = "DictRolloutBuffer" if isinstance(space, spaces.Dict) else "RolloutBuffer"
    ours = getattr(rb, name)(6, space, act, gae_lambda=0.9, gamma=0.95, n_envs=N_ENVS)
    ref = getattr(sb3b, name)(6, space, act, gae_lambda=0.9, gamma=0.95, n_envs=N_ENVS)
    dones = _fill_rollout([ours, ref], space, act, 6)
    last = torch.as_tensor(np.array([[0.5], [-1.0]], np.float32))
    ours.compute_returns_and_advantage(last, dones)
    ref.compute_returns_and_advantage(last, dones)
    for attr in ("observations", "actions", "advantages", "returns", "values", "log_probs"):
        _assert_same(getattr(ours, attr), getattr(ref, attr))
    np.random.seed(5)
    got = list(ours.get(5))
    np.random.seed(5)
    want = list(ref.get(5))
    assert len(got) == len(want) == 3  # 12 rows: 5 + 5 + 2
    for g, w in zip(got, want):
        assert type(g).__name__ == type(w).__name__
        for field in g._fields:
            _assert_same(getattr(g, field), getattr(w, field))


def test_rollout_gae_is_the_closed_form_on_one_episode() -> None:
    # lambda = 1, one env, no episode end: A_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V_T - V_t
    buf = rb.RolloutBuffer(4, BOX, spaces.Discrete(2), gae_lambda=1.0, gamma=0.5)
    r = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    v = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    for t in range(4):
        buf.add(np.zeros((1, 3)), np.zeros(1), r[t:t + 1], np.zeros(1), v[t:t + 1], np.zeros(1))
    buf.compute_returns_and_advantage(np.array([8.0]), np.array([False]))
    want = [sum(0.5 ** k * r[t + k] for k in range(4 - t)) + 0.5 ** (4 - t) * 8.0 for t in range(4)]
    np.testing.assert_allclose(buf.returns[:, 0], want, rtol=1e-6)
    np.testing.assert_allclose(buf.advantages[:, 0], np.array(want) - v, rtol=1e-6)


def test_n_step_returns_by_hand() -> None:
    # one env, rewards 1, 2, 3, 4 with an episode end after the 2nd step
    buf = rb.NStepReplayBuffer(10, BOX, spaces.Box(-1, 1, (1,)), n_steps=3, gamma=0.5)
    for t, done in enumerate([False, True, False, False]):
        buf.add(np.full((1, 3), t), np.full((1, 3), t + 1), np.zeros((1, 1)),
                np.array([t + 1.0]), np.array([done]), [{}])
    s = buf._get_samples(np.array([0, 1, 2]))
    np.testing.assert_allclose(s.rewards.numpy()[:, 0], [1 + 0.5 * 2, 2, 3 + 0.5 * 4])
    np.testing.assert_allclose(s.discounts.numpy()[:, 0], [0.25, 0.5, 0.25])
    np.testing.assert_allclose(s.dones.numpy()[:, 0], [1, 1, 0])  # step 3: the stream's end
    np.testing.assert_allclose(s.next_observations.numpy()[:, 0], [2, 2, 4])


def test_sb3_errors_keep_sb3s_types() -> None:
    with pytest.raises(AssertionError, match="DictRolloutBuffer must be used with Dict obs"):
        rb.DictRolloutBuffer(4, BOX, BOX)
    with pytest.raises(AssertionError, match="ReplayBuffer must be used with non-Dict"):
        rb.ReplayBuffer(4, DICT, BOX)
    with pytest.raises(ValueError, match="optimize_memory_usage = True and handle_timeout"):
        rb.ReplayBuffer(4, BOX, BOX, optimize_memory_usage=True)
    with pytest.raises(AssertionError, match="not full"):
        next(rb.RolloutBuffer(4, BOX, BOX).get())


@pytest.mark.parametrize("obs_dtype", [np.uint8, np.int16, np.float16, np.float64])
@pytest.mark.parametrize("act", [spaces.Discrete(3), spaces.Box(-1, 1, (1,), np.float64)])
def test_stored_and_sampled_dtypes_are_sb3s(obs_dtype: type, act: spaces.Space) -> None:
    space = spaces.Box(0, 100, (2,), obs_dtype)
    for name in ("ReplayBuffer", "RolloutBuffer"):
        ours, ref = getattr(rb, name)(1, space, act), getattr(sb3b, name)(1, space, act)
        assert ours.observations.dtype == ref.observations.dtype == obs_dtype
        assert ours.actions.dtype == ref.actions.dtype
        ours.full = ref.full = True
        got = next(ours.get(4)) if name == "RolloutBuffer" else ours.sample(4)
        want = next(ref.get(4)) if name == "RolloutBuffer" else ref.sample(4)
        for field in ("observations", "actions"):
            assert _arr(getattr(got, field)).dtype == _arr(getattr(want, field)).dtype


def test_n_steps_gives_sb3s_n_step_buffer_and_discounted_targets() -> None:
    from rlgrad.rl import DQN, SAC
    from rlgrad.rl.policies import mlp_numpy

    model = DQN("MlpPolicy", "CartPole-v1", n_steps=3, gamma=0.9, learning_starts=50,
                buffer_size=500, policy_kwargs={"net_arch": [16]}, seed=0)
    assert isinstance(model.replay_buffer, rb.NStepReplayBuffer)
    assert (model.replay_buffer.n_steps, model.replay_buffer.gamma) == (3, 0.9)
    model.learn(200)
    b = model.sample(64)
    assert np.isin(np.round(b.discounts.astype(float), 6), [0.9, 0.81, 0.729]).all()
    q_next = mlp_numpy(model.q_net_target, b.next_observations).max(axis=1)
    want = b.rewards + b.discounts * (1 - b.terminated) * q_next
    np.testing.assert_allclose(model.td_target(b), want, rtol=1e-5, atol=1e-5)
    # the default storage has no per-row discount; Dict observations cannot take n-step
    assert DQN("CartPole-v1", buffer_size=100).sample is not None
    from rlgrad.rl.common.envs import BitFlippingEnv

    with pytest.raises(AssertionError, match="N-step returns are not supported for Dict"):
        SAC("MultiInputPolicy", BitFlippingEnv(n_bits=3, continuous=True), n_steps=3)
    with pytest.warns(UserWarning, match="n_steps=3"):
        SAC("MlpPolicy", "Pendulum-v1", n_steps=3, buffer_size=100,
            replay_buffer_class=rb.ReplayBuffer)


def test_rollout_buffer_class_is_checked_as_sb3_builds_it() -> None:
    from rlgrad.rl import A2C, PPO

    model = A2C("MlpPolicy", "Pendulum-v1", rollout_buffer_class=rb.RolloutBuffer,
                rollout_buffer_kwargs={})
    assert model.get_hyperparams()["rollout_buffer_class"] == "RolloutBuffer"
    with pytest.raises(TypeError, match="unexpected keyword argument 'wrong_keyword'"):
        A2C("MlpPolicy", "Pendulum-v1", rollout_buffer_class=rb.RolloutBuffer,
            rollout_buffer_kwargs={"wrong_keyword": 1})
    with pytest.raises(TypeError, match="multiple values for keyword argument 'gamma'"):
        PPO("MlpPolicy", "Pendulum-v1", rollout_buffer_class=rb.RolloutBuffer,
            rollout_buffer_kwargs={"gamma": 1})
    with pytest.raises(AssertionError, match="DictRolloutBuffer must be used with Dict obs"):
        A2C("MlpPolicy", "Pendulum-v1", rollout_buffer_class=rb.DictRolloutBuffer)


def test_replay_buffer_kwargs_without_a_class_reach_the_default_storage() -> None:
    from rlgrad.rl import SAC

    kw = {"learning_starts": 250, "buffer_size": 1000, "policy_kwargs": {"net_arch": [8]}}
    keep = SAC("MlpPolicy", "Pendulum-v1", seed=0, **kw)
    cut = SAC("MlpPolicy", "Pendulum-v1", seed=0,
              replay_buffer_kwargs={"handle_timeout_termination": False}, **kw)
    for m in (keep, cut):
        m.learn(220)  # Pendulum's 200-step time limit once: one truncated row
        assert m.replay_buffer.truncated.sum() == 1 and not m.replay_buffer.terminated.any()
    b_keep, b_cut = keep.sample_many(1, 5000)[0], cut.sample_many(1, 5000)[0]  # all rows
    assert not b_keep.terminated.any()  # bootstrapped through the time limit (SB3's default)
    np.testing.assert_array_equal(b_cut.terminated, b_cut.truncated)  # not bootstrapped
    assert b_cut.truncated.any()
    with pytest.raises(TypeError, match="unexpected keyword argument 'wrong'"):
        SAC("MlpPolicy", "Pendulum-v1", replay_buffer_kwargs={"wrong": 1}, **kw)
    with pytest.raises(ValueError, match="optimize_memory_usage = True and handle_timeout"):
        SAC("MlpPolicy", "Pendulum-v1", replay_buffer_kwargs={"optimize_memory_usage": True},
            **kw)


def test_sb3_buffer_classes_are_refused_with_env_runners() -> None:
    from rlgrad.rl import SAC

    with pytest.raises(ValueError, match="with env_runners > 0 is not supported") as e:
        SAC("MlpPolicy", "Pendulum-v1", replay_buffer_class=rb.ReplayBuffer, env_runners=2,
            n_envs=2, buffer_size=100)
    assert "\n" not in str(e.value)
