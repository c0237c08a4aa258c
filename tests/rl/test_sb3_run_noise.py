"""SB3's action-noise objects (``rlgrad.rl.common.noise``) against Stable-Baselines3's own: the
same draws from NumPy's global generator, the same shapes, dtypes and exception types."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad.rl.common import noise as ours

sb3_noise = pytest.importorskip("stable_baselines3.common.noise")


def _draws(make: object, n: int = 5) -> list[np.ndarray]:
    np.random.seed(3)
    obj = make()
    out = [obj() for _ in range(n)]
    obj.reset()
    out.append(obj())
    return out


@pytest.mark.parametrize("name", ["NormalActionNoise", "OrnsteinUhlenbeckActionNoise"])
def test_noise_draws_match_sb3(name: str) -> None:
    mu, sigma = np.zeros(3), np.array([0.1, 0.2, 0.3])
    mine = _draws(lambda: getattr(ours, name)(mu, sigma))
    theirs = _draws(lambda: getattr(sb3_noise, name)(mu, sigma))
    for a, b in zip(mine, theirs, strict=True):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_ou_closed_form_one_step() -> None:
    """x1 = x0 + theta (mu - x0) dt + sigma sqrt(dt) z, from initial_noise."""
    x0, mu, sigma = np.array([0.5]), np.array([1.0]), np.array([2.0])
    n = ours.OrnsteinUhlenbeckActionNoise(mu, sigma, theta=0.3, dt=0.1, initial_noise=x0,
                                          dtype=np.float64)
    np.random.seed(0)
    got = n()
    np.random.seed(0)
    z = np.random.normal(size=1)
    np.testing.assert_allclose(got, x0 + 0.3 * (mu - x0) * 0.1 + sigma * np.sqrt(0.1) * z)
    assert n.kind == ""  # not rlgrad's default process: an algorithm refuses it


def test_vectorized_noise_matches_sb3_and_checks() -> None:
    base_m = ours.OrnsteinUhlenbeckActionNoise(np.zeros(2), 0.4 * np.ones(2))
    base_t = sb3_noise.OrnsteinUhlenbeckActionNoise(np.zeros(2), 0.4 * np.ones(2))
    mine = _draws(lambda: ours.VectorizedActionNoise(base_m, 4))
    theirs = _draws(lambda: sb3_noise.VectorizedActionNoise(base_t, 4))
    for a, b in zip(mine, theirs, strict=True):
        assert a.shape == (4, 2)
        np.testing.assert_array_equal(a, b)
    vec = ours.VectorizedActionNoise(base_m, 4)
    assert vec.kind == "ornstein-uhlenbeck" and vec.n_envs == 4
    for bad in (-1, None, "whatever"):
        with pytest.raises(ValueError, match="n_envs"):
            ours.VectorizedActionNoise(base_m, bad)
    with pytest.raises(ValueError, match="base_noise"):
        ours.VectorizedActionNoise(None, 2)
    with pytest.raises(TypeError, match="base_noise"):
        ours.VectorizedActionNoise(12, 2)
    with pytest.raises(AssertionError, match="expected a list of 4"):
        vec.noises = []
    with pytest.raises(ValueError, match="expected a list of 4"):  # the same error, both types
        vec.noises = [base_m]
    with pytest.raises(TypeError):
        vec.noises = None
    with pytest.raises(ValueError, match="indices"):
        vec.noises = [None] * 4


def test_vectorized_noise_converts_for_td3() -> None:
    from rlgrad.rl import TD3

    base = ours.NormalActionNoise(np.zeros(1), 0.2 * np.ones(1))
    model = TD3("MlpPolicy", "Pendulum-v1", n_envs=2,
                action_noise=ours.VectorizedActionNoise(base, 2))
    assert model.get_hyperparams()["noise_std"] == pytest.approx(0.2)
