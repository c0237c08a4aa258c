"""The algorithms' losses against hand-computed values, errors, state, save/load and seeding."""

import numpy as np
import pytest
from np_reference import relu_mlp_np

import rlgrad
from rlgrad.rl import A2C, DDPG, DQN, PPO, REINFORCE, SAC, TD3
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.callbacks import BaseCallback


def _rollout(m):
    m._setup_learn(10_000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    return next(m.rollout_buffer.get(None))


def _mlp_np(layers, x):
    """A Linear/Tanh stack in float64, written here (independent of rlgrad's acting path)."""
    x = np.asarray(x, np.float64)
    for m in layers:
        if hasattr(m, "weight"):
            x = x @ m.weight._value.astype(np.float64).T + m.bias._value
        else:
            x = np.tanh(x)
    return x


def _logp_np(m, b):
    logits = _mlp_np([*m.policy.pi_net, m.policy.action_net], b.observations)
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return logp[np.arange(len(b.actions)), b.actions], logp


def _values_np(m, b):
    return _mlp_np([*m.policy.vf_net, m.policy.value_net], b.observations)[:, 0]


def _both_steps(m):
    """The algorithm's one loss, run eagerly and compiled (the same function)."""
    return m._loss_step(compiled=False), m._loss_step(compiled=True)


def test_ppo_losses_hand_computed():
    m = PPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=16, ent_coef=0.01, seed=1)
    b = _rollout(m)
    rng = np.random.default_rng(0)
    b = b._replace(old_log_prob=b.old_log_prob + rng.normal(0, 0.3, len(b.old_log_prob)),
                   old_values=b.old_values + rng.normal(0, 0.5, len(b.old_values)).astype(np.float32))
    clip, clip_vf = 0.2, 0.1
    adv = (b.advantages - b.advantages.mean()) / (b.advantages.std(ddof=1) + 1e-8)
    logp, logp_all = _logp_np(m, b)
    r = np.exp(logp - b.old_log_prob)
    exp_pl = -np.mean(np.minimum(adv * r, adv * np.clip(r, 1 - clip, 1 + clip)))
    v = _values_np(m, b)
    exp_el = np.mean(np.sum(np.exp(logp_all) * logp_all, axis=1))  # -entropy
    for vf in (clip_vf, None):
        batch = m._loss_batch(b, adv.astype(np.float32), np.full(16, 1 / 16, np.float32))
        batch["clip"] = np.float32(clip)
        if vf is not None:
            batch["clip_vf"] = np.float32(vf)
        v_used = v if vf is None else b.old_values + np.clip(v - b.old_values, -vf, vf)
        exp_vl = np.mean((b.returns - v_used) ** 2)
        for step in _both_steps(m) if vf is None else _both_steps(m)[:1]:
            loss, s, _ = step(batch, True)
            np.testing.assert_allclose(s["log_prob"], logp, rtol=1e-5, atol=1e-6)
            assert float(s["policy_loss"]) == pytest.approx(exp_pl, rel=1e-4, abs=1e-6)
            assert float(s["value_loss"]) == pytest.approx(exp_vl, rel=1e-4)
            assert float(s["entropy_loss"]) == pytest.approx(exp_el, rel=1e-4)
            assert float(loss) == pytest.approx(exp_pl + 0.5 * exp_vl + 0.01 * exp_el, rel=1e-4)


def test_policy_gradient_loss_and_its_gradient_hand_computed():
    m = A2C("CartPole-v1", n_envs=2, n_steps=5, seed=2)
    b = _rollout(m)
    n = len(b.actions)
    batch = m._loss_batch(b, b.advantages, np.full(n, 1 / n, np.float32))
    logp, logp_all = _logp_np(m, b)
    v = _values_np(m, b)
    # the score-function gradient: d pl / d logits = -(onehot(a) - softmax) * A / n, so the
    # action head's bias gets its sum over rows; the value head's bias -2 (R - V) * vf_coef / n
    onehot = np.eye(2)[b.actions]
    exp_bias = -((onehot - np.exp(logp_all)) * b.advantages[:, None]).sum(0) / n
    exp_vbias = -0.5 * 2 * np.sum(b.returns - v) / n
    i_bias = next(i for i, p in enumerate(m._params) if p is m.policy.action_net.bias)
    i_vbias = next(i for i, p in enumerate(m._params) if p is m.policy.value_net.bias)
    for step in _both_steps(m):
        loss, s, grads = step(batch, False)
        assert float(s["policy_loss"]) == pytest.approx(-np.mean(logp * b.advantages), rel=1e-4,
                                                        abs=1e-7)
        assert float(s["value_loss"]) == pytest.approx(np.mean((b.returns - v) ** 2), rel=1e-4)
        np.testing.assert_allclose(grads[i_bias], exp_bias, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(grads[i_vbias], [exp_vbias], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_acting_samples_as_the_policy_distribution(env):
    """The NumPy acting path draws the same actions as ``distribution(obs).sample`` from the same
    generator state, with the distribution's log-probabilities."""
    m = PPO(env, n_envs=2, seed=0)
    obs = np.random.default_rng(0).normal(size=(64, m.obs_dim)).astype(np.float32)
    a, _, logp = m.policy.act(obs, np.random.default_rng(5))
    dist = m.policy.distribution(obs)
    a_dist = dist.sample(generator=np.random.default_rng(5))._value
    if m.policy.discrete:
        np.testing.assert_array_equal(a, a_dist)
    else:  # loc from NumPy vs the engine's matmul: the same draws, a few ulp apart
        np.testing.assert_allclose(a.reshape(a_dist.shape), a_dist, rtol=1e-5, atol=1e-6)
    lp = dist.log_prob(m.policy.actions_for_loss(a))._value
    np.testing.assert_allclose(logp, lp, rtol=1e-5, atol=1e-5)


def _dqn_batch(m, n=8, seed=0):
    rng = np.random.default_rng(seed)
    return ReplayBatch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n),
                       rng.normal(size=(n, 4)).astype(np.float32),
                       rng.normal(size=n).astype(np.float32) * 5, rng.random(n) < 0.3,
                       np.zeros(n, bool))


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_target_and_clipped_td_error(double_q):
    m = DQN("CartPole-v1", double_q=double_q, gamma=0.9, seed=0,
            policy_kwargs={"net_arch": [16]})
    rng = np.random.default_rng(1)
    for p in m.q_net_target.parameters():  # make the target net differ from the online one
        p._value += rng.normal(0, 0.5, p.shape).astype(np.float32)
    b = _dqn_batch(m)
    qt = relu_mlp_np(m.q_net_target, b.next_observations)
    if double_q:
        a_star = relu_mlp_np(m.q_net, b.next_observations).argmax(1)
        nxt = qt[np.arange(8), a_star]
    else:
        nxt = qt.max(1)
    y = b.rewards + 0.9 * (1 - b.terminated) * nxt
    np.testing.assert_allclose(m.td_target(b), y, rtol=1e-5, atol=1e-6)
    # DQN 3.0: the gradient w.r.t. Q(s, a) is the TD error clipped to +-clip_delta (mean over
    # the batch), so the output bias of action k gets the sum over the rows that took k
    q_a = relu_mlp_np(m.q_net, b.observations)[np.arange(8), b.actions]
    g = np.clip(q_a - y, -1, 1) / 8
    exp_bias = [g[b.actions == k].sum() for k in range(2)]
    huber = np.where(np.abs(q_a - y) <= 1, 0.5 * (q_a - y) ** 2, np.abs(q_a - y) - 0.5).mean()
    batch = {"obs": b.observations, "actions": b.actions, "target": y.astype(np.float32)}
    from rlgrad.rl.steps import grad_step

    for compiled in (False, True):  # DQN.loss, the training loss, run eagerly and compiled
        loss, _, grads = grad_step(m.loss, m._params, compiled)(batch)
        assert float(loss) == pytest.approx(huber, rel=1e-5)
        np.testing.assert_allclose(grads[-1], exp_bias, rtol=1e-5, atol=1e-7)


def test_td3_target_without_smoothing():
    m = TD3("Pendulum-v1", target_policy_noise=0.0, gamma=0.5, seed=0,
            policy_kwargs={"net_arch": [8]})
    rng = np.random.default_rng(0)
    n = 5
    b = ReplayBatch(rng.normal(size=(n, 3)).astype(np.float32),
                    rng.uniform(-1, 1, (n, 1)).astype(np.float32),
                    rng.normal(size=(n, 3)).astype(np.float32), np.ones(n, np.float32),
                    np.array([True, False, False, False, True]), np.zeros(n, bool))
    with rlgrad.no_grad():
        a2 = m.actor_target(b.next_observations)._value
        q1, q2 = (q._value for q in m.critic_target(b.next_observations, a2))
    y = 1 + 0.5 * (1 - b.terminated) * np.minimum(q1, q2)
    np.testing.assert_allclose(m.td_target(b), y, rtol=1e-5)


def test_wrong_action_space_errors():
    with pytest.raises(ValueError, match=r"discrete \(Discrete\) action space.*SAC, TD3 or DDPG"):
        DQN("Pendulum-v1")
    with pytest.raises(ValueError, match="continuous.*DQN, PPO or A2C"):
        SAC("CartPole-v1")
    with pytest.raises(ValueError, match="unknown Gymnasium environment id"):
        PPO("CartPoel-v1")


def _params(module):
    return [p._value.copy() for p in module.parameters()]


@pytest.mark.parametrize("cls,env,kw", [
    (PPO, "CartPole-v1", dict(n_envs=2, n_steps=32, batch_size=32, n_epochs=2)),
    (SAC, "Pendulum-v1", dict(learning_starts=50, batch_size=32,
                              policy_kwargs={"net_arch": [32, 32]})),
])
def test_save_load_predict_same_actions(tmp_path, cls, env, kw):
    m = cls(env, seed=0, **kw).learn(256)
    path = str(tmp_path / "model.safetensors")
    m.save(path)
    m2 = cls.load(path)
    obs = np.stack([m.observation_space.sample() for _ in range(16)])
    np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0],
                                  m2.predict(obs, deterministic=True)[0])
    a1, _ = m.predict(obs[0], deterministic=True)
    assert np.asarray(a1).shape == np.asarray(m.action_space.sample()).shape


class _StopAfter(BaseCallback):
    def __init__(self, k):
        super().__init__()
        self.k, self.i = k, 0

    def on_iteration_end(self):
        self.i += 1
        return self.i < self.k


@pytest.mark.parametrize("cls,kw,total,stop", [
    (PPO, dict(n_envs=4, n_steps=16, batch_size=32, n_epochs=2, learning_rate="lin_0.001"),
     640, 4),
    (PPO, dict(n_envs=4, n_steps=16, batch_size=64, n_epochs=3, learning_rate="lin_0.001"),
     640, 4),  # one minibatch: the compiled full-rollout step
    (A2C, dict(n_envs=4), 800, 13),
    (DQN, dict(learning_starts=100, train_freq=16, gradient_steps=4, target_update_interval=50,
               policy_kwargs={"net_arch": [32]}), 800, 20),
])
def test_interrupted_and_resumed_run_is_bit_identical(tmp_path, cls, kw, total, stop):
    full = cls("CartPole-v1", seed=3, **kw).learn(total)
    part = cls("CartPole-v1", seed=3, **kw).learn(total, callback=_StopAfter(stop))
    assert 0 < part.num_timesteps < total
    path = str(tmp_path / "ck.safetensors")
    rlgrad.save(part.get_state(), path)
    resumed = cls("CartPole-v1", seed=3, **kw)
    resumed.set_state(rlgrad.load(path))
    resumed.learn(total - resumed.num_timesteps, reset_num_timesteps=False)
    mod = "q_net" if cls is DQN else "policy"
    for p, q in zip(_params(getattr(full, mod)), _params(getattr(resumed, mod))):
        np.testing.assert_array_equal(p, q)


def _curve(m):
    skip = ("time/fps", "time/time_elapsed")
    return [{k: v for k, v in r.items() if k not in skip} for r in m.logger.history]


@pytest.mark.parametrize("cls,env,kw", [
    (A2C, "CartPole-v1", dict(n_envs=4)),
    (REINFORCE, "CartPole-v1", dict(n_envs=2, n_steps=64)),
    (DDPG, "Pendulum-v1", dict(learning_starts=100, noise_type="normal", batch_size=32,
                               policy_kwargs={"net_arch": [32]})),
])
def test_same_seed_same_learning_curve(cls, env, kw):
    a = cls(env, seed=5, **kw).learn(600, log_interval=1)
    b = cls(env, seed=5, **kw).learn(600, log_interval=1)
    assert _curve(a) == _curve(b) and len(a.logger.history) > 0
    for p, q in zip(_params(a._modules()[next(iter(a._modules()))]),
                    _params(b._modules()[next(iter(b._modules()))])):
        np.testing.assert_array_equal(p, q)


def test_logged_keys_follow_sb3_names():
    m = PPO("CartPole-v1", n_envs=4, n_steps=64, batch_size=64, n_epochs=1, seed=0).learn(1024)
    row = m.logger.history[-1]
    for k in ("train/policy_gradient_loss", "train/value_loss", "train/entropy_loss",
              "train/approx_kl", "train/clip_fraction", "train/loss",
              "train/explained_variance", "rollout/ep_rew_mean", "rollout/ep_len_mean",
              "time/fps", "time/total_timesteps"):
        assert k in row, k
    a = A2C("CartPole-v1", n_envs=4, seed=0).learn(2000)
    row = a.logger.history[-1]
    for k in ("train/policy_loss", "train/value_loss", "train/entropy_loss"):
        assert k in row, k


def test_fused_acting_weights_follow_the_parameters():
    """fused_numpy keeps its block matrices between rollouts and refreshes them from the
    current parameters: after the weights change, acting uses the new ones."""
    m = PPO("CartPole-v1", n_envs=2, seed=0)
    obs = np.random.default_rng(0).normal(size=(5, m.obs_dim)).astype(np.float32)
    first = m.policy.fused_numpy()
    for p in m.policy.parameters():
        p._value += np.float32(0.05)  # as an optimizer step does, in place
    again = m.policy.fused_numpy()
    assert again is first  # the same arrays, refilled
    a1, v1, l1 = m.policy.act(obs, np.random.default_rng(1))
    a2, v2, l2 = m.policy.act(obs, np.random.default_rng(1), again)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(v2, v1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l2, l1, rtol=1e-5, atol=1e-6)


def _same_step_env(max_steps):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    return SyncVectorEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=max_steps)] * 2,
                         autoreset_mode=AutoresetMode.SAME_STEP)


def test_same_step_autoreset_bootstraps_truncation_from_final_obs():
    m = PPO(_same_step_env(5), n_steps=8, batch_size=16, seed=0)
    m._setup_learn(1000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    buf = m.rollout_buffer
    assert buf.valid.all()  # SAME_STEP inserts no reset transitions
    trunc_rows = buf.dones & ~buf.terminated
    assert trunc_rows.sum() == 2 * (8 // 5)
    # every truncated step has its V(final observation) and only those
    np.testing.assert_array_equal(~np.isnan(buf.bootstrap), trunc_rows)


def test_replay_stores_final_obs_and_truncation_flags():
    m = SAC(_same_step_env(4), learning_starts=1000, seed=0)
    m._setup_learn(1000, reset_num_timesteps=True)
    m.train_freq = (12, "step")
    m.collect_rollouts(None)
    rb = m.replay_buffer
    assert len(rb) == 24 and rb.truncated.sum() == 6 and not rb.terminated.any()
    # within an episode, next_obs of one step is the obs of the next one; at the truncation the
    # stored next_obs is the final observation, not the reset one
    obs, nxt = rb.observations[:24].reshape(12, 2, 3), rb.next_observations[:24].reshape(12, 2, 3)
    for t in range(11):
        same = np.all(nxt[t] == obs[t + 1], axis=1)
        assert same.tolist() == [t % 4 != 3] * 2


def test_a_subclass_inherits_hyperparameters_through_kwargs(tmp_path):
    """A subclass types only its own argument: the parent's stay settable (API and --set) and
    are recorded, and the subclass's value is not overwritten by the parent's constructor."""
    from rlgrad.cli.build import parse_sets
    from rlgrad.rl.hyperparams import hyperparameters

    class WideDQN(DQN):
        def __init__(self, env, width: int = 32, **kwargs):
            self.width = width
            super().__init__(env, **kwargs)

        def make_q_net(self):
            from rlgrad.rl.policies import mlp

            return mlp([self.obs_dim, self.width, self.n_actions], "relu")

    params = hyperparameters(WideDQN)
    assert {"width", "clip_delta", "gamma", "policy_kwargs", "blas_threads"} <= set(params)
    assert parse_sets(["width=8", "clip_delta=2.5"], WideDQN) == {"width": 8, "clip_delta": 2.5}
    m = WideDQN("CartPole-v1", width=8, gamma=0.5, learning_starts=0, seed=0)
    hp = m.get_hyperparams()
    assert hp["width"] == 8 and hp["gamma"] == 0.5 and hp["clip_delta"] == 1.0
    assert m.q_net[0].weight.shape == (8, 4)
    assert list(hyperparameters(DDPG)) == [k for k in hyperparameters(TD3) if k not in
                                           DDPG.fixed_hyperparams]
    with pytest.raises(TypeError, match="DDPG fixes n_critics"):
        DDPG("Pendulum-v1", n_critics=2)
    with pytest.raises(ValueError, match="policy_kwargs has no key 'net_arc'"):
        DQN("CartPole-v1", policy_kwargs={"net_arc": [8]})


def test_dqn_loads_checkpoints_of_the_qnetwork_layout(tmp_path):
    """Checkpoints written when the MLP sat inside a QNetwork ('q_net.0.weight') still load."""
    m = DQN("CartPole-v1", seed=0, policy_kwargs={"net_arch": [8]})
    state = m.get_state()
    old = {**state, "modules": {k: {f"q_net.{n}": v for n, v in sd.items()}
                                for k, sd in state["modules"].items()}}
    m2 = DQN("CartPole-v1", seed=1, policy_kwargs={"net_arch": [8]})
    m2.set_state(old)
    for p, q in zip(m.q_net.parameters(), m2.q_net.parameters()):
        np.testing.assert_array_equal(p._value, q._value)


def test_advantage_normalisation_is_sb3s_unbiased_std():
    # SB3 normalises with torch's std, the unbiased one (correction=1); ddof=0 differed silently
    m = A2C("CartPole-v1", n_envs=2, n_steps=4, seed=0, normalize_advantage=True)
    adv = np.array([1.0, -2.0, 0.5, 3.0, 0.0, 7.0], dtype=np.float32)
    valid = np.array([True, True, True, True, False, True])
    a = adv[valid].astype(np.float64)
    want = np.where(valid, (adv - a.mean()) / (a.std(ddof=1) + 1e-8), 0.0)
    np.testing.assert_allclose(m._advantages(adv, valid), want, rtol=1e-6)
