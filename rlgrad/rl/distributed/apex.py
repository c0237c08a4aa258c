"""Off-policy algorithms on env runners, Ape-X style (Horgan et al., 2018): the runners never wait
for the learner.

Every runner always has one call in flight: ``train_freq`` of its algorithm's own exploration
(warm-up, epsilon-greedy with the learner's schedule, action noise, gSDE) with the newest weights
the learner had when the call was made. ``ApexSampler.collect`` takes the first rollout that is
ready, sends that runner off again at once with the newest weights, and puts the transitions
into the learner's replay buffer; the learner then trains as after a local ``collect_rollouts``.

Policy lag: a rollout's lag is the number of gradient steps the learner made between the weights
it was sampled with and now. It is logged (``env_runners/policy_lag_mean``, ``..._max``) and
bounded: a rollout older than ``max_policy_lag`` gradient steps is dropped (counted in
``env_runners/stale_dropped``) and the runner sampled again.
"""

from __future__ import annotations

import time
from typing import Any

from rlgrad.rl.distributed.sampler import RaySampler, _Died, _Restarting


class ApexSampler(RaySampler):
    #: rollouts sampled with weights older than this many gradient steps are dropped
    max_policy_lag: int = 1000

    def __init__(self, algo: Any, **kwargs: Any) -> None:
        super().__init__(algo, **kwargs)
        self._inflight: dict[int, tuple[Any, float]] = {}
        self._down: set[int] = set()  # runners that failed and have not answered since
        self._last = -1  # the runner whose rollout was taken last
        self._call_norm: dict[int, Any] = {}  # the normaliser statistics each call started from
        self._ref: Any = None
        self._ref_norm: Any = None
        self._ref_version = -1
        self._credit = 0  # environment steps received but not yet counted as learner steps
        self._lags: list[int] = []
        self.stale_dropped = 0

    def weights(self) -> dict[str, Any]:
        algo = self.algo
        return {**super().weights(), "version": algo._n_updates,
                "counters": {"num_timesteps": algo.num_timesteps,
                             "total_timesteps": algo._total_timesteps}}

    def _submit(self, i: int, restarting: bool = False) -> None:
        algo = self.algo
        if self._ref is None or self._ref_version != algo._n_updates:
            w = self.weights()
            self._ref, self._ref_version, self._ref_norm = self.ray.put(w), algo._n_updates, \
                w["normalizer"]
        self._call_norm[i] = self._ref_norm
        extra = self.restart_timeout_s if restarting else 0.0
        self._inflight[i] = (self.runners[i].sample_transitions.remote(self._ref),
                             time.monotonic() + self.timeout_s + extra)

    def _next(self) -> dict[str, Any]:
        """The first rollout that is ready and fresh enough; its runner is sent off again."""
        ray = self.ray
        for i in range(len(self.runners)):
            if i not in self._inflight:
                self._submit(i)
        n = len(self.runners)
        while True:
            refs = [ref for ref, _ in self._inflight.values()]
            ready = ray.wait(refs, num_returns=len(refs), timeout=0)[0]
            if not ready:
                left = min(d for _, d in self._inflight.values()) - time.monotonic()
                ready = ray.wait(refs, num_returns=1, timeout=max(left, 0.0))[0]
            # every runner in turn, from the one after the last answer: none is starved
            for i in sorted(self._inflight, key=lambda j: (j - self._last - 1) % n):
                ref, deadline = self._inflight[i]
                if ref in ready:
                    try:
                        b = self._get(i, ref)
                    except _Restarting:  # Ray is restarting it: counted once, then waited for
                        if i not in self._down or time.monotonic() >= deadline:
                            self._failed(i, "died or cannot be reached (ActorUnavailableError)")
                            self._down.add(i)
                            self._submit(i, restarting=True)
                        else:
                            time.sleep(0.2)
                            self._inflight[i] = (self.runners[i].sample_transitions.remote(
                                self._ref), deadline)
                        break
                    except _Died as e:
                        self._failed(i, f"died ({e})")
                        self._down.add(i)
                        self._submit(i, restarting=True)
                        break
                    self._check_pid(i, int(b["pid"]), failed=i in self._down)
                    self._down.discard(i)
                    self._last = i
                    b["sent_normalizer"] = self._call_norm[i]
                    self._submit(i)
                    lag = self.algo._n_updates - int(b["version"])
                    if lag > self.max_policy_lag:
                        self.stale_dropped += 1
                        break
                    self._lags.append(lag)
                    return b
                if time.monotonic() >= deadline:
                    ray.kill(self.runners[i], no_restart=False)
                    self._failed(i, f"gave no rollout within {self.timeout_s:g} s and was killed")
                    self._down.add(i)
                    self._submit(i, restarting=True)

    def collect(self, callback: Any) -> tuple[int, bool]:  # type: ignore[override]
        """``OffPolicyAlgorithm.collect_rollouts`` from the runners: (env steps, keep going)."""
        algo = self.algo
        b = self._next()
        t = b["transitions"]
        algo.replay_buffer.add(t["observations"], t["next_observations"], t["actions"],
                               t["rewards"], t["terminated"], t["truncated"])
        self._merge_normalizer(b["sent_normalizer"], [b], exact_single=False)
        self._add_episodes([b])
        algo._episode_num += int(b["episodes"])
        self._record()
        self._credit += int(b["env_steps"])
        while self._credit >= algo.n_envs:  # one learner vector step per n_envs env steps
            self._credit -= algo.n_envs
            algo.num_timesteps += algo.n_envs
            algo._update_progress()
            algo._on_step()  # DQN: target sync, epsilon
            if callback is not None and not callback.on_step():
                return int(b["env_steps"]), False
        if callback is not None:
            callback.on_rollout_end()
        return int(b["env_steps"]), True

    def _record(self) -> None:
        lg = self.algo.logger
        lg.record("env_runners/restarts", sum(self.restarts))
        lg.record("env_runners/stale_dropped", self.stale_dropped)
        if self._lags:
            lg.record("env_runners/policy_lag_mean", sum(self._lags) / len(self._lags))
            lg.record("env_runners/policy_lag_max", max(self._lags))
            self._lags = self._lags[-100:]
