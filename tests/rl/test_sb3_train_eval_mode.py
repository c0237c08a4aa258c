"""SB3's train/eval switching on rlgrad.rl's on-policy algorithms: rollouts and ``predict`` run
the policy in evaluation mode (BatchNorm's running statistics, no dropout), the update in
training mode, eagerly when the policy holds such a layer; a torch module put in an rlgrad
network is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad.nn as nn
from rlgrad.rl import A2C, PPO
from rlgrad.rl.common.preprocessing import get_flattened_obs_dim
from rlgrad.rl.common.torch_layers import BaseFeaturesExtractor


class BatchNormDropout(BaseFeaturesExtractor):
    def __init__(self, observation_space) -> None:  # noqa: ANN001 - SB3's extractor signature
        super().__init__(observation_space, get_flattened_obs_dim(observation_space))
        self.flatten = nn.Flatten()
        self.batch_norm = nn.BatchNorm1d(self.features_dim)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: rlgrad.Tensor) -> rlgrad.Tensor:
        return self.dropout(self.batch_norm(self.flatten(x)))


def _model(cls: type, **kw: object) -> PPO | A2C:
    if cls is PPO:
        kw = {"n_epochs": 1, "batch_size": 32, **kw}
    return cls("MlpPolicy", "CartPole-v1", seed=1, n_steps=32,
               policy_kwargs=dict(net_arch=[16], features_extractor_class=BatchNormDropout), **kw)


@pytest.mark.parametrize("cls", [A2C, PPO])
def test_rollouts_and_predict_leave_the_statistics(cls: type) -> None:
    m = _model(cls)
    bn = m.policy.features_extractor.batch_norm
    mean0, var0 = np.array(bn.running_mean), np.array(bn.running_var)
    m._setup_learn(64, reset_num_timesteps=True)
    assert m.collect_rollouts(None) and m.rollout_buffer.full
    assert not m.policy.training and not bn.training
    np.testing.assert_array_equal(bn.running_mean, mean0)
    np.testing.assert_array_equal(bn.running_var, var0)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    first = m.predict(obs, deterministic=True)[0]
    for _ in range(3):  # no dropout mask, no batch statistics: the same actions
        np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0], first)
    np.testing.assert_array_equal(bn.running_mean, mean0)


@pytest.mark.parametrize("cls", [A2C, PPO])
def test_the_update_trains_batch_norm(cls: type) -> None:
    """After one update the running mean moved towards the rollout's observations (momentum
    0.1, from 0) and the bias was trained; the layer ran eagerly (not under jit)."""
    m = _model(cls)
    bn = m.policy.features_extractor.batch_norm
    bias0 = bn.bias.detach().numpy().copy()
    assert m._stateful_training()
    m.learn(32)
    obs = m.rollout_buffer.observations.reshape(-1, 4)
    # one batch-norm forward on the whole rollout (one minibatch): 0.9 * 0 + 0.1 * its mean
    np.testing.assert_allclose(bn.running_mean, 0.1 * obs.mean(0), rtol=1e-4, atol=1e-6)
    assert np.all(bn.bias.detach().numpy() != bias0)
    plain = PPO("MlpPolicy", "CartPole-v1", seed=1)
    assert not plain._stateful_training()


def test_a_torch_module_in_an_rlgrad_network_is_one_line() -> None:
    torch = pytest.importorskip("torch")
    net = nn.Module()
    with pytest.raises(TypeError) as e:
        net.bn = torch.nn.BatchNorm1d(3)
    msg = str(e.value)
    assert "torch.nn.modules.batchnorm.BatchNorm1d is a torch module" in msg
    assert "nn.BatchNorm1d" in msg and "\n" not in msg
    net.scale = torch.ones(2)  # other torch objects are plain attributes, as before
    assert isinstance(net.scale, torch.Tensor)
