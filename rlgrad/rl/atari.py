"""Pixel environments: Atari (ALE, through ``ale-py``) with DeepMind's preprocessing, and MinAtar.

The preprocessing is Gymnasium's own ``AtariPreprocessing`` (no-op reset, frame skip 4 with
max-pooling of the last two frames, 84x84 grayscale) and ``FrameStackObservation(4)``; what
Gymnasium has no wrapper for is added here as three small wrappers:

* ``AtariGameStatistics``: the raw score and length of whole games (all lives), in ``info`` on the
  step where the game really ends, under the keys ``GAME_RETURN`` ("game_return", float: the sum of
  the unclipped rewards) and ``GAME_LENGTH`` ("game_length", int: agent steps of 4 frames, the
  no-op reset's steps not counted). It sits inside the life-loss and clipping wrappers, so training
  logs can report the score that papers and SB3's ``Monitor`` report, not the clipped per-life one.
* ``EpisodicLife``: for training, an episode ends at a life loss but the game goes on (DQN 3.0).
* ``FireReset``: presses FIRE after each reset in the games that have it (Breakout waits for it).

Layering, inside out: ALE env (frameskip=1) -> AtariPreprocessing -> AtariGameStatistics ->
[EpisodicLife] -> FireReset -> [sign of the reward] -> FrameStackObservation; the bracketed ones
for training only (evaluation presses FIRE after a life loss instead). Observations are uint8
(4, 84, 84): the network scales them, not the buffer.

Ids are registered lazily: ``ALE/<Game>-v5`` and ``<Game>NoFrameskip-v4`` need ``ale-py``,
``MinAtar/<Game>-v0|v1`` needs ``minatar``; both come with ``pip install 'rlgrad[atari]'``.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    TransformObservation,
    TransformReward,
)
from gymnasium.wrappers.vector import RecordEpisodeStatistics

EXTRA_HINT = "pip install 'rlgrad[atari]'"
GAME_RETURN = "game_return"
GAME_LENGTH = "game_length"

_ALE_V5 = re.compile(r"^ALE/[A-Za-z0-9]+-v5$")
_NOFRAMESKIP_V4 = re.compile(r"^[A-Za-z0-9]+NoFrameskip-v4$")
_MINATAR = re.compile(r"^MinAtar/[A-Za-z0-9]+-v[01]$")


# ---- ids and registration -------------------------------------------------------------------------
def pixel_env_kind(env_id: str) -> str | None:
    """"atari" for ``ALE/...`` and ``...NoFrameskip-v4`` ids, "minatar" for ``MinAtar/...``, else None.

    Judged from the id's form alone (no import): an id of the family with a misspelt game is still
    the family's, so that its error can say what the family has."""
    if env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4"):
        return "atari"
    if env_id.startswith("MinAtar/"):
        return "minatar"
    return None


def _import_extra(module: str, env_id: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{env_id!r} needs the {module} package, which is not installed ({e}): {EXTRA_HINT}"
        ) from None


def register_pixel_envs(env_id: str) -> str:
    """Registers the ids of ``env_id``'s family with Gymnasium (ale-py's or minatar's), then checks
    that ``env_id`` is one of them and of a form this module preprocesses; returns its kind.

    Raises ImportError (one line naming the ``pip install`` that fixes it) when the package is
    missing, ValueError (with a did-you-mean) for an unknown game or an unsupported version."""
    kind = pixel_env_kind(env_id)
    if kind is None:
        raise ValueError(f"{env_id!r} is not an Atari (ALE/<Game>-v5, <Game>NoFrameskip-v4) or "
                         "MinAtar (MinAtar/<Game>-v1) id")
    if kind == "atari":
        ale_py = _import_extra("ale_py", env_id)
        gym.register_envs(ale_py)
        pattern, family = (_ALE_V5, "ALE/") if env_id.startswith("ALE/") else (_NOFRAMESKIP_V4, "")
        forms = "ALE/<Game>-v5 or <Game>NoFrameskip-v4"
    else:
        mg = _import_extra("minatar.gym", env_id)
        if "MinAtar/Breakout-v1" not in gym.registry:
            mg.register_envs()
        pattern, family, forms = _MINATAR, "MinAtar/", "MinAtar/<Game>-v0 or -v1"
    if env_id not in gym.registry or not pattern.match(env_id):
        known = [k for k in gym.registry if pattern.match(k) and k.startswith(family)]
        raise ValueError(f"unknown {kind} environment {env_id!r} (ids have the form {forms})."
                         f"{_did_you_mean(env_id, known)}")
    return kind


def _did_you_mean(env_id: str, known: list[str]) -> str:
    import difflib

    lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(env_id.lower(), list(lower), n=3, cutoff=0.6)
    return f" Did you mean: {', '.join(lower[c] for c in close)}?" if close else ""


# ---- wrappers Gymnasium does not have -----------------------------------------------------------
class AtariGameStatistics(gym.Wrapper):
    """Puts the raw return and length of the whole game in ``info`` when the game ends (terminated or
    truncated by the environment itself, not by a life loss): keys ``GAME_RETURN``, ``GAME_LENGTH``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.game_return, self.game_length = 0.0, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        self.game_return, self.game_length = 0.0, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += float(reward)
        self.game_length += 1
        if terminated or truncated:
            info = {**info, GAME_RETURN: self.game_return, GAME_LENGTH: self.game_length}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A life loss ends the training episode (``terminated``) while the game goes on: the next
    ``reset`` takes one no-op step instead of restarting the game, unless the game is over.

    This is DQN 3.0's and SB3's ``EpisodicLifeEnv`` semantics. Gymnasium's
    ``AtariPreprocessing(terminal_on_life_loss=True)`` also reports a life loss as terminated, but
    the autoreset that follows restarts the whole game: the agent would only ever play its first
    life and never see the states of later lives (in Breakout: fewer bricks, a faster ball)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self._lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # soft reset: the game continues from the state after the lost life
            obs, _, terminated, truncated, step_info = self.env.step(0)
            info = step_info
            if terminated or truncated:  # the game ended during that no-op step: keep its score
                obs, info = self.env.reset(options=options)
                info = {**info, **{k: step_info[k] for k in (GAME_RETURN, GAME_LENGTH)
                                   if k in step_info}}
        self.game_over = False
        self.lives = self._lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE after every reset (including the soft reset after a life loss): Breakout and
    other games wait for it, and an untrained agent may never press it (SB3's ``FireResetEnv``).

    ``on_life_loss``: also after a life loss within the episode (evaluation, whole games): a
    deterministic policy that never presses FIRE would otherwise wait until the game's time limit
    (27,000 steps). The FIRE step's reward goes to the step that lost the life."""

    def __init__(self, env: gym.Env, on_life_loss: bool = False) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if "FIRE" not in meanings:
            raise ValueError(f"{env.spec.id if env.spec else env} has no FIRE action: {meanings}")
        self.fire = meanings.index("FIRE")
        self.on_life_loss = on_life_loss
        self.lives = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for _ in range(100):  # bounded: a FIRE that ends the episode is followed by a new reset
            obs, _, terminated, truncated, _ = self.env.step(self.fire)
            if not (terminated or truncated):
                break
            obs, info = self.env.reset(options=options)
        self.lives = int(self.env.unwrapped.ale.lives())
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self.on_life_loss:
            return obs, reward, terminated, truncated, info
        lives = int(self.env.unwrapped.ale.lives())
        if 0 < lives < self.lives and not (terminated or truncated):
            obs, r, terminated, truncated, info = self.env.step(self.fire)
            reward += r
        self.lives = lives
        return obs, reward, terminated, truncated, info


def _sign(reward: Any) -> float:
    return float(np.sign(reward))


# ---- factories --------------------------------------------------------------------------------------
def make_atari_env(env_id: str, training: bool, *, noop_max: int = 30, frame_skip: int = 4,
                   screen_size: int = 84, frame_stack: int = 4,
                   terminal_on_life_loss: bool | None = None, clip_reward: bool | None = None,
                   **make_kwargs: Any) -> gym.Env:
    """One Atari env with DeepMind's preprocessing; observations uint8 (frame_stack, H, W).

    ``training`` turns on the life-loss episode ends and the reward's sign (each can be set apart
    by ``terminal_on_life_loss`` / ``clip_reward``); evaluation keeps whole games and raw scores.
    ``make_kwargs`` go to ``gym.make`` (e.g. ``render_mode``, ``repeat_action_probability``: the v5
    ids keep ALE's sticky actions, 0.25, as Machado et al. 2018 recommend)."""
    register_pixel_envs(env_id)
    if pixel_env_kind(env_id) != "atari":
        raise ValueError(f"{env_id!r} is not an Atari id: use make_minatar_env")
    make_kwargs.setdefault("frameskip", 1)  # AtariPreprocessing does the skipping (and max-pooling)
    return wrap_atari(gym.make(env_id, **make_kwargs), training, noop_max=noop_max,
                      frame_skip=frame_skip, screen_size=screen_size, frame_stack=frame_stack,
                      terminal_on_life_loss=terminal_on_life_loss, clip_reward=clip_reward)


def wrap_atari(env: gym.Env, training: bool, *, noop_max: int = 30, frame_skip: int = 4,
               screen_size: int = 84, frame_stack: int = 4, terminal_on_life_loss: bool | None = None,
               clip_reward: bool | None = None) -> gym.Env:
    """The wrappers of ``make_atari_env`` around an ALE env created with ``frameskip=1``."""
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
                             terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    env = AtariGameStatistics(env)
    episodic_life = training if terminal_on_life_loss is None else terminal_on_life_loss
    if episodic_life:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env, on_life_loss=not episodic_life)
    if training if clip_reward is None else clip_reward:
        env = TransformReward(env, _sign)
    return FrameStackObservation(env, frame_stack)


def _channels_first_uint8(obs: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(obs, -1, 0), dtype=np.uint8)


class MinAtarRender(gym.Wrapper):
    """MinAtar's ``rgb_array`` frames are 10x10 float colours (seaborn's palette); videos want
    uint8 images of a watchable size: each cell becomes ``scale`` x ``scale`` pixels."""

    def __init__(self, env: gym.Env, scale: int = 16, fps: int = 15) -> None:
        super().__init__(env)
        self.scale = int(scale)
        self.metadata = {**env.metadata, "render_fps": fps}

    def render(self) -> Any:
        frame = self.env.render()
        if self.render_mode != "rgb_array" or frame is None:
            return frame
        img = np.round(np.clip(np.asarray(frame, dtype=np.float64), 0.0, 1.0) * 255).astype(np.uint8)
        return np.repeat(np.repeat(img, self.scale, axis=0), self.scale, axis=1)


def make_minatar_env(env_id: str, **make_kwargs: Any) -> gym.Env:
    """One MinAtar env; its 10x10xC boolean observations become channels-first uint8 (C, 10, 10).

    uint8 rather than float32: the values are 0/1 either way, a replay buffer holds them in a
    quarter of the memory, and the network casts them to float32 (without scaling).
    ``render_mode="rgb_array"`` renders uint8 160x160 images (``MinAtarRender``)."""
    register_pixel_envs(env_id)
    if pixel_env_kind(env_id) != "minatar":
        raise ValueError(f"{env_id!r} is not a MinAtar id: use make_atari_env")
    if make_kwargs.get("render_mode") == "rgb_array":
        # Gymnasium's checker would warn once about the float frames MinAtarRender converts
        make_kwargs.setdefault("disable_env_checker", True)
    env = gym.make(env_id, **make_kwargs)
    h, w, c = env.observation_space.shape
    space = spaces.Box(0, 1, shape=(c, h, w), dtype=np.uint8)
    env = TransformObservation(env, _channels_first_uint8, space)
    return MinAtarRender(env) if env.render_mode == "rgb_array" else env


def make_pixel_env(env_id: str, training: bool, **kwargs: Any) -> gym.Env:
    """``make_atari_env`` or ``make_minatar_env``, by the id's form."""
    if pixel_env_kind(env_id) == "minatar":
        return make_minatar_env(env_id, **kwargs)
    return make_atari_env(env_id, training, **kwargs)


# ---- vector envs ------------------------------------------------------------------------------------
class RecordPixelStatistics(RecordEpisodeStatistics):
    """Gymnasium's ``RecordEpisodeStatistics`` whose finished-episode statistics (``return_queue``,
    ``length_queue``, ``episode_count``) go into checkpoints (``state_dict``): pixel envs are not
    snapshot (a resumed run starts from a fresh reset), but its ``ep_rew_mean`` continues from the
    episodes the checkpoint had seen instead of starting empty."""

    def state_dict(self) -> dict[str, Any]:
        return {"return_queue": np.asarray(self.return_queue, dtype=np.float64),
                "length_queue": np.asarray(self.length_queue, dtype=np.int64),
                "episode_count": int(self.episode_count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.return_queue.clear()
        self.return_queue.extend(float(x) for x in np.asarray(state["return_queue"]).reshape(-1))
        self.length_queue.clear()
        self.length_queue.extend(int(x) for x in np.asarray(state["length_queue"]).reshape(-1))
        self.episode_count = int(state["episode_count"])


class RecordGameStatistics(RecordPixelStatistics):
    """The vector env's episode statistics for Atari training envs: ``return_queue``,
    ``length_queue`` and ``episode_count`` count whole games with their raw score (the
    ``GAME_RETURN`` / ``GAME_LENGTH`` infos), not the clipped per-life training episodes, so logs,
    TensorBoard and the progress bar report what papers and SB3's ``Monitor`` report. Saved in
    checkpoints as ``RecordPixelStatistics``; a game under way at a checkpoint is not (the resumed
    run resets its envs)."""

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        mask = infos.get("_" + GAME_RETURN)
        if mask is not None and np.any(mask):
            idx = np.flatnonzero(mask)
            self.return_queue.extend(np.asarray(infos[GAME_RETURN], dtype=np.float64)[idx])
            self.length_queue.extend(np.asarray(infos[GAME_LENGTH], dtype=np.int64)[idx])
            self.episode_count += len(idx)
        return obs, rewards, terminated, truncated, infos


def make_pixel_vec_env(env_id: str, n_envs: int, training: bool = True,
                       vectorization_mode: str | None = None,
                       env_kwargs: dict[str, Any] | None = None,
                       wrappers: Any = None, record_statistics: bool = True) -> Any:
    """``n_envs`` copies of ``make_pixel_env(env_id, training)`` in a Sync (or, with
    ``vectorization_mode="async"``, Async) vector env with episode statistics: an Atari training
    env always records raw whole-game scores (``RecordGameStatistics``: the algorithms' logs use
    them); otherwise Gymnasium's ``RecordEpisodeStatistics`` if ``record_statistics`` (as
    ``RecordPixelStatistics``: checkpoints keep its statistics)."""
    register_pixel_envs(env_id)  # one clear line for a missing package or game, before any copy
    kwargs = dict(env_kwargs or {})

    def make() -> gym.Env:
        env = make_pixel_env(env_id, training, **kwargs)
        for w in wrappers or ():
            env = w(env)
        return env

    cls = gym.vector.AsyncVectorEnv if vectorization_mode == "async" else gym.vector.SyncVectorEnv
    venv = cls([make] * n_envs)
    if training and pixel_env_kind(env_id) == "atari":
        return RecordGameStatistics(venv, buffer_length=100)
    return RecordPixelStatistics(venv, buffer_length=100) if record_statistics else venv
