"""The learner's side of distributed on-policy sampling: ``RaySampler(algo).collect(callback)``
fills ``algo.rollout_buffer`` from the algorithm's ``EnvRunner`` actors, as the local
``collect_rollouts`` fills it from its own environments.

One iteration: the weights (and the normaliser's statistics) are put into Ray's object store
once, every runner samples ``n_steps`` with them, and the rollouts are copied side by side into
the buffer (runner ``i``'s copies at the columns of its environment copies), GAE computed.

Faults: a runner whose process dies is restarted by Ray (``max_restarts``); the rollout it was
collecting is dropped, one line says so, and it samples again with the same weights. A runner
that does not answer within ``timeout_s`` is killed (and so restarted). The driver therefore
never waits without a bound; a runner that fails more than ``max_restarts`` times stops training
with one line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.rl.distributed.cluster import connect, import_ray, runner_cpus
from rlgrad.rl.distributed.runner import ROLLOUT_FIELDS, EnvRunner


def split_envs(n_envs: int, n_runners: int) -> list[int]:
    """Environment copies per runner: ``n_envs`` spread as evenly as possible."""
    if n_runners > n_envs:
        raise ValueError(f"env_runners={n_runners} is more than n_envs={n_envs}: every runner "
                         "steps at least one environment copy (n_envs is the total over runners)")
    q, r = divmod(n_envs, n_runners)
    return [q + (i < r) for i in range(n_runners)]


def batch_moments(old: dict[str, Any], new: dict[str, Any]) -> tuple[Any, Any, float]:
    """(mean, variance, count) of the data that took running statistics from ``old`` to ``new``
    (both ``RunningMeanStd.state_dict()``s): Chan et al.'s merge solved for the batch."""
    c0, c1 = float(old["count"]), float(new["count"])
    cb = c1 - c0
    if cb <= 0:
        return None, None, 0.0
    m0, m1 = np.asarray(old["mean"]), np.asarray(new["mean"])
    v0, v1 = np.asarray(old["var"]), np.asarray(new["var"])
    mb = (m1 * c1 - m0 * c0) / cb
    m2b = v1 * c1 - v0 * c0 - np.square(mb - m0) * (c0 * cb / c1)
    return mb, np.maximum(m2b / cb, 0.0), cb


class _Died(Exception):
    """A runner's process died (killed, out of memory, its node lost)."""


class _Restarting(Exception):
    """A runner Ray is restarting right now."""


def _last_line(text: str) -> str:
    """The last non-empty line of a remote traceback: the exception and its message."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else text


class RaySampler:
    """``algo.env_runners`` EnvRunner actors for an on-policy algorithm (see the module)."""

    #: seconds a runner may take for one rollout (its restart included) before it is killed
    timeout_s: float = 300.0
    #: restarts of each runner before training stops
    max_restarts: int = 3
    #: seconds Ray may take to restart a runner (a new process, imports, environments)
    restart_timeout_s: float = 120.0

    def __init__(self, algo: Any, address: str | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.ray = ray = import_ray()
        self.algo = algo
        self.warn = warn or (lambda msg: print(msg, file=sys.stderr))
        self.started_ray = connect(address)
        env = algo._env_arg  # an id: checked when the algorithm was built
        counts = split_envs(algo.n_envs, algo.env_runners)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        cpus = runner_cpus(len(counts), self.warn)
        actor = ray.remote(EnvRunner).options(num_cpus=cpus, max_restarts=self.max_restarts,
                                              max_task_retries=0)
        hp = algo.get_hyperparams()
        self.counts = counts
        self.runners = [actor.remote(type(algo), env, algo.seed, self.runner_hyperparams(hp, n),
                                     i, offsets[i], n) for i, n in enumerate(counts)]
        self.restarts = [0] * len(counts)
        self.pids: list[int | None] = [None] * len(counts)  # each runner's process
        self.events: list[str] = []  # one line per fault, also printed
        self.version = 0
        self.sample_times: list[float] = []

    def runner_hyperparams(self, hp: dict[str, Any], n_envs: int) -> dict[str, Any]:
        """The hyperparameters of a runner of ``n_envs`` copies (the learner's)."""
        return hp

    # ---- checkpoints ----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Every runner's ``get_state()``, keyed by its index: part of the learner's checkpoint."""
        states = self.ray.get([r.get_state.remote() for r in self.runners],
                              timeout=self.timeout_s)
        return {str(i): st for i, st in enumerate(states)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Hand each runner its state of a checkpoint (of a run with as many runners)."""
        if sorted(state, key=int) != [str(i) for i in range(len(self.runners))]:
            self.warn(f"rlgrad: warning: the checkpoint holds the state of {len(state)} env "
                      f"runners, this run has {len(self.runners)}: they start new episodes")
            return
        self.ray.get([r.set_state.remote(state[str(i)]) for i, r in enumerate(self.runners)],
                     timeout=self.timeout_s + self.restart_timeout_s)

    # ---- one iteration ------------------------------------------------------------------------
    def weights(self) -> dict[str, Any]:
        algo = self.algo
        norm = algo.normalizer
        return {"modules": {k: m.state_dict() for k, m in algo._modules().items()},
                "version": self.version,
                "normalizer": None if norm is None else {"obs_rms": norm.obs_rms.state_dict(),
                                                         "ret_rms": norm.ret_rms.state_dict()}}

    def collect(self, callback: Any) -> bool:
        """``algo.collect_rollouts`` on the runners: the buffer filled, counters advanced, the
        callback's ``on_step`` called once per vector step; False if a callback stopped."""
        algo = self.algo
        self.version += 1
        sent = self.weights()
        batches = self._sample_all(self.ray.put(sent))
        self.sample_times = [float(b["sample_time"]) for b in batches]  # seconds, in the runners
        self._fill(batches)
        self._merge_normalizer(sent["normalizer"], batches)
        self._add_episodes(batches)
        algo.logger.record("env_runners/restarts", sum(self.restarts))
        for _ in range(algo.n_steps):
            algo.num_timesteps += algo.n_envs
            if callback is not None and not callback.on_step():
                return False
        if callback is not None:
            callback.on_rollout_end()
        return True

    def _add_episodes(self, batches: list[dict[str, Any]]) -> None:
        """The runners' finished episodes into the learner's statistics (what it logs)."""
        st = self.algo._ep_stats
        for b in batches:
            st.return_queue.extend(b["episode_returns"].tolist())
            st.length_queue.extend(b["episode_lengths"].tolist())
            st.episode_count += b["episodes"]
        self.algo._adapter.add_episodes()  # (into ep_info_buffer, as the learner's own would)

    def _fill(self, batches: list[dict[str, Any]]) -> None:
        buf = self.algo.rollout_buffer
        buf.reset()
        col = 0
        for b in batches:
            n = int(b["n_envs"])
            for f in ROLLOUT_FIELDS:
                getattr(buf, f)[:, col:col + n] = b[f]
            col += n
        buf.pos = buf.n_steps

    def _merge_normalizer(self, sent: dict[str, Any] | None, batches: list[dict[str, Any]],
                          exact_single: bool = True) -> None:
        """Each batch's statistics were ``sent`` plus what its runner saw: merge that part."""
        norm = self.algo.normalizer
        if norm is None or sent is None:
            return
        if exact_single and len(batches) == 1:  # the runner's statistics are the learner's
            norm.obs_rms.load_state_dict(batches[0]["normalizer"]["obs_rms"])
            norm.ret_rms.load_state_dict(batches[0]["normalizer"]["ret_rms"])
            return
        for key in ("obs_rms", "ret_rms"):
            rms = getattr(norm, key)
            for b in batches:
                mean, var, count = batch_moments(sent[key], b["normalizer"][key])
                if count > 0:
                    rms.update_from_moments(mean, var, count)

    # ---- faults -------------------------------------------------------------------------------
    def _sample_all(self, weights_ref: Any) -> list[dict[str, Any]]:
        """Every runner's rollout; a runner that dies or hangs is restarted and asked again."""
        ray = self.ray
        n_steps = self.algo.n_steps

        def submit(i: int, restarting: bool = False) -> tuple[Any, float]:
            extra = self.restart_timeout_s if restarting else 0.0
            return (self.runners[i].sample.remote(n_steps, weights_ref),
                    time.monotonic() + self.timeout_s + extra)

        pending = {i: submit(i) for i in range(len(self.runners))}
        done: dict[int, dict[str, Any]] = {}
        failed: set[int] = set()
        while pending:
            left = min(deadline for _, deadline in pending.values()) - time.monotonic()
            ready, _ = ray.wait([ref for ref, _ in pending.values()], num_returns=1,
                                timeout=max(left, 0.0))
            for i, (ref, deadline) in list(pending.items()):
                if ready and ref == ready[0]:
                    try:
                        done[i] = self._get(i, ref)
                        del pending[i]
                    except _Restarting:  # Ray is restarting it: a fault, then a wait
                        if i not in failed:
                            self._failed(i, "died or cannot be reached (ActorUnavailableError)")
                            failed.add(i)
                            deadline += self.restart_timeout_s
                        elif time.monotonic() >= deadline:
                            self._failed(i, f"stayed unavailable for {self.timeout_s:g} s")
                            deadline = time.monotonic() + self.timeout_s + self.restart_timeout_s
                        else:
                            time.sleep(0.2)
                        pending[i] = (self.runners[i].sample.remote(n_steps, weights_ref),
                                      deadline)
                    except _Died as e:
                        self._failed(i, f"died ({e})")
                        failed.add(i)
                        pending[i] = submit(i, restarting=True)
                elif time.monotonic() >= deadline:
                    ray.kill(self.runners[i], no_restart=False)
                    self._failed(i, f"gave no rollout within {self.timeout_s:g} s and was killed")
                    failed.add(i)
                    pending[i] = submit(i, restarting=True)
        for i, b in done.items():
            self._check_pid(i, int(b["pid"]), failed=i in failed)
        return [done[i] for i in range(len(self.runners))]

    def _check_pid(self, i: int, pid: int, failed: bool) -> None:
        """A runner whose process died between two rollouts is restarted by Ray without a
        failed call (nothing was lost): only its new process tells, and is logged."""
        old, self.pids[i] = self.pids[i], pid
        if old is not None and pid != old and not failed:
            self._failed(i, f"was restarted by Ray (its process {old} died; this rollout "
                         "came whole from the new one)", dropped=False)

    def _get(self, i: int, ref: Any) -> dict[str, Any]:
        """The rollout of a finished call; ``_Died``/``_Restarting`` for a runner fault, the
        rollout's own exception (a non-finite observation, ...) as it was raised."""
        exc = self.ray.exceptions
        try:
            return self.ray.get(ref, timeout=self.timeout_s)
        except exc.ActorUnavailableError:
            raise _Restarting() from None
        except exc.RayActorError as e:
            if getattr(e, "actor_init_failed", False):  # restarting cannot help
                raise RuntimeError(f"env runner {i} could not be built: "
                                   f"{_last_line(str(e))}") from None
            raise _Died(type(e).__name__) from None
        except exc.RayTaskError as e:  # the rollout itself raised
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, Exception) else e) from None

    def _failed(self, i: int, why: str, dropped: bool = True) -> None:
        self.restarts[i] += 1
        k = self.restarts[i]
        if k > self.max_restarts:
            raise RuntimeError(f"env runner {i} {why}: its restart {k}, more than max_restarts="
                               f"{self.max_restarts}; training stops")
        then = ("Ray restarts it; its partial rollout is dropped and it samples again"
                if dropped else "it samples on")
        msg = (f"rlgrad: warning: env runner {i} {why}; {then} (restart {k} of "
               f"{self.max_restarts}, step {self.algo.num_timesteps})")
        self.events.append(msg)
        self.warn(msg)

    # ---- shutting down ----------------------------------------------------------------------
    def close(self) -> None:
        """Kill the runners (no restart); stop Ray if this sampler started it."""
        ray = self.ray
        for r in self.runners:
            try:
                ray.kill(r, no_restart=True)
            except Exception:  # already gone
                pass
        self.runners = []
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
