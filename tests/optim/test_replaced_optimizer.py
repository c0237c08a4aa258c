"""An algorithm's optimizer replaced by the user (SB3 allows it: ``model.critic.optimizer = ...``)
is the one its compiled gradient steps follow: the step is built again for the new optimizer's
parameters, in its order, so parameters left out stay frozen and the order does not matter."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.rl import DQN, PPO, TD3

CASES = {
    "td3": (lambda: TD3("Pendulum-v1", seed=0, learning_starts=40, batch_size=16,
                        policy_kwargs=dict(net_arch=[8, 8])), "critic", "critic_optimizer"),
    "dqn": (lambda: DQN("CartPole-v1", seed=0, learning_starts=40, batch_size=16, train_freq=4,
                        policy_kwargs=dict(net_arch=[8])), "q_net", "optimizer"),
    "ppo": (lambda: PPO("CartPole-v1", seed=0, n_steps=32, batch_size=16, n_epochs=2,
                        policy_kwargs=dict(net_arch=[8])), "policy", "optimizer"),
}


def _run(case: str, choose) -> list[np.ndarray]:
    make, net, attr = CASES[case]
    model = make()
    model.learn(64)
    params = list(getattr(model, net).parameters())
    setattr(model, attr, optim.Adam(choose(params), lr=1e-3))
    model.learn(64, reset_num_timesteps=False)
    return [p.detach().numpy().copy() for p in params], params


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_replaced_optimizer_over_part_of_the_network_leaves_the_rest_frozen(case):
    make, net, attr = CASES[case]
    model = make()
    model.learn(64)
    params = list(getattr(model, net).parameters())
    trained = params[-2:][::-1]  # the output layer, in the other order
    setattr(model, attr, optim.Adam(trained, lr=1e-2))
    before = [p.detach().numpy().copy() for p in params]
    model.learn(96, reset_num_timesteps=False)
    moved = [not np.array_equal(p.detach().numpy(), b) for p, b in zip(params, before)]
    assert moved[-2:] == [True, True] and not any(moved[:-2])


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_replaced_optimizers_parameter_order_does_not_change_the_result(case):
    forward, _ = _run(case, lambda ps: ps)
    backward, _ = _run(case, lambda ps: ps[::-1])
    for a, b in zip(forward, backward):
        np.testing.assert_array_equal(a, b)
