"""``stable_baselines3.common.envs.multi_input_envs``: a grid world seen as a vector and an
image at once (a Dict observation)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Cells each move is possible from, on the 4x4 grid with cells 5, 6, 9 and 10 blocked (0 is the
# top-left corner, 15 the goal); left, down, right, up are actions 0, 1, 2, 3.
_LEFT, _DOWN = [1, 2, 3, 13, 14, 15], [0, 4, 8, 3, 7, 11]
_RIGHT, _UP = [0, 1, 2, 12, 13, 14], [4, 8, 12, 7, 11, 15]


class SimpleMultiObsEnv(gym.Env):
    """A 4x4 grid world: the agent walks around a 2x2 block to the last cell (reward 1,
    terminated); every other step costs 0.1, and the episode is truncated after 100 steps.
    Observations are ``{"vec": float64 (5,), "img": uint8 64x64x1}`` (1x64x64 without
    ``channel_last``): one random vector per column and one random image per row, drawn once
    from NumPy's global generator at construction; ``random_start`` draws the start cell from
    it too. ``discrete_actions=False`` takes a ``Box(0, 1, (4,))`` and moves by its argmax."""

    def __init__(self, num_col: int = 4, num_row: int = 4, random_start: bool = True,
                 discrete_actions: bool = True, channel_last: bool = True) -> None:
        super().__init__()
        self.vector_size = 5
        self.img_size = [64, 64, 1] if channel_last else [1, 64, 64]
        self.random_start = random_start
        self.discrete_actions = discrete_actions
        self.action_space: spaces.Space = (spaces.Discrete(4) if discrete_actions
                                           else spaces.Box(0, 1, (4,)))
        self.observation_space = spaces.Dict(spaces={
            "vec": spaces.Box(0, 1, (self.vector_size,), dtype=np.float64),
            "img": spaces.Box(0, 255, self.img_size, dtype=np.uint8)})
        self.count = 0
        self.max_count = 100
        self.log = ""
        self.state = 0
        self.action2str = ["left", "down", "right", "up"]
        self.init_possible_transitions()
        self.num_col = num_col
        self.state_mapping: list[dict[str, np.ndarray]] = []
        self.init_state_mapping(num_col, num_row)
        self.max_state = len(self.state_mapping) - 1

    def init_state_mapping(self, num_col: int, num_row: int) -> None:
        """The observation of each cell (column-major, as SB3 lists them)."""
        col_vecs = np.random.random((num_col, self.vector_size))
        row_imgs = np.random.randint(0, 255, (num_row, 64, 64), dtype=np.uint8)
        for i in range(num_col):
            for j in range(num_row):
                self.state_mapping.append({"vec": col_vecs[i],
                                           "img": row_imgs[j].reshape(self.img_size)})

    def get_state_mapping(self) -> dict[str, np.ndarray]:
        return self.state_mapping[self.state]

    def init_possible_transitions(self) -> None:
        """The cells each move is possible from (a move elsewhere leaves the agent in place)."""
        self.left_possible, self.down_possible = list(_LEFT), list(_DOWN)
        self.right_possible, self.up_possible = list(_RIGHT), list(_UP)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        action = int(np.argmax(action) if not self.discrete_actions
                     else np.asarray(action).reshape(-1)[0])
        self.count += 1
        prev_state = self.state
        moves = ((self.left_possible, -1), (self.down_possible, self.num_col),
                 (self.right_possible, 1), (self.up_possible, -self.num_col))
        if 0 <= action < 4 and self.state in moves[action][0]:
            self.state += moves[action][1]
        got_to_end = self.state == self.max_state
        reward = 1.0 if got_to_end else -0.1
        self.log = (f"Went {self.action2str[action]} in state {prev_state}, "
                    f"got to state {self.state}")
        return (self.get_state_mapping(), reward, got_to_end, self.count > self.max_count,
                {"got_to_end": got_to_end})

    def render(self, mode: str = "human") -> None:
        print(self.log)

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[dict[str, np.ndarray], dict]:
        if seed is not None:
            super().reset(seed=seed)
        self.count = 0
        self.state = np.random.randint(0, self.max_state) if self.random_start else 0
        return self.state_mapping[self.state], {}
