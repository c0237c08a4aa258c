"""The RL fast paths against the plain ones they replace: the same numbers (to float32 rounding
where BLAS sums in another order, bit for bit where the arithmetic is the same)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rlgrad import optim
from rlgrad.nn import MLP, Linear, Sequential, Sigmoid, Tanh
from rlgrad.rl import A2C, DQN, PPO, REINFORCE
from rlgrad.rl.base import keep_freed_memory
from rlgrad.rl.buffers import ReplayBuffer
from rlgrad.rl.dqn import FusedQStep, huber_means, mlp_forward, mlp_layers
from rlgrad.rl.envs import FastEpisodeStatistics, FastSyncVectorEnv, make_vec_env
from rlgrad.rl.on_policy import FusedActorCriticStep
from rlgrad.rl.policies import mlp_numpy


def _params(m):
    return [p.data.copy() for p in m.q_net.parameters()]


def _assert_close_params(a, b, rtol=1e-5):
    for p, q in zip(a, b):
        scale = max(float(np.abs(p).max()), 1e-3)
        np.testing.assert_allclose(p, q, rtol=0, atol=rtol * scale)


# ---- DQN: the NumPy gradient step against the compiled engine step -------------------------------
# The NumPy steps run the compiled step's operations on the same operand layouts: on this
# machine's OpenBLAS a whole run is the same bits either way (the dead-unit restriction and the
# chunked target pass rely on BLAS summing the remaining terms in the same order, which it does).
@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("arch,act,max_norm", [([64, 64], "relu", 10.0), ([32], "tanh", 10.0),
                                               ([16, 8, 8], "relu", 1e-3)])
def test_dqn_fused_train_equals_the_compiled_step(double_q, arch, act, max_norm):
    kw = dict(learning_rate=1e-3, batch_size=32, learning_starts=300, target_update_interval=50,
              train_freq=64, gradient_steps=6, double_q=double_q, max_grad_norm=max_norm,
              policy_kwargs={"net_arch": arch, "activation_fn": act})
    ref = DQN("CartPole-v1", seed=4, **kw)
    ref.fused_update = False
    fast = DQN("CartPole-v1", seed=4, **kw)
    ref.learn(256)  # collection only up to here: the same transitions and networks
    fast.learn(256)
    for m in (ref, fast):
        m.train(6, 32)
    assert fast._fused_step is not None and ref._fused_step is None
    for p, q in zip(_params(ref), _params(fast)):
        np.testing.assert_array_equal(p, q)
    assert ref.logger.name_to_value["train/loss"] == fast.logger.name_to_value["train/loss"]


def test_dqn_preset_run_is_the_compiled_run_bit_for_bit():
    from rlgrad.rl import make_from_preset

    runs = []
    for fused in (False, True):
        m, _ = make_from_preset("dqn", "CartPole-v1", seed=2)
        m.fused_update = fused
        m.learn(3000, log_interval=1)  # 8 updates of 128 steps, targets over ~2,800 rows
        runs.append(m)
    ref, fast = runs
    for p, q in zip(_params(ref), _params(fast)):
        np.testing.assert_array_equal(p, q)
    assert ref.logger.history[-1]["train/loss"] == fast.logger.history[-1]["train/loss"]


def test_dqn_fused_gradient_equals_the_engine_gradient_with_clipping():
    m = DQN("CartPole-v1", seed=0, policy_kwargs={"net_arch": [32, 32]}, max_grad_norm=1e-3)
    rng = np.random.default_rng(0)
    B = 16
    obs = rng.normal(size=(B, 4)).astype(np.float32)
    actions = rng.integers(0, 2, B)
    target = (rng.normal(size=B) * 3).astype(np.float32)  # some |TD| > 1: clipped
    from rlgrad.rl.buffers import ReplayBatch

    b = ReplayBatch(obs, actions, obs, target, np.zeros(B, bool), np.zeros(B, bool))
    loss, _ = m.loss(b, target)
    params = list(m.q_net.parameters())
    for p in params:
        p.grad = None
    loss.backward()
    want = [p.grad.data.copy() for p in params]
    step = FusedQStep(mlp_layers(m.q_net.q_net), B, m.clip_delta)
    step.mlp.sparse_fraction = 0.0  # the compiled step's products exactly
    got = [np.empty_like(p.data) for p in params]
    td = step(obs, actions, target, got)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
    assert float(huber_means(td, 1.0)) == float(loss.data)
    assert np.abs(td).max() > 1  # the clipped branch was exercised
    m._train_compiled(b, target, 1, B)  # builds the compiled step (and takes a step on it)
    for p, w in zip(params, want):
        p.data += 0.0 * w  # (parameters moved: recompute the reference at the moved ones)
    got = [np.empty_like(p.data) for p in params]
    step(obs, actions, target, got)
    _, compiled = m._step_fn(obs, m._eye[actions], target)
    for g, c in zip(got, compiled):
        np.testing.assert_array_equal(g, c)


def test_dqn_fused_training_is_deterministic_and_resumable_bit_for_bit():
    kw = dict(learning_starts=100, train_freq=16, gradient_steps=4, target_update_interval=50,
              batch_size=32, policy_kwargs={"net_arch": [32]})
    a = DQN("CartPole-v1", seed=7, **kw).learn(600, log_interval=1)
    b = DQN("CartPole-v1", seed=7, **kw).learn(600, log_interval=1)
    skip = ("time/fps", "time/time_elapsed")
    curve = [[{k: v for k, v in r.items() if k not in skip} for r in m.logger.history]
             for m in (a, b)]
    assert curve[0] == curve[1] and len(curve[0]) > 0
    for p, q in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(p, q)


def test_mlp_layers_accepts_only_what_the_fused_step_computes():
    assert mlp_layers(MLP([4, 8, 2])) is not None
    assert mlp_layers(MLP([4, 8, 2], activation=Tanh)) is not None
    assert mlp_layers(MLP([4, 8, 2], activation=Sigmoid)) is None
    assert mlp_layers(MLP([4, 8, 2], output_activation=Tanh)) is None  # Q-values are linear
    assert mlp_layers(Sequential(Linear(4, 2, bias=False))) is None
    m = DQN("CartPole-v1", seed=0, policy_kwargs={"activation_fn": Sigmoid})
    assert not m._use_fused()  # falls back to the compiled step


def test_mlp_forward_equals_the_acting_forward():
    net = MLP([4, 64, 64, 3])
    x = np.random.default_rng(0).normal(size=(1100, 4)).astype(np.float32)  # several chunks
    np.testing.assert_allclose(mlp_forward(mlp_layers(net), x, chunk=512), mlp_numpy(net, x),
                               rtol=1e-5, atol=1e-6)


# ---- replay sampling -------------------------------------------------------------------------
def test_sample_many_draws_what_repeated_sample_calls_draw():
    rb = ReplayBuffer(1000, 3, (), np.int64)
    rng = np.random.default_rng(0)
    for _ in range(7):
        k = 50
        rb.add(rng.normal(size=(k, 3)).astype(np.float32), rng.normal(size=(k, 3)).astype(np.float32),
               rng.integers(0, 4, k), rng.normal(size=k).astype(np.float32), rng.random(k) < 0.1,
               rng.random(k) < 0.1)
    one, many = np.random.default_rng(5), np.random.default_rng(5)
    batches = [rb.sample(32, one) for _ in range(9)]
    idx = rb.sample_indices(9 * 32, many)
    stacked = rb.take(idx)
    for field, parts in zip(stacked, zip(*batches)):
        np.testing.assert_array_equal(field, np.concatenate(parts))
    assert one.random() == many.random()  # the generators continue in step


# ---- Adam: gradients written into the optimizer's flat buffer --------------------------------
def test_adam_flat_grad_buffer_gives_the_same_update_as_plain_grads():
    rng = np.random.default_rng(0)
    a, b = MLP([3, 16, 2]), MLP([3, 16, 2])
    b.load_state_dict(a.state_dict())
    oa, ob = optim.Adam(a.parameters(), lr=0.01), optim.Adam(b.parameters(), lr=0.01)
    from rlgrad.tensor import _const

    for _ in range(60):  # past the every-50-steps flush of tiny moments
        grads = [rng.normal(size=p.shape).astype(np.float32) for p in a.parameters()]
        for p, g in zip(a.parameters(), grads):
            p.grad = _const(g.copy())
        oa.step()
        flat, views = ob.flat_grad_buffer()
        for v, g in zip(views, grads):
            v[...] = g
        for p, v in zip(b.parameters(), views):
            p.grad = _const(v)
        ob.step()
        np.testing.assert_array_equal(flat, np.concatenate([g.ravel() for g in grads]))
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.data, q.data)
    sa, sb = oa.state_dict(), ob.state_dict()
    for k in sa["state"]:
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(sa["state"][k][key], sb["state"][k][key])
    # a loaded state replaces the buffer: ask again, the old views are simply copied
    ob.load_state_dict(sa)
    assert ob.flat_grad_buffer()[0] is not flat
    assert optim.Adam(MLP([3, 4]).parameters(), maximize=True).flat_grad_buffer() is None
    pa = list(a.parameters())
    two_groups = optim.Adam([{"params": pa[:1]}, {"params": pa[1:]}])
    assert two_groups.flat_grad_buffer() is None


# ---- environments: the lean vector step against Gymnasium's ------------------------------------
def _drive(venv, n_steps, seed):
    rng = np.random.default_rng(seed)
    venv.reset(seed=seed)
    out = []
    for _ in range(n_steps):
        act = rng.integers(0, 2, venv.num_envs)
        obs, rew, term, trunc, info = venv.step(act)
        out.append((obs, rew, term, trunc, info))
    return out


def _same_info(x, y):
    assert x.keys() == y.keys()
    for k in x:
        if isinstance(x[k], dict):
            _same_info(x[k], y[k])
        elif k != "t":  # wall-clock episode durations
            np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("n_envs,mode", [(1, "sync"), (3, "sync"), (8, "vector_entry_point")])
def test_fast_vector_step_and_statistics_equal_gymnasiums(n_envs, mode):
    ref = RecordEpisodeStatistics(gym.make_vec("CartPole-v1", num_envs=n_envs,
                                               vectorization_mode=mode), buffer_length=100)
    fast = make_vec_env("CartPole-v1", n_envs=n_envs, vectorization_mode=mode)
    assert isinstance(fast, FastEpisodeStatistics)
    if mode == "sync":
        assert type(fast.env) is FastSyncVectorEnv
    for (a, b) in zip(_drive(ref, 400, 3), _drive(fast, 400, 3)):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        _same_info(a[4], b[4])
    assert ref.episode_count == fast.episode_count > 5
    assert list(ref.return_queue) == list(fast.return_queue)
    assert list(ref.length_queue) == list(fast.length_queue)
    np.testing.assert_array_equal(ref.episode_returns, fast.episode_returns)
    np.testing.assert_array_equal(ref.episode_lengths, fast.episode_lengths)


def test_fast_sync_vector_env_returns_fresh_arrays():
    venv = FastSyncVectorEnv([lambda: gym.make("CartPole-v1")])
    assert isinstance(venv, SyncVectorEnv)
    venv.reset(seed=0)
    o1 = venv.step(np.array([0]))[0]
    o2 = venv.step(np.array([1]))[0]
    assert not np.shares_memory(o1, o2) and not np.array_equal(o1, o2)


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() is first


# ---- PPO, A2C, REINFORCE: the NumPy actor-critic step against the compiled one -----------------
def _policy_params(m):
    return [p.data.copy() for p in m.policy.parameters()]


@pytest.mark.parametrize("cls,kw,steps", [
    (PPO, dict(n_envs=4, n_steps=32, batch_size=128, n_epochs=4, learning_rate="lin_0.001",
               clip_range="lin_0.2"), 256),  # the preset's layout: one minibatch, full rollout
    (PPO, dict(n_envs=4, n_steps=16, batch_size=64, n_epochs=3, ent_coef=0.05,
               policy_kwargs={"net_arch": [32], "activation_fn": "relu"}), 192),
    (PPO, dict(n_envs=2, n_steps=32, batch_size=64, n_epochs=2,
               policy_kwargs={"net_arch": {"pi": [16, 16], "vf": [8]}}), 192),
    (A2C, dict(n_envs=8), 400),
    (A2C, dict(n_envs=4, ent_coef=0.01, policy_kwargs={"net_arch": [256, 256]}), 200),
    (REINFORCE, dict(n_envs=2, n_steps=64), 384),
])
def test_actor_critic_fused_step_matches_the_compiled_step(cls, kw, steps):
    ref = cls("CartPole-v1", seed=2, **kw)
    ref.fused_update = False
    fast = cls("CartPole-v1", seed=2, **kw)
    ref.learn(steps, log_interval=1)
    fast.learn(steps, log_interval=1)
    assert fast._fused is not None and ref._fused is None
    exact = not kw.get("ent_coef")  # the entropy's rule: another order of operations
    for p, q in zip(_policy_params(ref), _policy_params(fast)):
        if exact:
            np.testing.assert_array_equal(p, q)
        else:
            scale = max(float(np.abs(p).max()), 1e-3)
            np.testing.assert_allclose(p, q, rtol=0, atol=2e-5 * scale)
    skip = ("time/fps", "time/time_elapsed")
    ka = {k: v for k, v in ref.logger.history[-1].items() if k not in skip}
    kb = {k: v for k, v in fast.logger.history[-1].items() if k not in skip}
    assert ka.keys() == kb.keys()
    if exact:
        assert ka == kb
    for k in ka:
        assert kb[k] == pytest.approx(ka[k], rel=1e-3, abs=1e-5), k


def test_actor_critic_fused_step_gradient_equals_the_engine_gradient():
    m = PPO("CartPole-v1", n_envs=2, n_steps=16, seed=0, ent_coef=0.1)
    m._setup_learn(1000, True)
    m.collect_rollouts(None)
    data, w, valid = m._full_batch()
    adv = m._advantages(data.advantages, valid)
    rng = np.random.default_rng(0)
    old = (data.old_log_prob + rng.normal(0, 0.2, len(w))).astype(np.float32)  # some clipped
    clip = np.float32(0.1)
    params = list(m.policy.parameters())
    from rlgrad.rl.ppo import _surrogate_p

    values, log_prob, entropy = m.policy.evaluate_traceable(data.observations,
                                                           m.policy.action_input(data.actions))
    from rlgrad import ops

    loss = (_surrogate_p(log_prob, old, adv, clip, w)
            + 0.5 * (w * ops.square(data.returns - values)).sum() + 0.1 * -(w * entropy).sum())
    for p in params:
        p.grad = None
    loss.backward()
    want = [p.grad.data.copy() for p in params]
    step = FusedActorCriticStep(m.policy, params, len(w))
    got = [np.empty_like(p.data) for p in params]
    pl, vl, el, lp = step(data.observations, data.actions, adv, data.returns, w, 0.5, 0.1, got,
                          old, clip)
    np.testing.assert_allclose(lp, log_prob.data, rtol=1e-5, atol=1e-6)
    assert float(pl + 0.5 * vl + 0.1 * el) == pytest.approx(float(loss.data), rel=1e-5)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-4, atol=1e-6)


def test_continuous_actions_keep_the_compiled_step():
    m = PPO("Pendulum-v1", n_envs=2, n_steps=16, batch_size=32, n_epochs=1, seed=0).learn(64)
    assert m._fused is None and not m.fused_update and m._ppo_step is not None


def test_dqn_acting_forward_is_the_modules_forward_bit_for_bit():
    for act in ("relu", "tanh"):
        m = DQN("CartPole-v1", seed=0, policy_kwargs={"net_arch": [32, 16], "activation_fn": act})
        x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
        np.testing.assert_array_equal(m._q_values(x), m.q_net.q_numpy(x))
        np.testing.assert_array_equal(m._q_values(x[:1]), m.q_net.q_numpy(x[:1]))


@pytest.mark.parametrize("batch", [16, 64])
def test_fused_mlp_backward_over_the_active_units_only_equals_the_dense_backward(batch):
    from rlgrad.rl.fused import FusedMLP

    rng = np.random.default_rng(0)
    net = MLP([4, 32, 48, 40, 3])
    lin = [m for m in net if isinstance(m, Linear)]
    lin[1].bias.data[:36] -= 50.0  # 36 of 48 second-layer units dead for every input
    lin[2].bias.data[:10] -= 50.0
    layers = mlp_layers(net)
    x = rng.normal(size=(batch, 4)).astype(np.float32)
    dout = rng.normal(size=(batch, 3)).astype(np.float32)
    out = {}
    for frac in (0.0, 0.5):
        f = FusedMLP(layers, batch)
        f.sparse_fraction, f.sparse_min_units = frac, 1
        np.testing.assert_array_equal(f.forward(x), mlp_numpy(net, x))
        f.grad_out[...] = dout
        grads = [np.full(p.shape, np.nan, np.float32) for p in net.parameters()]
        f.backward(x, grads)
        out[frac] = grads
    for a, b in zip(out[0.0], out[0.5]):
        np.testing.assert_array_equal(b, a)  # zero terms change no sum: the same bits
    assert not np.any(out[0.5][2][:36]) and not np.any(out[0.5][3][:36])  # dead units: zero
    # consecutive steps into the same arrays: only the rows written last time are re-zeroed
    sparse, dense = FusedMLP(layers, batch), FusedMLP(layers, batch)
    sparse.sparse_min_units, dense.sparse_fraction = 1, 0.0
    gs = [np.full(p.shape, np.nan, np.float32) for p in net.parameters()]
    for k in range(4):
        lin[1].bias.data[:] = rng.normal(size=48).astype(np.float32)
        lin[1].bias.data[rng.permutation(48)[:30 + k]] -= 50.0  # another set of dead units
        gd = [np.empty(p.shape, np.float32) for p in net.parameters()]
        for f, g in ((sparse, gs), (dense, gd)):
            f.forward(x)
            f.grad_out[...] = dout
            f.backward(x, g)
        for a, b in zip(gd, gs):
            np.testing.assert_array_equal(b, a)
    assert sparse._written  # the partial re-zeroing ran
