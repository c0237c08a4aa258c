"""Settings changed mid-training reach the compiled off-policy updates: a compiled step must not
keep a Python value from its first trace (issue 17). Each case trains a compiled model and an
eager one (``compile_updates = False``: the same losses run without ``rlgrad.jit``) from the
same seed, changes the setting on both, trains on, and compares their weights; a third model,
compiled and unchanged, shows that the change moves the weights far more than the tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad.rl import C51, DQN, QRDQN, SAC, TD3

SMALL = {"seed": 0, "learning_starts": 0, "learning_rate": 3e-3,
         "policy_kwargs": {"net_arch": [16, 16]}}
# DQN acting at random throughout: its trajectory does not depend on the weights (an argmax
# could otherwise flip on a float32 rounding difference and fork the runs)
RANDOM_ACTS = {"exploration_initial_eps": 1.0, "exploration_final_eps": 1.0}
DQN_ONE = {**SMALL, **RANDOM_ACTS, "batch_size": 16, "train_freq": 1, "gradient_steps": 1,
           "target_update_interval": 1000}  # the target stays the initial network
DQN_STACKED = {**DQN_ONE, "train_freq": 4, "gradient_steps": 4}  # targets outside the step
CONT = {**SMALL, "batch_size": 16}


def _weights(cls, kw, env, compiled, change):
    m = cls(env, **kw)
    m.compile_updates = compiled
    m.learn(96)
    if change is not None:
        setattr(m, *change)
    m.learn(96, reset_num_timesteps=False)
    return np.concatenate([p._value.ravel() for mod in m._modules().values()
                           for p in mod.parameters()])


CASES = [
    (DQN, DQN_ONE, "clip_delta", 0.01),
    (DQN, DQN_STACKED, "clip_delta", 0.01),
    (DQN, DQN_ONE, "gamma", 0.5),
    (DQN, DQN_ONE, "double_q", True),
    (DQN, {**DQN_ONE, "double_q": True}, "gamma", 0.5),
    (DQN, {**DQN_ONE, "target_update_interval": 8}, "tau", 0.1),
    (QRDQN, {**DQN_ONE, "policy_kwargs": {"net_arch": [16], "n_quantiles": 5}}, "clip_delta",
     0.01),
    (QRDQN, {**DQN_ONE, "policy_kwargs": {"net_arch": [16], "n_quantiles": 5}}, "gamma", 0.5),
    (C51, {**DQN_ONE, "policy_kwargs": {"net_arch": [16], "n_atoms": 11}}, "gamma", 0.5),
    (C51, {**DQN_ONE, "policy_kwargs": {"net_arch": [16], "n_atoms": 11}}, "double_q", True),
    (TD3, CONT, "gamma", 0.5),
    (TD3, CONT, "tau", 0.2),
    (TD3, CONT, "target_policy_noise", 0.8),
    (TD3, {**CONT, "target_policy_noise": 0.0}, "target_policy_noise", 0.5),
    (TD3, {**CONT, "target_policy_noise": 0.5}, "target_noise_clip", 0.02),
    (SAC, CONT, "gamma", 0.5),
    (SAC, CONT, "tau", 0.2),
    (SAC, CONT, "target_entropy", 3.0),
    (SAC, {**CONT, "ent_coef": 0.1}, "ent_coef", 2.0),
]


@pytest.mark.parametrize(("cls", "kw", "name", "value"), CASES,
                         ids=[f"{c.__name__}-{n}-{i}" for i, (c, _, n, _) in enumerate(CASES)])
def test_setting_changed_mid_training_reaches_compiled_step(cls, kw, name, value):
    env = "CartPole-v1" if issubclass(cls, DQN) else "Pendulum-v1"
    compiled = _weights(cls, kw, env, True, (name, value))
    eager = _weights(cls, kw, env, False, (name, value))
    unchanged = _weights(cls, kw, env, True, None)
    # float32 weights of size ~1 after ~100 Adam steps: a few ulps each if the two runs round
    # differently (today they run the same operations); a lost setting moves them by many steps
    tol = 1e-5
    np.testing.assert_allclose(compiled, eager, rtol=0, atol=tol)
    assert np.abs(compiled - unchanged).max() > 20 * tol


def test_sac_ent_coef_attribute():
    """SB3's ``model.ent_coef``: the given value; a learned one cannot be set to a number."""
    fixed = SAC("Pendulum-v1", ent_coef=0.1, **CONT)
    assert fixed.ent_coef == 0.1
    fixed.ent_coef = 0.3
    assert fixed.ent_coef == 0.3
    learned = SAC("Pendulum-v1", ent_coef="auto_0.5", **CONT)
    assert learned.ent_coef == "auto_0.5"
    with pytest.raises(ValueError, match="fixed ent_coef"):
        learned.ent_coef = 0.2
