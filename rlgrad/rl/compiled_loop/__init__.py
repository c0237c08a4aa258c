"""The whole on-policy training loop as one compiled program (issue 31, item 2).

``PPO(env_id, compile_loop=True)`` (and ``A2C``, ``REINFORCE``) on a functional environment
(``rlgrad.rl.functional``: CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum)
traces the rollout, GAE and the update epochs of an update into one ``rlgrad.jit`` program
(``program.py``), as PureJaxRL does with ``jax.jit``, and ``learn`` calls it once per update.
The program runs as native code (``rlgrad.native``: C built once per configuration, cached on
disk) where every op lowers and a C compiler is there, else as the NumPy replay, which is its
reference (``loop_backend``: ``RLGRAD_JIT_BACKEND`` chooses; ``model.loop_backend`` says which
ran). The randomness is a key-splitting generator carried in the loop's state
(``rlgrad.rl.functional.keys``).
``train_seeds`` runs N seeds as one program (a leading seed axis on every array), PureJaxRL's
``vmap`` over seeds. ``RLGRAD_LOOP_DEBUG=1`` prints the compiled program.

For the same seed the compiled loop computes what the eager algorithm computes on
``FunctionalVectorEnv`` when the eager run draws from the same key streams (``use_key_streams``),
up to the float rounding of sums taken in another order.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import rlgrad
from rlgrad.rl.compiled_loop.program import make_program
from rlgrad.rl.compiled_loop.spec import EnvSide, LoopSpec, loop_spec, refuse_env
from rlgrad.rl.functional.keys import ALGO_STREAM, ENV_STREAM, KeyBatch, KeyGenerator, seed_keys
from rlgrad.transforms import tree_flatten, tree_unflatten

__all__ = ["LoopSpec", "clear_programs", "compiled_source", "initial_state", "learn_compiled",
           "loop_backend", "loop_spec", "program_source", "refuse_env", "restart_episodes",
           "schedule", "train_seeds",
           "use_key_streams"]


def _tree_map(fn: Any, *trees: Any) -> Any:
    leaves = [tree_flatten(t)[0] for t in trees]
    return tree_unflatten(tree_flatten(trees[0])[1], [fn(*xs) for xs in zip(*leaves)])


def use_key_streams(model: Any) -> Any:
    """Make an eager on-policy ``model`` on a ``FunctionalVectorEnv`` draw what the compiled loop
    draws for its seed (its sampling and minibatch order from the algorithm's key stream, its env
    copies' first states from theirs); call before ``learn``. Returns ``model``."""
    env = model.vector_env
    if not hasattr(env, "key_rng"):
        raise refuse_env(type(model).__name__, env)
    env.key_rng = True
    model.rng = KeyGenerator.from_seed(model.seed, ALGO_STREAM)
    return model


def initial_state(models: Sequence[Any], spec: EnvSide) -> dict[str, Any]:
    """The loop's state for one model per seed, stacked on a leading seed axis."""
    seeds = np.array([m.seed for m in models], dtype=np.int64)
    params = [np.stack([np.array(p._value) for p in ps])
              for ps in zip(*(m.optimizer.param_groups[0]["params"] for m in models))]
    E = spec.n_envs
    batch = KeyBatch(seed_keys(seeds[:, None] + np.arange(E), ENV_STREAM))
    state = np.asarray(spec.func_env.initial(batch))
    env = {"state": state, "keys": np.ascontiguousarray(batch.keys),  # (a view: native wants C order)
           "steps": np.zeros((len(seeds), E), np.int64),
           "autoreset": np.zeros((len(seeds), E), bool),
           "obs": np.asarray(spec.func_env.observation(state), dtype=np.float32)}
    n = sum(p[0].size for p in params)  # the optimizer's moments: flat, (S, P)
    opt = {"step": np.zeros(len(seeds)), "m": np.zeros((len(seeds), n), params[0].dtype),
           "v": np.zeros((len(seeds), n), params[0].dtype)}
    return {"params": params, "opt": opt, "env": env, "key": seed_keys(seeds, ALGO_STREAM),
            "ep_ret": np.zeros((len(seeds), E))}


def schedule(model: Any, total_timesteps: int, start: int = 0) -> dict[str, np.ndarray]:
    """One row per update: the learning rate and clip ranges the eager loop would use there
    (its progress counted after each rollout)."""
    per = model.n_steps * model.n_envs
    n = -(-int(total_timesteps) // per)
    total = start + int(total_timesteps)
    progress = np.maximum(0.0, 1.0 - (start + per * np.arange(1, n + 1)) / max(total, 1))
    out = {"lr": np.array([model.lr_schedule(p) for p in progress], dtype=np.float64)}
    if hasattr(model, "clip_range"):
        out["clip"] = np.array([model.clip_range(p) for p in progress], dtype=np.float32)
        if model.clip_range_vf is not None:
            out["clip_vf"] = np.array([model.clip_range_vf(p) for p in progress], np.float32)
    return out


_PROGRAMS: dict[tuple[LoopSpec, str], Any] = {}
LOG = logging.getLogger("rlgrad.rl")


def loop_backend() -> str:
    """The backend of the loop's program: ``RLGRAD_JIT_BACKEND`` when set, else "auto" (native
    code where every op lowers and a C compiler is there, the NumPy replay otherwise)."""
    return os.environ.get("RLGRAD_JIT_BACKEND") or "auto"


#: every cache of compiled loop programs (DQN's module adds its own), for ``clear_programs``
PROGRAM_CACHES: list[dict] = [_PROGRAMS]


def clear_programs() -> None:
    """Forget the compiled programs: the next run traces and compiles again, as a new process
    would (benchmarks that time compilation with each run)."""
    for cache in PROGRAM_CACHES:
        cache.clear()


def _compiled(spec: LoopSpec) -> Any:
    key = (spec, loop_backend())
    fn = _PROGRAMS.get(key)
    if fn is None:
        fn = _PROGRAMS[key] = rlgrad.jit(make_program(spec), backend=key[1])
    return fn


def _rows(sched: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The schedule's rows: one dict of 0-d arrays per update (the program's second argument)."""
    n = len(sched["lr"])
    return [{k: np.array(v[i]) for k, v in sched.items()} for i in range(n)]


def program_source(spec: LoopSpec, state: dict[str, Any], sched: dict[str, Any]) -> str:
    """The compiled program of one update, readable: its top-level step, then the body of every
    loop it calls (a loop is one line of its caller, ``ctx=cK``), each once, outermost first."""
    return compiled_source(_compiled(spec), (state, _rows(sched)[0]), "one update")


def compiled_source(compiled: Any, args: tuple[Any, ...], what: str) -> str:
    """``compiled``'s (an ``rlgrad.jit`` function's) program for ``args``, then its loop bodies
    (shared by every algorithm's compiled loop: ``RLGRAD_LOOP_DEBUG=1`` prints it)."""
    top = compiled.lower(*args)
    parts = [f"# ---- the program ({what}): {top.count(chr(10))} lines ----", top]
    step = compiled._compile_for(args).fn
    seen: set[int] = set()
    queue = [("program", step)]
    while queue:
        caller, fn = queue.pop(0)
        for name, v in sorted(getattr(fn, "__globals__", {}).items()):
            for body in _bodies(v):
                if id(body) in seen:
                    continue
                seen.add(id(body))
                me = f"loop {len(seen)}"
                parts.append(f"# ---- {me}: a {body.where} body, called by {caller} as {name} "
                             f"({body.source.count(chr(10))} lines) ----")
                parts.append(body.source)
                queue.append((me, body.run))
    return "\n".join(parts)


def _bodies(node: Any) -> list[Any]:
    """The traced bodies a loop node's context holds (scan: body; while: cond, body; switch:
    branches)."""
    found = [getattr(node, a, None) for a in ("cond", "body")] + list(getattr(node, "branches", ()))
    return [b for b in found if b is not None and hasattr(b, "source") and hasattr(b, "run")]


def run_loop(models: Sequence[Any], spec: LoopSpec, state: dict[str, Any],
             sched: dict[str, np.ndarray]) -> tuple[dict[str, Any], tuple[Any, Any]]:
    """The program run on ``state`` once per update; its source printed first when
    ``RLGRAD_LOOP_DEBUG=1``. Returns the final state and, per update and seed, the sum and
    count of the episodes that ended."""
    update = _compiled(spec)
    out = run_program(models, update, state, _rows(sched), "one update")
    for m in models:
        m.loop_backend = update.backend
    LOG.info("compile_loop: %s runs its updates as %s", type(models[0]).__name__,
             "native code" if update.backend == "native" else "the NumPy replay")
    return out


def run_program(models: Sequence[Any], program: Any, state: dict[str, Any],
                rows: Sequence[dict[str, np.ndarray]], what: str
                ) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray]]:
    """``program`` called once per schedule row (every algorithm's compiled loop): the final
    state and, per row and seed, the sum and count of the episodes that ended. Non-finite
    parameters after it are one line naming the seeds."""
    if os.environ.get("RLGRAD_LOOP_DEBUG", "0") == "1" and rows:
        print(compiled_source(program, (state, rows[0]), what), file=sys.stderr)
    sums, counts = [], []
    with np.errstate(all="ignore"):  # a discarded branch (a done env's step) may overflow
        for row in rows:
            state, (ret_sum, n_done) = program(state, row)
            sums.append(ret_sum)
            counts.append(n_done)
    state = _tree_map(np.asarray, state)
    bad = [m.seed for i, m in enumerate(models)
           if not all(np.isfinite(p[i]).all() for p in state["params"])]
    if bad:
        raise FloatingPointError(f"compile_loop: the parameters of seed(s) {bad} are not finite "
                                 "after training; lower the learning rate or clip the gradients")
    return state, (np.stack(sums), np.stack(counts))


def same_spec(models: Sequence[Any], spec_of: Callable[[Any], Any]) -> Any:
    """The models' one spec (``train_seeds``' models must differ only in their seed)."""
    spec = spec_of(models[0])
    if any(spec_of(m) != spec for m in models[1:]):
        raise ValueError("train_seeds: the models differ in more than their seed; build them "
                         "with the same arguments")
    return spec


def start_state(models: Sequence[Any], spec: Any, initial: Callable[..., dict[str, Any]]
                ) -> dict[str, Any]:
    """The state the loop goes on from: the models' carried states stacked (a later ``learn``),
    else ``initial(models, spec)``. A ``learn(reset_num_timesteps=True)`` (the counter back at 0)
    restarts the episodes, as SB3 resets the env then: everything else carries on."""
    carried = [getattr(m, "_loop_state", None) for m in models]
    if all(c is not None for c in carried):
        state = _tree_map(lambda *xs: np.concatenate(xs), *carried)
        if all(m.num_timesteps == 0 for m in models):
            state = restart_episodes(state, spec)
        return state
    return initial(models, spec)


def restart_episodes(state: dict[str, Any], spec: EnvSide) -> dict[str, Any]:
    """``state`` with every env copy at a new first state, drawn from the copy's own key stream
    where it stands (an unseeded reset of ``FunctionalVectorEnv`` with ``key_rng`` draws the
    same), and the running episode returns at 0."""
    batch = KeyBatch(np.array(state["env"]["keys"]))
    first = np.asarray(spec.func_env.initial(batch))
    env = {"state": first, "keys": np.ascontiguousarray(batch.keys),
           "steps": np.zeros_like(state["env"]["steps"]),
           "autoreset": np.zeros_like(state["env"]["autoreset"]),
           "obs": np.asarray(spec.func_env.observation(first), dtype=np.float32)}
    return {**state, "env": env, "ep_ret": np.zeros_like(state["ep_ret"])}


def _write_back(models: Sequence[Any], state: dict[str, Any], ret_sum: np.ndarray,
                n_done: np.ndarray, steps: int) -> None:
    """Each model gets its seed's parameters, loop state and statistics."""
    for i, m in enumerate(models):
        for p, arr in zip(m.optimizer.param_groups[0]["params"], state["params"]):
            np.copyto(p._value, arr[i])
        m._loop_state = _tree_map(lambda a, i=i: np.array(a[i:i + 1]), state)
        m.num_timesteps += steps
        m.loop_returns = (ret_sum[:, i], n_done[:, i])  # per update: sum and count of episodes
        recent = n_done[-10:, i].sum()
        if recent:
            m.logger.record("rollout/ep_rew_mean", float(ret_sum[-10:, i].sum() / recent))


def learn_compiled(models: Sequence[Any], total_timesteps: int) -> None:
    """Train ``models`` (one per seed, built alike) for ``total_timesteps`` each, as one
    program; a later call goes on from where the last one stopped."""
    own = getattr(type(models[0]), "learn_compiled_loop", None)
    if own is not None:  # DQN: its own program (compiled_loop.dqn)
        return own(models, total_timesteps)
    spec = same_spec(models, loop_spec)
    state = start_state(models, spec, initial_state)
    start = models[0].num_timesteps
    sched = schedule(models[0], total_timesteps, start)
    for m in models:  # (learn's bookkeeping, for models trained together by train_seeds)
        m._total_timesteps = max(m._total_timesteps, start + int(total_timesteps))
    state, (ret_sum, n_done) = run_loop(models, spec, state, sched)
    per = models[0].n_steps * models[0].n_envs
    _write_back(models, state, ret_sum, n_done, per * len(sched["lr"]))
    for m in models:
        m.loop_backend = _compiled(spec).backend  # "numpy" (the replay) or "native"


def train_seeds(algo: type, env: Any, seeds: Sequence[int], total_timesteps: int,
                **kwargs: Any) -> list[Any]:
    """``len(seeds)`` independent runs of ``algo(env, seed=s, compile_loop=True, **kwargs)`` as
    one program (PureJaxRL's ``vmap`` over seeds); returns the trained models."""
    models = [algo(env, seed=int(s), compile_loop=True, **kwargs) for s in seeds]
    learn_compiled(models, total_timesteps)
    return models
