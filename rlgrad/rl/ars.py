"""Augmented Random Search (Mania et al., 2018), as sb3-contrib's ``ARS``.

No gradient: each update draws ``n_delta`` Gaussian directions ``d_k`` in parameter space,
evaluates the policy at ``w + delta_std d_k`` and ``w - delta_std d_k`` (``n_eval_episodes``
whole episodes each, their return plus ``alive_bonus_offset`` per step), keeps the ``n_top``
directions whose better return is highest, and steps

    w += learning_rate / (n_top * sigma_R + 1e-6) * sum_k (R_k+ - R_k-) d_k

with ``sigma_R`` the (unbiased) standard deviation of the kept returns. The policy is linear
(``LinearPolicy``: no bias, actions clipped to the box) or an MLP (``MlpPolicy``: [64, 64] ReLU,
tanh-squashed and rescaled to the box); Discrete actions take the argmax. With
``zero_policy`` (the default) training starts from all-zero weights. Observations are normalised
by ``normalize=True`` or a ``VecNormalize`` env (the statistics follow every evaluated step, as
sb3-contrib's ARS with VecNormalize).

``learn(async_eval=AsyncEval(...))`` evaluates the candidates on AsyncEval's environments
instead (``rlgrad.rl.contrib.common.vec_env``: in this process, not in worker processes), their
``VecNormalize`` statistics merged into the training env's and synced back, as sb3-contrib does.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from rlgrad import nn, ops
from rlgrad.device import device as cpu_device
from rlgrad.nn.utils import parameters_to_vector, vector_to_parameters
from rlgrad.rl.base import BaseAlgorithm
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.envs import EnvLike, SpaceError, flat_obs_dim
from rlgrad.rl.layers import create_mlp
from rlgrad.rl.policies import SB3PolicyMethods, load_policy, mlp_numpy, predict_with, save_policy
from rlgrad.rl.schedules import Schedule, get_schedule_fn
from rlgrad.tensor import Tensor


class ARSPolicy(nn.Module):
    """sb3-contrib's ``ARSPolicy``: ``action_net`` (``create_mlp``: ``net_arch`` hidden layers,
    ``activation_fn``, tanh at the end with ``squash_output`` for Box actions) maps the flattened
    observation to the action (Box) or to logits whose argmax is the action (Discrete).

    ``act_numpy`` (acting: NumPy on the parameter arrays) and ``forward`` (through the engine,
    the reference) give the same actions."""

    device = cpu_device("cpu")  # rlgrad computes on the CPU (SB3's policy.device.type)

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_arch: list[int] | None = None, activation_fn: Any = "relu",
                 with_bias: bool = True, squash_output: bool = True) -> None:
        super().__init__()
        if not isinstance(action_space, spaces.Box | spaces.Discrete):
            raise SpaceError(f"ARS policy: action space {action_space} is not supported; "
                             "ARS takes Box or Discrete actions")
        self.observation_space, self.action_space = observation_space, action_space
        self.net_arch = [64, 64] if net_arch is None else [int(n) for n in net_arch]
        self.activation_fn, self.with_bias = activation_fn, bool(with_bias)
        self.box = isinstance(action_space, spaces.Box)
        self.squash_output = self.box and bool(squash_output)
        out = int(np.prod(action_space.shape)) if self.box else int(action_space.n)
        self.action_net = nn.Sequential(*create_mlp(
            flat_obs_dim(observation_space), out, self.net_arch, activation_fn,
            squash_output=self.squash_output, with_bias=with_bias))
        if self.box:
            self._low = action_space.low.astype(np.float32)
            self._high = action_space.high.astype(np.float32)

    def _constructor_parameters(self) -> dict[str, Any]:
        return {"observation_space": self.observation_space, "action_space": self.action_space,
                "net_arch": self.net_arch, "activation_fn": self.activation_fn,
                "with_bias": self.with_bias, "squash_output": self.squash_output}

    def forward(self, obs: Any) -> Any:
        """sb3-contrib's: the network's output (Box) or the argmax action (Discrete) of a batch
        of preprocessed observations."""
        out = self.action_net(obs if isinstance(obs, Tensor) else Tensor(np.asarray(obs)))
        return out if self.box else ops.argmax(out, axis=1)

    def to_env(self, out: np.ndarray) -> np.ndarray:
        """The network's output as environment actions: rescaled from [-1, 1] to the box
        (squashed), clipped to it (not squashed), or the argmax (Discrete)."""
        if not self.box:
            return np.argmax(out, axis=1)
        out = out.reshape(len(out), *self.action_space.shape)
        if self.squash_output:
            return self._low + 0.5 * (out + 1.0) * (self._high - self._low)
        return np.clip(out, self._low, self._high)

    def act_numpy(self, obs: np.ndarray) -> np.ndarray:
        """Environment actions of a batch of preprocessed observations, in NumPy."""
        return self.to_env(mlp_numpy(self.action_net, obs))

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, None]:
        """SB3's ``policy.predict``: ``(actions, None)`` (ARS acts deterministically)."""
        return predict_with(self.observation_space, observation, self.act_numpy)

    obs_to_tensor = SB3PolicyMethods.obs_to_tensor
    is_vectorized_observation = SB3PolicyMethods.is_vectorized_observation

    def set_training_mode(self, mode: bool) -> None:
        self.train(mode)

    def parameters_to_vector(self) -> np.ndarray:
        return parameters_to_vector(self.parameters())

    def load_from_vector(self, vector: Any) -> None:
        """Set the parameters from one flat vector (``parameters_to_vector``'s order)."""
        vector_to_parameters(np.asarray(vector, dtype=np.float32), self.parameters())

    def save(self, path: Any) -> None:
        save_policy(self, path, self._constructor_parameters())

    @classmethod
    def load(cls, path: Any, device: Any = "auto") -> Any:
        return load_policy(cls, path)


class ARSLinearPolicy(ARSPolicy):
    """sb3-contrib's ``ARSLinearPolicy``: one linear layer (no bias by default), actions clipped
    to the box."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 with_bias: bool = False, squash_output: bool = False) -> None:
        super().__init__(observation_space, action_space, net_arch=[], with_bias=with_bias,
                         squash_output=squash_output)

    def _constructor_parameters(self) -> dict[str, Any]:
        return {"observation_space": self.observation_space, "action_space": self.action_space,
                "with_bias": self.with_bias, "squash_output": self.squash_output}


MlpPolicy = ARSPolicy
LinearPolicy = ARSLinearPolicy
_LINEAR = {"net_arch": [], "with_bias": False, "squash_output": False}


class ARS(BaseAlgorithm):
    """sb3-contrib's ``ARS`` (its defaults): ``ARS("LinearPolicy" | "MlpPolicy", env, ...)``."""

    action_spaces = (spaces.Discrete, spaces.Box)
    policy_aliases: ClassVar[dict[str, dict[str, Any]]] = {"MlpPolicy": {},
                                                           "LinearPolicy": _LINEAR}
    log_interval = 1  # updates between two dumps of the logger, as in sb3-contrib

    def __init__(self, env: EnvLike, n_delta: int = 8, n_top: int | None = None,
                 learning_rate: float | str | Schedule = 0.02,
                 delta_std: float | str | Schedule = 0.05, zero_policy: bool = True,
                 alive_bonus_offset: float = 0.0, n_eval_episodes: int = 1, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, **env_options: Any) -> None:
        super().__init__(env, seed=seed, n_envs=n_envs, normalize=normalize,
                         learning_rate=learning_rate, policy_kwargs=policy_kwargs,
                         verbose=verbose, **env_options)
        if self.policy_name not in self.policy_aliases:
            raise ValueError(f"ARS: policy {self.policy_name!r} is not ARS's; use 'LinearPolicy' "
                             "or 'MlpPolicy' (vector observations)")
        self.n_delta = int(n_delta)
        if n_top is not None and n_top > n_delta:
            warnings.warn(f"n_top = {n_top} > n_delta = {n_delta}, setting n_top = n_delta",
                          UserWarning, stacklevel=3)
        self.n_top = self.n_delta if n_top is None else min(int(n_top), self.n_delta)
        self.delta_std = delta_std
        self.delta_std_schedule = get_schedule_fn(delta_std)
        self.zero_policy = bool(zero_policy)
        self.alive_bonus_offset = float(alive_bonus_offset)
        self.n_eval_episodes = int(n_eval_episodes)
        self.policy = self._make_policy()
        self._candidate = self._make_policy()  # the network each candidate's weights go into
        if self.zero_policy:
            self.policy.load_from_vector(np.zeros_like(self.policy.parameters_to_vector()))
        self.n_params = int(self.policy.parameters_to_vector().size)
        self._async_eval: Any = None
        self._old_count = 0.0  # observations counted before the last sync (sb3-contrib's)

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int | None = None,
              tb_log_name: str | None = None, reset_num_timesteps: bool = True,
              async_eval: Any = None, progress_bar: bool = False) -> ARS:
        """``BaseAlgorithm.learn``; with ``async_eval`` the candidates are evaluated on its
        environments (it is closed at the end, as sb3-contrib closes it)."""
        self._async_eval = async_eval
        try:
            return super().learn(total_timesteps, callback, log_interval, tb_log_name,
                                 reset_num_timesteps, progress_bar)
        finally:
            self._async_eval = None
            if async_eval is not None:
                async_eval.close()

    def _make_policy(self) -> ARSPolicy:
        if self.policy_class is not None:  # the user's ARSPolicy subclass
            return self.policy_class(self.observation_space, self.action_space,
                                     **self.policy_kwargs)
        kw = self.net_kwargs(net_arch=None, activation_fn="relu", with_bias=True,
                             squash_output=True)
        return ARSPolicy(self.observation_space, self.action_space, **kw)

    @property
    def weights(self) -> np.ndarray:
        """The current policy's parameters as one flat vector (sb3-contrib's ``weights``)."""
        return self.policy.parameters_to_vector()

    # ---- evaluation of the candidates -----------------------------------------------------------
    def _evaluate(self, weights: np.ndarray, callback: BaseCallback | None,
                  episodes: list[tuple[float, int]]) -> float | None:
        """The return of the policy with ``weights`` over ``n_eval_episodes`` episodes from a
        reset (sb3-contrib's ``evaluate_policy``: copy i of the env runs
        ``(n_eval_episodes + i) // n_envs``), plus ``alive_bonus_offset`` per step; None when
        the callback stopped training."""
        self._candidate.load_from_vector(weights)
        act, adapter, n = self._candidate.act_numpy, self._adapter, self.n_envs
        want_locals = callback is not None and callback.wants_locals()
        targets = (self.n_eval_episodes + np.arange(n)) // n
        counts = np.zeros(n, dtype=np.int64)
        ret, length = np.zeros(n), np.zeros(n, dtype=np.int64)
        total = 0.0
        raw = adapter.reset()
        while (counts < targets).any():
            actions = act(self._obs(raw, update=True))
            raw, rew, term, trunc, valid, _ = adapter.step(actions)
            counting = valid & (counts < targets)
            ret += np.where(counting, rew, 0.0)
            length += counting
            self.num_timesteps += n
            for i in np.flatnonzero((term | trunc) & counting):
                episodes.append((float(ret[i]), int(length[i])))
                total += ret[i] + self.alive_bonus_offset * length[i]
                counts[i] += 1
                ret[i], length[i] = 0.0, 0
            if callback is not None and not self._callback_step(
                    callback, want_locals, raw, rew, term | trunc, actions):
                return None
        self._last_obs = raw
        return total

    def _async_returns(self, candidates: np.ndarray, callback: BaseCallback | None,
                       episodes: list[tuple[float, int]]) -> np.ndarray | None:
        """The candidates' returns from ``async_eval``'s environments (sb3-contrib's: their
        observation statistics combined into the training env's, then synced back; callback
        steps one per worker's share of the steps)."""
        ae = self._async_eval
        ae.send_jobs(candidates, len(candidates))
        returns = np.zeros(len(candidates), dtype=np.float32)
        steps = 0
        for idx, (rewards, lengths) in ae.get_results():
            returns[idx] = sum(rewards) + self.alive_bonus_offset * sum(lengths)
            episodes.extend(zip(map(float, rewards), map(int, lengths)))
            steps += int(sum(lengths))
        norm = self._env_normalizer()
        if norm is not None:
            for rms in ae.get_obs_rms():
                norm.obs_rms.combine(rms)
                norm.obs_rms.count -= self._old_count  # (counted once already)
            ae.sync_obs_rms(norm.obs_rms.copy())
            self._old_count = norm.obs_rms.count
        n = len(ae.remotes)
        for _ in range(steps // n):
            self.num_timesteps += n
            if callback is not None and callback.on_step() is False:
                return None
        self.num_timesteps += steps % n
        return returns

    def _candidate_returns(self, candidates: np.ndarray, callback: BaseCallback | None,
                           episodes: list[tuple[float, int]]) -> np.ndarray | None:
        if callback is not None:
            callback.on_rollout_start()
        if self._async_eval is not None:
            returns = self._async_returns(candidates, callback, episodes)
            if returns is not None and callback is not None:
                callback.on_rollout_end()
            return returns
        returns = np.zeros(len(candidates), dtype=np.float32)
        for k, w in enumerate(candidates):
            r = self._evaluate(w, callback, episodes)
            if r is None:
                return None
            returns[k] = r
        if callback is not None:
            callback.on_rollout_end()
        return returns

    # ---- the update -----------------------------------------------------------------------------
    def _iteration(self, callback: BaseCallback | None) -> bool:
        delta_std = float(self.delta_std_schedule(self._current_progress_remaining))
        lr = float(self.lr_schedule(self._current_progress_remaining))
        weights = self.weights
        deltas = self.rng.standard_normal((self.n_delta, self.n_params)).astype(np.float32)
        step = deltas * np.float32(delta_std)
        episodes: list[tuple[float, int]] = []
        returns = self._candidate_returns(np.concatenate([weights + step, weights - step]),
                                          callback, episodes)
        if returns is None:
            return False
        plus, minus = returns[:self.n_delta], returns[self.n_delta:]
        top = np.argsort(-np.maximum(plus, minus), kind="stable")[:self.n_top]
        plus, minus, deltas = plus[top], minus[top], deltas[top]
        return_std = float(np.std(np.concatenate([plus, minus]), ddof=1)) if self.n_top else 0.0
        step_size = lr / (self.n_top * return_std + 1e-6)
        self.policy.load_from_vector(weights + np.float32(step_size) * ((plus - minus) @ deltas))
        self._n_updates += 1
        self._update_progress()
        if self.log_interval and self._n_updates % self.log_interval == 0:
            self._dump_logs(episodes, delta_std, lr, step_size, return_std)
        return True

    def _dump_logs(self, episodes: list[tuple[float, int]], delta_std: float, lr: float,
                   step_size: float, return_std: float) -> None:
        """sb3-contrib's log: the episodes of this update's candidates only."""
        log = self.logger
        if episodes:
            log.record("rollout/ep_rew_mean", float(np.mean([r for r, _ in episodes])))
            log.record("rollout/ep_len_mean", float(np.mean([n for _, n in episodes])))
        log.record("rollout/return_std", return_std)
        log.record("train/iterations", self._n_updates, exclude="tensorboard")
        log.record("train/delta_std", delta_std)
        log.record("train/learning_rate", lr)
        log.record("train/step_size", step_size)
        elapsed = max(time.perf_counter() - self._start_time, 1e-9)
        log.record("time/fps", int((self.num_timesteps - self._num_timesteps_at_start) / elapsed))
        log.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        log.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        log.dump(self.num_timesteps)

    # ---- acting and state ---------------------------------------------------------------------
    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.policy.act_numpy(obs)

    def _modules(self) -> dict[str, Any]:
        return {"policy": self.policy}

    def _optimizers(self) -> dict[str, Any]:
        return {}

