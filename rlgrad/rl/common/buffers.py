"""``stable_baselines3.common.buffers``: SB3's buffer classes with SB3's constructor arguments,
layout and results, for code written against them (custom training loops, HER, tests).

Storage is SB3's: arrays of shape ``(buffer_size, n_envs, ...)`` in the spaces' dtypes (float64
Box actions stored as float32 in the replay buffers, as SB3 does); ``sample`` / ``get`` return
SB3's named tuples (``rlgrad.rl.common.type_aliases``) of rlgrad Tensors where SB3 returns torch
tensors. Sampling draws from NumPy's global generator, as SB3's does (``set_random_seed``
seeds it). GAE is ``rlgrad.rl.buffers.compute_gae``, the formula rlgrad's own loops use.

rlgrad's algorithms store transitions in ``rlgrad.rl.buffers`` (flat rows, no per-step
copies of dicts): given ``replay_buffer_class=ReplayBuffer`` / ``DictReplayBuffer`` or
``rollout_buffer_class=RolloutBuffer`` / ``DictRolloutBuffer`` they keep that storage, which
holds the same transitions; HER and n-step replay use the classes here.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad.rl.buffers import compute_gae
from rlgrad.rl.common.preprocessing import get_action_dim, get_obs_shape
from rlgrad.rl.common.type_aliases import (
    DictReplayBufferSamples,
    DictRolloutBufferSamples,
    ReplayBufferSamples,
    RolloutBufferSamples,
)
from rlgrad.rl.envs import SpaceError
from rlgrad.typing import DeviceLike


def _np(x: Any) -> np.ndarray:
    """An array of values given as an array, an rlgrad Tensor or a torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "cpu"):
        x = x.cpu()
    return np.asarray(x)


def _obs_apply(fn: Any, obs: Any) -> Any:
    """``fn`` on an observation array, or on each entry of a dict of them."""
    return {k: fn(v) for k, v in obs.items()} if isinstance(obs, dict) else fn(obs)


class BaseBuffer:
    """What every SB3 buffer has: sizes, ``pos`` / ``full``, ``sample`` and conversions."""

    observation_space: spaces.Space
    obs_shape: Any

    def __init__(self, buffer_size: int, observation_space: spaces.Space,
                 action_space: spaces.Space, device: DeviceLike = "auto", n_envs: int = 1) -> None:
        from rlgrad.rl.common.utils import get_device

        self.buffer_size = int(buffer_size)
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_shape = get_obs_shape(observation_space)
        self.action_dim = get_action_dim(action_space)
        self.pos, self.full = 0, False
        self.device = get_device(device)
        self.n_envs = int(n_envs)

    @staticmethod
    def swap_and_flatten(arr: np.ndarray) -> np.ndarray:
        """(steps, n_envs, ...) -> (n_envs * steps, ...), each env's steps kept together."""
        shape = arr.shape if arr.ndim >= 3 else (*arr.shape, 1)
        return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

    def size(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def extend(self, *args: Any) -> None:
        """``add`` each row of batches of arguments."""
        for data in zip(*args):
            self.add(*data)

    def reset(self) -> None:
        self.pos, self.full = 0, False

    def sample(self, batch_size: int, env: Any = None) -> Any:
        """``batch_size`` stored transitions drawn uniformly with replacement (observations and
        rewards normalised by ``env``, a VecNormalize, when given)."""
        upper = self.buffer_size if self.full else self.pos
        return self._get_samples(np.random.randint(0, upper, size=batch_size), env=env)

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        raise NotImplementedError

    def to_torch(self, array: np.ndarray, copy: bool = True) -> Any:
        """SB3's name: an rlgrad Tensor of ``array`` (copied unless ``copy=False``)."""
        return rlgrad.tensor(array) if copy else rlgrad.as_tensor(array)

    @staticmethod
    def _normalize_obs(obs: Any, env: Any = None) -> Any:
        return obs if env is None else env.normalize_obs(obs)

    @staticmethod
    def _normalize_reward(reward: np.ndarray, env: Any = None) -> np.ndarray:
        return reward if env is None else env.normalize_reward(reward).astype(np.float32)


def _obs_zeros(space: spaces.Space, shape: Any, lead: tuple[int, ...]) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: np.zeros((*lead, *shape[k]), dtype=space[k].dtype) for k in shape}
    return np.zeros((*lead, *shape), dtype=space.dtype)


def _check_dict(cls: str, space: spaces.Space, want_dict: bool) -> None:
    if isinstance(space, spaces.Dict) != want_dict:
        what = "with Dict obs space only" if want_dict else "with non-Dict obs spaces"
        raise SpaceError(f"{cls} must be used {what}, got {space}")


class ReplayBuffer(BaseBuffer):
    """SB3's replay buffer: ``buffer_size // n_envs`` steps of ``n_envs`` transitions.
    ``optimize_memory_usage`` keeps one array of observations (next = the following row);
    ``handle_timeout_termination`` records ``infos[i]["TimeLimit.truncated"]`` so that a time
    limit is not a termination (``dones * (1 - timeouts)`` in the samples)."""

    def __init__(self, buffer_size: int, observation_space: spaces.Space,
                 action_space: spaces.Space, device: DeviceLike = "auto", n_envs: int = 1,
                 optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True) -> None:
        super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
        _check_dict(type(self).__name__, observation_space, self._dict_obs)
        self.buffer_size = max(self.buffer_size // self.n_envs, 1)
        if optimize_memory_usage and handle_timeout_termination:
            raise ValueError("ReplayBuffer does not support optimize_memory_usage = True and "
                             "handle_timeout_termination = True simultaneously.")
        if optimize_memory_usage and self._dict_obs:
            raise ValueError("DictReplayBuffer does not support optimize_memory_usage")
        self.optimize_memory_usage = optimize_memory_usage
        self.handle_timeout_termination = handle_timeout_termination
        lead = (self.buffer_size, self.n_envs)
        self.observations = _obs_zeros(observation_space, self.obs_shape, lead)
        if not optimize_memory_usage:
            self.next_observations = _obs_zeros(observation_space, self.obs_shape, lead)
        self.actions = np.zeros((*lead, self.action_dim),
                                dtype=self._maybe_cast_dtype(action_space.dtype))
        self.rewards = np.zeros(lead, dtype=np.float32)
        self.dones = np.zeros(lead, dtype=np.float32)
        self.timeouts = np.zeros(lead, dtype=np.float32)

    _dict_obs = False

    def _store_obs(self, store: Any, row: int, obs: Any) -> None:
        if isinstance(store, dict):
            for k, arr in store.items():
                arr[row] = np.array(obs[k]).reshape(arr.shape[1:])
        else:
            store[row] = np.array(obs).reshape(store.shape[1:])

    def add(self, obs: Any, next_obs: Any, action: np.ndarray, reward: np.ndarray,
            done: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """One step of the ``n_envs`` environments (copies are stored)."""
        p = self.pos
        self._store_obs(self.observations, p, obs)
        if self.optimize_memory_usage:
            self._store_obs(self.observations, (p + 1) % self.buffer_size, next_obs)
        else:
            self._store_obs(self.next_observations, p, next_obs)
        self.actions[p] = np.array(action).reshape((self.n_envs, self.action_dim))
        self.rewards[p] = np.array(reward)
        self.dones[p] = np.array(done)
        if self.handle_timeout_termination:
            self.timeouts[p] = [info.get("TimeLimit.truncated", False) for info in infos]
        self.pos = p + 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int, env: Any = None) -> Any:
        return self._samples(*self.sample_arrays(batch_size, env))

    def sample_arrays(self, batch_size: int, env: Any = None) -> tuple:
        """``sample``'s minibatch as NumPy arrays: (observations, actions, next_observations,
        dones, rewards, discounts or None), what rlgrad's off-policy updates read."""
        if not self.optimize_memory_usage:
            inds = np.random.randint(0, self.buffer_size if self.full else self.pos,
                                     size=batch_size)
        elif self.full:  # the row at ``pos`` has no next observation yet (the oldest's successor)
            inds = (np.random.randint(1, self.buffer_size, size=batch_size) + self.pos)
            inds %= self.buffer_size
        else:
            inds = np.random.randint(0, self.pos, size=batch_size)
        return self._arrays(inds, env)

    def _gather(self, store: Any, rows: np.ndarray, envs: np.ndarray, env: Any) -> Any:
        return self._normalize_obs(_obs_apply(lambda a: a[rows, envs], store), env)

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        return self._samples(*self._arrays(batch_inds, env))

    def _arrays(self, batch_inds: np.ndarray, env: Any = None) -> tuple:
        envs = np.random.randint(0, self.n_envs, size=len(batch_inds))
        if self.optimize_memory_usage:
            nxt = self._gather(self.observations, (batch_inds + 1) % self.buffer_size, envs, env)
        else:
            nxt = self._gather(self.next_observations, batch_inds, envs, env)
        obs = self._gather(self.observations, batch_inds, envs, env)
        dones = self.dones[batch_inds, envs] * (1 - self.timeouts[batch_inds, envs])
        rewards = self._normalize_reward(self.rewards[batch_inds, envs].reshape(-1, 1), env)
        return obs, self.actions[batch_inds, envs], nxt, dones.reshape(-1, 1), rewards, None

    def _samples(self, obs: Any, actions: np.ndarray, next_obs: Any, dones: np.ndarray,
                 rewards: np.ndarray, discounts: np.ndarray | None = None) -> Any:
        t = self.to_torch
        cls = DictReplayBufferSamples if self._dict_obs else ReplayBufferSamples
        return cls(_obs_apply(t, obs), t(actions), _obs_apply(t, next_obs), t(dones), t(rewards),
                   None if discounts is None else t(discounts))

    # ---- checkpoints (rlgrad's save_replay_buffer / save(include_replay_buffer=True)) --------
    _STATE = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")

    def state_dict(self) -> dict[str, Any]:
        """Every stored array (a Dict observation's entries as ``observations.<key>``), ``pos``
        and ``full``."""
        out: dict[str, Any] = {"pos": self.pos, "full": int(self.full)}
        for name in self._STATE:
            value = getattr(self, name, None)
            if isinstance(value, dict):
                out.update({f"{name}.{k}": v.copy() for k, v in value.items()})
            elif value is not None:
                out[name] = value.copy()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._STATE:
            value = getattr(self, name, None)
            targets = value.items() if isinstance(value, dict) else [(None, value)]
            for k, arr in targets:
                key = name if k is None else f"{name}.{k}"
                if arr is not None and key in state:
                    if np.shape(state[key]) != arr.shape:
                        raise ValueError(f"replay buffer mismatch: {key} has shape "
                                         f"{np.shape(state[key])} in the file, {arr.shape} here")
                    arr[...] = state[key]
        self.pos, self.full = int(state["pos"]), bool(int(state["full"]))

    @staticmethod
    def _maybe_cast_dtype(dtype: Any) -> Any:
        """float64 actions are stored as float32 (SB3's rule, GH#1572); other dtypes as they are."""
        return np.float32 if dtype == np.float64 else dtype


class DictReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` for Dict observations: ``observations`` is a dict of arrays."""

    _dict_obs = True


class RolloutBuffer(BaseBuffer):
    """SB3's rollout buffer: ``buffer_size`` steps of ``n_envs`` environments, then GAE."""

    _dict_obs = False
    # (buffer_size, n_envs) float32 arrays, made by reset()
    rewards: np.ndarray
    returns: np.ndarray
    episode_starts: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    advantages: np.ndarray

    def __init__(self, buffer_size: int, observation_space: spaces.Space,
                 action_space: spaces.Space, device: DeviceLike = "auto", gae_lambda: float = 1,
                 gamma: float = 0.99, n_envs: int = 1) -> None:
        super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
        _check_dict(type(self).__name__, observation_space, self._dict_obs)
        self.gae_lambda, self.gamma = gae_lambda, gamma
        self.generator_ready = False
        self.reset()

    def reset(self) -> None:
        lead = (self.buffer_size, self.n_envs)
        self.observations = _obs_zeros(self.observation_space, self.obs_shape, lead)
        self.actions = np.zeros((*lead, self.action_dim), dtype=self.action_space.dtype)
        for name in ("rewards", "returns", "episode_starts", "values", "log_probs",
                     "advantages"):
            setattr(self, name, np.zeros(lead, dtype=np.float32))
        self.generator_ready = False
        super().reset()

    def compute_returns_and_advantage(self, last_values: Any, dones: np.ndarray) -> None:
        """GAE(lambda) advantages and lambda-returns: an episode ends where the next step
        starts one (``episode_starts``), the last step where ``dones``."""
        last = _np(last_values).astype(np.float32).reshape(self.n_envs)
        ends = np.concatenate([self.episode_starts[1:],
                               np.asarray(dones, dtype=np.float32).reshape(1, self.n_envs)])
        next_values = np.concatenate([self.values[1:], last[None]])
        self.advantages[:], self.returns[:] = compute_gae(
            self.rewards, self.values, next_values, ends, ends, self.gamma, self.gae_lambda)

    def add(self, obs: Any, action: np.ndarray, reward: np.ndarray, episode_start: np.ndarray,
            value: Any, log_prob: Any) -> None:
        p = self.pos
        if isinstance(self.observations, dict):
            for k, arr in self.observations.items():
                arr[p] = np.array(obs[k]).reshape(arr.shape[1:])
        else:
            self.observations[p] = np.array(obs).reshape(self.observations.shape[1:])
        self.actions[p] = np.array(action).reshape((self.n_envs, self.action_dim))
        self.rewards[p] = np.array(reward)
        self.episode_starts[p] = np.array(episode_start)
        self.values[p] = _np(value).reshape(-1)
        self.log_probs[p] = _np(log_prob).reshape(-1)
        self.pos = p + 1
        if self.pos == self.buffer_size:
            self.full = True

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        """Minibatches of every stored transition in a random order (one if ``batch_size`` is
        None); the first call flattens the storage to (n_envs * steps, ...)."""
        if not self.full:
            raise AssertionError("the rollout buffer is not full: add buffer_size steps first")
        total = self.buffer_size * self.n_envs
        indices = np.random.permutation(total)
        if not self.generator_ready:
            self.observations = _obs_apply(self.swap_and_flatten, self.observations)
            for name in ("actions", "values", "log_probs", "advantages", "returns"):
                setattr(self, name, self.swap_and_flatten(getattr(self, name)))
            self.generator_ready = True
        bs = total if batch_size is None else batch_size
        for start in range(0, total, bs):
            yield self._get_samples(indices[start:start + bs])

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        t = self.to_torch
        cls = DictRolloutBufferSamples if self._dict_obs else RolloutBufferSamples
        return cls(_obs_apply(lambda a: t(a[batch_inds]), self.observations),
                   t(self.actions[batch_inds].astype(np.float32, copy=False)),
                   t(self.values[batch_inds].flatten()), t(self.log_probs[batch_inds].flatten()),
                   t(self.advantages[batch_inds].flatten()), t(self.returns[batch_inds].flatten()))


class DictRolloutBuffer(RolloutBuffer):
    """``RolloutBuffer`` for Dict observations: ``observations`` is a dict of arrays."""

    _dict_obs = True


class NStepReplayBuffer(ReplayBuffer):
    """Replay of n-step returns: a sampled row's reward is ``sum_{k<m} gamma^k r_{t+k}`` over the
    ``m <= n_steps`` steps up to the first done or time limit, its next observation and done
    those of step ``t + m - 1``, and ``discounts = gamma^m`` (the bootstrap's discount)."""

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.n_steps, self.gamma = int(n_steps), gamma
        if self.optimize_memory_usage:
            raise NotImplementedError("NStepReplayBuffer doesn't support "
                                      "optimize_memory_usage=True")

    def _arrays(self, batch_inds: np.ndarray, env: Any = None) -> tuple:
        envs = np.random.randint(0, self.n_envs, size=batch_inds.shape)
        # the newest row ends the stored stream: treated as a time limit while sampling, so that
        # a sequence never runs on into the oldest rows of the ring
        last = self.pos - 1
        cut = np.logical_or(self.timeouts[last], np.logical_not(self.dones[last]))
        idx = (batch_inds[:, None] + np.arange(self.n_steps)) % self.buffer_size
        col = envs[:, None]
        timeouts = self.timeouts[idx, col]
        timeouts[idx == (last % self.buffer_size)] = np.broadcast_to(cut[col], idx.shape)[
            idx == (last % self.buffer_size)]
        ends = np.logical_or(self.dones[idx, col], timeouts)
        m = np.where(ends.any(axis=1), ends.argmax(axis=1), self.n_steps - 1)  # last step taken
        mask = np.arange(self.n_steps) <= m[:, None]
        rewards = self._normalize_reward(self.rewards[idx, col], env)
        powers = self.gamma ** np.arange(self.n_steps, dtype=np.float32)
        returns = (rewards * powers * mask).sum(axis=1, keepdims=True)
        discounts = self.gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
        end = (batch_inds + m) % self.buffer_size
        end_timeout = timeouts[np.arange(len(m)), m]
        dones = (self.dones[end, envs] * (1.0 - end_timeout))[:, None].astype(np.float32)
        return (self._gather(self.observations, batch_inds, envs, env),
                self.actions[batch_inds, envs], self._gather(self.next_observations, end, envs, env),
                dones, returns, discounts)


__all__ = ["BaseBuffer", "DictReplayBuffer", "DictRolloutBuffer", "NStepReplayBuffer",
           "ReplayBuffer", "RolloutBuffer"]
