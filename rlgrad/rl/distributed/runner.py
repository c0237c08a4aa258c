"""``EnvRunner``: one Ray actor's share of the environment copies and a copy of the policy.

The runner builds the very algorithm the learner is (same class, same hyperparameters, its own
``n_envs``) and samples with that algorithm's own ``collect_rollouts``: the rollout a runner
returns is the one a local run would collect from the same environments, weights and random
stream. Runner ``i`` holds the copies ``offset .. offset + n_envs - 1`` of the learner's vector
environment and seeds them as a local run seeds those copies (``seed + offset + j``); runner 0
draws its actions from the algorithm's own random stream, runner ``i > 0`` from one derived from
``(seed, i)``. So with one runner a run is the local run, number for number.

The class is plain Python (``ray.remote(EnvRunner)`` makes the actor), so it can be tested and
used without Ray.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

import numpy as np

from rlgrad.rl.buffers import RolloutBuffer
from rlgrad.rl.ranges import relations_unchecked

#: rows of an off-policy runner's scratch replay buffer: one call's transitions at most
SCRATCH_ROWS = 100_000
#: the rollout buffer's arrays a runner sends back, each (n_steps, n_envs, ...)
ROLLOUT_FIELDS = ("observations", "actions", "rewards", "values", "log_probs", "terminated",
                  "dones", "valid", "bootstrap", "advantages", "returns")


def _reconstructed() -> bool:
    """Whether this process is a Ray actor restarted after a failure."""
    try:
        import ray

        with warnings.catch_warnings():  # Ray's property reads a deprecated one of its own
            warnings.simplefilter("ignore")
            return bool(ray.is_initialized()
                        and ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside a Ray actor
        return False


class EnvRunner:
    """Steps ``n_envs`` environment copies with a copy of the policy; ``sample`` returns a rollout.

    ``algo_cls(env, seed=seed, **hyperparams)`` is built with ``n_envs`` and no runners of its
    own. After a restart (Ray re-runs the constructor) the environments and the action stream are
    seeded afresh, so the restarted runner does not repeat the episodes it played before.
    """

    def __init__(self, algo_cls: type, env: Any, seed: int, hyperparams: dict[str, Any],
                 index: int = 0, env_offset: int = 0, n_envs: int = 1) -> None:
        hp = {**hyperparams, "n_envs": int(n_envs), "env_runners": 0, "verbose": 0}
        if "buffer_size" in hp:  # off-policy: a scratch ring for one call's transitions
            hp["buffer_size"] = min(int(hp["buffer_size"]), SCRATCH_ROWS)
        with relations_unchecked():  # batch_size <= n_steps * n_envs is the learner's rule
            self.algo = algo_cls(env, seed=seed, **hp)
        self.index = int(index)
        self.version = -1  # version of the weights last set
        self.restarted = _reconstructed()
        env_seed = int(seed) + int(env_offset)
        if self.restarted or self.index:
            parts = [int(seed), self.index] + ([os.getpid()] if self.restarted else [])
            ss = np.random.SeedSequence(parts)
            self.algo.rng = np.random.default_rng(ss)
            if self.restarted:
                env_seed = int(ss.generate_state(1)[0] % 2**31)
        self.algo.vector_env.action_space.seed(env_seed)
        self.algo._last_obs = self.algo._adapter.reset(seed=env_seed)
        self.algo._env_seeded = True
        # the learner's normaliser counted the first observations already (its own reset)

    def pid(self) -> int:
        return os.getpid()

    def get_state(self) -> dict[str, Any]:
        """What sampling continues from: the algorithm's ``get_state()`` without its networks
        and optimizers (the learner's are the ones that count): the environment copies (their
        whole state where it is plain data), last observations, episode statistics, the action
        stream, the normaliser (its per-copy discounted returns are this runner's own)."""
        state = self.algo.get_state(include_replay_buffer=False)
        for k in ("modules", "optimizers"):
            state.pop(k, None)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``get_state()``'s result, through the algorithm's own ``set_state`` (an
        environment whose state is not plain data keeps the episodes it started)."""
        algo = self.algo
        algo.set_state({**algo.get_state(include_replay_buffer=False), **state})

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load ``{"modules": {name: state_dict}, "normalizer": statistics or None, "version":
        int, "counters": {"num_timesteps", "total_timesteps"}}`` (counters: off-policy
        exploration follows the learner's step count: warm-up, epsilon's schedule)."""
        algo = self.algo
        modules = algo._modules()
        for name, sd in weights["modules"].items():
            modules[name].load_state_dict(sd)
        counters = weights.get("counters")
        if counters:
            algo.num_timesteps = int(counters["num_timesteps"])
            algo._total_timesteps = int(counters["total_timesteps"])
            algo._update_progress()
        norm = weights.get("normalizer")
        if norm is not None and algo.normalizer is not None:
            # the statistics only: the discounted returns are per environment copy, this
            # runner's own
            algo.normalizer.obs_rms.load_state_dict(norm["obs_rms"])
            algo.normalizer.ret_rms.load_state_dict(norm["ret_rms"])
        self.version = int(weights.get("version", self.version))

    def sample_transitions(self, weights: dict[str, Any] | None = None, calls: int = 1
                           ) -> dict[str, Any]:
        """Off-policy: ``calls`` times one ``train_freq`` of the algorithm's own
        ``collect_rollouts`` (its exploration: warm-up, epsilon-greedy, action noise, gSDE) with
        ``weights``; returns the transitions it stored (``ReplayBatch`` fields), where each
        call's rows end (``piece_rows``) and its vector steps (``piece_steps``), the episodes
        finished and the weights' ``version``. Several calls per round trip (a rollout fragment,
        as RLlib's ``rollout_fragment_length``) keep a ``train_freq`` of 1 from being bound by
        the round trip."""
        algo = self.algo
        if weights is not None:
            self.set_weights(weights)
        rb = algo.replay_buffer
        rb.pos, rb.full = 0, False  # a scratch ring: only this call's rows are sent
        stats = algo._ep_stats
        before = stats.episode_count
        rows, steps = [], []
        t0 = time.perf_counter()
        for _ in range(max(int(calls), 1)):
            env_steps, _ = algo.collect_rollouts(None)
            rows.append(rb.size())
            steps.append(int(env_steps))
        elapsed = time.perf_counter() - t0
        data = rb.take(np.arange(rb.size()))
        return {"transitions": data._asdict(), "env_steps": int(sum(steps)),
                "piece_rows": np.asarray(rows, dtype=np.int64),
                "piece_steps": np.asarray(steps, dtype=np.int64),
                "n_envs": algo.n_envs, "sample_time": elapsed, **self._report(before)}

    def _report(self, episodes_before: int) -> dict[str, Any]:
        """What every sample returns besides the data: who sampled, with which weights, the
        episodes finished since ``episodes_before`` and the normaliser's statistics."""
        algo, stats = self.algo, self.algo._ep_stats
        done = int(stats.episode_count - episodes_before)
        new = min(done, len(stats.return_queue))
        tail = lambda q: list(q)[len(q) - new:]
        norm = algo.normalizer
        return {"index": self.index, "version": self.version, "pid": os.getpid(),
                "episodes": done,
                "episode_returns": np.asarray(tail(stats.return_queue), dtype=np.float64),
                "episode_lengths": np.asarray(tail(stats.length_queue), dtype=np.int64),
                "normalizer": None if norm is None else {"obs_rms": norm.obs_rms.state_dict(),
                                                         "ret_rms": norm.ret_rms.state_dict()}}

    def _resize(self, n_steps: int) -> None:
        algo, buf = self.algo, self.algo.rollout_buffer
        algo.n_steps = int(n_steps)
        algo.rollout_buffer = RolloutBuffer(int(n_steps), buf.n_envs, buf.observations.shape[2],
                                            buf.actions.shape[2:], buf.actions.dtype, buf.gamma,
                                            buf.gae_lambda)

    def sample(self, n_steps: int | None = None, weights: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        """``n_steps`` vector steps (default: the algorithm's) with ``weights`` if given.

        Returns the rollout buffer's arrays (``ROLLOUT_FIELDS``, advantages and returns
        included), the episodes finished meanwhile (``episode_returns``, ``episode_lengths``),
        the normaliser's statistics after the rollout, the weights' ``version``, the process
        id and the seconds the rollout took here (``sample_time``).
        """
        algo = self.algo
        if weights is not None:
            self.set_weights(weights)
        if n_steps is not None and int(n_steps) != algo.n_steps:
            self._resize(n_steps)
        stats = algo._ep_stats
        before = stats.episode_count
        t0 = time.perf_counter()
        algo.collect_rollouts(None)
        elapsed = time.perf_counter() - t0
        buf = algo.rollout_buffer
        out: dict[str, Any] = {f: getattr(buf, f).copy() for f in ROLLOUT_FIELDS}
        out.update(sample_time=elapsed, n_envs=buf.n_envs, n_steps=buf.n_steps,
                   **self._report(before))
        return out
