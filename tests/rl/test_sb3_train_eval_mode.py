"""SB3's train/eval switching on rlgrad.rl's on-policy algorithms: rollouts and ``predict`` run
the policy in evaluation mode (BatchNorm's running statistics, no dropout), the update in
training mode, eagerly when the policy holds such a layer; a torch module put in an rlgrad
network becomes rlgrad's layer of the same name."""

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


def test_a_torch_layer_in_an_extractor_trains_as_rlgrad_s() -> None:
    """SB3's test_train_eval_mode writes its extractor with torch's layers: they become
    rlgrad's, so the rollout leaves the statistics and the update moves them."""
    torch = pytest.importorskip("torch")

    class TorchLayers(BaseFeaturesExtractor):
        def __init__(self, observation_space) -> None:  # noqa: ANN001 - SB3's signature
            super().__init__(observation_space, get_flattened_obs_dim(observation_space))
            self.batch_norm = torch.nn.BatchNorm1d(self.features_dim)
            self.dropout = torch.nn.Dropout(0.5)

        def forward(self, x: rlgrad.Tensor) -> rlgrad.Tensor:
            return self.dropout(self.batch_norm(x))

    m = A2C("MlpPolicy", "CartPole-v1", seed=1, n_steps=32,
            policy_kwargs=dict(net_arch=[16], features_extractor_class=TorchLayers))
    bn = m.policy.features_extractor.batch_norm
    assert isinstance(bn, nn.BatchNorm1d)
    total, cb = m._setup_learn(64, None, True)
    assert total == 64 and cb is None
    mean0 = np.array(bn.running_mean)
    assert m.collect_rollouts(m.get_env(), cb, m.rollout_buffer, n_rollout_steps=m.n_steps)
    np.testing.assert_array_equal(bn.running_mean, mean0)
    m.learn(64)
    assert not np.array_equal(bn.running_mean, mean0)
    net = nn.Module()
    net.scale = torch.ones(2)  # other torch objects are plain attributes, as before
    assert isinstance(net.scale, torch.Tensor)


def test_collect_rollouts_refuses_another_env_buffer_or_length_in_one_line() -> None:
    m = _model(A2C)
    m._setup_learn(64)
    with pytest.raises(ValueError, match="n_rollout_steps=5 but the model was built with n_steps=32"):
        m.collect_rollouts(None, None, None, n_rollout_steps=5)
    with pytest.raises(ValueError, match="rollout_buffer must be model.rollout_buffer"):
        m.collect_rollouts(None, None, rollout_buffer=object())
    with pytest.raises(ValueError, match="env must be the model's own"):
        m.collect_rollouts(object(), None)


def _stats(bn: nn.BatchNorm1d) -> tuple[np.ndarray, np.ndarray]:
    return np.array(bn.bias.detach().numpy()), np.array(bn.running_mean)


def _off_policy(name: str):
    from rlgrad.rl import DQN, SAC, TD3
    from rlgrad.rl.contrib import QRDQN, TQC

    cls = {"DQN": DQN, "QRDQN": QRDQN, "SAC": SAC, "TD3": TD3, "TQC": TQC}[name]
    env = "CartPole-v1" if name in ("DQN", "QRDQN") else "Pendulum-v1"
    kw = {"n_quantiles": 5} if name in ("QRDQN", "TQC") else {}
    return cls("MlpPolicy", env, seed=1, learning_starts=0, buffer_size=500, batch_size=16,
               policy_kwargs=dict(net_arch=[8], features_extractor_class=BatchNormDropout, **kw))


def _nets(m) -> tuple[nn.Module, nn.Module]:  # noqa: ANN001
    """(an online network, its target) holding the extractor."""
    if hasattr(m, "q_net"):
        return m.q_net, m.q_net_target
    return m.critic, m.critic_target


@pytest.mark.parametrize("name", ["DQN", "QRDQN", "SAC", "TD3", "TQC"])
def test_off_policy_acts_in_eval_mode_and_learns_in_train_mode(name: str) -> None:
    """SB3's semantics, off-policy: collecting and predicting leave BatchNorm's statistics
    (evaluation mode, no dropout: repeated predictions agree); the updates train the online
    network (its bias and running mean move) and never the target's, which runs in evaluation
    mode and takes the statistics, copied, at a target update."""
    m = _off_policy(name)
    online, target = _nets(m)
    ext = online.features_extractor
    bn, bn_t = ext.batch_norm, target.features_extractor.batch_norm
    before, before_t = _stats(bn), _stats(bn_t)
    m._setup_learn(64, reset_num_timesteps=True)
    m.collect_rollouts(None)
    assert not ext.training and not bn.training
    np.testing.assert_array_equal(_stats(bn)[1], before[1])
    obs = m.observation_space.sample()[None].repeat(4, 0)
    first = m.predict(obs, deterministic=True)[0]
    for _ in range(3):
        np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0], first)
    np.testing.assert_array_equal(_stats(bn)[1], before[1])
    m.policy.set_training_mode(True)
    assert bn.training and not bn_t.training  # a target network stays in evaluation mode
    m.train(2, 16)
    after = _stats(bn)
    assert np.all(after[0] != before[0]) and np.all(after[1] != before[1])
    if name in ("DQN", "QRDQN"):  # target_update_interval (10000) not reached: untouched
        np.testing.assert_array_equal(_stats(bn_t)[1], before_t[1])
        m._n_calls = m.target_update_interval - 1
        m._on_step()
    np.testing.assert_array_equal(np.array(bn_t.running_mean), np.array(bn.running_mean))
    assert not m.compile_updates  # the statistics are written in place: eager updates


def test_maskable_ppo_predicts_in_eval_mode() -> None:
    from rlgrad.rl.contrib import MaskablePPO
    from rlgrad.rl.contrib.common.envs import InvalidActionEnvDiscrete

    env = InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10)
    m = MaskablePPO("MlpPolicy", env, seed=1, n_steps=32, batch_size=32, n_epochs=1,
                    policy_kwargs=dict(net_arch=[16], features_extractor_class=BatchNormDropout))
    bn = m.policy.features_extractor.batch_norm
    m.learn(32)
    stats = _stats(bn)
    obs, _ = env.reset(seed=0)
    first = m.predict(obs, action_masks=env.action_masks(), deterministic=True)[0]
    for _ in range(3):
        np.testing.assert_array_equal(
            m.predict(obs, action_masks=env.action_masks(), deterministic=True)[0], first)
    np.testing.assert_array_equal(_stats(bn)[1], stats[1])
