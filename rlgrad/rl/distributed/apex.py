"""Off-policy algorithms on env runners, Ape-X style (Horgan et al., 2018): the runners never wait
for the learner.

Every runner always has one call in flight: a rollout fragment, ``calls`` times ``train_freq`` of
its algorithm's own exploration (warm-up, epsilon-greedy with the learner's schedule, action
noise, gSDE), with the newest weights the learner had when the call was made. ``ApexSampler``
takes the first fragment that is ready, sends that runner off again at once with the newest
weights, and hands the fragment to the learner in ``train_freq`` pieces: ``collect_rollouts``
takes pieces until one ``train_freq`` of the learner's ``n_envs`` copies arrived, and the
learner trains as after a local ``collect_rollouts`` (the same gradient steps per environment
step), so one round trip serves ``calls`` of a runner's pieces.

Policy lag: a piece's lag is the number of gradient steps the learner made between the weights
it was sampled with and its use. It is logged (``env_runners/policy_lag_mean``, ``..._max``) and
bounded: a piece older than ``max_policy_lag`` gradient steps is dropped (counted in
``env_runners/stale_dropped``). A longer fragment means fewer round trips and a larger lag (the
last piece of a fragment waits for the learner's steps on the ones before it).

Checkpoints: ``get_state`` waits for the calls in flight and keeps their fragments (to be used
first after a resume, their runner sent off again when they are taken, as without the
checkpoint), the pieces not used yet, the lag counters and every runner's state (environments,
action stream, noise), so that a resumed run goes on with the same episodes and data; with one
runner it is the uninterrupted run, number for number.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from rlgrad.rl.distributed.runner import SCRATCH_ROWS
from rlgrad.rl.distributed.sampler import RaySampler, _Died, _Restarting, split_envs


class ApexSampler(RaySampler):
    #: pieces sampled with weights older than this many gradient steps are dropped
    max_policy_lag: int = 1000
    #: environment steps of one runner call (over the runner's copies), rounded up to whole
    #: ``train_freq``s; 1 makes every ``train_freq`` a round trip
    rollout_fragment_length: int = 16

    def __init__(self, algo: Any, **kwargs: Any) -> None:
        self.calls = self.fragment_calls(algo, max(split_envs(algo.n_envs, algo.env_runners)))
        super().__init__(algo, **kwargs)
        self._inflight: dict[int, tuple[Any, float]] = {}
        self._down: set[int] = set()  # runners that failed and have not answered since
        self._last = -1  # the runner whose rollout was taken last
        self._call_norm: dict[int, Any] = {}  # the normaliser statistics each call started from
        self._ready: dict[int, dict[str, Any]] = {}  # fragments kept by a checkpoint, not taken
        self._pieces: list[dict[str, Any]] = []  # the taken fragment's pieces not yet used
        self._ref: Any = None
        self._ref_norm: Any = None
        self._ref_version = -1
        self._credit = 0  # environment steps received but not yet counted as learner steps
        self._lags: list[int] = []
        self.stale_dropped = 0
        self.restarts_before = 0  # restarts of the runners of the run this one resumes

    @classmethod
    def fragment_calls(cls, algo: Any, n_envs: int) -> int:
        """``train_freq``s per runner call: ``rollout_fragment_length`` environment steps of a
        runner of ``n_envs`` copies, rounded up (1 for a ``train_freq`` in episodes)."""
        n, unit = algo.train_freq
        if unit == "episode":
            return 1
        per_call = n * n_envs
        calls = max(1, math.ceil(int(cls.rollout_fragment_length) / per_call))
        return max(1, min(calls, SCRATCH_ROWS // per_call))

    def runner_hyperparams(self, hp: dict[str, Any], n_envs: int) -> dict[str, Any]:
        n, unit = self.algo.train_freq
        if unit == "episode":
            return hp
        # the runner's replay buffer is a scratch ring of one fragment (not a second buffer)
        return {**hp, "buffer_size": min(int(hp["buffer_size"]), self.calls * n * n_envs)}

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
        self._inflight[i] = (self.runners[i].sample_transitions.remote(self._ref, self.calls),
                             time.monotonic() + self.timeout_s + extra)

    def _take(self) -> dict[str, Any]:
        """The first fragment that is ready (one a checkpoint kept first); its runner is sent
        off again."""
        n = len(self.runners)
        turn = lambda j: (j - self._last - 1) % n  # every runner in turn: none is starved
        for i in sorted(self._ready, key=turn):
            b = self._ready.pop(i)
            self._last = i
            self._submit(i)
            return b
        for i in range(n):
            if i not in self._inflight:
                self._submit(i)
        while True:
            refs = [ref for ref, _ in self._inflight.values()]
            ready = self.ray.wait(refs, num_returns=len(refs), timeout=0)[0]
            if not ready:
                left = min(d for _, d in self._inflight.values()) - time.monotonic()
                ready = self.ray.wait(refs, num_returns=1, timeout=max(left, 0.0))[0]
            for i in sorted(self._inflight, key=turn):
                ref, deadline = self._inflight[i]
                if ref in ready:
                    b = self._answer(i, ref, deadline)
                    if b is None:  # a fault: handled, look again
                        break
                    self._last = i
                    self._submit(i)
                    return b
                if time.monotonic() >= deadline:
                    self.ray.kill(self.runners[i], no_restart=False)
                    self._failed(i, f"gave no rollout within {self.timeout_s:g} s and was killed")
                    self._down.add(i)
                    self._submit(i, restarting=True)

    def _answer(self, i: int, ref: Any, deadline: float) -> dict[str, Any] | None:
        """Runner ``i``'s finished call: its fragment, or None after a fault (the runner is
        asked again; a runner Ray is restarting is counted once, then waited for)."""
        try:
            b = self._get(i, ref)
        except _Restarting:
            if i not in self._down or time.monotonic() >= deadline:
                self._failed(i, "died or cannot be reached (ActorUnavailableError)")
                self._down.add(i)
                self._submit(i, restarting=True)
            else:
                time.sleep(0.2)
                self._inflight[i] = (self.runners[i].sample_transitions.remote(
                    self._ref, self.calls), deadline)
            return None
        except _Died as e:
            self._failed(i, f"died ({e})")
            self._down.add(i)
            self._submit(i, restarting=True)
            return None
        del self._inflight[i]
        self._check_pid(i, int(b["pid"]), failed=i in self._down)
        self._down.discard(i)
        b["sent_normalizer"] = self._call_norm[i]
        return b

    def _unpack(self, b: dict[str, Any]) -> None:
        """A fragment's statistics into the learner's, its pieces queued for ``collect``."""
        algo = self.algo
        self._merge_normalizer(b["sent_normalizer"], [b], exact_single=False)
        self._add_episodes([b])
        algo._episode_num += int(b["episodes"])
        t, start = b["transitions"], 0
        for end, steps in zip(np.asarray(b["piece_rows"]).tolist(),
                              np.asarray(b["piece_steps"]).tolist(), strict=True):
            self._pieces.append({"transitions": {k: None if v is None else np.asarray(v)[start:end]
                                                 for k, v in t.items()},  # (None: no n-step)
                                 "env_steps": int(steps), "version": int(b["version"])})
            start = end

    def _next_piece(self) -> dict[str, Any]:
        """The next ``train_freq`` of transitions fresh enough to learn from."""
        while True:
            if not self._pieces:
                self._unpack(self._take())
            p = self._pieces.pop(0)
            lag = self.algo._n_updates - p["version"]
            if lag > self.max_policy_lag:
                self.stale_dropped += 1
                continue
            self._lags.append(lag)
            return p

    def collect(self, callback: Any) -> tuple[int, bool]:  # type: ignore[override]
        """``OffPolicyAlgorithm.collect_rollouts`` from the runners: (env steps, keep going).

        One ``train_freq`` of the learner's ``n_envs`` copies: pieces until ``train_freq *
        n_envs`` environment steps arrived (a runner's piece is one ``train_freq`` of its own,
        fewer, copies), so that the learner makes as many gradient steps per environment step
        as a local run; with ``train_freq`` in episodes, one piece."""
        algo = self.algo
        n, unit = algo.train_freq
        need = n * algo.n_envs if unit == "step" else 1
        got = 0
        while got < need:
            p = self._next_piece()
            t = p["transitions"]
            if len(t["rewards"]):
                algo.replay_buffer.add(t["observations"], t["next_observations"], t["actions"],
                                       t["rewards"], t["terminated"], t["truncated"])
            got += p["env_steps"] if unit == "step" else 1
            self._credit += p["env_steps"]
            while self._credit >= algo.n_envs:  # one learner vector step per n_envs env steps
                self._credit -= algo.n_envs
                algo.num_timesteps += algo.n_envs
                algo._update_progress()
                algo._on_step()  # DQN: target sync, epsilon
                if callback is not None and not callback.on_step():
                    return p["env_steps"], False
        self._record()
        if callback is not None:
            callback.on_rollout_end()
        return got if unit == "step" else p["env_steps"], True

    def _record(self) -> None:
        lg = self.algo.logger
        lg.record("env_runners/restarts", self.restarts_before + sum(self.restarts))
        lg.record("env_runners/stale_dropped", self.stale_dropped)
        lg.record("env_runners/fragment_calls", self.calls)
        if self._lags:
            lg.record("env_runners/policy_lag_mean", sum(self._lags) / len(self._lags))
            lg.record("env_runners/policy_lag_max", max(self._lags))
            self._lags = self._lags[-100:]

    # ---- checkpoints ----------------------------------------------------------------------------
    def _drain(self) -> None:
        """Wait for the calls in flight and keep their fragments (a runner that failed meanwhile
        is restarted by Ray with a fresh state; its call is dropped, as any failed call)."""
        for i, (_, deadline) in list(self._inflight.items()):
            b = None
            while b is None and i in self._inflight:
                b = self._answer(i, self._inflight[i][0], deadline)
            if b is not None:
                self._ready[i] = b

    def get_state(self) -> dict[str, Any]:
        self._drain()
        ready = {str(i): {k: v for k, v in b.items() if k != "pid"}
                 for i, b in self._ready.items()}
        return {"runners": super().get_state(), "ready": ready, "pieces": list(self._pieces),
                "counters": {"credit": self._credit, "lags": list(self._lags),
                             "stale_dropped": self.stale_dropped, "last": self._last,
                             "restarts": self.restarts_before + sum(self.restarts)}}

    def set_state(self, state: dict[str, Any]) -> None:
        if "runners" not in state:  # a checkpoint of runners' states only
            super().set_state(state)
            return
        super().set_state(state["runners"])
        ready = {int(i): dict(b) for i, b in state.get("ready", {}).items()}
        if len(state["runners"]) != len(self.runners):  # other runners: the data is still good
            for i in sorted(ready):
                self._unpack(ready.pop(i))
        self._ready = ready
        self._pieces.extend(dict(p) for p in state.get("pieces", []))
        c = state.get("counters", {})
        self._credit = int(c.get("credit", 0))
        self._lags = [int(x) for x in c.get("lags", [])]
        self.stale_dropped = int(c.get("stale_dropped", 0))
        self._last = int(c.get("last", -1))
        self.restarts_before = int(c.get("restarts", 0))
