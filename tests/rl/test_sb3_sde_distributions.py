"""``rlgrad.rl.common.distributions`` against ``stable_baselines3.common.distributions``: the same
inputs give the same log-probabilities, entropies, modes, KL divergences and shapes, and the same
gradients; gSDE's noise with the same exploration matrices is SB3's; sampling agrees with the
closed forms; ``make_proba_distribution``'s classes and errors are SB3's; a torch function handed
rlgrad Tensors answers with torch tensors of their values."""

import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl.common import distributions as mine

th = pytest.importorskip("torch")
ref = pytest.importorskip("stable_baselines3.common.distributions")

N, A, F = 6, 3, 4


def _np(x):
    return x._value if isinstance(x, rlgrad.Tensor) else x.detach().numpy()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(N, A)), rng.normal(size=(N, A)) * 0.3 - 0.5,
            np.tanh(rng.normal(size=(N, A))), rng.normal(size=(N, F)))


@pytest.mark.parametrize("name", ["DiagGaussianDistribution", "SquashedDiagGaussianDistribution"])
def test_gaussians_match_sb3_values_and_gradients(name):
    mean, log_std, actions, _ = _data(1)
    m_mean, m_ls = rlgrad.tensor(mean, requires_grad=True), rlgrad.tensor(log_std, requires_grad=True)
    t_mean, t_ls = th.tensor(mean, requires_grad=True), th.tensor(log_std, requires_grad=True)
    d = getattr(mine, name)(A).proba_distribution(m_mean, m_ls)
    r = getattr(ref, name)(A).proba_distribution(t_mean, t_ls)
    lp, lp_ref = d.log_prob(actions), r.log_prob(th.tensor(actions))
    np.testing.assert_allclose(_np(lp), _np(lp_ref), rtol=1e-10)
    np.testing.assert_allclose(_np(d.mode()), _np(r.mode()), rtol=1e-12)
    ent, ent_ref = d.entropy(), r.entropy()
    if ent_ref is None:
        assert ent is None
    else:
        np.testing.assert_allclose(_np(ent), _np(ent_ref), rtol=1e-12)
        lp, lp_ref = lp + ent, lp_ref + ent_ref
    lp.sum().backward()
    lp_ref.sum().backward()
    np.testing.assert_allclose(_np(m_mean.grad), _np(t_mean.grad), rtol=1e-9)
    np.testing.assert_allclose(_np(m_ls.grad), _np(t_ls.grad), rtol=1e-9)


def test_bijector_matches_sb3():
    y = np.array([-1.0, -0.999999, -0.3, 0.0, 0.7, 1.0])
    np.testing.assert_allclose(_np(mine.TanhBijector.inverse(y)),
                               _np(ref.TanhBijector.inverse(th.tensor(y))), rtol=1e-12)
    np.testing.assert_allclose(_np(mine.TanhBijector(1e-6).log_prob_correction(y)),
                               _np(ref.TanhBijector(1e-6).log_prob_correction(th.tensor(y))),
                               rtol=1e-12)


@pytest.mark.parametrize("name, arg, width", [("CategoricalDistribution", 4, 4),
                                              ("MultiCategoricalDistribution", [2, 3], 5),
                                              ("BernoulliDistribution", 3, 3)])
def test_discrete_match_sb3(name, arg, width):
    rng = np.random.default_rng(2)
    logits, logits2 = rng.normal(size=(N, width)), rng.normal(size=(N, width))
    d = getattr(mine, name)(arg).proba_distribution(logits)
    r = getattr(ref, name)(arg).proba_distribution(th.tensor(logits))
    actions = r.sample()
    assert tuple(d.sample().shape) == tuple(actions.shape)
    np.testing.assert_allclose(_np(d.log_prob(actions.numpy())), _np(r.log_prob(actions)),
                               rtol=1e-10)
    np.testing.assert_allclose(_np(d.entropy()), _np(r.entropy()), rtol=1e-10)
    np.testing.assert_array_equal(_np(d.mode()), _np(r.mode()))
    d2 = getattr(mine, name)(arg).proba_distribution(logits2)
    r2 = getattr(ref, name)(arg).proba_distribution(th.tensor(logits2))
    np.testing.assert_allclose(_np(mine.kl_divergence(d, d2)), _np(ref.kl_divergence(r, r2)),
                               rtol=1e-10)


@pytest.mark.parametrize("squash", [False, True])
@pytest.mark.parametrize("full_std, use_expln", [(True, False), (False, True)])
def test_sde_matches_sb3_with_the_same_exploration_matrices(squash, full_std, use_expln):
    mean, _, actions, latent = (x.astype(np.float32) for x in _data(3))  # log_std's dtype
    kw = dict(full_std=full_std, use_expln=use_expln, squash_output=squash)
    d, r = mine.StateDependentNoiseDistribution(A, **kw), ref.StateDependentNoiseDistribution(A, **kw)
    _, log_std = d.proba_distribution_net(F, log_std_init=0.4)
    _, log_std_ref = r.proba_distribution_net(F, log_std_init=0.4)
    np.testing.assert_allclose(_np(d.get_std(log_std)), _np(r.get_std(log_std_ref)), rtol=1e-6)
    d.sample_weights(log_std, batch_size=N)
    r.exploration_mat = th.tensor(_np(d.exploration_mat))
    r.exploration_matrices = th.tensor(_np(d.exploration_matrices))
    d.proba_distribution(mean, log_std, latent)
    r.proba_distribution(th.tensor(mean), log_std_ref, th.tensor(latent))
    np.testing.assert_allclose(_np(d.sample()), _np(r.sample()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(d.get_noise(latent[:1])), _np(r.get_noise(th.tensor(latent[:1]))),
                               rtol=1e-5)
    np.testing.assert_allclose(_np(d.log_prob(actions)), _np(r.log_prob(th.tensor(actions))),
                               rtol=1e-5)
    np.testing.assert_allclose(_np(d.mode()), _np(r.mode()), rtol=1e-6)
    if squash:
        assert d.entropy() is None and r.entropy() is None
    else:
        np.testing.assert_allclose(_np(d.entropy()), _np(r.entropy()), rtol=1e-5)


def test_sampling_agrees_with_closed_forms():
    from rlgrad.rl.common.utils import set_random_seed

    set_random_seed(0)
    n = 200_000
    d = mine.DiagGaussianDistribution(2).proba_distribution(np.full((n, 2), 0.3),
                                                            np.full((n, 2), np.log(0.5)))
    a = d.get_actions()
    np.testing.assert_allclose([float(a.mean()), float(a.std())], [0.3, 0.5], rtol=1e-2)
    lp = d.log_prob(a).detach()
    np.testing.assert_allclose(float(-lp.mean()), float(d.entropy().mean()), rtol=1e-2)


def test_make_proba_distribution_classes_and_errors():
    box = spaces.Box(-1, 1, (3,))
    cases = [(box, False, "DiagGaussianDistribution"), (box, True, "StateDependentNoiseDistribution"),
             (spaces.Discrete(4), False, "CategoricalDistribution"),
             (spaces.MultiDiscrete([2, 3]), False, "MultiCategoricalDistribution"),
             (spaces.MultiBinary(3), False, "BernoulliDistribution")]
    for space, sde, name in cases:
        assert type(mine.make_proba_distribution(space, use_sde=sde)).__name__ == name
        assert type(ref.make_proba_distribution(space, use_sde=sde)).__name__ == name
    with pytest.raises(AssertionError, match="Multi-dimensional MultiBinary"):
        mine.make_proba_distribution(spaces.MultiBinary([2, 2]))
    with pytest.raises(NotImplementedError, match="not implemented for action space"):
        mine.make_proba_distribution(spaces.Tuple([box]))
    with pytest.raises(AssertionError, match="same type"):
        mine.kl_divergence(mine.CategoricalDistribution(2).proba_distribution(np.zeros((1, 2))),
                           mine.BernoulliDistribution(2).proba_distribution(np.zeros((1, 2))))


def test_torch_functions_take_rlgrad_tensors():
    x = rlgrad.tensor([[1.0, -2.0], [3.0, 0.5]])
    out = th.max(th.abs(x))
    assert isinstance(out, th.Tensor) and float(out) == 3.0
    assert th.allclose(x, th.tensor([[1.0, -2.0], [3.0, 0.5]]))
    np.testing.assert_array_equal(th.stack([x, x]).numpy(), np.stack([x._value] * 2))
    y = th.exp(x) * x  # a torch answer times an rlgrad Tensor: torch again
    assert isinstance(y, th.Tensor)
    np.testing.assert_allclose(y.numpy(), np.exp(x._value) * x._value, rtol=1e-6)
