"""Rollouts on Ray actors: ``PPO(..., env_runners=N)`` (also A2C, REINFORCE) and
``rlgrad train ... --env-runners N [--ray-address ADDR]``.

* ``runner.EnvRunner`` (RLlib's name): a Ray actor that builds its own vector environment and a
  copy of the algorithm's policy with the same code a local run uses, takes the learner's weights
  as NumPy arrays through Ray's object store and returns a rollout (NumPy arrays, GAE computed)
  with the episodes it finished.
* ``sampler.RaySampler``: the learner's side. It broadcasts the weights once per iteration,
  gathers the runners' rollouts into the algorithm's own rollout buffer, restarts a runner that
  died (its partial rollout is dropped) and never waits without a timeout.
* ``cluster.connect``: a local Ray by default, a cluster given by its address; an unreachable
  address fails within seconds in one line.

Nothing here is imported by ``import rlgrad`` or ``import rlgrad.rl``: Ray is loaded when an
algorithm with ``env_runners > 0`` starts learning (or the CLI is asked for runners).
"""

from __future__ import annotations

__all__ = ["EnvRunner", "RaySampler", "connect"]


def __getattr__(name: str) -> object:
    if name == "EnvRunner":
        from rlgrad.rl.distributed.runner import EnvRunner

        return EnvRunner
    if name == "RaySampler":
        from rlgrad.rl.distributed.sampler import RaySampler

        return RaySampler
    if name == "connect":
        from rlgrad.rl.distributed.cluster import connect

        return connect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
