"""Callbacks in Stable-Baselines3's shape: hooks a training loop calls, any of which can stop it.

``learn(callback=...)`` takes a ``BaseCallback``, a list of them, or a plain function: rlgrad's
``fn(algo) -> bool | None`` called after every vector-environment step (return False to stop), or
SB3's ``fn(locals, globals) -> bool`` (a function of two arguments). ``on_iteration_end`` runs
after each update (one rollout + update for on-policy algorithms, one collection + gradient steps
for off-policy ones): the natural point to checkpoint, since the algorithm's whole state is
consistent there.

SB3's callbacks are here with its arguments and files: ``EvalCallback`` (``evaluations.npz``
with ``timesteps``, ``results``, ``ep_lengths``; ``best_model`` saved on a new best),
``CheckpointCallback``, ``StopTrainingOnRewardThreshold``, ``StopTrainingOnNoModelImprovement``,
``StopTrainingOnMaxEpisodes``, ``EveryNTimesteps``, ``LogEveryNTimesteps``,
``ProgressBarCallback``. A subclass overrides SB3's ``_on_step`` (and ``_init_callback``,
``_on_training_start``, ...) and reads ``self.model``, ``self.num_timesteps``, ``self.n_calls``,
``self.training_env``, ``self.logger``, ``self.locals``.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.rl.evaluation import evaluate_policy
from rlgrad.rl.vec_env import (
    VecEnvWrapper,
    as_vec_env,
    sync_envs_normalization,
    unwrap_vec_normalize,
)


class BaseCallback:
    #: whether it reads ``self.locals`` (the loop then fills them at every step, ~2 us): True
    #: for a user's subclass, False for rlgrad's own callbacks, which never read them
    uses_locals = True
    #: whether its steps may write the policy's weights: after each of its steps an on-policy
    #: rollout then forgets the arrays it keeps of them while acting (``F.weights_fixed``; ~50
    #: us of a Dict-image step). True unless the class itself says False (rlgrad's own that
    #: only read them; a user's subclass of one is taken to write, as any user's callback)
    writes_weights = True

    def __init__(self, verbose: int = 0) -> None:
        self.model: Any = None
        self.n_calls = 0
        self.verbose = verbose
        self.locals: dict[str, Any] = {}
        self.globals: dict[str, Any] = {}
        self.parent: BaseCallback | None = None

    @property
    def num_timesteps(self) -> int:
        return self.model.num_timesteps

    @property
    def training_env(self) -> Any:
        """The training environment with SB3's VecEnv interface (``model.get_env()``)."""
        return self.model.get_env()

    @property
    def logger(self) -> Any:
        return self.model.logger

    def init_callback(self, model: Any) -> None:
        self.model = model
        self._init_callback()

    def _init_callback(self) -> None:
        pass

    def on_training_start(self, locals_: dict[str, Any] | None = None,
                          globals_: dict[str, Any] | None = None) -> None:
        self.locals, self.globals = dict(locals_ or {}), dict(globals_ or {})
        self._on_training_start()

    def _on_training_start(self) -> None:
        pass

    def on_rollout_start(self) -> None:
        self._on_rollout_start()

    def _on_rollout_start(self) -> None:
        pass

    def on_step(self) -> bool:
        self.n_calls += 1
        ok = self._on_step()  # None: go on (as rlgrad always did); else its truth value, as SB3
        return True if ok is None else bool(ok)

    def _on_step(self) -> bool | None:
        return True

    def on_rollout_end(self) -> None:
        self._on_rollout_end()

    def _on_rollout_end(self) -> None:
        pass

    def on_iteration_end(self) -> bool:
        """After an update; return False to stop training."""
        return True

    def on_training_end(self) -> None:
        self._on_training_end()

    def _on_training_end(self) -> None:
        pass

    def update_locals(self, locals_: dict[str, Any]) -> None:
        self.locals.update(locals_)
        self.update_child_locals(locals_)

    def wants_locals(self) -> bool:
        """Whether this callback or one it triggers reads the per-step locals."""
        return self.uses_locals or any(c.wants_locals() for c in self._children())

    def may_write_weights(self) -> bool:
        """Whether this callback or one it triggers may write the weights (``writes_weights``
        as its own class declares it, True where it does not)."""
        return (type(self).__dict__.get("writes_weights", True)
                or any(c.may_write_weights() for c in self._children()))

    def _children(self) -> list[BaseCallback]:
        return []

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        pass


class CallbackList(BaseCallback):
    uses_locals = False
    writes_weights = False  # (its callbacks decide)

    def __init__(self, callbacks: Sequence[BaseCallback]) -> None:
        super().__init__()
        self.callbacks = [make_callback(c) for c in callbacks]

    def _init_callback(self) -> None:
        for c in self.callbacks:
            c.init_callback(self.model)
            c.parent = self.parent  # a list under EvalCallback: its callbacks read the parent

    def on_training_start(self, locals_: dict[str, Any] | None = None,
                          globals_: dict[str, Any] | None = None) -> None:
        for c in self.callbacks:
            c.on_training_start(locals_, globals_)

    def on_rollout_start(self) -> None:
        for c in self.callbacks:
            c.on_rollout_start()

    def on_step(self) -> bool:
        ok = True
        for c in self.callbacks:
            ok = c.on_step() and ok
        return ok

    def on_rollout_end(self) -> None:
        for c in self.callbacks:
            c.on_rollout_end()

    def on_iteration_end(self) -> bool:
        ok = True
        for c in self.callbacks:
            ok = (c.on_iteration_end() is not False) and ok
        return ok

    def on_training_end(self) -> None:
        for c in self.callbacks:
            c.on_training_end()

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        for c in self.callbacks:
            c.update_locals(locals_)

    def _children(self) -> list[BaseCallback]:
        return self.callbacks


class FunctionCallback(BaseCallback):
    """Wraps ``fn(algo) -> bool | None``, called after every vector-environment step."""

    uses_locals = False

    def __init__(self, fn: Callable[[Any], bool | None]) -> None:
        super().__init__()
        self.fn = fn

    def _on_step(self) -> bool | None:
        return self.fn(self.model)


class ConvertCallback(BaseCallback):
    """SB3's function callback: ``fn(locals, globals) -> bool`` after every step."""

    def __init__(self, callback: Callable[[dict, dict], bool | None], verbose: int = 0) -> None:
        super().__init__(verbose)
        self.callback = callback

    def _on_step(self) -> bool | None:
        return self.callback(self.locals, self.globals)


def _positional_arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in params)


def make_callback(callback: Any) -> BaseCallback | None:
    if callback is None:
        return None
    if isinstance(callback, BaseCallback):
        return callback
    if isinstance(callback, list | tuple):
        return CallbackList(list(callback))
    if callable(callback):
        return ConvertCallback(callback) if _positional_arity(callback) == 2 else FunctionCallback(
            callback)
    raise TypeError(f"callback must be a BaseCallback, a list of them or a function, got {callback!r}")


class EventCallback(BaseCallback):
    """A callback that triggers a child callback (``callback``) on its events."""

    uses_locals = False
    writes_weights = False  # (the callback it triggers decides)

    def __init__(self, callback: BaseCallback | None = None, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.callback = callback
        if callback is not None:
            callback.parent = self

    def init_callback(self, model: Any) -> None:
        super().init_callback(model)
        if self.callback is not None:
            self.callback.init_callback(model)

    def _on_training_start(self) -> None:
        if self.callback is not None:
            self.callback.on_training_start(self.locals, self.globals)

    def _on_event(self) -> bool:
        return self.callback.on_step() if self.callback is not None else True

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        if self.callback is not None:
            self.callback.update_locals(locals_)

    def _children(self) -> list[BaseCallback]:
        return [self.callback] if self.callback is not None else []


class EveryNTimesteps(EventCallback):
    """Triggers ``callback`` every ``n_steps`` environment steps."""

    writes_weights = False  # (the callback it triggers decides)

    def __init__(self, n_steps: int, callback: BaseCallback) -> None:
        super().__init__(callback)
        self.n_steps = int(n_steps)
        self.last_time_trigger = 0

    def _on_step(self) -> bool:
        if self.num_timesteps - self.last_time_trigger >= self.n_steps:
            self.last_time_trigger = self.num_timesteps
            return self._on_event()
        return True


class LogEveryNTimesteps(EveryNTimesteps):
    """Writes the logger's row (the rollout statistics and whatever was recorded since the last
    one) every ``n_steps`` environment steps, besides the algorithm's own ``log_interval``."""

    def __init__(self, n_steps: int) -> None:
        super().__init__(n_steps, callback=ConvertCallback(self._log_data))

    def _log_data(self, _locals: dict[str, Any], _globals: dict[str, Any]) -> bool:
        self.model._record_rollout_stats()
        self.model.logger.dump(self.num_timesteps)
        return True


class CheckpointCallback(BaseCallback):
    """Saves the model every ``save_freq`` calls (vector steps) to
    ``<save_path>/<name_prefix>_<num_timesteps>_steps.zip`` (SB3's archive, with rlgrad's
    training state inside); optionally the replay buffer (rlgrad's ``.safetensors``: no
    pickle) and the VecNormalize statistics next to it."""

    uses_locals = False
    writes_weights = False  # (reads them only)

    def __init__(self, save_freq: int, save_path: str, name_prefix: str = "rl_model",
                 save_replay_buffer: bool = False, save_vecnormalize: bool = False,
                 verbose: int = 0) -> None:
        super().__init__(verbose)
        self.save_freq, self.save_path, self.name_prefix = int(save_freq), save_path, name_prefix
        self.save_replay_buffer, self.save_vecnormalize = save_replay_buffer, save_vecnormalize

    def _init_callback(self) -> None:
        if self.save_path is not None:
            os.makedirs(self.save_path, exist_ok=True)

    def _checkpoint_path(self, checkpoint_type: str = "", extension: str = "zip") -> str:
        return os.path.join(self.save_path, f"{self.name_prefix}_{checkpoint_type}"
                                            f"{self.num_timesteps}_steps.{extension}")

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq != 0:
            return True
        path = self._checkpoint_path()
        self.model.save(path)
        if self.verbose >= 2:
            print(f"Saving model checkpoint to {path}")
        if self.save_replay_buffer and hasattr(self.model, "save_replay_buffer"):
            self.model.save_replay_buffer(self._checkpoint_path("replay_buffer_", "safetensors"))
        norm = _vec_normalize_of(self.model)
        if self.save_vecnormalize and norm is not None:
            norm.save(self._checkpoint_path("vecnormalize_", "pkl"))
        return True


def _vec_normalize_of(model: Any) -> Any:
    return unwrap_vec_normalize(getattr(model, "_user_env", None))


class EvalCallback(EventCallback):
    """Every ``eval_freq`` calls, ``n_eval_episodes`` episodes of the policy on ``eval_env``
    (``evaluate_policy``); logs ``eval/mean_reward`` and ``eval/mean_ep_length``, saves
    ``best_model`` to ``best_model_save_path`` on a new best and triggers
    ``callback_on_new_best``, then ``callback_after_eval``; with ``log_path``, writes every
    evaluation so far to ``<log_path>/evaluations.npz`` (``timesteps``, ``results``,
    ``ep_lengths``) as SB3 does."""

    writes_weights = False  # (it reads them; the callbacks it triggers decide)

    def __init__(self, eval_env: Any, callback_on_new_best: BaseCallback | None = None,
                 callback_after_eval: BaseCallback | None = None, n_eval_episodes: int = 5,
                 eval_freq: int = 10000, log_path: str | None = None,
                 best_model_save_path: str | None = None, deterministic: bool = True,
                 render: bool = False, verbose: int = 1, warn: bool = True) -> None:
        super().__init__(callback_after_eval, verbose=verbose)
        self.callback_on_new_best = callback_on_new_best
        if callback_on_new_best is not None:
            callback_on_new_best.parent = self
        self.eval_env = as_vec_env(eval_env)
        self.n_eval_episodes, self.eval_freq = int(n_eval_episodes), int(eval_freq)
        self.best_mean_reward = -np.inf
        self.last_mean_reward = -np.inf
        self.deterministic, self.render, self.warn = deterministic, render, warn
        self.best_model_save_path = best_model_save_path
        self.log_path = None if log_path is None else os.path.join(log_path, "evaluations")
        self.evaluations_results: list[list[float]] = []
        self.evaluations_timesteps: list[int] = []
        self.evaluations_length: list[list[int]] = []
        #: SB3's: the ``is_success`` of each evaluation episode's last info (this evaluation's)
        self._is_success_buffer: list[bool] = []
        self.evaluations_successes: list[list[bool]] = []

    def _log_success_callback(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        """``evaluate_policy``'s per-step callback: an episode's end may say ``is_success``."""
        if locals_["done"]:
            success = locals_["info"].get("is_success")
            if success is not None:
                self._is_success_buffer.append(bool(success))

    def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """``evaluate_policy`` (MaskableEvalCallback passes the action masks)."""
        return evaluate_policy(*args, **kwargs)

    def _init_callback(self) -> None:
        for path in (self.best_model_save_path, self.log_path and os.path.dirname(self.log_path)):
            if path:
                os.makedirs(path, exist_ok=True)
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.init_callback(self.model)
        train = self.training_env
        if isinstance(train, VecEnvWrapper) and not isinstance(train, type(self.eval_env)):
            warnings.warn(f"Training and eval env are not of the same type {train} != "
                          f"{self.eval_env}", stacklevel=2)

    def _on_step(self) -> bool:
        if self.eval_freq <= 0 or self.n_calls % self.eval_freq != 0:
            return True
        sync_envs_normalization(self.training_env, self.eval_env)
        self._is_success_buffer = []
        rewards, lengths = self._evaluate(
            self.model, self.eval_env, n_eval_episodes=self.n_eval_episodes, render=self.render,
            deterministic=self.deterministic, return_episode_rewards=True, warn=self.warn,
            callback=self._log_success_callback)
        self.evaluations_timesteps.append(self.num_timesteps)
        self.evaluations_results.append(list(rewards))
        self.evaluations_length.append(list(lengths))
        if self._is_success_buffer:
            self.evaluations_successes.append(list(self._is_success_buffer))
        if self.log_path is not None:
            extra = {"successes": self.evaluations_successes} if self.evaluations_successes else {}
            np.savez(self.log_path, timesteps=self.evaluations_timesteps,
                     results=self.evaluations_results, ep_lengths=self.evaluations_length, **extra)
        mean_reward, std_reward = float(np.mean(rewards)), float(np.std(rewards))
        mean_len, std_len = float(np.mean(lengths)), float(np.std(lengths))
        self.last_mean_reward = mean_reward
        if self.verbose >= 1:
            print(f"Eval num_timesteps={self.num_timesteps}, episode_reward={mean_reward:.2f} "
                  f"+/- {std_reward:.2f}")
            print(f"Episode length: {mean_len:.2f} +/- {std_len:.2f}")
        self.logger.record("eval/mean_reward", mean_reward)
        self.logger.record("eval/mean_ep_length", mean_len)
        if self._is_success_buffer:
            success_rate = float(np.mean(self._is_success_buffer))
            if self.verbose >= 1:
                print(f"Success rate: {100 * success_rate:.2f}%")
            self.logger.record("eval/success_rate", success_rate)
        keep_going = True
        if mean_reward > self.best_mean_reward:
            if self.verbose >= 1:
                print("New best mean reward!")
            if self.best_model_save_path is not None:
                self.model.save(os.path.join(self.best_model_save_path, "best_model"))
            self.best_mean_reward = mean_reward
            if self.callback_on_new_best is not None:
                keep_going = self.callback_on_new_best.on_step()
        if self.callback is not None:
            keep_going = keep_going and self._on_event()
        return keep_going

    def update_child_locals(self, locals_: dict[str, Any]) -> None:
        super().update_child_locals(locals_)
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.update_locals(locals_)

    def _children(self) -> list[BaseCallback]:
        return [c for c in (self.callback, self.callback_on_new_best) if c is not None]


class StopTrainingOnRewardThreshold(BaseCallback):
    """As ``EvalCallback(callback_on_new_best=...)``: stops once the best mean reward reaches
    ``reward_threshold``."""

    uses_locals = False
    writes_weights = False  # (reads them only)

    def __init__(self, reward_threshold: float, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.reward_threshold = float(reward_threshold)

    def _on_step(self) -> bool:
        if self.parent is None:
            raise ValueError("StopTrainingOnRewardThreshold is used as EvalCallback's "
                             "callback_on_new_best")
        keep_going = bool(self.parent.best_mean_reward < self.reward_threshold)
        if self.verbose >= 1 and not keep_going:
            print(f"Stopping training because the mean reward {self.parent.best_mean_reward:.2f} "
                  f"is above the threshold {self.reward_threshold}")
        return keep_going


class StopTrainingOnNoModelImprovement(BaseCallback):
    """As ``EvalCallback(callback_after_eval=...)``: stops after ``max_no_improvement_evals``
    evaluations in a row without a new best (counted once ``min_evals`` have run)."""

    uses_locals = False
    writes_weights = False  # (reads them only)

    def __init__(self, max_no_improvement_evals: int, min_evals: int = 0, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.max_no_improvement_evals, self.min_evals = int(max_no_improvement_evals), int(min_evals)
        self.last_best_mean_reward = -np.inf
        self.no_improvement_evals = 0

    def _on_step(self) -> bool:
        if self.parent is None:
            raise ValueError("StopTrainingOnNoModelImprovement is used as EvalCallback's "
                             "callback_after_eval")
        if self.n_calls > self.min_evals:
            if self.parent.best_mean_reward > self.last_best_mean_reward:
                self.no_improvement_evals = 0
            else:
                self.no_improvement_evals += 1
        self.last_best_mean_reward = self.parent.best_mean_reward
        keep_going = self.no_improvement_evals <= self.max_no_improvement_evals
        if self.verbose >= 1 and not keep_going:
            print(f"Stopping training: no new best model in the last "
                  f"{self.no_improvement_evals} evaluations")
        return keep_going


class StopTrainingOnMaxEpisodes(BaseCallback):
    """Stops after ``max_episodes`` episodes per environment copy (``max_episodes * n_envs``
    in all, as SB3 counts)."""

    uses_locals = False
    writes_weights = False  # (reads them only)

    def __init__(self, max_episodes: int, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.max_episodes = int(max_episodes)
        self.n_episodes = 0
        self._start = 0

    def _init_callback(self) -> None:
        self._total_max_episodes = self.max_episodes * self.model.n_envs
        self._start = int(self.model._ep_stats.episode_count)

    def _on_step(self) -> bool:
        self.n_episodes = int(self.model._ep_stats.episode_count) - self._start
        keep_going = self.n_episodes < self._total_max_episodes
        if self.verbose >= 1 and not keep_going:
            print(f"Stopping training: {self.n_episodes} episodes reached "
                  f"(max_episodes={self.max_episodes} per environment copy)")
        return keep_going


class ProgressBarCallback(BaseCallback):
    """The progress bar of ``learn(progress_bar=True)`` as a callback (rich)."""

    uses_locals = False
    writes_weights = False  # (reads them only)

    def __init__(self) -> None:
        super().__init__()
        self.bar: Any = None

    def _on_training_start(self) -> None:
        from rlgrad.rl.progress import ProgressBar

        self.bar = ProgressBar(self.model._total_timesteps, self.model)

    def on_iteration_end(self) -> bool:
        if self.bar is not None:
            self.bar.update()
        return True

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.update()
            self.bar.close()
            self.bar = None
