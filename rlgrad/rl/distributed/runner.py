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

from rlgrad.random import generator_state_dict, load_generator_state
from rlgrad.rl.buffers import RolloutBuffer
from rlgrad.rl.envs import get_env_state, set_env_state
from rlgrad.rl.ranges import relations_unchecked

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
        self.algo.env.action_space.seed(env_seed)
        self.algo._last_obs = self.algo._adapter.reset(seed=env_seed)
        self.algo._env_seeded = True
        # the learner's normaliser counted the first observations already (its own reset)

    def pid(self) -> int:
        return os.getpid()

    def get_state(self) -> dict[str, Any]:
        """What sampling continues from: the environment copies (their whole state where it is
        plain data, ``rlgrad.rl.envs.get_env_state``), the last observations, the action
        stream and the normaliser's per-copy discounted returns."""
        algo = self.algo
        state: dict[str, Any] = {
            "rng": generator_state_dict(algo.rng),
            "env": {"last_obs": np.asarray(algo._last_obs).copy(),
                    "prev_done": algo._adapter.prev_done.copy(),
                    "vector_env": get_env_state(algo.env)}}
        if algo.normalizer is not None:
            state["returns"] = algo.normalizer.returns.copy()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``get_state()``'s result (an environment whose state is not plain data
        keeps the episodes it started)."""
        algo, env = self.algo, state["env"]
        load_generator_state(algo.rng, state["rng"])
        if env.get("vector_env"):
            set_env_state(algo.env, env["vector_env"])
            algo._last_obs = np.asarray(env["last_obs"])
            algo._adapter.prev_done = np.asarray(env["prev_done"], dtype=bool).copy()
        if algo.normalizer is not None and "returns" in state:
            algo.normalizer.returns = np.array(state["returns"], dtype=np.float64)

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load ``{"policy": state_dict, "normalizer": statistics or None, "version": int}``."""
        algo = self.algo
        algo.policy.load_state_dict(weights["policy"])
        norm = weights.get("normalizer")
        if norm is not None and algo.normalizer is not None:
            # the statistics only: the discounted returns are per environment copy, this
            # runner's own
            algo.normalizer.obs_rms.load_state_dict(norm["obs_rms"])
            algo.normalizer.ret_rms.load_state_dict(norm["ret_rms"])
        self.version = int(weights.get("version", self.version))

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
        new = min(stats.episode_count - before, len(stats.return_queue))
        buf = algo.rollout_buffer
        out: dict[str, Any] = {f: getattr(buf, f).copy() for f in ROLLOUT_FIELDS}
        out.update(
            index=self.index, version=self.version, pid=os.getpid(), sample_time=elapsed,
            n_envs=buf.n_envs, n_steps=buf.n_steps,
            episode_returns=np.asarray(list(stats.return_queue)[len(stats.return_queue) - new:],
                                       dtype=np.float64),
            episode_lengths=np.asarray(list(stats.length_queue)[len(stats.length_queue) - new:],
                                       dtype=np.int64),
            episodes=int(stats.episode_count - before),
            normalizer=None if algo.normalizer is None else {
                "obs_rms": algo.normalizer.obs_rms.state_dict(),
                "ret_rms": algo.normalizer.ret_rms.state_dict()},
        )
        return out
