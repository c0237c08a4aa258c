"""MaskablePPO (rlgrad.rl.maskable): the masked Categorical against sb3-contrib's (torch), no
invalid action ever taken while training or predicting, masks through predict, evaluation and
the eval callback, and the one-line errors."""

from __future__ import annotations

from typing import Any

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


@pytest.mark.parametrize("space, sb3_name", [
    (gym.spaces.MultiDiscrete([3, 2, 4]), "MaskableMultiCategoricalDistribution"),
    (gym.spaces.MultiBinary(3), "MaskableBernoulliDistribution"),
])
def test_masked_multi_heads_match_sb3_contrib_with_gradients(space, sb3_name) -> None:
    """MultiDiscrete and MultiBinary (two logits per bit) heads: log-probabilities, entropies and
    the gradient at the action net's bias against sb3-contrib's distributions."""
    obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    from rlgrad.rl.maskable import masked_head_space

    policy = MaskableActorCriticPolicy(obs_space, masked_head_space(space), net_arch=[8])
    rng = np.random.default_rng(3)
    obs = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    k = policy.act_dim
    masks = rng.random((6, k)) > 0.3
    masks[:, 0] = masks[:, 3] = masks[:, k - 1] = True  # a valid choice in every part
    actions, _, _ = policy.act_masked(obs, masks, np.random.default_rng(0))
    dist, _ = policy.distribution_and_value_masked(rlgrad.Tensor(obs), masks)
    lp = dist.log_prob(policy.actions_for_loss(actions))
    (lp.sum() + 0.5 * dist.entropy().sum()).backward()
    with rlgrad.no_grad():
        logits = policy._head_np(obs)
    t = torch.tensor(logits, requires_grad=True)
    nvec = list(space.nvec) if hasattr(space, "nvec") else None
    theirs = getattr(sb3_dist, sb3_name)(nvec if nvec is not None else space.n)
    theirs.proba_distribution(t)
    theirs.apply_masking(torch.tensor(masks))
    tlp = theirs.log_prob(torch.tensor(actions))
    (tlp.sum() + 0.5 * theirs.entropy().sum()).backward()
    np.testing.assert_allclose(np.asarray(lp._value), tlp.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(policy.action_net.bias.grad._value, t.grad.sum(0).numpy(),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("env_cls, dims", [("InvalidActionEnvMultiDiscrete", [3, 4]),
                                           ("InvalidActionEnvMultiBinary", 3)])
def test_masked_multi_action_spaces_never_take_an_invalid_slot(env_cls, dims) -> None:
    from rlgrad.rl.contrib.common import envs

    env = getattr(envs, env_cls)(dims=dims, n_invalid_actions=2)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, seed=0).learn(128)
    nvec = np.asarray(env.action_space.nvec if hasattr(env.action_space, "nvec") else [2] * dims)
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    assert model.rollout_buffer.action_masks.shape[-1] == nvec.sum()
    env.reset(seed=0)
    for _ in range(50):
        masks = np.asarray(env.action_masks())
        action, _ = model.predict(np.asarray(env.state), action_masks=masks)  # (sampled)
        assert env.action_space.contains(action)
        assert masks[offsets + np.asarray(action, dtype=np.int64)].all()
        env.step(action)


def test_policy_class_must_be_maskable_and_subproc_masks_are_read() -> None:
    from rlgrad.rl.common.env_util import make_vec_env
    from rlgrad.rl.common.vec_env import SubprocVecEnv
    from rlgrad.rl.policies import ActorCriticPolicy

    with pytest.raises(ValueError, match="is not a MaskableActorCriticPolicy") as e:
        MaskablePPO(ActorCriticPolicy, InvalidActionEnvDiscrete(dim=4, n_invalid_actions=2))
    assert "\n" not in str(e.value)
    env = make_vec_env(lambda: InvalidActionEnvDiscrete(dim=6, n_invalid_actions=4), n_envs=2,
                       vec_env_cls=SubprocVecEnv)
    try:
        model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0).learn(64)
        masks = model.rollout_buffer.action_masks
        assert (masks.sum(-1) == 2).all()  # the copies' own masks: 2 of 6 allowed at each step
    finally:
        env.close()


@pytest.mark.parametrize("name, arg, width", [
    ("MaskableCategoricalDistribution", 5, 5),
    ("MaskableMultiCategoricalDistribution", [3, 2, 4], 9),
    ("MaskableBernoulliDistribution", 3, 6),
])
def test_distribution_classes_match_sb3_contrib(name: str, arg, width: int) -> None:
    from rlgrad.rl.contrib.common.maskable import distributions as ours_mod

    ours, theirs = getattr(ours_mod, name)(arg), getattr(sb3_dist, name)(arg)
    with pytest.raises(AttributeError, match="call proba_distribution") as e:
        ours.entropy()
    assert isinstance(e.value, AssertionError)
    with pytest.raises(RuntimeError, match="cannot be laid out as rows of"):
        ours.proba_distribution(np.zeros((1, width + 1), np.float32))
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(4, width)).astype(np.float32)
    masks = rng.random((4, width)) > 0.4
    masks[:, 0] = masks[:, 3] = masks[:, width - 1] = True  # (a valid slot in every part)
    ours.proba_distribution(logits)
    theirs.proba_distribution(torch.tensor(logits))
    ours.apply_masking(masks)
    theirs.apply_masking(masks)
    mode = np.asarray(ours.mode()._value)
    np.testing.assert_array_equal(mode, theirs.mode().numpy())
    np.testing.assert_allclose(np.asarray(ours.log_prob(mode)._value),
                               theirs.log_prob(torch.tensor(mode)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.entropy()._value), theirs.entropy().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert ours.proba_distribution_net(7).weight.shape == (width, 7)


def test_maskable_categorical_from_probs_as_torch_converts_them():
    """probs= as torch's Categorical takes them (log of probs clamped to [eps, 1 - eps]), so a
    zero-probability action unmasked still gets its share when the others are masked."""
    from rlgrad.rl.maskable import MaskableCategorical

    probs = np.array([[0.2, 0.2, 0.6], [1.0, 0.0, 0.0]], dtype=np.float32)
    d = MaskableCategorical(probs=probs)
    np.testing.assert_allclose(d.probs._value, probs, atol=1e-6)
    d.apply_masking(np.array([[False, True, True], [False, True, True]]))
    np.testing.assert_allclose(d.probs._value, [[0, 0.25, 0.75], [0, 0.5, 0.5]], atol=1e-6)
    np.testing.assert_allclose(d.entropy()._value,
                               [-(0.25 * np.log(0.25) + 0.75 * np.log(0.75)), np.log(2)],
                               rtol=1e-5)
    d.apply_masking(None)
    np.testing.assert_allclose(d.probs._value, probs, atol=1e-6)
    with pytest.raises(ValueError, match="either probs or logits"):
        MaskableCategorical(probs=probs, logits=probs)


def test_separate_value_extractor_gives_the_loss_its_values():
    """share_features_extractor=False: the masked loss's values come through the value
    extractor, the same numbers as the policy's own value path (and its NumPy one)."""
    from rlgrad.rl.common.envs import FakeImageEnv
    from rlgrad.rl.contrib.common.wrappers import ActionMasker

    env = ActionMasker(FakeImageEnv(screen_height=36, screen_width=36, n_channels=1,
                                    channel_first=True), lambda e: [True, False] * 3)
    m = MaskablePPO("CnnPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0,
                    policy_kwargs=dict(share_features_extractor=False,
                                       features_extractor_kwargs=dict(features_dim=8)))
    p = m.policy
    assert p.vf_features_extractor is not p.features_extractor
    obs = np.random.default_rng(0).integers(0, 256, (3, 1, 36, 36)).astype(np.uint8)
    _, values = p.distribution_and_value_masked(obs, np.ones((3, 6), bool))
    np.testing.assert_allclose(values._value, p.value(obs)._value, rtol=1e-6)
    np.testing.assert_allclose(values._value, p.values_numpy(obs), rtol=1e-5, atol=1e-6)
    m.learn(16)  # every parameter reached by the loss (no unused-input error)


def test_a_batch_size_above_the_rollout_trains_on_the_whole_rollout() -> None:
    """sb3-contrib warns and takes the rollout as one minibatch: the same update as
    ``batch_size`` equal to the rollout, on the same rollout (the padded rows weigh nothing)."""
    def model(batch_size: int) -> MaskablePPO:
        env = InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10)
        return MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=batch_size, n_epochs=2, seed=3)

    with pytest.warns(UserWarning, match="truncated mini-batch of size 32"):
        big = model(64)
    small = model(32)
    before = [p.detach().numpy().copy() for p in big.policy.parameters()]
    big.learn(32)
    small.rollout_buffer = big.rollout_buffer  # the same rollout, trained with batch_size=32
    small._current_progress_remaining = big._current_progress_remaining
    small.policy.set_training_mode(True)
    small.train()
    for p0, a, b in zip(before, big.policy.parameters(), small.policy.parameters()):
        assert not np.allclose(a.detach().numpy(), p0)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_seed_makes_an_unseeded_env_instance_repeat_as_sb3_contribs() -> None:
    """SB3's set_random_seed also seeds NumPy's global generator and the action space, the
    env's own object: an env instance that draws from them (InvalidActionEnvDiscrete: its state
    from the action space, its invalid actions from np.random) steps the same for the same
    seed, and as sb3-contrib's after sb3-contrib's model seeded it."""
    sb3c = pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete as Theirs

    runs = []
    for _ in range(2):
        env = InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10)
        m = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=64, seed=8)
        m.learn(128)
        runs.append([np.asarray(v).copy() for v in m.policy.state_dict().values()]
                    + [m.rollout_buffer.actions.copy()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    def draws(model: Any, env: Any) -> list:  # 5 steps after the model's seed, 5 after seed 3
        out = []
        for seed in (None, 3):
            if seed is not None:
                model.set_random_seed(seed)
            for _ in range(5):
                env.step(0)
                out.append((int(env.state), env.action_masks()))
        return out

    ours, theirs = (InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10),
                    Theirs(dim=20, n_invalid_actions=10))
    mine = draws(MaskablePPO("MlpPolicy", ours, seed=8), ours)  # (one global NumPy generator:
    ref = draws(sb3c.MaskablePPO("MlpPolicy", theirs, seed=8, device="cpu"), theirs)  # in turn)
    assert mine == ref
