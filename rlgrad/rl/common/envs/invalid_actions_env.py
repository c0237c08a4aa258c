"""``sb3_contrib.common.envs.invalid_actions_env``: an identity env with action masks."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.envs.identity_env import IdentityEnv


class InvalidActionEnvDiscrete(IdentityEnv):
    """``Discrete(dim)`` identity whose ``action_masks()`` hides ``n_invalid_actions`` actions,
    drawn with NumPy's global generator among those that are not the observation (so the right
    action is always allowed)."""

    def __init__(self, dim: int | None = None, ep_length: int = 100,
                 n_invalid_actions: int = 0) -> None:
        dim = 1 if dim is None else dim
        if not 0 <= n_invalid_actions < dim:
            raise ValueError(f"InvalidActionEnvDiscrete: n_invalid_actions must be in [0, {dim}) "
                             f"for dim={dim} (one action must stay valid), got {n_invalid_actions}")
        self.n_invalid_actions = n_invalid_actions
        self.possible_actions = np.arange(dim)
        self.invalid_actions: list[int] = []
        super().__init__(space=spaces.Discrete(dim), ep_length=ep_length)

    def _choose_next_state(self) -> None:
        self.state = self.action_space.sample()
        others = [i for i in self.possible_actions if i != self.state]
        self.invalid_actions = list(np.random.choice(others, self.n_invalid_actions,
                                                     replace=False))

    def action_masks(self) -> list[bool]:
        """True for the actions allowed now."""
        return [a not in self.invalid_actions for a in self.possible_actions]
