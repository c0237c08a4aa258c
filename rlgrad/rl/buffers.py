"""Experience storage, preallocated NumPy arrays throughout.

* ``compute_gae`` / ``RolloutBuffer``: on-policy rollouts of ``n_steps`` x ``n_envs`` with
  generalised advantage estimation; transitions marked invalid (the reset step Gymnasium's
  NEXT_STEP autoreset inserts after a done) are kept in place but never sampled.
* ``ReplayBuffer``: a ring of transitions with uniform sampling that stores ``terminated`` and
  ``truncated`` apart, so that targets bootstrap through truncations (time limits) and not through
  terminations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from rlgrad import lax, ops
from rlgrad.device import device as cpu_device


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns by GAE(lambda), arrays shaped (T, n_envs).

    ``next_values[t]`` is V of the observation reached by step t (for a truncated step: the final
    observation, so the time limit is bootstrapped); ``terminated`` stops the bootstrap,
    ``dones`` (terminated or truncated) stops the lambda-sum from crossing into the next episode:

        delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    """
    T = rewards.shape[0]
    adv = np.empty_like(values)
    not_term = 1.0 - terminated.astype(values.dtype)
    carry = (gamma * gae_lambda) * (1.0 - dones.astype(values.dtype))
    deltas = rewards + gamma * next_values * not_term - values
    last = np.zeros_like(values[0])
    for t in range(T - 1, -1, -1):  # T is small (n_steps); the rows are vectorised over envs
        last = deltas[t] + carry[t] * last
        adv[t] = last
    return adv, adv + values


def compute_gae_scan(
    rewards: Any,
    values: Any,
    next_values: Any,
    terminated: Any,
    dones: Any,
    gamma: float,
    gae_lambda: float,
) -> tuple[Any, Any]:
    """``compute_gae`` as one ``lax.scan`` (JAX's formulation, e.g. PureJaxRL's): the same
    numbers, differentiable in ``values``/``rewards`` and compiled once under ``rlgrad.jit``
    whatever T. ``compute_gae`` (and the buffer's C kernel) stays the default: for arrays it is
    the faster of the two (bench/lax.py)."""
    dt = _value_dtype(values)
    not_term = 1.0 - ops.astype(terminated, dt)
    carry = (gamma * gae_lambda) * (1.0 - ops.astype(dones, dt))
    deltas = rewards + gamma * next_values * not_term - values

    def step(last: Any, inp: tuple[Any, Any]) -> tuple[Any, Any]:
        delta, c = inp
        last = delta + c * last
        return last, last

    last = np.zeros(np.shape(getattr(values, "_value", values))[1:], dt)
    _, adv = lax.scan(step, last, (deltas, carry), reverse=True)
    return adv, adv + values


def _value_dtype(values: Any) -> np.dtype:
    return np.asarray(getattr(values, "_value", values)).dtype


def _shape(obs_dim: int | tuple[int, ...]) -> tuple[int, ...]:
    return (int(obs_dim),) if isinstance(obs_dim, int | np.integer) else tuple(map(int, obs_dim))


class RolloutBatch(NamedTuple):
    observations: np.ndarray
    actions: np.ndarray
    old_values: np.ndarray
    old_log_prob: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray


_PY_NUMBERS = (float, int)


class RolloutBuffer:
    """``n_steps`` x ``n_envs`` transitions of the current policy, then GAE over them."""

    def __init__(self, n_steps: int, n_envs: int, obs_dim: int | tuple[int, ...],
                 action_shape: tuple[int, ...], action_dtype: Any, gamma: float = 0.99,
                 gae_lambda: float = 1.0, obs_dtype: Any = np.float32) -> None:
        self.n_steps, self.n_envs = n_steps, n_envs
        self.gamma, self.gae_lambda = gamma, gae_lambda
        T, N = n_steps, n_envs
        # images: (C, H, W) uint8 rows, as the env gives them
        self.obs_shape = _shape(obs_dim)
        self.observations = np.zeros((T, N, *self.obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((T, N, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros((T, N), dtype=np.float32)
        self.values = np.zeros((T, N), dtype=np.float32)
        self.log_probs = np.zeros((T, N), dtype=np.float32)
        self.terminated = np.zeros((T, N), dtype=bool)
        self.dones = np.zeros((T, N), dtype=bool)
        self.valid = np.ones((T, N), dtype=bool)
        # V(final observation) for done rows whose final observation is not the next row's
        # observation (SAME_STEP autoreset); NaN where next_values come from values[t + 1].
        self.bootstrap = np.full((T, N), np.nan, dtype=np.float32)
        self.advantages = np.zeros((T, N), dtype=np.float32)
        self.returns = np.zeros((T, N), dtype=np.float32)
        self.pos = 0

    def size(self) -> int:
        """SB3's: the number of steps stored (per environment copy)."""
        return self.pos

    def reset(self) -> None:
        self.pos = 0
        self.bootstrap.fill(np.nan)

    @property
    def full(self) -> bool:
        return self.pos == self.n_steps

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminated: np.ndarray, dones: np.ndarray, values: np.ndarray,
            log_probs: np.ndarray, valid: np.ndarray) -> None:
        p = self.pos
        self.observations[p] = obs
        self.actions[p] = actions
        self.rewards[p] = rewards
        self.terminated[p] = terminated
        self.dones[p] = dones
        self.values[p] = values
        self.log_probs[p] = log_probs
        self.valid[p] = valid
        self.pos = p + 1

    def compute_returns_and_advantage(self, last_values: np.ndarray) -> None:
        """GAE over the stored rollout; ``last_values`` = V(observation after the last step).
        One C pass where rlgrad._kernels is built (the same operations per element as the NumPy
        lines below: the same bits), which A2C's short rollouts feel (~13 -> ~2 us per rollout)."""
        last = np.asarray(last_values).astype(np.float32, copy=False)
        # (Python numbers only: a NumPy float64 gamma would make NumPy's arithmetic float64)
        if (ops._kernels is not None and type(self.gamma) in _PY_NUMBERS
                and type(self.gae_lambda) in _PY_NUMBERS and ops._kernels.gae(
                    self.rewards, self.values, last, self.bootstrap, self.terminated, self.dones,
                    self.advantages, self.returns, self.gamma, self.gae_lambda)):
            return
        next_values = np.concatenate([self.values[1:], last[None]])
        has_boot = ~np.isnan(self.bootstrap)
        if has_boot.any():
            next_values[has_boot] = self.bootstrap[has_boot]
        adv, ret = compute_gae(self.rewards, self.values, next_values, self.terminated,
                               self.dones, self.gamma, self.gae_lambda)
        self.advantages[:] = adv
        self.returns[:] = ret

    def valid_indices(self) -> np.ndarray:
        """Flat indices (into ``T * n_envs`` rows) of the real transitions."""
        return np.flatnonzero(self.valid.reshape(-1))

    def flat(self) -> RolloutBatch:
        """All rows, flattened to (T * n_envs, ...) views."""
        R = self.n_steps * self.n_envs
        return RolloutBatch(
            self.observations.reshape(R, *self.obs_shape), self.actions.reshape(R, *self.actions.shape[2:]),
            self.values.reshape(R), self.log_probs.reshape(R), self.advantages.reshape(R),
            self.returns.reshape(R),
        )

    def get(self, batch_size: int | None, rng: np.random.Generator | None = None
            ) -> Iterator[RolloutBatch]:
        """Minibatches of the valid rows in random order (one batch if ``batch_size`` is None)."""
        if batch_size is None and rng is None and self.valid.all():
            yield self.flat()  # every row, in order: views, no copy
            return
        idx = self.valid_indices()
        if rng is not None:
            idx = rng.permutation(idx)
        data = self.flat()
        n = len(idx)
        bs = n if batch_size is None else batch_size
        for start in range(0, n, bs):
            sl = idx[start:start + bs]
            yield type(data)(*(a[sl] for a in data))

    def padded_minibatches(self, batch_size: int, rng: np.random.Generator
                           ) -> Iterator[tuple[RolloutBatch, int]]:
        """``get(batch_size, rng)``'s minibatches (the same rows in the same order), each of
        exactly ``batch_size`` rows: ``(batch, n_real)``, the ragged last one padded after its
        ``n_real`` real rows with copies of its first row (to be weighted 0), so that a compiled
        step sees one shape. The rows of an epoch are gathered in one indexing per array."""
        rows, n = self.padded_epoch(batch_size, rng)
        for start in range(0, n, batch_size):
            sl = slice(start, start + batch_size)
            yield type(rows)(*(a[sl] for a in rows)), min(batch_size, n - start)

    def padded_epoch(self, batch_size: int, rng: np.random.Generator
                     ) -> tuple[RolloutBatch, int]:
        """``(rows, n)``: the ``n`` valid rows in ``get(batch_size, rng)``'s order, gathered (fresh
        arrays) and padded to a multiple of ``batch_size`` as ``padded_minibatches`` pads them;
        minibatch ``i`` is ``rows[i * batch_size:(i + 1) * batch_size]``."""
        idx = rng.permutation(self.valid_indices())
        n = len(idx)
        pad = -n % batch_size
        if pad:
            last = n - (n % batch_size)
            idx = np.concatenate([idx, np.full(pad, idx[last], dtype=idx.dtype)])
        data = self.flat()  # (a subclass's flat() may add fields: its batch type is kept)
        return type(data)(*(a[idx] for a in data)), n


class ReplayBatch(NamedTuple):
    observations: np.ndarray
    actions: np.ndarray
    next_observations: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    # per-row discount of the bootstrapped value (n-step returns: gamma ** steps); None: gamma
    discounts: np.ndarray | None = None


class ReplayBuffer:
    """A ring of ``buffer_size`` transitions; ``sample`` draws uniformly with replacement."""

    def __init__(self, buffer_size: int, obs_dim: int | tuple[int, ...],
                 action_shape: tuple[int, ...], action_dtype: Any = np.float32,
                 obs_dtype: Any = np.float32) -> None:
        self.buffer_size = int(buffer_size)
        n = self.buffer_size
        shape = _shape(obs_dim)  # images: (C, H, W) rows, e.g. MinAtar's uint8 (C, 10, 10)
        self.observations = np.zeros((n, *shape), dtype=obs_dtype)
        self.next_observations = np.zeros((n, *shape), dtype=obs_dtype)
        self.actions = np.zeros((n, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(n, dtype=np.float32)
        self.terminated = np.zeros(n, dtype=bool)
        self.truncated = np.zeros(n, dtype=bool)
        self.pos = 0
        self.full = False

    def size(self) -> int:
        return self.buffer_size if self.full else self.pos

    def __len__(self) -> int:
        return self.size()

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray,
            rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            env_ids: np.ndarray | None = None) -> None:
        """Add a batch of rows (one per environment that made a real transition; ``env_ids``,
        which, matters to ``FrameReplayBuffer`` only)."""
        k = len(rewards)
        if k == 0:
            return
        p, n = self.pos, self.buffer_size
        if p + k <= n:
            sl: Any = slice(p, p + k)
        else:  # wraps around the end of the ring
            sl = np.arange(p, p + k) % n
        self.observations[sl] = obs
        self.next_observations[sl] = next_obs
        self.actions[sl] = actions
        self.rewards[sl] = rewards
        self.terminated[sl] = terminated
        self.truncated[sl] = truncated
        self.pos = (p + k) % n
        if p + k >= n:
            self.full = True

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        return self.take(self.sample_indices(batch_size, rng))

    # ---- SB3's names for what tests and scripts read (rows: (buffer_size,), one per transition)
    device = cpu_device("cpu")  # rlgrad computes on the CPU (SB3's buffer.device)

    @property
    def dones(self) -> np.ndarray:
        """SB3's ``dones`` (float32): the episode ended, by termination or time limit."""
        return (self.terminated | self.truncated).astype(np.float32)

    @property
    def timeouts(self) -> np.ndarray:
        """SB3's ``timeouts`` (float32): ended by the time limit only (``TimeLimit.truncated``)."""
        return (self.truncated & ~self.terminated).astype(np.float32)

    def extend(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray,
               rewards: np.ndarray, dones: np.ndarray, infos: Any = None) -> None:
        """SB3's ``extend``: rows of SB3's ``add`` arguments at once (``dones``, and
        ``infos``' ``TimeLimit.truncated`` telling a time limit from a termination)."""
        rewards = np.asarray(rewards, dtype=np.float32).reshape(-1)
        dones = np.asarray(dones).reshape(-1).astype(bool)
        timeouts = np.zeros_like(dones)
        if infos is not None:
            flat = [i for row in infos for i in (row if isinstance(row, list | tuple) else [row])]
            if len(flat) != len(dones):
                raise ValueError(f"ReplayBuffer.extend: {len(flat)} infos for {len(dones)} rows")
            timeouts = np.array([bool(i.get("TimeLimit.truncated", False)) for i in flat])
        rows = len(rewards)
        self.add(np.asarray(obs).reshape(rows, *self.observations.shape[1:]),
                 np.asarray(next_obs).reshape(rows, *self.observations.shape[1:]),
                 np.asarray(actions).reshape(rows, *self.actions.shape[1:]), rewards,
                 dones & ~timeouts, dones & timeouts)

    def sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniform draws (with replacement) of stored rows. ``k`` calls drawing ``m`` each
        give the same indices as one call drawing ``k * m``: NumPy's bounded integers come from one
        stream, whatever the size of each request."""
        return rng.integers(0, self.size(), size=n)

    def take(self, idx: np.ndarray) -> ReplayBatch:
        """The transitions at rows ``idx``, as copies."""
        return ReplayBatch(self.observations[idx], self.actions[idx], self.next_observations[idx],
                           self.rewards[idx], self.terminated[idx], self.truncated[idx])

    # ---- checkpoints: only the filled part is saved ----------------------------------------
    def state_dict(self) -> dict[str, Any]:
        n = self.size()
        return {
            "pos": self.pos, "full": int(self.full), "buffer_size": self.buffer_size,
            "observations": self.observations[:n].copy(),
            "next_observations": self.next_observations[:n].copy(),
            "actions": self.actions[:n].copy(), "rewards": self.rewards[:n].copy(),
            "terminated": self.terminated[:n].copy(), "truncated": self.truncated[:n].copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["buffer_size"]) != self.buffer_size:
            raise ValueError(
                f"replay buffer size mismatch: checkpoint has {int(state['buffer_size'])}, this "
                f"buffer {self.buffer_size}"
            )
        n = len(state["rewards"])
        for k in ("observations", "next_observations", "actions", "rewards", "terminated",
                  "truncated"):
            getattr(self, k)[:n] = state[k]
        self.pos, self.full = int(state["pos"]), bool(int(state["full"]))
