"""The off-policy loop's plain path for SB3's replay buffer classes (``replay_buffer_class=``:
``ReplayBuffer``, ``DictReplayBuffer``, ``HerReplayBuffer``, ``NStepReplayBuffer``).

Those classes store one row of ``n_envs`` transitions per ``add``, raw observations (dicts for
Dict spaces), and sample with NumPy's global generator. The loop hands them its transitions
through ``Sb3Rows`` and reads their minibatches back as ``ReplayBatch`` (observations
preprocessed as the networks take them). The default storage (``rlgrad.rl.buffers``) stays the
fast path; these classes are for what it has not got (goal relabelling, n-step returns) and for
code that reads ``model.replay_buffer`` as SB3's.
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.envs import SpaceError, preprocess_obs
from rlgrad.rl.sb3_args import buffer_class


def sb3_replay_buffer(algo: Any, name: str, kwargs: dict[str, Any]) -> Any:
    """SB3's class ``name`` for ``algo``'s spaces and sizes; HER computes rewards on its env.
    A keyword the class does not take is Python's TypeError, as in SB3."""
    cls = buffer_class(name)
    # SB3's classes draw from NumPy's global generator, which SB3 seeds with the model's seed:
    # so does rlgrad here, for runs that repeat
    np.random.seed(algo.seed)
    if name == "NStepReplayBuffer":
        kwargs = {"gamma": algo.gamma, **kwargs}
    if name == "HerReplayBuffer":
        kwargs = {"env": algo.vector_env, **kwargs}
    return cls(algo.buffer_size, algo.observation_space, algo.action_space,
               n_envs=algo.n_envs, **kwargs)


def default_buffer_options(kwargs: dict[str, Any]) -> bool:
    """``replay_buffer_kwargs`` without a class: SB3 gives them to its ``ReplayBuffer``; rlgrad's
    storage takes the same two. Returns whether time limits count as terminations
    (``handle_timeout_termination=False``). ``optimize_memory_usage`` changes memory only (the
    flat storage keeps next observations either way)."""
    allowed = ("handle_timeout_termination", "optimize_memory_usage")
    for k in kwargs:
        if k not in allowed:
            raise TypeError(f"ReplayBuffer.__init__() got an unexpected keyword argument {k!r}")
    timeouts = bool(kwargs.get("handle_timeout_termination", True))
    if timeouts and kwargs.get("optimize_memory_usage", False):
        raise ValueError("ReplayBuffer does not support optimize_memory_usage = True and "
                         "handle_timeout_termination = True simultaneously.")
    return not timeouts


def n_step_buffer(algo: Any, name: str | None, kwargs: dict[str, Any]
                  ) -> tuple[str | None, dict[str, Any]]:
    """SB3's rule for ``n_steps`` > 1: the default buffer becomes ``NStepReplayBuffer`` with
    ``n_steps`` and ``gamma`` (refused for Dict observations, which it cannot hold); a buffer
    class the user chose is kept as given, with a warning that ``n_steps`` is not applied."""
    n = algo.n_steps
    if n <= 1:
        return name, kwargs
    if name is not None:
        warnings.warn(f"`n_steps={n}` is ignored because a custom `replay_buffer_class` "
                      f"({name}) is set; pass replay_buffer_kwargs={{'n_steps': {n}, 'gamma': "
                      f"{algo.gamma}}} to NStepReplayBuffer instead", UserWarning, stacklevel=4)
        return name, kwargs
    if isinstance(algo.observation_space, spaces.Dict):
        raise SpaceError(f"{type(algo).__name__}: N-step returns are not supported for Dict "
                         "observation spaces yet (n_steps must be 1)")
    return "NStepReplayBuffer", {**kwargs, "n_steps": n, "gamma": algo.gamma}


def _row(x: Any, i: int) -> Any:
    return {k: v[i] for k, v in x.items()} if isinstance(x, dict) else x[i]


def _stack(rows: list[Any]) -> Any:
    if isinstance(rows[0], dict):
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return np.stack(rows)


class Sb3Rows:
    """Feeds an SB3 buffer whole rows of ``n_envs`` real transitions.

    With Gymnasium's NEXT_STEP autoreset the step after an episode's end is no transition of
    that environment (``valid`` False): its other environments' transitions wait in per-env
    queues until every environment has one, so each row holds one real transition per env (each
    env's transitions in order, which is all SB3's per-env bookkeeping needs)."""

    def __init__(self, n_envs: int) -> None:
        self.queues: list[deque] = [deque() for _ in range(n_envs)]

    def add(self, rb: Any, obs: Any, next_obs: Any, actions: np.ndarray, rewards: np.ndarray,
            term: np.ndarray, trunc: np.ndarray, valid: np.ndarray) -> None:
        done = term | trunc
        infos = [{"TimeLimit.truncated": bool(t and not d)} for t, d in zip(trunc, term)]
        if valid.all() and not self.queues[0]:  # every env made a transition, none waits
            rb.add(obs, next_obs, actions, rewards, done, infos)
            return
        for i in np.flatnonzero(valid):
            self.queues[i].append((_row(obs, i), _row(next_obs, i), actions[i], rewards[i],
                                   done[i], infos[i]))
        while all(self.queues):
            rows = [q.popleft() for q in self.queues]
            o, n, a, r, d, info = zip(*rows)
            rb.add(_stack(list(o)), _stack(list(n)), np.stack(a), np.array(r), np.array(d),
                   list(info))


def sb3_batch(algo: Any, batch_size: int) -> ReplayBatch:
    """A minibatch of ``algo.replay_buffer`` (an SB3 class) as the updates read it. SB3's
    ``dones`` already leave out time limits: they are the terminations."""
    obs, actions, next_obs, dones, rewards, discounts = algo.replay_buffer.sample_arrays(
        batch_size)
    space = algo.observation_space
    if isinstance(algo.action_space, spaces.Discrete):
        actions = actions.reshape(batch_size).astype(np.int64)
    else:
        actions = actions.reshape(batch_size, -1).astype(np.float32, copy=False)
    return ReplayBatch(preprocess_obs(obs, space), actions, preprocess_obs(next_obs, space),
                       rewards.reshape(batch_size).astype(np.float32, copy=False),
                       dones.reshape(batch_size) > 0, np.zeros(batch_size, dtype=bool),
                       None if discounts is None
                       else discounts.reshape(batch_size).astype(np.float32))
