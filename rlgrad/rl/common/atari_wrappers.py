"""``stable_baselines3.common.atari_wrappers``: SB3's Atari preprocessing as Gymnasium wrappers
(observations (84, 84, 1) uint8, channels last, as SB3's ``AtariWrapper`` gives them).

``rlgrad.rl.atari`` builds rlgrad's own Atari envs (Gymnasium's ``AtariPreprocessing``,
channels first, frame-stacked); ``EpisodicLifeEnv`` is its ``EpisodicLife`` (the same
semantics: a life loss ends the training episode, the next reset plays on). ``WarpFrame``
needs OpenCV (the ``atari`` extra)."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlgrad.rl.atari import EpisodicLife as EpisodicLifeEnv


def _meanings(env: gym.Env) -> list[str]:
    return list(env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]


class _AtariError(ValueError, AssertionError):
    """An env these wrappers cannot take (SB3 asserts there)."""


class StickyActionEnv(gym.Wrapper):
    """With probability ``action_repeat_probability`` the previous action is repeated (Machado
    et al. 2018), drawn from the env's own generator."""

    def __init__(self, env: gym.Env, action_repeat_probability: float) -> None:
        super().__init__(env)
        if _meanings(env)[0] != "NOOP":
            raise _AtariError(f"StickyActionEnv: action 0 must be NOOP, got {_meanings(env)[0]}")
        self.action_repeat_probability = action_repeat_probability
        self._sticky_action = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._sticky_action = 0  # NOOP
        return self.env.reset(**kwargs)

    def step(self, action: int) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.np_random.random() >= self.action_repeat_probability:
            self._sticky_action = action
        return self.env.step(self._sticky_action)


class NoopResetEnv(gym.Wrapper):
    """A reset followed by 1..``noop_max`` no-ops (random starts; ``override_num_noops`` fixes
    the number)."""

    def __init__(self, env: gym.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        if _meanings(env)[0] != "NOOP":
            raise _AtariError(f"NoopResetEnv: action 0 must be NOOP, got {_meanings(env)[0]}")
        self.noop_max, self.noop_action = noop_max, 0
        self.override_num_noops: int | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        noops = (self.override_num_noops if self.override_num_noops is not None
                 else int(self.unwrapped.np_random.integers(1, self.noop_max + 1)))
        obs, info = np.zeros(0), dict[str, Any]()
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class FireResetEnv(gym.Wrapper):
    """FIRE then action 2 after each reset (games that wait for FIRE)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = _meanings(env)
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise _AtariError(f"FireResetEnv: action 1 must be FIRE (of 3 or more), got {meanings}")

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs = None
        for action in (1, 2):
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        return obs, {}


class MaxAndSkipEnv(gym.Wrapper):
    """Each action repeated ``skip`` times, rewards summed, the observation the maximum of the
    last two frames (Atari sprites flicker)."""

    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env)
        space = env.observation_space
        if space.dtype is None or space.shape is None:
            raise _AtariError(f"MaxAndSkipEnv needs an observation space with a shape and dtype, "
                              f"got {space}")
        self._obs_buffer = np.zeros((2, *space.shape), dtype=space.dtype)
        self._skip = skip

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        total, terminated, truncated, info = 0.0, False, False, dict[str, Any]()
        for i in range(self._skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            if i >= self._skip - 2:
                self._obs_buffer[i - (self._skip - 2)] = obs
            total += float(reward)
            if terminated or truncated:
                break
        return self._obs_buffer.max(axis=0), total, terminated, truncated, info


class ClipRewardEnv(gym.RewardWrapper):
    """Rewards as their sign: -1, 0 or +1."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


class WarpFrame(gym.ObservationWrapper):
    """RGB frames as grayscale ``height`` x ``width`` x 1 (area interpolation, OpenCV)."""

    def __init__(self, env: gym.Env, width: int = 84, height: int = 84) -> None:
        super().__init__(env)
        if not isinstance(env.observation_space, spaces.Box):
            raise _AtariError(f"WarpFrame: expected a Box observation space, got "
                              f"{env.observation_space}")
        self.width, self.height = width, height
        self.observation_space = spaces.Box(0, 255, (height, width, 1),
                                            dtype=env.observation_space.dtype)

    def observation(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (self.width, self.height), interpolation=cv2.INTER_AREA)[:, :, None]


class AtariWrapper(gym.Wrapper):
    """SB3's Atari preprocessing (for ``*NoFrameskip-v4`` ids or ``frameskip=1``): sticky
    actions (off by default), no-op starts, frame skipping with max-pooling, a life loss as an
    episode end, FIRE on reset, 84x84 grayscale, rewards clipped to their sign."""

    def __init__(self, env: gym.Env, noop_max: int = 30, frame_skip: int = 4,
                 screen_size: int = 84, terminal_on_life_loss: bool = True,
                 clip_reward: bool = True, action_repeat_probability: float = 0.0) -> None:
        if action_repeat_probability > 0.0:
            env = StickyActionEnv(env, action_repeat_probability)
        if noop_max > 0:
            env = NoopResetEnv(env, noop_max=noop_max)
        if frame_skip > 1:
            env = MaxAndSkipEnv(env, skip=frame_skip)
        if terminal_on_life_loss:
            env = EpisodicLifeEnv(env)
        if "FIRE" in _meanings(env):
            env = FireResetEnv(env)
        env = WarpFrame(env, width=screen_size, height=screen_size)
        if clip_reward:
            env = ClipRewardEnv(env)
        super().__init__(env)


__all__ = ["AtariWrapper", "ClipRewardEnv", "EpisodicLifeEnv", "FireResetEnv", "MaxAndSkipEnv",
           "NoopResetEnv", "StickyActionEnv", "WarpFrame"]
