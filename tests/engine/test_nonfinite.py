"""NaN or inf from an environment, or in an update, stops training with one line instead of
turning every weight into NaN (before: PPO 12 of 12 parameter tensors NaN, DQN 6 of 6, and
learn() returned normally)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlgrad.rl import DQN, PPO, SAC
from rlgrad.rl.finite import NonFiniteError


class Poisoned(gym.Wrapper):
    """CartPole/Pendulum that returns a NaN observation element or an inf reward at one step."""

    def __init__(self, env: gym.Env, at: int, field: str = "observation") -> None:
        super().__init__(env)
        self.at, self.field, self.n = at, field, 0

    def step(self, action):  # noqa: ANN001, ANN201
        obs, r, term, trunc, info = self.env.step(action)
        self.n += 1
        if self.n == self.at:
            if self.field == "observation":
                obs = obs.copy()
                obs[1] = np.nan
            else:
                r = float("inf")
        return obs, r, term, trunc, info


def _finite(model) -> bool:
    return all(np.isfinite(p._value).all() for p in model.policy.parameters()) if hasattr(
        model, "policy") else all(np.isfinite(p._value).all() for p in model.q_net.parameters())


@pytest.mark.parametrize("cls,kw", [(PPO, dict(n_steps=64, batch_size=32)),
                                    (DQN, dict(learning_starts=50, train_freq=4))])
@pytest.mark.parametrize("field", ["observation", "reward"])
def test_a_non_finite_transition_stops_training_naming_env_step_and_field(cls, kw, field):
    model = cls(Poisoned(gym.make("CartPole-v1"), at=300, field=field), seed=0, **kw)
    # the env's 300th step: an env instance steps as SB3's DummyVecEnv (reset in the same step),
    # so no reset steps are added, and the refused transition is not counted: 299 timesteps
    with pytest.raises(NonFiniteError, match=rf"after \d+ timesteps: environment 0 returned a "
                                             rf"non-finite {field} \((nan|inf)\) at vector step"):
        model.learn(2000)
    assert _finite(model)  # nothing learned from it
    assert model.num_timesteps == 299


def test_check_finite_false_lets_the_transition_in_and_the_update_check_catches_it():
    model = PPO(Poisoned(gym.make("CartPole-v1"), at=100), n_steps=64, batch_size=32, seed=0,
                check_finite=False)
    with pytest.raises(NonFiniteError, match=r"after 128 timesteps: the \w*loss of an update is nan"):
        model.learn(640)  # the NaN observation reached a rollout; the weights never take it
    assert _finite(model)


@pytest.mark.parametrize("cls,kw", [(PPO, dict(n_steps=64, batch_size=32)),
                                    (DQN, dict(learning_starts=50, train_freq=4)),
                                    (SAC, dict(learning_starts=50, batch_size=32))])
# the diverged layer's inf values meet in GAE's arithmetic (inf - inf) before the error is raised
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_non_finite_loss_stops_before_the_weights_take_it(cls, kw):
    env = "Pendulum-v1" if cls is SAC else "CartPole-v1"
    model = cls(env, seed=0, **kw)
    net = model.critic if cls is SAC else (model.q_net if cls is DQN else model.policy)
    last = list(net.parameters())[-1]
    last.data[...] = np.inf  # a diverged output layer: every loss is non-finite
    with pytest.raises(NonFiniteError, match=r"(loss|critic_loss) of an update is (nan|inf|-inf)"):
        model.learn(400)


def test_the_cli_says_one_line_and_keeps_the_last_good_checkpoint(tmp_path: Path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "poisonenv.py").write_text(
        "import gymnasium as gym, numpy as np\n"
        "class P(gym.Wrapper):\n"
        "    n = 0\n"
        "    def step(self, a):\n"
        "        o, r, t, tr, i = self.env.step(a)\n"
        "        P.n += 1\n"
        "        return (o * np.nan if P.n == 700 else o), r, t, tr, i\n"
        "gym.register('PoisonRlgradTest-v0', entry_point=lambda **k: P(gym.make('CartPole-v1')))\n")
    env = dict(os.environ, PYTHONPATH=str(mods) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "rlgrad.cli", "train", "poisonenv:PoisonRlgradTest-v0",
                        "--algo", "ppo", "--set", "n_steps=128", "--set", "batch_size=64",
                        "--steps", "2000", "--checkpoint-every", "256", "--no-progress",
                        "--run-dir", str(run)], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "non-finite observation" in p.stderr
    assert "The last checkpoint (step 512) is kept" in p.stderr
    import rlgrad

    state = rlgrad.load(str(run / "checkpoint.safetensors"))
    arrays = [v for v in _leaves(state) if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    assert arrays and all(np.isfinite(a).all() for a in arrays)


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    elif isinstance(tree, list | tuple):
        for v in tree:
            yield from _leaves(v)
    else:
        yield tree
