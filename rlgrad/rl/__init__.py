"""``rlgrad.rl``: deep-RL algorithms on Gymnasium, built on rlgrad's engine, nn, optim and
distributions, with an API shaped like Stable-Baselines3's::

    from rlgrad.rl import PPO, evaluate, load_preset, split_preset
    hyper, env = split_preset(load_preset("ppo", "CartPole-v1"))
    model = PPO("CartPole-v1", seed=0, n_envs=env["n_envs"], **hyper).learn(env["n_timesteps"])
    mean, std = evaluate(model, "CartPole-v1", n_episodes=20)

SB3 scripts run with ``stable_baselines3`` changed to ``rlgrad.rl`` in their imports:
``PPO("MlpPolicy", "CartPole-v1", verbose=1)``, ``rlgrad.rl.common.callbacks``,
``rlgrad.rl.common.vec_env``, ... (docs/dropin.md).
"""

from __future__ import annotations

from rlgrad.rl.a2c import A2C
from rlgrad.rl.ars import ARS
from rlgrad.rl.base import BaseAlgorithm, get_schedule_fn, linear_schedule
from rlgrad.rl.buffers import ReplayBuffer, RolloutBuffer, compute_gae
from rlgrad.rl.c51 import C51
from rlgrad.rl.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    EveryNTimesteps,
    FunctionCallback,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
)
from rlgrad.rl.common.save_util import SB3_LAYOUT_VERSION
from rlgrad.rl.contrib.common import envs as _contrib_envs  # noqa: F401 (CartPoleNoVel-v1)
from rlgrad.rl.crossq import CrossQ
from rlgrad.rl.ddpg import DDPG
from rlgrad.rl.dqn import DQN
from rlgrad.rl.envs import make_vec_env
from rlgrad.rl.evaluation import evaluate, evaluate_policy
from rlgrad.rl.functional import register_functional_envs
from rlgrad.rl.her import HerReplayBuffer
from rlgrad.rl.logger import CSVWriter, Logger, TensorBoardWriter
from rlgrad.rl.maskable import MaskablePPO
from rlgrad.rl.monitor import Monitor
from rlgrad.rl.normalize import Normalizer, RunningMeanStd
from rlgrad.rl.ppo import PPO
from rlgrad.rl.presets import list_presets, load_preset, split_preset
from rlgrad.rl.qrdqn import QRDQN
from rlgrad.rl.recurrent_ppo import RecurrentPPO
from rlgrad.rl.reinforce import REINFORCE
from rlgrad.rl.sac import SAC
from rlgrad.rl.td3 import TD3
from rlgrad.rl.tqc import TQC
from rlgrad.rl.trpo import TRPO
from rlgrad.rl.vec_env import DummyVecEnv, SubprocVecEnv, VecCheckNan, VecEnv, VecNormalize

# what `stable_baselines3.__version__` answers: the SB3 release whose API rlgrad.rl follows
__version__ = SB3_LAYOUT_VERSION


def HER(*args: object, **kwargs: object) -> None:  # noqa: N802 - SB3's name
    """SB3 < 2.1's HER class, which SB3 (and rlgrad) replaced by a replay buffer class."""
    raise ImportError("HER is a replay buffer class since Stable-Baselines3 2.1: pass "
                      "replay_buffer_class=HerReplayBuffer to SAC, TD3, DDPG or DQN (see the "
                      "documentation, docs/dropin.md)")


ALGORITHMS: dict[str, type[BaseAlgorithm]] = {
    "reinforce": REINFORCE, "a2c": A2C, "ppo": PPO, "dqn": DQN, "qrdqn": QRDQN, "c51": C51,
    "ddpg": DDPG, "td3": TD3, "sac": SAC, "ppo_lstm": RecurrentPPO,
    "ppo_mask": MaskablePPO, "trpo": TRPO, "tqc": TQC,
    "crossq": CrossQ, "ars": ARS,
}


def make_from_preset(algo: str, env_id: str, seed: int = 0, **overrides: object
                     ) -> tuple[BaseAlgorithm, int]:
    """(algorithm built with the preset of ``algo`` for ``env_id``, its training budget)."""
    try:
        cls = ALGORITHMS[algo.lower()]
    except KeyError:
        raise ValueError(f"unknown algorithm {algo!r}; one of {sorted(ALGORITHMS)}") from None
    hp, env = split_preset(load_preset(algo, env_id))
    hp.update({k: v for k, v in env.items() if k != "n_timesteps"})
    hp.update(overrides)
    budget = int(hp.pop("n_timesteps", env.get("n_timesteps", 100_000)))
    return cls(env_id, seed=seed, **hp), budget


register_functional_envs()  # gym.make('rlgrad/CartPole-v1') and the other functional ids

__all__ = [
    "A2C", "PPO", "RecurrentPPO", "MaskablePPO", "TRPO", "REINFORCE", "DQN", "QRDQN", "C51",
    "DDPG", "TD3", "SAC", "TQC", "CrossQ", "ARS", "ALGORITHMS", "BaseAlgorithm",
    "BaseCallback", "CallbackList",
    "FunctionCallback", "CSVWriter", "Logger", "TensorBoardWriter", "Normalizer",
    "RunningMeanStd", "ReplayBuffer", "RolloutBuffer", "compute_gae", "evaluate",
    "get_schedule_fn", "linear_schedule", "list_presets", "load_preset", "make_from_preset",
    "make_vec_env", "split_preset",
    # Stable-Baselines3's helpers (also at SB3's module paths under rlgrad.rl.common)
    "CheckpointCallback", "EvalCallback", "EveryNTimesteps", "ProgressBarCallback",
    "StopTrainingOnMaxEpisodes", "StopTrainingOnNoModelImprovement",
    "StopTrainingOnRewardThreshold", "evaluate_policy", "Monitor", "DummyVecEnv", "SubprocVecEnv",
    "VecCheckNan", "VecEnv", "VecNormalize", "HER", "HerReplayBuffer",
]
