"""The algorithm base class, shaped like Stable-Baselines3's ``BaseAlgorithm``.

``Algo(env, seed=0, **hyperparams)`` builds the vector environment, the networks and optimizers;
``learn(total_timesteps, callback=None, progress_bar=False)`` trains (call it again with
``reset_num_timesteps=False`` to continue in chunks); ``predict(obs, deterministic=True)`` acts;
``save(path)`` / ``Algo.load(path)`` go through rlgrad's safe checkpoints. The complete training
state (networks, optimizers, counters, RNG streams, normaliser, optionally the replay buffer) is
``get_state()``: nested dicts of arrays, numbers and strings, restored by ``set_state``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad.nn import init as nn_init
from rlgrad.random import Generator, generator_state_dict, load_generator_state
from rlgrad.rl.callbacks import BaseCallback, make_callback
from rlgrad.rl.envs import (
    EnvLike,
    EpisodeStatistics,
    StepAdapter,
    find_episode_statistics,
    flat_obs_dim,
    get_env_state,
    make_vec_env,
    preprocess_obs,
    set_env_state,
)
from rlgrad.rl.finite import NonFiniteError
from rlgrad.rl.hyperparams import capture, constructor_hyperparams
from rlgrad.rl.logger import Logger
from rlgrad.rl.normalize import Normalizer
from rlgrad.rl.progress import ProgressBar
from rlgrad.rl.ranges import check_hyperparams, check_relations
from rlgrad.rl.runtime import keep_freed_memory, limit_blas_threads
from rlgrad.rl.schedules import Schedule, get_schedule_fn, linear_schedule
from rlgrad.rl.steps import set_grads

# The helpers that lived here keep their old import path (rlgrad.rl.base.<name>).
rng_state, set_rng_state = generator_state_dict, load_generator_state
__all__ = ["BaseAlgorithm", "Schedule", "action_space_error", "constructor_hyperparams",
           "get_schedule_fn", "keep_freed_memory", "linear_schedule", "rng_state", "set_grads",
           "set_rng_state"]


def action_space_error(name: str, allowed: tuple[type, ...], space: spaces.Space) -> str:
    """One line: which action space the algorithm needs, what it got, what to use instead."""
    if allowed == (spaces.Discrete,):
        return (f"{name} needs a discrete (Discrete) action space, got {space}: for continuous "
                "actions use SAC, TD3 or DDPG")
    if allowed == (spaces.Box,):
        return (f"{name} needs a continuous (Box) action space, got {space}: for discrete actions "
                "use DQN, PPO or A2C")
    kinds = " or ".join(t.__name__ for t in allowed)
    return f"{name} supports {kinds} action spaces, got {space}"


class BaseAlgorithm:
    """Shared machinery: environment, seeding, counters, logging, callbacks, predict, save/load."""

    _abstract = True  # not an algorithm itself (see rlgrad.rl.hyperparams)
    #: keys of the constructor that describe the environment rather than the learner
    _env_keys: ClassVar[tuple[str, ...]] = ("n_envs", "normalize")
    #: the Gymnasium action spaces the algorithm takes: checked when it is built, and read by the
    #: CLI to refuse an environment before building anything
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box)
    #: whether ``env_runners > 0`` (rollouts on Ray actors, rlgrad.rl.distributed) is supported
    env_runner_sampling: ClassVar[bool] = False

    def __new__(cls, *args: Any, **kwargs: Any) -> BaseAlgorithm:
        # the hyperparameters of this call, through the whole class chain (rlgrad.rl.hyperparams)
        obj = super().__new__(cls)
        obj._hyperparams = capture(cls, args, kwargs) or {}
        return obj

    def __init__(self, env: EnvLike, seed: int | None = 0, n_envs: int = 1,
                 normalize: bool | dict[str, Any] = False, learning_rate: float | str | Schedule = 3e-4,
                 gamma: float = 0.99, policy_kwargs: dict[str, Any] | None = None,
                 verbose: int = 0, env_kwargs: dict[str, Any] | None = None,
                 vectorization_mode: str | None = None, blas_threads: int | None = 1,
                 check_finite: bool = True, env_runners: int = 0) -> None:
        check_hyperparams(type(self).__name__, self._hyperparams)  # before anything is built
        if env_runners and not self.env_runner_sampling:
            raise ValueError(f"{type(self).__name__}: env_runners={env_runners}: rollouts on Ray "
                             "env runners are implemented for REINFORCE, A2C and PPO only so far")
        if env_runners and not isinstance(env, str):
            raise ValueError(f"{type(self).__name__}: env_runners={env_runners} needs the "
                             "environment as an id (each runner builds its own copies)")
        self.env_runners = int(env_runners)
        self._sampler: Any = None  # the Ray env runners' driver (rlgrad.rl.distributed)
        self._env_arg = env  # what env runners build their own copies from
        if blas_threads is not None:
            limit_blas_threads(blas_threads)
        keep_freed_memory()
        self.env_id = env if isinstance(env, str) else getattr(getattr(env, "spec", None), "id", None)
        self.seed = 0 if seed is None else int(seed)
        self.n_envs = n_envs
        self.verbose = verbose
        self.gamma = float(gamma)
        self.learning_rate = learning_rate
        self.lr_schedule = get_schedule_fn(learning_rate)
        self.policy_kwargs = dict(policy_kwargs or {})
        # Seeding: network initialisation draws from rlgrad.nn.init's generator, SAC's rsample
        # from self.generator, everything else (action sampling, exploration, minibatch order,
        # replay sampling) from self.rng, its NumPy generator; the env copies get seed + i.
        rlgrad.random.seed(self.seed)
        nn_init.manual_seed(self.seed)
        self.generator = Generator(self.seed)
        self.rng = self.generator.numpy
        self.env = make_vec_env(env, n_envs=n_envs, env_kwargs=env_kwargs,
                                vectorization_mode=vectorization_mode, record_statistics=False)
        self.n_envs = self.env.num_envs
        self.observation_space: spaces.Space = self.env.single_observation_space
        self.action_space: spaces.Space = self.env.single_action_space
        check_relations(type(self).__name__, {**self._hyperparams, "n_envs": self.n_envs})
        if not isinstance(self.action_space, self.action_spaces):
            raise ValueError(action_space_error(type(self).__name__, self.action_spaces,
                                                self.action_space))
        self.obs_dim = flat_obs_dim(self.observation_space)
        # episode statistics: a RecordEpisodeStatistics wrapper the env comes with, else kept by
        # the step adapter (the same numbers, less work per step)
        wrapper = find_episode_statistics(self.env)
        own = EpisodeStatistics(self.n_envs) if wrapper is None else None
        self._adapter = StepAdapter(self.env, check_finite=check_finite, statistics=own)
        self._ep_stats: Any = wrapper if own is None else own
        self.normalizer: Normalizer | None = None
        if normalize:
            opts = dict(normalize) if isinstance(normalize, dict) else {}
            opts.setdefault("gamma", self.gamma)
            self.normalizer = Normalizer(self.obs_dim, self.n_envs, **opts)
        self.logger = Logger()
        self.num_timesteps = 0
        self._total_timesteps = 0
        self._n_updates = 0
        self._episode_num = 0
        self._last_obs: np.ndarray | None = None  # raw observations of the vector env
        self._env_seeded = False
        self._current_progress_remaining = 1.0
        self._start_time = 0.0
        self._num_timesteps_at_start = 0
        self._stop = False

    def net_kwargs(self, **defaults: Any) -> dict[str, Any]:
        """``policy_kwargs`` over the algorithm's network defaults (the one way every algorithm
        reads them); a key the networks do not take is refused in one line."""
        unknown = sorted(set(self.policy_kwargs) - set(defaults))
        if unknown:
            raise ValueError(f"{type(self).__name__}: policy_kwargs has no key "
                             f"{', '.join(map(repr, unknown))}; it takes {', '.join(defaults)}")
        return {**defaults, **self.policy_kwargs}

    # ---- hooks for subclasses -------------------------------------------------------------
    def _iteration(self, callback: BaseCallback | None) -> bool:
        """One collection + update; False stops training."""
        raise NotImplementedError

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Environment actions for a batch of preprocessed (normalised) observations."""
        raise NotImplementedError

    def _modules(self) -> dict[str, Any]:
        """Named networks (their state_dicts go into checkpoints)."""
        raise NotImplementedError

    def _optimizers(self) -> dict[str, Any]:
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's state as this version names it (older layouts stay loadable)."""
        return state

    # ---- observations -----------------------------------------------------------------------
    def _obs(self, raw: np.ndarray, update: bool) -> np.ndarray:
        x = preprocess_obs(raw, self.observation_space)
        if self.normalizer is None:
            return x
        return self.normalizer.process_obs(x) if update else self.normalizer.normalize_obs(x)

    # ---- training loop ------------------------------------------------------------------------
    def _setup_learn(self, total_timesteps: int, reset_num_timesteps: bool) -> None:
        self._start_time = time.perf_counter()
        if reset_num_timesteps or self._last_obs is None:
            if reset_num_timesteps:
                self.num_timesteps = 0
                self._episode_num = 0
            # the first reset is seeded (sub-environment i gets seed + i); later ones continue
            seed = None if self._env_seeded else self.seed
            if seed is not None:
                self.env.action_space.seed(seed)
                self.action_space.seed(seed)
            self._last_obs = self._adapter.reset(seed=seed)
            self._env_seeded = True
            self._on_reset()
        self._total_timesteps = int(total_timesteps) + (0 if reset_num_timesteps else self.num_timesteps)
        self._num_timesteps_at_start = self.num_timesteps

    def _on_reset(self) -> None:
        if self.normalizer is not None:
            self.normalizer.update_obs(preprocess_obs(self._last_obs, self.observation_space))

    def _update_progress(self) -> None:
        # clamped: the last rollout may overshoot the budget (a linear schedule must not go < 0)
        self._current_progress_remaining = max(
            0.0, 1.0 - self.num_timesteps / max(self._total_timesteps, 1))

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int | None = None,
              progress_bar: bool = False, reset_num_timesteps: bool = True) -> BaseAlgorithm:
        """Train for ``total_timesteps`` environment steps (summed over the vector env copies)."""
        if log_interval is not None:
            self.log_interval = log_interval
        self._setup_learn(total_timesteps, reset_num_timesteps)
        cb = make_callback(callback)
        if cb is not None:
            cb.init_callback(self)
            cb.on_training_start()
        bar = ProgressBar(self._total_timesteps, self) if progress_bar else None
        try:
            while self.num_timesteps < self._total_timesteps:
                try:
                    if not self._iteration(cb):
                        break
                except NonFiniteError as e:
                    raise NonFiniteError(f"{type(self).__name__} on {self.env_id}, after "
                                         f"{self.num_timesteps} timesteps: {e}") from None
                if bar is not None:
                    bar.update()
                if cb is not None and cb.on_iteration_end() is False:
                    break
        finally:
            if bar is not None:
                bar.close()
        if cb is not None:
            cb.on_training_end()
        return self

    def _record_rollout_stats(self) -> None:
        st = self._ep_stats
        if len(st.return_queue):
            self.logger.record("rollout/ep_rew_mean", float(np.mean(st.return_queue)))
            self.logger.record("rollout/ep_len_mean", float(np.mean(st.length_queue)))
        elapsed = max(time.perf_counter() - self._start_time, 1e-9)
        self.logger.record("time/fps", int((self.num_timesteps - self._num_timesteps_at_start) / elapsed))
        self.logger.record("time/time_elapsed", elapsed)
        self.logger.record("time/episodes", int(st.episode_count))

    def close_env_runners(self) -> None:
        """Stop the Ray env runners of ``env_runners > 0``, and Ray if it was started for them
        (a later ``learn`` starts new ones)."""
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.close()

    # ---- acting ---------------------------------------------------------------------------------
    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, None]:
        """Actions for one observation or a batch (SB3's signature: returns ``(actions, None)``)."""
        obs = np.asarray(observation)
        space = self.observation_space
        single = obs.shape == space.shape if isinstance(space, spaces.Box) else obs.ndim == 0
        if single:
            obs = obs[None]
        with rlgrad.no_grad():
            actions = self._predict(self._obs(obs, update=False), deterministic)
        return (actions[0] if single else actions), None

    # ---- state ---------------------------------------------------------------------------------
    def get_state(self, include_replay_buffer: bool = True) -> dict[str, Any]:
        """Everything needed to continue training exactly: nested dicts of arrays/numbers/strings."""
        state: dict[str, Any] = {
            "modules": {k: m.state_dict() for k, m in self._modules().items()},
            "optimizers": {k: o.state_dict() for k, o in self._optimizers().items()},
            "counters": {"num_timesteps": self.num_timesteps, "n_updates": self._n_updates,
                         "episode_num": self._episode_num, "total_timesteps": self._total_timesteps},
            "rng": {"algo": generator_state_dict(self.rng),
                    "global": generator_state_dict(rlgrad.random.default_generator.numpy)},
        }
        if self.normalizer is not None:
            state["normalizer"] = self.normalizer.state_dict()
        if self._last_obs is not None:
            state["env"] = {"last_obs": np.asarray(self._last_obs).copy(),
                            "prev_done": self._adapter.prev_done.copy(),
                            "vector_env": get_env_state(self.env)}
            if self._adapter.statistics is not None:
                state["env"]["episode_statistics"] = self._adapter.statistics.state_dict()
        state.update(self._extra_state())
        if not include_replay_buffer:
            state.pop("replay_buffer", None)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._upgrade_state(state)
        for k, m in self._modules().items():
            m.load_state_dict(state["modules"][k])
        for k, o in self._optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        c = state["counters"]
        self.num_timesteps = int(c["num_timesteps"])
        self._n_updates = int(c["n_updates"])
        self._episode_num = int(c["episode_num"])
        self._total_timesteps = int(c["total_timesteps"])
        load_generator_state(self.rng, state["rng"]["algo"])
        load_generator_state(rlgrad.random.default_generator.numpy, state["rng"]["global"])
        if self.normalizer is not None and "normalizer" in state:
            self.normalizer.load_state_dict(state["normalizer"])
        if "env" in state:
            self._last_obs = np.asarray(state["env"]["last_obs"])
            self._adapter.prev_done = np.asarray(state["env"]["prev_done"], dtype=bool).copy()
            if "vector_env" in state["env"]:
                set_env_state(self.env, state["env"]["vector_env"], self._adapter.statistics)
            if "episode_statistics" in state["env"] and self._adapter.statistics is not None:
                self._adapter.statistics.load_state_dict(state["env"]["episode_statistics"])
            self._env_seeded = True
        self._set_extra_state(state)

    def get_hyperparams(self) -> dict[str, Any]:
        """The constructor arguments (JSON-like) that rebuild this algorithm."""
        return dict(self._hyperparams)

    def save(self, path: str, include_replay_buffer: bool = False) -> None:
        hp = self.get_hyperparams()
        for k, v in hp.items():
            if callable(v):
                raise ValueError(
                    f"hyperparameter {k!r} is a function and cannot be saved; use a number or a "
                    "'lin_X' string"
                )
        rlgrad.save({
            "algo": type(self).__name__, "env_id": self.env_id or "", "seed": self.seed,
            "hyperparams": hp, "state": self.get_state(include_replay_buffer),
        }, path)

    @classmethod
    def load(cls, path: str, env: EnvLike | None = None, **overrides: Any) -> BaseAlgorithm:
        ckpt = rlgrad.load(path)
        if ckpt["algo"] != cls.__name__:
            raise ValueError(f"{path} holds a {ckpt['algo']} checkpoint, not {cls.__name__}")
        env = env if env is not None else ckpt["env_id"]
        if not env:
            raise ValueError("this checkpoint was trained on an environment instance; pass env=")
        hp = dict(ckpt["hyperparams"])
        hp.update(overrides)
        model = cls(env, seed=int(ckpt["seed"]), **hp)
        model.set_state(ckpt["state"])
        return model
