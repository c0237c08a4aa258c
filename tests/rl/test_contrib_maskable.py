"""MaskablePPO (rlgrad.rl.maskable): the masked Categorical against sb3-contrib's (torch), no
invalid action ever taken while training or predicting, masks through predict, evaluation and
the eval callback, and the one-line errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlgrad
from rlgrad.rl.common.envs import IdentityEnv, IdentityEnvBox
from rlgrad.rl.contrib import MaskablePPO
from rlgrad.rl.contrib.common.envs import InvalidActionEnvDiscrete
from rlgrad.rl.contrib.common.maskable.callbacks import MaskableEvalCallback
from rlgrad.rl.contrib.common.maskable.distributions import MaskableCategorical
from rlgrad.rl.contrib.common.maskable.evaluation import evaluate_policy
from rlgrad.rl.contrib.common.maskable.utils import is_masking_supported
from rlgrad.rl.contrib.common.wrappers import ActionMasker
from rlgrad.rl.maskable import MaskableActorCriticPolicy

torch = pytest.importorskip("torch")
sb3_dist = pytest.importorskip("sb3_contrib.common.maskable.distributions")


def test_masked_categorical_matches_sb3_contrib_with_gradients() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 5))
    masks = rng.random((6, 5)) > 0.4
    masks[:, 2] = True  # one valid action per row at least
    actions = np.array([2, 2, 2, 2, 2, 2])
    actions[masks[:, 0]] = 0
    x = rlgrad.tensor(logits.astype(np.float32), requires_grad=True)
    d = MaskableCategorical(logits=x, masks=masks)
    loss = d.log_prob(actions).sum() + 0.3 * d.entropy().sum()
    loss.backward()
    t = torch.tensor(logits.astype(np.float32), requires_grad=True)
    td = sb3_dist.MaskableCategorical(logits=t, masks=torch.tensor(masks))
    tl = td.log_prob(torch.tensor(actions)).sum() + 0.3 * td.entropy().sum()
    tl.backward()
    np.testing.assert_allclose(np.asarray(d.entropy()._value), td.entropy().detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(loss._value), float(tl.detach()), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert (x.grad.numpy()[~masks] == 0).all()  # masked logits get no gradient
    # the entropy is the entropy over the valid actions only
    p = np.where(masks, np.exp(logits), 0)
    p /= p.sum(1, keepdims=True)
    ent = -np.where(masks, p * np.log(np.where(masks, p, 1)), 0).sum(1)
    np.testing.assert_allclose(np.asarray(d.entropy()._value), ent, rtol=1e-5)
    d.apply_masking(None)  # unmasked again: the plain Categorical
    np.testing.assert_allclose(np.asarray(d.log_prob(actions)._value),
                               logits[np.arange(6), actions]
                               - np.log(np.exp(logits).sum(1)), rtol=1e-5)
    with pytest.raises(ValueError, match="allows no action"):
        MaskableCategorical(logits=x, masks=np.zeros((6, 5), bool))


def test_acting_never_draws_a_masked_action() -> None:
    env = InvalidActionEnvDiscrete(dim=10, n_invalid_actions=8)
    pol = MaskableActorCriticPolicy(env.observation_space, env.action_space)
    rng = np.random.default_rng(0)
    obs = rng.random((4000, 10)).astype(np.float32)
    masks = rng.random((4000, 10)) > 0.7
    masks[np.arange(4000), rng.integers(10, size=4000)] = True
    a, _, logp = pol.act_masked(obs, masks, rng)
    assert masks[np.arange(4000), a].all()
    with rlgrad.no_grad():
        d, _ = pol.distribution_and_value_masked(obs, masks)
        np.testing.assert_allclose(logp, np.asarray(d.log_prob(a)._value), atol=1e-5)
    assert masks[np.arange(4000), pol.mode_masked(obs, masks)].all()


class _Recorder(gym.Wrapper):
    """Counts the steps whose action the mask of that step did not allow."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.invalid = self.steps = 0

    def step(self, action):  # noqa: ANN001, ANN201
        self.invalid += int(not self.env.unwrapped.action_masks()[int(action)])
        self.steps += 1
        return self.env.step(action)

    def action_masks(self) -> list[bool]:
        return self.env.unwrapped.action_masks()


def test_training_never_takes_an_invalid_action_and_learns() -> None:
    env = _Recorder(InvalidActionEnvDiscrete(dim=20, n_invalid_actions=15))
    model = MaskablePPO("MlpPolicy", env, gamma=0.1, seed=3, n_steps=256, batch_size=64,
                        n_epochs=4, clip_range=0.4)
    model.learn(3000)
    assert env.steps >= 3000 and env.invalid == 0
    before = env.steps
    masked, _ = evaluate_policy(model, env, n_eval_episodes=5, warn=False)
    assert env.invalid == 0 and env.steps > before
    # out of 5 valid actions a random choice scores ~20 of 100; trained it is far above
    assert masked > 60, masked


def test_predict_uses_action_masks() -> None:
    env = InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4)
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0)
    obs = np.arange(6)  # Discrete(6) observations
    only = np.zeros((6, 6), bool)
    only[:, 4] = True  # every observation: action 4 alone is allowed
    for det in (True, False):
        a, state = model.predict(obs, deterministic=det, action_masks=only)
        assert (a == 4).all() and state is None
    a, _ = model.predict(obs[1], deterministic=True, action_masks=only[1])
    assert int(a) == 4


def test_use_masking_false_and_missing_masks() -> None:
    model = MaskablePPO("MlpPolicy", IdentityEnv(dim=2), n_steps=64, seed=8)
    with pytest.raises(ValueError, match="gives no action_masks"):
        model.learn(100)
    with pytest.raises(ValueError, match="gives no action_masks"):
        evaluate_policy(model, IdentityEnv(dim=2), warn=False)
    assert not is_masking_supported(IdentityEnv(dim=2))
    model.learn(100, use_masking=False)
    evaluate_policy(model, IdentityEnv(dim=2), warn=False, use_masking=False)
    with pytest.raises(ValueError, match="Discrete"):
        MaskablePPO("MlpPolicy", IdentityEnvBox())


def test_action_masker_and_eval_callback(tmp_path) -> None:
    env = ActionMasker(IdentityEnv(dim=4), lambda e: [True, False, True, True])
    assert is_masking_supported(env)
    np.testing.assert_array_equal(env.action_masks(), [True, False, True, True])
    with pytest.raises(ValueError, match="no method"):
        ActionMasker(IdentityEnv(dim=4), "no_such_method")
    model = MaskablePPO("MlpPolicy", env, n_steps=64, seed=0)
    cb = MaskableEvalCallback(ActionMasker(IdentityEnv(dim=4), lambda e: [True, False, True, True]),
                              eval_freq=64, n_eval_episodes=2, warn=False, log_path=str(tmp_path))
    model.learn(128, callback=cb)
    assert len(cb.evaluations_results) == 2
    assert (tmp_path / "evaluations.npz").exists()
