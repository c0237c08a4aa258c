"""TRPO (rlgrad.rl.trpo): conjugate gradient against a dense solve, the Fisher-vector product
(double backward of the KL) against finite differences of the KL's gradient in float64, the
trust region held by the line search, and learning above an untrained policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import autograd
from rlgrad.distributions import kl_divergence
from rlgrad.rl import evaluate_policy
from rlgrad.rl.contrib import TRPO
from rlgrad.rl.trpo import _flat, conjugate_gradient


def test_conjugate_gradient_solves_spd_systems() -> None:
    rng = np.random.default_rng(0)
    m = rng.standard_normal((12, 12))
    a = m @ m.T + 0.5 * np.eye(12)
    b = rng.standard_normal(12)
    x = conjugate_gradient(lambda v: a @ v, b, max_iter=12, residual_tol=0.0)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-6, atol=1e-8)
    # fewer steps: an approximation that still decreases the quadratic 0.5 x'Ax - b'x
    x3 = conjugate_gradient(lambda v: a @ v, b, max_iter=3)
    assert 0.5 * x3 @ a @ x3 - b @ x3 < 0.0


@pytest.fixture
def float64():
    rlgrad.set_default_dtype(np.float64)
    try:
        yield
    finally:
        rlgrad.set_default_dtype(np.float32)


def _kl_grad(m: TRPO, obs: np.ndarray, old: object, create_graph: bool) -> list:
    kl = kl_divergence(m.policy.distribution(obs), old).mean()
    return list(autograd.grad(kl, m.actor_params, create_graph=create_graph, allow_unused=True,
                              materialize_grads=True))


def test_fisher_vector_product_is_the_kl_hessian_float64(float64) -> None:
    m = TRPO("CartPole-v1", n_steps=32, seed=0, cg_damping=0.1,
             policy_kwargs={"net_arch": [3]})
    assert all(p._value.dtype == np.float64 for p in m.actor_params)
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((16, 4))
    theta = _flat(m.actor_params)
    with rlgrad.no_grad():
        old = m.policy.distribution(obs)
    # move away from old (at theta the KL's gradient is 0, its Hessian is the Fisher)
    shifted = theta + 0.3 * rng.standard_normal(theta.size)
    m._set_actor(shifted)
    fvp = m.fisher_vector_product(_kl_grad(m, obs, old, create_graph=True))
    n = theta.size
    hess = np.stack([fvp(e) - 0.1 * e for e in np.eye(n)], axis=1)
    h = 1e-5
    fd = np.empty((n, n))
    for i in range(n):
        cols = []
        for sign in (1, -1):
            m._set_actor(shifted + sign * h * np.eye(n)[i])
            cols.append(_flat(_kl_grad(m, obs, old, create_graph=False)))
        fd[:, i] = (cols[0] - cols[1]) / (2 * h)
    np.testing.assert_allclose(hess, fd, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(hess, hess.T, atol=1e-10)
    # CG on the FVP solves the damped system (H + damping I) x = g
    m._set_actor(shifted)
    fvp = m.fisher_vector_product(_kl_grad(m, obs, old, create_graph=True))
    g = rng.standard_normal(n)
    x = conjugate_gradient(fvp, g, max_iter=4 * n, residual_tol=0.0)
    np.testing.assert_allclose(x, np.linalg.solve(hess + 0.1 * np.eye(n), g), rtol=1e-5,
                               atol=1e-8)


def test_policy_step_keeps_the_kl_within_target() -> None:
    m = TRPO("CartPole-v1", n_steps=256, seed=0, target_kl=0.005)
    m._setup_learn(1000, reset_num_timesteps=True)
    m.collect_rollouts(None)
    buf = m.rollout_buffer
    data, valid = buf.flat(), buf.valid_indices()
    obs = data.observations[valid]
    with rlgrad.no_grad():
        old = m.policy.distribution(obs)
    adv = data.advantages[valid]
    stats = m._policy_step(obs, data.actions[valid], data.old_log_prob[valid],
                           ((adv - adv.mean()) / adv.std()).astype(np.float32))
    with rlgrad.no_grad():
        kl = float(kl_divergence(m.policy.distribution(obs), old).mean()._value)
    assert stats["is_line_search_success"] == 1.0
    assert 0 < kl < 0.005 and np.isclose(kl, stats["kl_divergence_loss"], rtol=1e-4)


def test_trpo_learns_cartpole_and_pendulum(seeded_eval_env: Callable[[str], Any]) -> None:
    def evaluate(model: TRPO, env_id: str) -> float:
        return evaluate_policy(model, seeded_eval_env(env_id), n_eval_episodes=10, warn=False)[0]

    rlgrad.manual_seed(0)
    np.random.seed(0)
    m = TRPO("CartPole-v1", seed=0)
    untrained = evaluate(m, "CartPole-v1")
    m.learn(20_000)
    mean = evaluate(m, "CartPole-v1")
    assert mean > 400 and mean > untrained + 200, (untrained, mean)
    m = TRPO("Pendulum-v1", seed=0, n_envs=2, n_steps=1024, gamma=0.9, n_critic_updates=15,
             cg_max_steps=25, normalize=True)
    untrained = evaluate(m, "Pendulum-v1")
    m.learn(30_000)
    mean = evaluate(m, "Pendulum-v1")
    assert mean > untrained + 200, (untrained, mean)  # seeds 0-2: +344, +537, +380


def test_kl_of_a_multidiscrete_head_is_the_sum_over_its_parts() -> None:
    from rlgrad.rl.action_dists import MultiCategorical
    from rlgrad.rl.trpo import policy_kl

    rng = np.random.default_rng(0)
    nvec = np.array([3, 2, 4])
    a, b = rng.normal(size=(5, 9)), rng.normal(size=(5, 9))
    got = np.asarray(policy_kl(MultiCategorical(rlgrad.Tensor(a), nvec),
                               MultiCategorical(rlgrad.Tensor(b), nvec))._value)
    want = np.zeros(5)
    for lo, hi in ((0, 3), (3, 5), (5, 9)):
        p = np.exp(a[:, lo:hi]) / np.exp(a[:, lo:hi]).sum(1, keepdims=True)
        q = np.exp(b[:, lo:hi]) / np.exp(b[:, lo:hi]).sum(1, keepdims=True)
        want += (p * np.log(p / q)).sum(1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("env_cls", ["IdentityEnvMultiDiscrete", "IdentityEnvMultiBinary"])
def test_trpo_takes_multi_action_spaces(env_cls: str) -> None:
    """The trust region holds on MultiDiscrete and MultiBinary heads too (their KL is the sum
    over independent parts)."""
    from rlgrad.rl.common import envs

    m = TRPO("MlpPolicy", getattr(envs, env_cls)(dim=4, ep_length=20), n_steps=64, batch_size=64,
             seed=0, target_kl=0.01)
    before = _flat(m.actor_params)
    m.learn(128)
    assert not np.array_equal(_flat(m.actor_params), before)
    assert m.logger.name_to_value.get("train/kl_divergence_loss", 0.0) <= 0.01 + 1e-9


def test_gsde_policy_kl_is_its_gaussians_kl_as_torch():
    """TRPO with use_sde: KL(new || old) of two gSDE distributions is the KL of their Gaussians
    (mean, sqrt(latent^2 @ std^2 + eps)) summed over the action, as torch computes it."""
    th = pytest.importorskip("torch")
    from rlgrad.distributions.sde import StateDependentNoiseDistribution
    from rlgrad.rl.trpo import policy_kl

    rng = np.random.default_rng(0)
    mean_p, mean_q = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    latent = rng.normal(size=(4, 3))
    log_std_p, log_std_q = rng.normal(size=(3, 2)) * 0.3, rng.normal(size=(3, 2)) * 0.3
    p = StateDependentNoiseDistribution(mean_p, log_std_p, latent)
    q = StateDependentNoiseDistribution(mean_q, log_std_q, latent)
    kl = policy_kl(p, q)._value

    def torch_normal(mean, log_std):
        var = th.as_tensor(latent) ** 2 @ th.as_tensor(np.exp(log_std)) ** 2
        return th.distributions.Normal(th.as_tensor(mean), th.sqrt(var + 1e-6))

    ref = th.distributions.kl_divergence(torch_normal(mean_p, log_std_p),
                                         torch_normal(mean_q, log_std_q)).sum(-1).numpy()
    np.testing.assert_allclose(kl, ref, rtol=1e-5)
    m = TRPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, use_sde=True,
             sub_sampling_factor=4, seed=0, policy_kwargs=dict(net_arch=dict(pi=[8], vf=[8])))
    m.learn(128)  # the line search's KL is this one
