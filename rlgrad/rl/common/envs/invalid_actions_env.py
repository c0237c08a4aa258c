"""``sb3_contrib.common.envs.invalid_actions_env``: identity envs with action masks.

An action mask lists every value of every action entry side by side (a ``MultiDiscrete([3, 2])``
mask has 3 + 2 slots). Each step hides ``n_invalid_actions`` slots, drawn with NumPy's global
generator among those the observation does not use, so the right action always stays allowed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.envs.identity_env import IdentityEnv


class _MaskedIdentity(IdentityEnv):
    """The mask machinery; subclasses say which slots the observation uses."""

    def __init__(self, space: spaces.Space, sizes: Sequence[int], ep_length: int,
                 n_invalid_actions: int) -> None:
        self.n_invalid_actions = n_invalid_actions
        self.offsets = np.cumsum([0, *sizes[:-1]])
        self.possible_actions = np.arange(int(sum(sizes)))
        self.invalid_actions: list[int] = []
        super().__init__(space=space, ep_length=ep_length)

    def _choose_next_state(self) -> None:
        self.state = self.action_space.sample()
        used = set((self.offsets + np.atleast_1d(self.state)).tolist())
        others = [i for i in self.possible_actions if i not in used]
        self.invalid_actions = np.random.choice(others, self.n_invalid_actions,
                                                replace=False).tolist()

    def action_masks(self) -> list[bool]:
        """True for the slots allowed now."""
        return [a not in self.invalid_actions for a in self.possible_actions]


class InvalidActionEnvDiscrete(_MaskedIdentity):
    """A ``Discrete(dim)`` identity; at most ``dim - 1`` invalid actions."""

    def __init__(self, dim: int | None = None, ep_length: int = 100,
                 n_invalid_actions: int = 0) -> None:
        dim = 1 if dim is None else dim
        if not 0 <= n_invalid_actions < dim:
            raise ValueError(f"InvalidActionEnvDiscrete: n_invalid_actions must be in [0, {dim}) "
                             f"for dim={dim} (one action must stay valid), got {n_invalid_actions}")
        super().__init__(spaces.Discrete(dim), [dim], ep_length, n_invalid_actions)


class InvalidActionEnvMultiDiscrete(_MaskedIdentity):
    """A ``MultiDiscrete(dims)`` identity; at most ``sum(dims) - len(dims)`` invalid slots."""

    def __init__(self, dims: list[int] | None = None, ep_length: int = 100,
                 n_invalid_actions: int = 0) -> None:
        dims = [1, 1] if dims is None else list(dims)
        if n_invalid_actions > sum(dims) - len(dims):
            raise ValueError("Cannot find a valid action for each dim. Set n_invalid_actions <= "
                             f"{sum(dims) - len(dims)}")
        super().__init__(spaces.MultiDiscrete(dims), dims, ep_length, n_invalid_actions)


class InvalidActionEnvMultiBinary(_MaskedIdentity):
    """A ``MultiBinary(dims)`` identity (two slots per bit); at most ``dims`` invalid slots."""

    def __init__(self, dims: int | None = None, ep_length: int = 100,
                 n_invalid_actions: int = 0) -> None:
        dims = 1 if dims is None else dims
        if n_invalid_actions > dims:
            raise ValueError(f"Cannot find a valid action for each dim. Set n_invalid_actions <= "
                             f"{dims}")
        self.n_dims = dims
        super().__init__(spaces.MultiBinary(dims), [2] * dims, ep_length, n_invalid_actions)
