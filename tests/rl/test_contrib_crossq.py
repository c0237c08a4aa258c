"""CrossQ (rlgrad.rl.crossq): the critic loss of the joint batch-normalised forward against a
NumPy recomputation, the policy delay, no target network, learning above untrained."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import rlgrad
from rlgrad.rl import evaluate_policy
from rlgrad.rl.contrib.common.torch_layers import BatchRenorm1d
from rlgrad.rl.crossq import CrossQ


def _critic_numpy(net, x: np.ndarray) -> np.ndarray:
    """One critic in train mode during the renormalisation's warm-up: the batch's mean and
    unbiased variance (sb3-contrib's BatchRenorm1d)."""
    for m in net:
        if isinstance(m, BatchRenorm1d):
            assert int(m.steps._value) <= m.warmup_steps
            mu, var = x.mean(0), x.var(0, ddof=1)
            x = (x - mu) / np.sqrt(var + m.eps) * m.scale._value + m.bias._value
        elif isinstance(m, rlgrad.nn.Linear):
            x = x @ m.weight._value.T + m.bias._value
        else:
            x = np.maximum(x, 0)
    return x[:, 0]


def _loss_batch(m: CrossQ) -> dict[str, Any]:
    """16 transitions of ``m``'s buffer as its critic loss reads them (noise, alpha 0.2)."""
    b = m.batch_dict(m.sample(16))
    b["next_noise"] = m._noise(16)
    b["ent_coef"] = np.array(0.2, np.float32)
    return b


def test_critic_loss_is_the_joint_batchnorm_forward() -> None:
    m = CrossQ("Pendulum-v1", seed=0, learning_starts=10, policy_kwargs={"net_arch": [8]})
    m.learn(30)
    b = _loss_batch(m)
    with rlgrad.no_grad():
        next_a, next_logp = m._rsample(b["next_obs"], b["next_noise"])
        x = np.concatenate([np.concatenate([b["obs"], b["actions"]], 1),
                            np.concatenate([b["next_obs"], np.asarray(next_a._value)], 1)])
        qs = [_critic_numpy(net, x.astype(np.float64)) for net in m.critic.q_networks]
        y = b["rewards"] + m.gamma * b["not_terminated"] * (
            np.minimum(*[q[16:] for q in qs]) - 0.2 * np.asarray(next_logp._value))
        want = 0.5 * sum(np.mean((q[:16] - y) ** 2) for q in qs)
        running = np.array(m.critic.q_networks[0][0].ra_mean)  # a copy
        loss, _ = m.critic_loss(b)
    np.testing.assert_allclose(float(loss._value), want, rtol=1e-4)
    # the train-mode forward moved the running mean toward the joint batch's mean (momentum 0.01)
    np.testing.assert_allclose(m.critic.q_networks[0][0].ra_mean,
                               0.99 * running + 0.01 * x.mean(0), rtol=1e-4, atol=1e-6)


def test_policy_delay_and_no_target_updates() -> None:
    m = CrossQ("Pendulum-v1", seed=0, learning_starts=20, policy_delay=3,
               policy_kwargs={"net_arch": [8]})
    m.learn(20)
    before = [p._value.copy() for p in m.actor.parameters()]
    target = [p._value.copy() for p in m.critic_target.parameters()]
    m.train(2, 16)  # steps 1 and 2: the critic only
    assert all((p._value == q).all() for p, q in zip(m.actor.parameters(), before))
    m.train(1, 16)  # step 3: the actor too
    assert any((p._value != q).any() for p, q in zip(m.actor.parameters(), before))
    assert all((p._value == q).all() for p, q in zip(m.critic_target.parameters(), target))
    assert m.critic_optimizer.param_groups[0]["betas"] == (0.5, 0.999)


def test_crossq_learns_pendulum(seeded_eval_env: Callable[[str], Any]) -> None:
    m = CrossQ("Pendulum-v1", seed=0, learning_starts=200, policy_kwargs={"net_arch": [128, 128]})
    untrained, _ = evaluate_policy(m, seeded_eval_env("Pendulum-v1"), n_eval_episodes=3, warn=False)
    m.learn(2500)
    mean, _ = evaluate_policy(m, seeded_eval_env("Pendulum-v1"), n_eval_episodes=3, warn=False)
    assert mean > untrained + 400, (untrained, mean)


def test_sb3_contrib_normalisation_keys():
    """batch_norm_momentum / batch_norm_eps / renorm_warmup_steps reach every BatchRenorm1d of
    the actor and the critics; the actor's statistics move in its update only (every
    ``policy_delay``-th step), the critics' in every critic update."""
    # (tanh: after the warm-up a dead ReLU unit's zero variance makes sb3-contrib's gradient
    # of sqrt(var) NaN, and rlgrad's as well, refused by the update's finite check)
    m = CrossQ("MlpPolicy", "Pendulum-v1", learning_starts=20, seed=0, policy_delay=3,
               policy_kwargs=dict(net_arch=[16], batch_norm_momentum=0.2, batch_norm_eps=0.01,
                                  renorm_warmup_steps=3, activation_fn="tanh"))
    critic = [b for b in m.critic.modules() if isinstance(b, BatchRenorm1d)]
    actor = [b for b in m.actor.modules() if isinstance(b, BatchRenorm1d)]
    assert len(critic) == 2 * 2 and len(actor) == 2
    assert all(b.momentum == 0.2 and b.eps == 0.01 and b.warmup_steps == 3
               for b in critic + actor)
    m.learn(20)
    m.train(6, 16)
    assert int(actor[0].steps._value) == 2 and int(critic[0].steps._value) == 6
    assert not any(b.training for b in actor)  # acting reads the running statistics
    assert m.policy_kwargs["renorm_warmup_steps"] == 3


def test_without_batch_norm_the_critic_loss_is_the_plain_mlps() -> None:
    """sb3-contrib's ``batch_norm=False``: no BatchRenorm1d anywhere, the critics plain MLPs
    whose joint forward gives the same loss as a NumPy recomputation; saved and loaded."""
    m = CrossQ("Pendulum-v1", seed=0, learning_starts=10,
               policy_kwargs={"net_arch": [8], "batch_norm": False})
    assert not any(isinstance(b, BatchRenorm1d) for b in [*m.critic.modules(),
                                                          *m.actor.modules()])
    m.learn(30)
    b = _loss_batch(m)
    with rlgrad.no_grad():
        next_a, next_logp = m._rsample(b["next_obs"], b["next_noise"])
        q = [_critic_numpy(net, np.concatenate([o, a], 1).astype(np.float64))
             for net in m.critic.q_networks
             for o, a in ((b["obs"], b["actions"]), (b["next_obs"], np.asarray(next_a._value)))]
        y = b["rewards"] + m.gamma * b["not_terminated"] * (
            np.minimum(q[1], q[3]) - 0.2 * np.asarray(next_logp._value))
        want = 0.5 * (np.mean((q[0] - y) ** 2) + np.mean((q[2] - y) ** 2))
        loss, _ = m.critic_loss(b)
    np.testing.assert_allclose(float(loss._value), want, rtol=1e-4)
