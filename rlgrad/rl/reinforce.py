"""REINFORCE with a learned baseline (Williams, 1992; Sutton & Barto, ch. 13.4).

The policy gradient is the score-function estimator: the loss ``-log pi(a|s) * (G - b(s))`` with
G the Monte-Carlo discounted return (GAE with lambda = 1) and the baseline ``b(s)`` a value
network trained by regression on G. Rollouts have a fixed size; an episode still running at the
end of one is completed by the baseline's estimate (as it is at a time-limit truncation).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import OnPolicyAlgorithm
from rlgrad.rl.schedules import ScheduleLike


class REINFORCE(OnPolicyAlgorithm):
    log_interval = 10

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 1e-3, n_steps: int = 256,
                 gamma: float = 0.99, ent_coef: float = 0.0, vf_coef: float = 0.5,
                 max_grad_norm: float | None = None, normalize_advantage: bool = True,
                 n_envs: int | None = None, normalize: bool | dict = False,
                 policy_kwargs: dict | None = None, seed: int | None = None, verbose: int = 0,
                 compile_loop: bool = False, **env_options: Any) -> None:
        if n_envs is None:  # 8 copies average the high-variance returns; an instance is one env
            n_envs = 1 if isinstance(env, gym.Env) else 8
            self._hyperparams["n_envs"] = n_envs
        super().__init__(env, learning_rate, n_steps, gamma, 1.0, ent_coef, vf_coef,
                         max_grad_norm, normalize_advantage, n_envs, normalize, policy_kwargs,
                         seed, verbose, compile_loop=compile_loop, **env_options)
        self._params = list(self.policy.parameters())
        self.optimizer = self.make_optimizer(self._params)
        self._check_compile_loop()

