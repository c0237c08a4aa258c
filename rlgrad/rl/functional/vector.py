"""A functional environment (``FuncEnv``) as an ordinary Gymnasium environment and vector env.

``FunctionalVectorEnv(func_env, num_envs, max_episode_steps)`` steps all copies with one call of
the functions on a batch of states, and behaves as ``gym.make_vec(id, num_envs,
vectorization_mode="sync")`` does (autoreset on the next step, copy i seeded with seed + i, the
time limit as a truncation), with the same numbers: so every algorithm, wrapper and the CLI can
use it. ``FunctionalEnv`` is one copy, as ``gym.make(id)`` is.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.experimental.functional import FuncEnv
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlgrad.rl.functional.keys import ENV_STREAM, KeyGenerator


def _seeds(seed: int | list[int | None] | None, n: int) -> list[int | None]:
    """Gymnasium's vector-env rule: an int seeds copy i with seed + i; a list gives each its own."""
    if seed is None or isinstance(seed, (int, np.integer)):
        return [None if seed is None else int(seed) + i for i in range(n)]
    if len(seed) != n:
        raise ValueError(f"reset(seed=...) got {len(seed)} seeds for {n} copies: give one per copy "
                         "or one int")
    return list(seed)


class FunctionalVectorEnv(VectorEnv):
    """``num_envs`` copies of ``func_env`` stepped as one batch of states. ``key_rng=True``: a
    copy seeded with ``s`` draws its first states from ``KeyGenerator.from_seed(s, ENV_STREAM)``
    (the compiled loop's stream, ``rlgrad.rl.functional.keys``) instead of Gymnasium's
    ``np_random(s)``, so an eager run starts its episodes where the compiled loop does."""

    def __init__(self, func_env: FuncEnv, num_envs: int = 1,
                 max_episode_steps: int | None = None, key_rng: bool = False) -> None:
        self.func_env, self.num_envs, self.max_episode_steps = func_env, num_envs, max_episode_steps
        self.key_rng = key_rng
        self.single_observation_space = func_env.observation_space
        self.single_action_space = func_env.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self.render_mode = None
        self._rngs: list[Any] = [self._generator(None) for _ in range(num_envs)]
        self.state: np.ndarray | None = None
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def _generator(self, seed: int | None) -> Any:
        """Copy's generator for ``seed`` (None: from the OS's entropy)."""
        if self.key_rng:
            s = int(np.random.SeedSequence().entropy % 2**62) if seed is None else seed
            return KeyGenerator.from_seed(s, ENV_STREAM)
        return seeding.np_random(seed)[0]

    def _initial(self, which: np.ndarray) -> None:
        """New first states for the copies in ``which`` (from each copy's own generator)."""
        fresh = [self.func_env.initial(self._rngs[i]) for i in np.flatnonzero(which)]
        if self.state is None:
            self.state = np.stack(fresh)
        elif fresh:
            self.state[which] = np.stack(fresh)
        self._steps[which] = 0

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError(f"reset(options={options!r}): functional environments take no "
                             "reset options; use gym.make_vec for custom reset bounds")
        for i, s in enumerate(_seeds(seed, self.num_envs)):
            if s is not None:  # else the copy goes on with its generator, as Gymnasium's
                self._rngs[i] = self._generator(s)
        self.state = None
        self._initial(np.ones(self.num_envs, dtype=bool))
        self._autoreset[:] = False
        return np.asarray(self.func_env.observation(self.state)), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        if self.state is None:
            raise RuntimeError("step() before reset(): call reset() first")
        actions = np.asarray(actions)
        f = self.func_env
        nxt = np.asarray(f.transition(self.state, actions))
        reward = np.asarray(f.reward(self.state, actions, nxt), dtype=np.float64)
        terminated = np.asarray(f.terminal(nxt), dtype=bool)
        self.state = nxt
        self._steps += 1
        truncated = (np.zeros(self.num_envs, dtype=bool) if self.max_episode_steps is None
                     else self._steps >= self.max_episode_steps)
        reset = self._autoreset
        if reset.any():  # the step after a done starts a new episode, as Gymnasium's NEXT_STEP
            self._initial(reset)
            reward[reset], terminated[reset], truncated[reset] = 0.0, False, False
        self._autoreset = terminated | truncated
        return np.asarray(f.observation(self.state)), reward, terminated, truncated, {}


class FunctionalEnv(gym.Env):
    """One copy of ``func_env`` as an ordinary Gymnasium environment (``gym.make`` adds the time
    limit from the registration, as for Gymnasium's own)."""

    def __init__(self, func_env: FuncEnv, render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode={render_mode!r}: functional environments do not render; "
                             "use Gymnasium's own id to watch an agent")
        self.func_env = func_env
        self.observation_space, self.action_space = func_env.observation_space, func_env.action_space
        self.state: np.ndarray | None = None

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"reset(options={options!r}): functional environments take no "
                             "reset options")
        self.state = self.func_env.initial(self.np_random)
        return np.asarray(self.func_env.observation(self.state)), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.state is None:
            raise RuntimeError("step() before reset(): call reset() first")
        action = np.asarray(action)
        nxt = np.asarray(self.func_env.transition(self.state, action))
        reward = float(self.func_env.reward(self.state, action, nxt))
        self.state = nxt
        return (np.asarray(self.func_env.observation(nxt)), reward,
                bool(self.func_env.terminal(nxt)), False, {})
