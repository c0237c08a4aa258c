"""Advantage Actor-Critic (Mnih et al., 2016), synchronous, with SB3's defaults.

One gradient step per rollout of ``n_steps`` x ``n_envs``: the score-function policy loss
``-E[log pi(a|s) A]``, the value loss ``E[(R - V)^2]`` and the entropy bonus, each logged apart.
RMSprop in TensorFlow's form (eps inside the square root, alpha 0.99, eps 1e-5) as SB3 uses.
"""

from __future__ import annotations

from typing import Any

from rlgrad import optim
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import OnPolicyAlgorithm
from rlgrad.rl.schedules import ScheduleLike


class A2C(OnPolicyAlgorithm):
    log_interval = 100

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 7e-4, n_steps: int = 5,
                 gamma: float = 0.99, gae_lambda: float = 1.0, ent_coef: float = 0.0,
                 vf_coef: float = 0.5, max_grad_norm: float | None = 0.5,
                 rms_prop_eps: float = 1e-5, use_rms_prop: bool = True,
                 normalize_advantage: bool = False, rollout_buffer_class: str | None = None,
                 rollout_buffer_kwargs: dict | None = None, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, compile_loop: bool = False,
                 **env_options: Any) -> None:
        super().__init__(env, learning_rate, n_steps, gamma, gae_lambda, ent_coef, vf_coef,
                         max_grad_norm, normalize_advantage, n_envs, normalize, policy_kwargs,
                         seed, verbose, rollout_buffer_class=rollout_buffer_class,
                         rollout_buffer_kwargs=rollout_buffer_kwargs,
                         compile_loop=compile_loop, **env_options)
        self._params = list(self.policy.parameters())
        if use_rms_prop:
            # SB3's A2C: torch's RMSprop (eps outside the root, averages from zero); the
            # TensorFlow form (RMSpropTFLike) is the zoo's Atari choice, through policy_kwargs
            self.optimizer = self.make_optimizer(self._params, optim.RMSprop, alpha=0.99,
                                                 eps=rms_prop_eps, weight_decay=0.0)
        else:
            self.optimizer = self.make_optimizer(self._params)
        self.policy.optimizer = self.optimizer  # SB3's model.policy.optimizer
        self._check_compile_loop()

