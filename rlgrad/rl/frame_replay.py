"""A replay buffer for stacked-frame observations that stores each frame once (DQN 3.0's design).

``FrameStackObservation(k)`` observations overlap: the next observation is the previous one shifted
by one frame. Storing whole stacks for ``obs`` and ``next_obs`` keeps every 84x84 frame 2k times
(SB3: about 56 GB for a million Atari transitions); here each frame is kept once, in one ring of
frames shared by all environments, and the stacks are rebuilt when sampled:

* every frame slot records ``prev``, the position of the frame before it in the same episode; an
  episode's first frame points to itself, so following ``prev`` past the start repeats the first
  frame, which is exactly ``FrameStackObservation``'s padding with the reset observation;
* a transition stores only ``npos``, the position of its next observation's newest frame; its
  next stack is that frame and the k-1 reached through ``prev``, its obs stack the k frames before
  (``prev[npos]`` is the obs's newest frame);
* an ``add`` writes one frame per row (the next observation's newest), plus, when the row starts a
  new segment (after a done, for an env not seen yet, or whose observation does not continue its
  last one), the frames of its observation that padding does not already give;
* rows live in a FIFO ring of ``buffer_size``; when a frame slot is overwritten, every row that
  used the old frame (``last_user``) is evicted with the rows before it, so the live rows are
  always one contiguous range in which every stack is complete. Frames take ``frame_capacity``
  slots (default ``buffer_size`` + 5%: episodes of 20 steps or more on average fit ``buffer_size``
  transitions; shorter ones mean fewer transitions, never more memory).

All arrays are ``np.zeros``: their pages are committed when first written, so the memory grows with
what was stored, not with the capacity asked for. A million 84x84 transitions take 7.45 GB.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.rl.buffers import ReplayBatch


class FrameReplayBuffer:
    """Ring of ``buffer_size`` transitions whose observations are ``obs_shape = (k, *frame)`` stacks
    (k frames, oldest first, as ``FrameStackObservation`` gives). The same interface as
    ``ReplayBuffer``; ``add`` also takes ``env_ids``, the vector-env index of each row (all envs in
    order when omitted), since rows of one step may be fewer than ``n_envs``."""

    def __init__(self, buffer_size: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...] = (),
                 action_dtype: Any = np.int64, n_envs: int = 1, frame_capacity: int | None = None,
                 obs_dtype: Any = np.uint8) -> None:
        if len(obs_shape) < 2:
            raise ValueError(f"obs_shape must be (stack, *frame_shape), got {obs_shape}")
        self.buffer_size = int(buffer_size)
        self.stack = int(obs_shape[0])
        self.frame_shape = tuple(int(d) for d in obs_shape[1:])
        self.n_envs = int(n_envs)
        n = self.buffer_size
        m = n + n // 20 if frame_capacity is None else int(frame_capacity)
        m = max(m, self.stack + 1)  # room for the frames of one row
        self.frame_capacity = m
        self.frames = np.zeros((m, *self.frame_shape), dtype=obs_dtype)
        self.prev = np.zeros(m, dtype=np.int64)
        # 1 + the newest row that uses the frame (0: none), for evicting those rows with it
        self.last_user = np.zeros(m, dtype=np.int64)
        self.npos = np.zeros(n, dtype=np.int64)
        self.actions = np.zeros((n, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(n, dtype=np.float32)
        self.terminated = np.zeros(n, dtype=bool)
        self.truncated = np.zeros(n, dtype=bool)
        # absolute counters: frames written, rows written, oldest live row
        self.frames_added = self.rows_added = self.row_tail = 0
        self.env_last = np.full(self.n_envs, -1, dtype=np.int64)  # newest frame per env, -1: none

    # ---- sizes ------------------------------------------------------------------------------------
    def size(self) -> int:
        return self.rows_added - self.row_tail

    def __len__(self) -> int:
        return self.size()

    @property
    def pos(self) -> int:
        return self.rows_added % self.buffer_size

    @property
    def full(self) -> bool:
        return self.rows_added >= self.buffer_size

    def nbytes(self) -> int:
        """Bytes of all arrays once every page is written (what a full buffer needs)."""
        arrays = (self.frames, self.prev, self.last_user, self.npos, self.actions, self.rewards,
                  self.terminated, self.truncated, self.env_last)
        return int(sum(a.nbytes for a in arrays))

    # ---- frames -------------------------------------------------------------------------------------
    def _chain(self, pos: np.ndarray, length: int) -> np.ndarray:
        """Positions ``pos, prev[pos], prev[prev[pos]], ...`` (newest first), shape (n, length)."""
        out = np.empty((len(pos), length), dtype=np.int64)
        out[:, 0] = pos
        for j in range(1, length):
            out[:, j] = self.prev[out[:, j - 1] % self.frame_capacity]
        return out

    def _write_frame(self, frame: np.ndarray, prev: int) -> int:
        """Writes a frame (``prev = -1``: it starts an episode); evicts the rows that used the frame
        it overwrites. Returns its position."""
        p = self.frames_added
        slot = p % self.frame_capacity
        if p >= self.frame_capacity:
            self.row_tail = max(self.row_tail, int(self.last_user[slot]))
        self.frames[slot] = frame
        self.prev[slot] = p if prev < 0 else prev
        self.last_user[slot] = 0
        self.frames_added = p + 1
        return p

    def _continues(self, last: int, obs: np.ndarray) -> bool:
        """Whether ``obs`` is the stack ending at frame ``last`` (all of whose frames are alive and
        stay so while this row writes its next frame)."""
        if last < 0:
            return False
        chain = self._chain(np.array([last]), self.stack)[0]
        if chain.min() <= self.frames_added - self.frame_capacity:  # a dead slot's prev is stale
            return False
        return bool(np.array_equal(self.frames[chain[::-1] % self.frame_capacity], obs))

    def _write_segment_start(self, obs: np.ndarray) -> int:
        """Writes the frames of ``obs`` that its padding does not repeat; returns the newest's position.
        A reset observation (k copies of one frame) writes one frame."""
        first = obs[0]
        lead = 1
        while lead < self.stack and np.array_equal(obs[lead], first):
            lead += 1
        p = self._write_frame(obs[lead - 1], -1)
        for j in range(lead, self.stack):
            p = self._write_frame(obs[j], p)
        return p

    # ---- adding and sampling ------------------------------------------------------------------------
    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminated: np.ndarray, truncated: np.ndarray, env_ids: np.ndarray | None = None) -> None:
        """Add a batch of rows, one per environment that made a real transition; ``env_ids[i]`` is
        the vector-env index of row i (default: rows are envs 0..n_envs-1)."""
        k = len(rewards)
        if k == 0:
            return
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        env_ids = self._check_add(obs, next_obs, k, env_ids)
        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        n = self.buffer_size
        for i in range(k):
            e = int(env_ids[i])
            last = int(self.env_last[e])
            start = last if self._continues(last, obs[i]) else self._write_segment_start(obs[i])
            p = self._write_frame(next_obs[i, -1], start)
            row = self.rows_added
            self.row_tail = max(self.row_tail, row - n + 1)  # the ring overwrites its oldest row
            slot = row % n
            self.npos[slot] = p
            self.last_user[self._chain(np.array([p]), self.stack + 1)[0] % self.frame_capacity] = row + 1
            self.rows_added = row + 1
            self.env_last[e] = -1 if done[i] else p
        sl = np.arange(self.rows_added - k, self.rows_added) % n
        self.actions[sl] = actions
        self.rewards[sl] = rewards
        self.terminated[sl] = terminated
        self.truncated[sl] = truncated

    def _check_add(self, obs: np.ndarray, next_obs: np.ndarray, k: int,
                   env_ids: np.ndarray | None) -> np.ndarray:
        shape = (self.stack, *self.frame_shape)
        if obs.shape != (k, *shape) or next_obs.shape != (k, *shape):
            raise ValueError(f"obs and next_obs must be ({k}, {', '.join(map(str, shape))}) stacks, got "
                             f"{obs.shape} and {next_obs.shape}")
        if not np.array_equal(next_obs[:, :-1], obs[:, 1:]):
            raise ValueError("next_obs must be obs shifted by one frame (FrameStackObservation "
                             "stacks, oldest frame first)")
        if env_ids is None:
            if k != self.n_envs:
                raise ValueError(f"{k} rows for {self.n_envs} envs: pass env_ids, the env of each row")
            return np.arange(k)
        env_ids = np.asarray(env_ids)
        if env_ids.shape != (k,) or (k and (env_ids.min() < 0 or env_ids.max() >= self.n_envs)):
            raise ValueError(f"env_ids must be {k} indices in [0, {self.n_envs}), got {env_ids}")
        return env_ids

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        return self.take(self.sample_indices(batch_size, rng))

    def sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniform draws (with replacement) of live rows, as ring slots; one ``integers`` call,
        so ``k`` calls drawing ``m`` each give the indices of one call drawing ``k * m``."""
        size = self.size()
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return (self.row_tail + rng.integers(0, size, size=n)) % self.buffer_size

    def take(self, idx: np.ndarray) -> ReplayBatch:
        """The transitions at ring slots ``idx``, their stacks rebuilt from the frames."""
        chain = self._chain(self.npos[idx], self.stack + 1)[:, ::-1] % self.frame_capacity
        return ReplayBatch(self.frames[chain[:, :-1]], self.actions[idx], self.frames[chain[:, 1:]],
                           self.rewards[idx], self.terminated[idx], self.truncated[idx])

    # ---- checkpoints: the written part, copied --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        nf = min(self.frames_added, self.frame_capacity)
        nr = min(self.rows_added, self.buffer_size)
        return {
            "buffer_size": self.buffer_size, "frame_capacity": self.frame_capacity,
            "n_envs": self.n_envs, "frames_added": self.frames_added,
            "rows_added": self.rows_added, "row_tail": self.row_tail,
            "env_last": self.env_last.copy(), "frames": self.frames[:nf].copy(),
            "prev": self.prev[:nf].copy(), "last_user": self.last_user[:nf].copy(),
            "npos": self.npos[:nr].copy(), "actions": self.actions[:nr].copy(),
            "rewards": self.rewards[:nr].copy(), "terminated": self.terminated[:nr].copy(),
            "truncated": self.truncated[:nr].copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("buffer_size", "frame_capacity", "n_envs"):
            if int(state[key]) != getattr(self, key):
                raise ValueError(f"frame replay buffer {key} mismatch: checkpoint has "
                                 f"{int(state[key])}, this buffer {getattr(self, key)}")
        if tuple(state["frames"].shape[1:]) != self.frame_shape:
            raise ValueError(f"frame shape mismatch: checkpoint has {state['frames'].shape[1:]}, this "
                             f"buffer {self.frame_shape}")
        for key in ("frames", "prev", "last_user", "npos", "actions", "rewards", "terminated",
                    "truncated"):
            getattr(self, key)[:len(state[key])] = state[key]
        self.env_last[:] = state["env_last"]
        for key in ("frames_added", "rows_added", "row_tail"):
            setattr(self, key, int(state[key]))
