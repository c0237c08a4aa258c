"""Every hyperparameter of every algorithm is range-checked when the algorithm is built, in one
line naming the parameter, the value and the range (issue 19, part 3)."""

import inspect

import pytest

from rlgrad.cli.errors import CLIError
from rlgrad.rl import ALGORITHMS, DQN, PPO, SAC, TD3
from rlgrad.rl.hyperparams import hyperparameters
from rlgrad.rl.ranges import RANGES, SPECIAL, check_hyperparams


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_hyperparameter_has_a_range(name):
    missing = [p for p in hyperparameters(ALGORITHMS[name]) if p not in RANGES | SPECIAL]
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_default_is_in_its_range(name):
    cls = ALGORITHMS[name]
    defaults = {k: p.default for k, p in hyperparameters(cls).items()
                if p.default is not inspect.Parameter.empty}
    check_hyperparams(cls.__name__, defaults)


@pytest.mark.parametrize("cls, kwargs, says", [
    (PPO, {"gamma": 5}, "gamma=5 is out of range: gamma must be a number in [0, 1]"),
    (PPO, {"clip_range": -0.2}, "clip_range=-0.2 is out of range: clip_range must be a number > 0"),
    (PPO, {"n_steps": 0}, "n_steps=0 is out of range"),
    (PPO, {"n_steps": -5}, "n_steps must be an integer in [1, 10000000]"),
    (PPO, {"n_steps": 1_000_000_000}, "n_steps=1000000000 is out of range"),
    (PPO, {"n_epochs": 0}, "n_epochs=0 is out of range: n_epochs must be an integer in [1, 10000]"),
    (PPO, {"gae_lambda": 2}, "gae_lambda=2 is out of range"),
    (PPO, {"learning_rate": "lin_-1"}, "learning_rate='lin_-1' is out of range"),
    (PPO, {"batch_size": 4096, "n_steps": 64}, "batch_size <= n_steps * n_envs"),
    (PPO, {"policy_kwargs": {"net_arch": [0]}}, "policy_kwargs.net_arch=[0] is out of range"),
    (PPO, {"n_envs": 100_000}, "n_envs=100000 is out of range: n_envs must be an integer in "
                               "[1, 4096]"),
    (DQN, {"train_freq": 0}, "train_freq=0 is out of range"),
    (DQN, {"train_freq": [4, "hour"]}, "train_freq=[4, 'hour'] is out of range"),
    (DQN, {"gradient_steps": 0}, "gradient_steps must be an integer >= 1 or -1"),
    (DQN, {"target_update_interval": 0}, "target_update_interval=0 is out of range"),
    (DQN, {"exploration_fraction": -1}, "exploration_fraction=-1 is out of range"),
    (DQN, {"batch_size": 0}, "batch_size=0 is out of range"),
    (DQN, {"buffer_size": 0}, "buffer_size=0 is out of range"),
    (DQN, {"tau": 0.0}, "tau must be a number in (0, 1]"),
    (TD3, {"noise_type": "pink"}, "noise_type='pink' is out of range"),
    (SAC, {"ent_coef": "auto_-1"}, "ent_coef='auto_-1' is out of range"),
])
def test_out_of_range_values_are_refused_in_one_line(cls, kwargs, says):
    env = "Pendulum-v1" if cls in (TD3, SAC) else "CartPole-v1"
    with pytest.raises(ValueError) as e:
        cls(env, **kwargs)
    msg = str(e.value)
    assert says in msg and "\n" not in msg and msg.startswith(cls.__name__ + ": ")


def test_valid_forms_are_accepted():
    check_hyperparams("SAC", {"ent_coef": "auto_0.1", "target_entropy": -2.0})
    check_hyperparams("DQN", {"train_freq": (2, "episode"), "gradient_steps": -1,
                              "buffer_size": 1e5})
    check_hyperparams("PPO", {"learning_rate": lambda p: 3e-4 * p, "clip_range": "lin_0.2"})


def test_the_cli_says_the_same_line():
    from rlgrad.cli.build import build

    with pytest.raises(CLIError, match=r"^PPO on CartPole-v1: gamma=5 is out of range: gamma "
                                       r"must be a number in \[0, 1\]"):
        build(PPO, "CartPole-v1", 0, {"gamma": 5})


def test_every_preset_is_in_range():
    from rlgrad.rl import list_presets, load_preset, split_preset
    from rlgrad.rl.ranges import check_relations

    for algo, envs in list_presets().items():
        for env in envs:
            hp, env_cfg = split_preset(load_preset(algo, env))
            values = {**hp, **{k: v for k, v in env_cfg.items() if k != "n_timesteps"}}
            check_hyperparams(algo, values)
            check_relations(algo, {"n_envs": 1, **values})
