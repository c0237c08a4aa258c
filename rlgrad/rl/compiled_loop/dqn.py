"""DQN's training loop as one compiled program (issue 31, item 2): ``DQN(env_id, compile_loop=True)``.

Every iteration of the eager loop (``OffPolicyAlgorithm._iteration``) is one step of a
``lax.scan``: ``train_freq`` epsilon-greedy env steps (an inner scan; the first
``learning_starts`` steps uniformly random), their transitions written to the replay buffer, the
target network's syncs of those steps, then, past ``learning_starts``, ``gradient_steps`` Huber
TD updates (a scan) on minibatches drawn from the buffer. The replay buffer is a ring of arrays
in the loop's state (``obs``, ``next_obs``, ``actions``, ``rewards``, ``terminated``, ``pos``,
``size``); the env step, the key streams and the optimizer are the on-policy loop's
(``program.env_step``, ``rlgrad.rl.functional.keys``, ``program._opt_step``).

The draws are those of eager DQN with ``use_key_streams``: per step one split for the
exploration uniforms and one more for the random actions when a copy explores (or one for the
warm-up's random actions), per ``train`` call one split for the indices of all its minibatches.
Reset rows (NEXT_STEP autoreset) are not stored, as the eager loop drops them. The targets of
a call's minibatches are computed before its steps (the target network does not change during
a call), as ``DQN.target_path = "stacked"``; with ``double_q`` in each step.

Writing a step's rows into the ring is one op, ``ops.write_rows``: in native code a copy of the
ring (``memcpy``: the program's output is a new array; in place only for a loop's carry) and
the rows written, no index arithmetic over the ring. The optimizer's step, Adam with the gradient
clip, is one op too (``fused_adam``: one C loop over the parameters), and the Q-network runs
column-wise (``_q_net``) so its weight gradients need no transposing copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import lax, ops
from rlgrad.optim.algorithms import _adam_math
from rlgrad.rl.compiled_loop import (
    PROGRAM_CACHES,
    _tree_map,
    initial_state,
    loop_backend,
    run_program,
    same_spec,
    start_state,
)
from rlgrad.rl.compiled_loop import _rows as _sched_rows
from rlgrad.rl.compiled_loop.program import (
    _ACT,
    _clip_grads,
    _flat,
    _opt_step,
    _rows,
    _take,
    _unflat,
    env_step,
)
from rlgrad.rl.compiled_loop.spec import Layer, _chain, optimizer_args, refuse_env
from rlgrad.rl.functional import FunctionalVectorEnv
from rlgrad.rl.functional.keys import split, uniform
from rlgrad.tracer import primitive
from rlgrad.transforms import grad

if TYPE_CHECKING:
    from rlgrad.rl.dqn import DQN

__all__ = ["DQNSpec", "dqn_schedule", "dqn_spec", "learn_compiled_dqn"]


@dataclass(frozen=True)
class DQNSpec:
    """The static part of a DQN run (hashable: the compiled program's cache key)."""

    func_env: Any = field(compare=False)  # FuncEnvs hold no state: equal when of one class
    env_cls: type
    hooks: Any = field(compare=False)  # a model whose q_of, bootstrap_target, loss_of are traced
    variant: tuple  # what those hooks read: the class, its trace settings, its policy_kwargs
    n_envs: int
    max_steps: int | None
    n_actions: int
    q: tuple[Layer, ...]  # the Q-network's layers, its head last
    buffer_size: int
    batch_size: int
    train_freq: int  # vector-env steps per iteration
    gradient_steps: int
    gamma: float
    tau: float
    truncation_terminates: bool  # handle_timeout_termination=False
    max_grad_norm: float | None
    optimizer: str
    opt_args: tuple[float, ...]
    low: tuple[float, ...] | None = None  # (discrete actions: no clip before the env step)
    high: tuple[float, ...] | None = None


def _refuse(algo: str, what: str) -> ValueError:
    return ValueError(f"{algo}(compile_loop=True) {what}; leave compile_loop False for this setup")


def _owner(cls: type, name: str) -> type:
    return next(c for c in cls.__mro__ if name in vars(c))


def dqn_spec(model: DQN) -> DQNSpec:
    """The spec of a DQN (or a variant: QR-DQN, C51) on a functional env; one line naming what
    the compiled loop lacks."""
    algo = type(model).__name__
    env = model.vector_env
    if not isinstance(env, FunctionalVectorEnv):
        raise refuse_env(algo, env)
    cls = type(model)
    pairs = (("q_values", "q_of"), ("loss", "loss_of"))  # a variant overrides both or neither
    if (any(_owner(cls, a) is not _owner(cls, b) for a, b in pairs)
            or _owner(cls, "td_loss").__name__ != "DQN"):
        raise _refuse(algo, "calls q_of and loss_of: override them with q_values and loss")
    if getattr(model, "env_runners", 0):
        raise _refuse(algo, "steps its envs inside the program: set env_runners=0")
    if model.normalizer is not None or model.policy_name == "CnnPolicy":
        raise _refuse(algo, "runs the MLP on vector observations without normalize=True")
    if model.train_freq[1] != "step" or model.n_steps != 1 or model._sb3_rows is not None:
        raise _refuse(algo, "needs train_freq in steps, n_steps=1 and rlgrad's replay buffer")
    mods = list(model.q_net) if isinstance(model.q_net, rlgrad.nn.Sequential) else []
    if not mods or type(mods[-1]) is not rlgrad.nn.Linear:
        raise _refuse(algo, "runs a Sequential MLP Q-network")
    params = list(model.optimizer.param_groups[0]["params"])
    index = {id(p): i for i, p in enumerate(params)}
    opt, args = optimizer_args(algo, model.optimizer)
    F_ = model.train_freq[0]
    gs = model.gradient_steps if model.gradient_steps >= 0 else F_ * model.n_envs
    variant = (cls, tuple(getattr(model, a) for a in model.trace_settings),
               repr(sorted(model.policy_kwargs.items())))
    return DQNSpec(
        func_env=env.func_env, env_cls=type(env.func_env), hooks=model, variant=variant,
        n_envs=env.num_envs,
        max_steps=env.max_episode_steps, n_actions=model.n_actions,
        q=_chain(None, mods[:-1], mods[-1], index), buffer_size=model.buffer_size,
        batch_size=model.batch_size, train_freq=F_, gradient_steps=gs, gamma=model.gamma,
        tau=model.tau, truncation_terminates=model._truncation_terminates, max_grad_norm=model.max_grad_norm,
        optimizer=opt, opt_args=args)


def dqn_schedule(model: DQN, total_timesteps: int) -> dict[str, np.ndarray]:
    """What the eager loop reads from Python state, per iteration (``lr``, ``train``: past
    ``learning_starts``; ``syncs``: target updates during its steps) and per step (``eps``,
    ``warm``: uniformly random actions), for ``total_timesteps`` more steps."""
    E, F_ = model.n_envs, model.train_freq[0]
    start = model.num_timesteps
    total = max(start + int(total_timesteps), 1)
    n_iter = -(-int(total_timesteps) // (E * F_))
    t = start + E * np.arange(n_iter * F_ + 1)  # num_timesteps before each step (and after all)
    calls = model._n_calls + np.arange(1, n_iter * F_ + 1)
    every = max(model.target_update_interval // E, 1)
    after = t[1:]  # progress is updated after each step
    if model.exploration_steps is None:
        progress = np.maximum(0.0, 1.0 - after / total)
    else:
        progress = np.maximum(0.0, 1.0 - after / model.exploration_steps)
    eps_after = np.array([model.exploration_schedule(p) for p in progress], dtype=np.float64)
    eps = np.concatenate([[model.exploration_rate], eps_after[:-1]])
    ends = after[F_ - 1::F_]  # num_timesteps after each collection
    lr = np.array([model.lr_schedule(max(0.0, 1.0 - n / total)) for n in ends], dtype=np.float64)
    shape = (n_iter, F_)
    return {"lr": lr, "train": (ends > 0) & (ends > model.learning_starts),
            "syncs": (calls % every == 0).reshape(shape).sum(axis=1).astype(np.int64),
            "eps": eps.reshape(shape), "warm": (t[:-1] < model.learning_starts).reshape(shape)}


# ---- the program ------------------------------------------------------------------------------
def _rowwise(fn: Callable, x: Any) -> Any:
    """``fn`` of rows (n, ...) applied to ``x`` (S, B, ...): the seeds' rows as one batch."""
    s = x.shape
    out = fn(rnp.reshape(x, (s[0] * s[1],) + tuple(s[2:])))
    return rnp.reshape(out, (s[0], s[1]) + tuple(out.shape[1:]))


def _q_net(params: list[Any], layers: tuple[Layer, ...], x: Any) -> Any:
    """The Q-network's outputs ``(S, B, k)`` of rows ``x`` ``(S, B, d)``, computed column-wise
    (``W @ h`` on activations ``(S, features, B)``: ``program._mlp``'s ``x @ W.T`` transposed):
    the weights' gradients ``g @ h.T`` then come out in the weights' own layout, where
    ``x @ W.T``'s come out transposed and are copied back element by element."""
    h = rnp.swapaxes(x, -1, -2)
    for w, b, act in layers:
        h = rnp.matmul(params[w], h) + rnp.expand_dims(params[b], -1)
        if act is not None:
            h = _ACT[act](h)
    return rnp.swapaxes(h, -1, -2)


def _integers(sub: Any, n: int, high: int) -> Any:
    """``KeyGenerator.integers(0, high, n)`` from subkeys ``sub`` (S,): (S, n) int64."""
    u = uniform(sub, (n,))
    return rnp.minimum(rnp.asarray(u * high, dtype=np.int64), high - 1)


def _act(spec: DQNSpec, params: list[Any], obs: Any, key: Any, eps: Any, warm: Any
         ) -> tuple[Any, Any]:
    """(actions (S, E), key after) as ``DQN._sample_action`` draws them."""
    E, A = spec.n_envs, spec.n_actions

    def random_actions(k: Any) -> tuple[Any, Any]:
        k, sub = split(k)
        return _integers(sub, E, A), k

    def epsilon_greedy(k: Any) -> tuple[Any, Any]:
        k, sub = split(k)
        explore = uniform(sub, (E,)) < eps
        greedy = rnp.argmax(_rowwise(spec.hooks.q_of, _q_net(params, spec.q, obs)), axis=-1)

        def some_explore(k: Any) -> tuple[Any, Any]:
            drawn, k2 = random_actions(k)
            some = rnp.any(explore, axis=-1)  # (per seed: a seed none of whose copies explores
            return rnp.where(explore, drawn, greedy), rnp.where(some, k2, k)  # draws nothing)

        # eager draws the random actions only when a copy explores (rare once epsilon is low)
        return lax.cond(rnp.any(explore), some_explore, lambda k: (greedy, k), k)

    return lax.cond(warm, random_actions, epsilon_greedy, key)


def _collect(spec: DQNSpec, params: list[Any], carry: tuple[Any, ...], steps: dict[str, Any]
             ) -> tuple[Any, Any]:
    """``train_freq`` steps of every copy: (env, key, episode stats), rows (F, S, E, ...)."""

    def step(c: tuple[Any, ...], x: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        env, key, ep_ret, ret_sum, n_done = c
        obs = env["obs"]
        action, key = _act(spec, params, obs, key, x["eps"], x["warm"])
        env, reward, term, done, valid = env_step(spec, env, action)
        stored = (done if spec.truncation_terminates else term)
        ep_ret = ep_ret + reward
        ret_sum = ret_sum + rnp.sum(rnp.where(done, ep_ret, 0.0), axis=-1)
        n_done = n_done + rnp.sum(rnp.asarray(done, dtype=np.int64), axis=-1)
        ep_ret = rnp.where(done, 0.0, ep_ret)
        row = (obs, action, rnp.asarray(reward, dtype=np.float32), stored, env["obs"], valid)
        return (env, key, ep_ret, ret_sum, n_done), row

    return lax.scan(step, carry, steps)


def _store(spec: DQNSpec, buf: dict[str, Any], rows: dict[str, Any], valid: Any
           ) -> dict[str, Any]:
    """``ReplayBuffer.add`` of the valid rows (S, R) in order: compacted, then written to the
    ring from ``pos`` (``ops.write_rows``; the rows past ``k`` get index -1 and are skipped, and
    of more rows than slots the later win, as the ring keeps the last N)."""
    R, N = valid.shape[-1], spec.buffer_size
    at = rnp.broadcast_to(rnp.arange(R), valid.shape)
    order = rnp.argsort(rnp.where(valid, at, at + R), axis=-1, kind="stable")
    k = rnp.sum(rnp.asarray(valid, dtype=np.int64), axis=-1)  # (S,)
    pos, size = buf["pos"], buf["size"]
    r = rnp.arange(R)
    slots = rnp.where(r < k[..., None], rnp.mod(pos[..., None] + r, N), -1)
    out = {name: ops.write_rows(buf[name], slots, _take(new, order)) for name, new in rows.items()}
    out["pos"] = rnp.mod(pos + k, N)
    out["size"] = rnp.minimum(size + k, N)
    return out


def _targets(spec: DQNSpec, params: list[Any], target: list[Any], b: dict[str, Any]) -> Any:
    """The model's ``bootstrap_target`` of every row of ``b`` (S, n), all seeds' rows as one
    batch (DQN's ``r + gamma (1 - terminated) max_a Q'(s', a)``), with no gradient."""
    s = b["rewards"].shape
    flat = lambda x: rnp.reshape(x, (s[0] * s[1],) + tuple(x.shape[2:]))  # noqa: E731
    x = b["next_obs"]
    d = {"rewards": flat(b["rewards"]), "gamma": np.array(spec.gamma, dtype=np.float32),
         "not_terminated": np.float32(1.0) - rnp.asarray(flat(b["terminated"]), dtype=np.float32)}
    y = spec.hooks.bootstrap_target(d, flat(_q_net(target, spec.q, x)),
                                    lambda: flat(_q_net(params, spec.q, x)))
    return lax.stop_gradient(rnp.reshape(y, s + tuple(y.shape[1:])))


def _loss(spec: DQNSpec, params: list[Any], b: dict[str, Any], y: Any) -> Any:
    """The sum over seeds of the model's ``loss_of`` on each seed's minibatch."""
    out = _q_net(params, spec.q, b["obs"])
    total = None
    for i in range(out.shape[0]):  # (S is static: the seeds' losses, each its own batch mean)
        part = spec.hooks.loss_of(out[i], {"actions": b["actions"][i], "target": y[i]})
        total = part if total is None else total + part
    return total


def _adam_clip(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: np.ndarray,
               lr: np.ndarray, *, b1: float, b2: float, eps: float, max_norm: float | None
               ) -> np.ndarray:
    """``fused_adam``'s plain reference: per seed (rows of the flat ``(S, P)`` arrays, ``t`` the
    step counts ``(S,)`` after this step) ``clip_grad_norm_`` as ``program._clip_grads`` and
    ``rlgrad.optim``'s Adam step (``_adam_math``, with its flush of tiny moments); returns the
    new parameters, first and second moments stacked ``(3, S, P)``. Its native lowering
    (``rlgrad.native.lowerings``) does both in one C loop over the parameters."""
    out = np.empty((3,) + p.shape, p.dtype)
    for s in range(p.shape[0]):
        gs = g[s]
        if max_norm is not None:
            sq = np.sum(np.asarray(gs * gs, dtype=np.float64))
            gs = gs * np.float32(min(max_norm / (np.sqrt(sq) + 1e-6), 1.0))
        out[1, s], out[2, s] = m[s], v[s]
        step = np.empty_like(gs)
        _adam_math(gs, out[1, s], out[2, s], None, step, int(t[s]), float(lr), b1, b2, eps)
        np.subtract(p[s], step, out=out[0, s])
    return out


#: the clipped Adam step of every seed as one op (no gradient: it is the update itself)
fused_adam = primitive(_adam_clip, "fused_adam", nondiff=True)


def _update(spec: DQNSpec, flat: Any, g: Any, opt: dict[str, Any], lr: Any
            ) -> tuple[Any, dict[str, Any]]:
    """The optimizer's step on the flat parameters ``(S, P)`` and gradients: Adam with the
    gradient clip as one op (``fused_adam``), RMSprop as ``program._opt_step``."""
    if spec.optimizer != "adam":
        return _opt_step(spec, flat, _clip_grads(spec, g), opt, lr)
    t = opt["step"] + 1.0
    b1, b2, eps = spec.opt_args
    out = fused_adam(flat, g, opt["m"], opt["v"], t, lr, b1=b1, b2=b2, eps=eps,
                     max_norm=spec.max_grad_norm)
    return out[0], {"step": t, "m": out[1], "v": out[2]}


def _train(spec: DQNSpec, buf: dict[str, Any], lr: Any) -> Callable:
    """``DQN.train``: one draw of every minibatch's rows, then ``gradient_steps`` steps."""
    G, B = spec.gradient_steps, spec.batch_size

    def run(params: list[Any], target: list[Any], opt: dict[str, Any], key: Any
            ) -> tuple[Any, ...]:
        key, sub = split(key)
        size = rnp.expand_dims(buf["size"], -1)
        u = uniform(sub, (G * B,))
        idx = rnp.minimum(rnp.asarray(u * rnp.asarray(size, dtype=np.float64), dtype=np.int64),
                          size - 1)
        names = ("obs", "actions", "rewards", "terminated", "next_obs")
        b = {k: _take(buf[k], idx) for k in names}
        if not spec.hooks.double_q:  # the target network is fixed during the call: at once
            b = {"obs": b["obs"], "actions": b["actions"], "y": _targets(spec, params, target, b)}

        def per_step(x: Any) -> Any:  # (S, G * B, ...) -> (G, S, B, ...)
            s = x.shape
            return rnp.swapaxes(rnp.reshape(x, (s[0], G, B) + tuple(s[2:])), 0, 1)

        def body(carry: tuple[Any, Any], mb: dict[str, Any]) -> tuple[tuple[Any, Any], Any]:
            params, opt = carry
            y = mb["y"] if "y" in mb else _targets(spec, params, target, mb)
            g = _flat(grad(lambda p: _loss(spec, p, mb, y))(params))
            flat, opt = _update(spec, _flat(params), g, opt, lr)
            return (_unflat(flat, params), opt), None

        (params, opt), _ = lax.scan(body, (params, opt), {k: per_step(v) for k, v in b.items()})
        return params, opt, key

    return run


def _sync(spec: DQNSpec, params: list[Any], target: list[Any], n: Any) -> list[Any]:
    """``n`` target updates with unchanged online parameters (``optim.polyak_update``)."""
    if spec.tau == 1.0:
        return [rnp.where(n > 0, p, t) for p, t in zip(params, target)]
    tau = np.float32(spec.tau)

    def once(_: Any, tg: list[Any]) -> list[Any]:
        return [t * (np.float32(1.0) - tau) + tau * p for p, t in zip(params, tg)]

    return lax.fori_loop(0, n, once, target)


def _iteration(spec: DQNSpec) -> Callable:
    """The body of the scan over iterations: collect, store, sync, train."""

    def body(state: dict[str, Any], x: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        params = state["params"]
        zero = rnp.zeros(state["key"].shape, dtype=np.float64)
        carry = (state["env"], state["key"], state["ep_ret"], zero,
                 rnp.zeros_like(zero, dtype=np.int64))
        steps = {"eps": x["eps"], "warm": x["warm"]}
        (env, key, ep_ret, ret_sum, n_done), rows = _collect(spec, params, carry, steps)
        obs, actions, rewards, term, next_obs, valid = (_rows(r) for r in rows)
        buf = _store(spec, state["buf"], {"obs": obs, "actions": actions, "rewards": rewards,
                                          "terminated": term, "next_obs": next_obs}, valid)
        target = _sync(spec, params, state["target"], x["syncs"])
        opt = state["opt"]
        if spec.gradient_steps > 0:  # (gradient_steps=0: eager never calls train)
            train = _train(spec, buf, x["lr"])
            params, opt, key = lax.cond(x["train"], train, lambda p, t, o, k: (p, o, k),
                                        params, target, opt, key)
        new = {"params": params, "target": target, "opt": opt, "env": env, "key": key,
               "ep_ret": ep_ret, "buf": buf}
        return new, (ret_sum, n_done)

    return body


def make_dqn_program(spec: DQNSpec) -> Callable:
    """``iteration(state, row) -> (state, (episode return sums, counts))``: one iteration, its
    schedule row (``dqn_schedule``'s arrays at one index); ``learn`` calls it once per iteration
    (a program of the whole run would train once more while traced, and its check against the
    trace would compare a whole run, whose greedy actions float rounding can flip)."""
    return _iteration(spec)


# ---- running it -------------------------------------------------------------------------------
_PROGRAMS: dict[tuple[DQNSpec, str, int], Any] = {}
PROGRAM_CACHES.append(_PROGRAMS)


def _probe(spec: DQNSpec, state: dict[str, Any], row: dict[str, np.ndarray]
           ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A copy of ``state`` whose ring is full of random rows, and a schedule row that acts
    greedily and at random, syncs the target and trains: the program is traced on it, so the
    native backend's check against the trace covers a gradient step (a first real iteration
    is a warm-up one: the check would see no update). Its outputs are dropped."""
    rng = np.random.default_rng(0)
    probe = _tree_map(np.array, state)
    buf = probe["buf"]
    for name in ("obs", "next_obs"):
        buf[name] = rng.standard_normal(buf[name].shape).astype(np.float32)
    buf["actions"] = rng.integers(0, spec.n_actions, buf["actions"].shape)
    buf["rewards"] = rng.standard_normal(buf["rewards"].shape).astype(np.float32)
    buf["terminated"] = rng.random(buf["terminated"].shape) < 0.2
    buf["size"] = np.full_like(buf["size"], spec.buffer_size)
    x = {**row, "train": np.array(True), "syncs": np.array(1, dtype=np.int64),
         "warm": np.zeros_like(row["warm"]), "eps": np.full_like(row["eps"], 0.5)}
    return probe, x


# The probe's native check (``rlgrad.native._verify``) allows float32 outputs 1e-5 of their
# largest magnitude, not the default 1e-3 of any program. Measured on the probe (a train call on
# a full random ring): at most 2.2e-7 (CartPole preset: 256-256 ReLU, 128 gradient steps), 1.5e-8
# (QR-DQN), 3e-8 (C51), two float32 ulps of 1; the float64 env state and the integer ring equal.
# What differs is rounding only: float32 sums accumulated in double (NumPy's are pairwise float32:
# the loss, the bias gradients, the clip's norm), the BLAS kernel a transposed operand takes,
# glibc's expf/tanhf against NumPy's; each a few ulps of a gradient. Adam divides each moment by
# its own scale, so a step moves a parameter by lr times O(1) and its rounding is the gradient's
# relative rounding times lr: after G steps about G * lr * 1e-6, 3e-7 for the preset. 1e-5 is 45x
# the largest measured, and a wrong lowering is orders above it (QR-DQN's miscompiled where:
# 0.04). (A gradient element that rounding alone signs, |g| ~ 1e-9, would move by 2 lr, past 1e-3
# too: not a case a tolerance can cover; the replay then runs, with a warning.)
PROBE_CHECK_FLOAT32 = 1e-5


def _check_tolerance(backend: str) -> contextlib.AbstractContextManager[None]:
    """``rlgrad.native.check_tolerance`` at ``PROBE_CHECK_FLOAT32`` when native code may run."""
    if backend == "numpy":
        return contextlib.nullcontext()
    from rlgrad import native  # (imported when asked for, as jit imports it: it builds C)

    return native.check_tolerance(float32=PROBE_CHECK_FLOAT32)


def _compiled(spec: DQNSpec, state: dict[str, Any], row: dict[str, np.ndarray]) -> Any:
    """The program for ``spec`` and this many seeds, traced (and its native code checked) on
    ``_probe``'s iteration when new."""
    key = (spec, loop_backend(), int(state["key"].shape[0]))
    fn = _PROGRAMS.get(key)
    if fn is None:
        fn = rlgrad.jit(make_dqn_program(spec), backend=key[1])
        # (errstate as run_program's: a discarded branch may overflow)
        with np.errstate(all="ignore"), _check_tolerance(key[1]):
            fn(*_probe(spec, state, row))
        _PROGRAMS[key] = fn
    return fn


def _initial(models: Sequence[Any], spec: DQNSpec) -> dict[str, Any]:
    """``initial_state`` (parameters, optimizer, envs, keys) plus the target network and an
    empty replay ring."""
    state = initial_state(models, spec)
    S, N = len(models), spec.buffer_size
    state["target"] = [np.stack([np.array(p._value) for p in ps])
                       for ps in zip(*(m._target_params for m in models))]
    d = state["env"]["obs"].shape[-1]
    state["buf"] = {"obs": np.zeros((S, N, d), np.float32),
                    "next_obs": np.zeros((S, N, d), np.float32),
                    "actions": np.zeros((S, N), np.int64), "rewards": np.zeros((S, N), np.float32),
                    "terminated": np.zeros((S, N), bool), "pos": np.zeros(S, np.int64),
                    "size": np.zeros(S, np.int64)}
    return state


def _write_back(models: Sequence[Any], spec: DQNSpec, state: dict[str, Any],
                sched: dict[str, np.ndarray], stats: tuple[np.ndarray, np.ndarray],
                backend: str) -> None:
    """Each model gets its seed's networks, loop state, counters and statistics, and the
    backend that ran (``loop_backend``: "numpy", the replay, or "native")."""
    n_iter, F_ = sched["eps"].shape
    ret_sum, n_done = stats
    for i, m in enumerate(models):
        for ps, arrs in ((m._params, state["params"]), (m._target_params, state["target"])):
            for p, arr in zip(ps, arrs):
                np.copyto(p._value, arr[i])
        m._loop_state = _tree_map(lambda a, i=i: np.array(a[i:i + 1]), state)
        m.loop_backend = backend
        m.num_timesteps += n_iter * F_ * m.n_envs
        m._n_calls += n_iter * F_
        m._n_updates += int(sched["train"].sum()) * spec.gradient_steps
        m._update_progress()
        m.exploration_rate = m.exploration_schedule(
            m._current_progress_remaining if m.exploration_steps is None else
            max(0.0, 1.0 - m.num_timesteps / m.exploration_steps))
        m.loop_returns = (ret_sum[:, i], n_done[:, i])  # per iteration: sum and count of episodes
        recent = n_done[-10:, i].sum()
        if recent:
            m.logger.record("rollout/ep_rew_mean", float(ret_sum[-10:, i].sum() / recent))


def learn_compiled_dqn(models: Sequence[DQN], total_timesteps: int) -> None:
    """Train ``models`` (one per seed, built alike) for ``total_timesteps`` each as one program;
    a later call goes on from where the last one stopped."""
    spec = same_spec(models, dqn_spec)
    state = start_state(models, spec, _initial)
    sched = dqn_schedule(models[0], total_timesteps)
    for m in models:
        m._total_timesteps = max(m._total_timesteps, m.num_timesteps + int(total_timesteps))
    rows = _sched_rows(sched)
    if not rows:
        return
    program = _compiled(spec, state, rows[0])
    state, returns = run_program(models, program, state, rows, "one iteration")
    _write_back(models, spec, state, sched, returns, program.backend)
