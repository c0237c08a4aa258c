"""The on-policy training loop as one program: rollout, GAE and the update epochs, each a
``rlgrad.lax`` loop, one update of the training traced once by ``rlgrad.jit`` and called once
per update.

Every array carries a leading seed axis ``S``: the parameters ``(S, ...)``, the env states
``(S, n_envs, d)``, the keys ``(S,)``. Seeds never mix (a loss is the sum of the seeds' losses,
so each seed's gradient is its own; norms, means and counts reduce over the other axes), so ``S``
independent runs are one program whose matrix products are batched, as PureJaxRL's ``vmap`` over
seeds. The computation per seed is the eager algorithm's on ``FunctionalVectorEnv``, step by
step: NEXT_STEP autoreset, the reset rows kept in place and left out of the update (weight 0),
GAE as ``rlgrad.rl.buffers``, minibatches of the valid rows in the order ``permutation`` gives,
the ragged last one weighted by its real rows, a minibatch with none skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import rlgrad.numpy as rnp
from rlgrad import lax
from rlgrad.nn import functional as F
from rlgrad.rl.buffers import compute_gae_scan
from rlgrad.rl.compiled_loop.spec import EnvSide, Layer, LoopSpec, OptSide
from rlgrad.rl.functional.keys import KeyBatch, normal, split, uniform
from rlgrad.transforms import grad

__all__ = ["make_program", "forward", "env_step"]

# relu: nn.ReLU's primitive (one relu_grad op backward, not maximum's eight)
_ACT: dict[str, Callable[[Any], Any]] = {"tanh": rnp.tanh, "relu": F.relu}
_LOG_2PI = float(np.log(2 * np.pi))


# ---- the policy -------------------------------------------------------------------------------
def _mlp(params: list[Any], layers: tuple[Layer, ...], x: Any) -> Any:
    for w, b, act in layers:  # Linear's x @ W.T + b, batched over the seeds
        x = rnp.matmul(x, rnp.swapaxes(params[w], -1, -2)) + rnp.expand_dims(params[b], -2)
        if act is not None:
            x = _ACT[act](x)
    return x


def forward(spec: LoopSpec, params: list[Any], obs: Any) -> tuple[Any, Any]:
    """(logits or means ``(S, B, k)``, values ``(S, B)``) of observations ``(S, B, d)``."""
    return _mlp(params, spec.pi, obs), _mlp(params, spec.vf, obs)[..., 0]


def acting_layers(spec: LoopSpec, params: list[Any]) -> list[tuple[Any, Any, str | None]] | None:
    """The actor and critic as one network of block matrices ``(S, in, out)``, as
    ``ActorCriticPolicy.fused_numpy`` builds it for acting: one matmul per layer, not two (built
    once per update: the weights do not change during a rollout); None when the towers differ
    in depth or activations."""
    if len(spec.pi) != len(spec.vf) or any(a[2] != b[2] for a, b in zip(spec.pi, spec.vf)):
        return None
    layers = []
    for i, ((wp, bp, act), (wv, bv, _)) in enumerate(zip(spec.pi, spec.vf)):
        p, v = rnp.swapaxes(params[wp], -1, -2), rnp.swapaxes(params[wv], -1, -2)
        if i == 0:
            w = rnp.concatenate([p, v], axis=-1)
        else:
            s, (ip, op), (iv, ov) = p.shape[0], p.shape[1:], v.shape[1:]
            w = rnp.concatenate([
                rnp.concatenate([p, rnp.zeros((s, ip, ov), dtype=p.dtype)], axis=-1),
                rnp.concatenate([rnp.zeros((s, iv, op), dtype=p.dtype), v], axis=-1)], axis=1)
        b = rnp.expand_dims(rnp.concatenate([params[bp], params[bv]], axis=-1), -2)
        layers.append((w, b, act))
    return layers


def _act_forward(spec: LoopSpec, params: list[Any], fused: Any, obs: Any) -> tuple[Any, Any]:
    """``forward`` for acting: through the fused network when there is one."""
    if fused is None:
        return forward(spec, params, obs)
    x = obs
    for w, b, act in fused:
        x = rnp.matmul(x, w) + b
        if act is not None:
            x = _ACT[act](x)
    return x[..., :-1], x[..., -1]


def _sample(spec: LoopSpec, params: list[Any], out: Any, sub: Any) -> tuple[Any, Any]:
    """Actions and log-probabilities drawn as ``ActorCriticPolicy.sample_numpy`` draws them
    (inverse CDF on one uniform per row; a Gaussian's ``mean + std * eps``)."""
    n = out.shape[1]
    if spec.discrete:
        z = out - rnp.max(out, axis=-1, keepdims=True)
        cdf = rnp.cumsum(rnp.exp(z), axis=-1)
        t = uniform(sub, (n,)) * cdf[..., -1]
        actions = rnp.sum(rnp.asarray(cdf[..., :-1] <= rnp.expand_dims(t, -1), dtype=np.int64),
                          axis=-1)
        log_prob = (rnp.take_along_axis(z, rnp.expand_dims(actions, -1), axis=-1)[..., 0]
                    - rnp.log(cdf[..., -1]))
        return actions, log_prob
    log_std = rnp.expand_dims(params[spec.log_std], -2)
    eps = normal(sub, (n, out.shape[-1]), np.float32)
    actions = out + rnp.exp(log_std) * eps
    log_prob = rnp.sum(-0.5 * rnp.square(eps) - log_std - 0.5 * _LOG_2PI, axis=-1)
    return actions, log_prob


def _log_prob_entropy(spec: LoopSpec, params: list[Any], out: Any, actions: Any
                      ) -> tuple[Any, Any]:
    """(log pi(a|s), entropy) per row, differentiable in the parameters."""
    if spec.discrete:
        logp_all = out - _logsumexp(out)
        lp = rnp.take_along_axis(logp_all, rnp.expand_dims(actions, -1), axis=-1)[..., 0]
        return lp, -rnp.sum(rnp.exp(logp_all) * logp_all, axis=-1)
    log_std = rnp.expand_dims(params[spec.log_std], -2)
    z = (actions - out) / rnp.exp(log_std)
    lp = rnp.sum(-0.5 * rnp.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)
    ent = rnp.sum(0.5 + 0.5 * _LOG_2PI + log_std, axis=-1)  # (S, 1): the same for every row
    return lp, rnp.broadcast_to(ent, lp.shape)


def _logsumexp(x: Any) -> Any:
    m = lax.stop_gradient(rnp.max(x, axis=-1, keepdims=True))
    return m + rnp.log(rnp.sum(rnp.exp(x - m), axis=-1, keepdims=True))


# ---- the environment --------------------------------------------------------------------------
def env_step(spec: EnvSide, env: dict[str, Any], action: Any) -> tuple[dict[str, Any], ...]:
    """``FunctionalVectorEnv.step`` on the traced state: (new env, reward, terminated, done,
    valid), the copies done at the previous step starting anew from their own key."""
    f = spec.func_env
    if spec.low is not None:  # the Gaussian policy is unbounded: the env gets the clipped action
        shape = np.shape(action)[-1:]
        action = rnp.clip(action, np.array(spec.low, np.float32).reshape(shape),
                          np.array(spec.high, np.float32).reshape(shape))
    state = env["state"]
    nxt = f.transition(state, action)
    reward = rnp.asarray(f.reward(state, action, nxt), dtype=np.float64)
    term = rnp.asarray(f.terminal(nxt), dtype=bool)
    steps = env["steps"] + 1
    trunc = (steps >= spec.max_steps) if spec.max_steps is not None else rnp.zeros_like(term)
    reset = env["autoreset"]
    first, keys = lax.cond(rnp.any(reset), lambda k, x: _first_states(spec, k, x), _no_reset,
                           env["keys"], nxt)
    state = rnp.where(rnp.expand_dims(reset, -1), first, nxt)
    keys = rnp.where(reset, keys, env["keys"])
    steps = rnp.where(reset, 0, steps)
    reward = rnp.where(reset, 0.0, reward)
    term = term & ~reset
    done = term | (trunc & ~reset)
    obs = rnp.asarray(f.observation(state), dtype=np.float32)
    new = {"state": state, "keys": keys, "steps": steps, "autoreset": done, "obs": obs}
    return new, reward, term, done, ~reset


def _first_states(spec: EnvSide, keys: Any, like: Any) -> tuple[Any, Any]:
    """Every copy's next first state and key (used where a copy resets)."""
    batch = KeyBatch(keys)
    return rnp.asarray(spec.func_env.initial(batch), dtype=like.dtype), batch.keys


def _no_reset(keys: Any, like: Any) -> tuple[Any, Any]:
    """No copy resets at this step (most steps): no draw."""
    return like, keys


def _rollout(spec: LoopSpec, params: list[Any], carry: tuple[Any, ...]) -> tuple[Any, Any]:
    """``n_steps`` steps of every copy: ``(env, key, episode stats)``, the rows ``(T, S, E)``."""
    fused = acting_layers(spec, params)

    def step(c: tuple[Any, ...], _: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        env, key, ep_ret, ret_sum, n_done = c
        obs = env["obs"]
        out, value = _act_forward(spec, params, fused, obs)
        key, sub = split(key)
        action, log_prob = _sample(spec, params, out, sub)
        env, reward, term, done, valid = env_step(spec, env, action)
        ep_ret = ep_ret + reward
        ret_sum = ret_sum + rnp.sum(rnp.where(done, ep_ret, 0.0), axis=-1)
        n_done = n_done + rnp.sum(rnp.asarray(done, dtype=np.int64), axis=-1)
        ep_ret = rnp.where(done, 0.0, ep_ret)
        row = (obs, action, rnp.asarray(reward, dtype=np.float32), term, done, value,
               log_prob, valid)
        return (env, key, ep_ret, ret_sum, n_done), row

    return lax.scan(step, carry, None, length=spec.n_steps)


def _rows(x: Any) -> Any:
    """(T, S, E, ...) -> (S, T * E, ...): the buffer's flat row order, per seed."""
    s = np.shape(x)
    return rnp.reshape(rnp.swapaxes(x, 0, 1), (s[1], s[0] * s[2]) + tuple(s[3:]))


def _take(x: Any, idx: Any) -> Any:
    """Rows ``idx`` ``(S, B)`` of ``x`` ``(S, R, ...)`` per seed."""
    s = np.shape(x)
    flat = rnp.reshape(x, (s[0] * s[1],) + tuple(s[2:]))
    offs = rnp.expand_dims(rnp.arange(s[0]) * s[1], -1)
    return rnp.take(flat, idx + offs, axis=0)


# ---- the update -------------------------------------------------------------------------------
def _order(spec: LoopSpec, valid: Any, n_valid: Any, key: Any) -> tuple[Any, Any]:
    """(rows in minibatch order, the key after): the valid rows first, permuted as
    ``KeyGenerator.permutation(valid_indices)`` permutes them; in order, with no draw, where the
    eager algorithm takes the whole rollout as one batch."""
    rows = valid.shape[-1]
    pos = rnp.broadcast_to(rnp.arange(rows), valid.shape)
    in_order = rnp.argsort(rnp.where(valid, pos, pos + rows), axis=-1, kind="stable")
    if not spec.ppo:
        return in_order, key
    new_key, sub = split(key)
    u = uniform(sub, (rows,))
    rank = rnp.clip(rnp.cumsum(rnp.asarray(valid, dtype=np.int64), axis=-1) - 1, 0, rows - 1)
    by_u = rnp.where(valid, rnp.take_along_axis(u, rank, axis=-1), 2.0)
    shuffled = rnp.argsort(by_u, axis=-1, kind="stable")
    if spec.clip_vf:  # eager PPO shuffles whenever clip_range_vf is set
        return shuffled, new_key
    whole = n_valid <= spec.batch_size
    return (rnp.where(rnp.expand_dims(whole, -1), in_order, shuffled),
            rnp.where(whole, key, new_key))


def _advantages(spec: LoopSpec, adv: Any, real: Any, r: Any) -> Any:
    """Advantages of a minibatch, normalised over its real rows (unbiased std, as SB3's)."""
    adv = rnp.where(real, adv, 0.0)
    if not spec.normalize_advantage:
        return adv
    rf = rnp.expand_dims(rnp.asarray(r, dtype=np.float32), -1)
    mean = rnp.sum(adv, axis=-1, keepdims=True) / rnp.maximum(rf, 1.0)
    dev = rnp.where(real, adv - mean, 0.0)
    std = rnp.sqrt(rnp.sum(dev * dev, axis=-1, keepdims=True) / rnp.maximum(rf - 1.0, 1.0))
    normed = rnp.where(real, (adv - mean) / (std + 1e-8), 0.0)
    return rnp.where(rf > 1.0, normed, adv)


def _loss(spec: LoopSpec, params: list[Any], b: dict[str, Any]) -> Any:
    """The sum over seeds of the algorithm's loss on minibatch ``b`` (rows weighted ``b["w"]``)."""
    out, values = forward(spec, params, b["obs"])
    lp, ent = _log_prob_entropy(spec, params, out, b["actions"])
    w = b["w"]
    if spec.ppo:
        policy = spec.surrogate(lp, b["old_log_prob"], b["adv"], b["clip"], w)
    else:
        policy = -rnp.sum(w * lp * b["adv"])
    if spec.clip_vf:
        values = spec.clipped_values(values, b["old_values"], b["returns"], b["clip_vf"],
                                     spec.clip_vf_max)
    loss = policy + np.float32(spec.vf_coef) * rnp.sum(w * rnp.square(b["returns"] - values))
    if spec.ent_coef != 0:
        loss = loss + np.float32(spec.ent_coef) * -rnp.sum(w * ent)
    return loss


def _flat(xs: list[Any]) -> Any:
    """Arrays ``(S, ...)`` end to end as one ``(S, P)``: the optimizer's arithmetic is elementwise,
    so one pass over the flat vector does each operation once for every parameter."""
    return rnp.concatenate([rnp.reshape(x, (x.shape[0], -1)) for x in xs], axis=-1)


def _unflat(flat: Any, like: list[Any]) -> list[Any]:
    out, off = [], 0
    for x in like:
        n = int(np.prod(x.shape[1:]))
        out.append(rnp.reshape(flat[:, off:off + n], x.shape))
        off += n
    return out


def _clip_grads(spec: OptSide, g: Any) -> Any:
    """``clip_grad_norm_`` per seed on the flat gradients ``(S, P)``: each seed scaled by its own
    norm's factor (the squares summed in float64, as ``rlgrad.rl.steps``)."""
    if spec.max_grad_norm is None:
        return g
    sq = rnp.sum(rnp.asarray(g * g, dtype=np.float64), axis=-1)
    coef = rnp.minimum(spec.max_grad_norm / (rnp.sqrt(sq) + 1e-6), 1.0)
    return g * rnp.expand_dims(rnp.asarray(coef, dtype=np.float32), -1)


def _opt_step(spec: OptSide, p: Any, g: Any, opt: dict[str, Any], lr: Any
              ) -> tuple[Any, dict[str, Any]]:
    """One optimizer step per seed on the flat parameters ``(S, P)``, with ``rlgrad.optim``'s
    arithmetic (Adam: ``_adam_math``, the fused kernel's order; RMSprop: PyTorch's)."""
    t = opt["step"] + 1.0
    m, v = opt["m"], opt["v"]
    if spec.optimizer == "adam":
        b1, b2, eps = spec.opt_args
        bc2 = rnp.sqrt(1.0 - b2 ** t)
        step = rnp.expand_dims(rnp.asarray(lr * bc2 / (1.0 - b1 ** t), dtype=np.float32), -1)
        eps_t = rnp.expand_dims(rnp.asarray(eps * bc2, dtype=np.float32), -1)
        m = m + (g - m) * np.float32(1 - b1)
        v = v * np.float32(b2) + (g * g) * np.float32(1 - b2)
        return p - m / (rnp.sqrt(v) + eps_t) * step, {"step": t, "m": m, "v": v}
    alpha, eps = spec.opt_args
    v = v * np.float32(alpha) + (g * g) * np.float32(1 - alpha)
    p = p - rnp.asarray(lr, dtype=np.float32) * g / (rnp.sqrt(v) + np.float32(eps))
    return p, {"step": t, "m": m, "v": v}


def _minibatch_step(spec: LoopSpec, data: dict[str, Any], n_valid: Any, sched: dict[str, Any]
                    ) -> Callable:
    """The body of the scan over an epoch's minibatches: ``(params, opt)`` -> after one step on
    rows ``idx`` (unchanged for a seed whose minibatch has no real row)."""
    bs = spec.batch_size

    def body(carry: tuple[Any, Any], inp: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
        params, opt = carry
        idx, start = inp
        r = rnp.clip(n_valid - start, 0, bs)
        real = rnp.arange(bs) < rnp.expand_dims(r, -1)
        b = {k: _take(v, idx) for k, v in data.items()}
        b["adv"] = _advantages(spec, b.pop("advantages"), real, r)
        w = rnp.asarray(1.0 / rnp.maximum(r, 1), dtype=np.float32)
        b["w"] = rnp.where(real, rnp.expand_dims(w, -1), np.float32(0.0))
        b.update(sched)
        grads = _clip_grads(spec, _flat(grad(lambda p: _loss(spec, p, b))(params)))
        flat = _flat(params)
        new_p, new_opt = _opt_step(spec, flat, grads, opt, sched["lr"])
        take = r > 0
        keep = rnp.expand_dims(take, -1)
        params = _unflat(rnp.where(keep, new_p, flat), params)
        opt = {"step": rnp.where(take, new_opt["step"], opt["step"]),
               "m": rnp.where(keep, new_opt["m"], opt["m"]),
               "v": rnp.where(keep, new_opt["v"], opt["v"])}
        return (params, opt), None

    return body


def _update(spec: LoopSpec, params: list[Any], opt: dict[str, Any], key: Any,
            data: dict[str, Any], valid: Any, sched: dict[str, Any]) -> tuple[Any, ...]:
    """``n_epochs`` passes over the rollout's rows in minibatches: (params, opt, key)."""
    bs, rows = spec.batch_size, spec.rows
    k = -(-rows // bs)
    n_valid = rnp.sum(rnp.asarray(valid, dtype=np.int64), axis=-1)
    body = _minibatch_step(spec, data, n_valid, sched)
    starts = np.arange(k, dtype=np.int64) * bs

    def epoch(carry: tuple[Any, ...], _: Any) -> tuple[tuple[Any, ...], Any]:
        params, opt, key = carry
        order, key = _order(spec, valid, n_valid, key)
        if k * bs > rows:  # the last minibatch padded with row 0 (weight 0)
            order = rnp.concatenate([order, rnp.zeros((order.shape[0], k * bs - rows),
                                                      dtype=order.dtype)], axis=-1)
        idx = rnp.swapaxes(rnp.reshape(order, (order.shape[0], k, bs)), 0, 1)
        (params, opt), _ = lax.scan(body, (params, opt), (idx, starts))
        return (params, opt, key), None

    (params, opt, key), _ = lax.scan(epoch, (params, opt, key), None, length=spec.n_epochs)
    return params, opt, key


def _iteration(spec: LoopSpec) -> Callable:
    """The body of the scan over updates: one rollout, its GAE, the update."""

    def body(state: dict[str, Any], sched: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        params = state["params"]
        zero = rnp.zeros(state["key"].shape, dtype=np.float64)
        carry = (state["env"], state["key"], state["ep_ret"], zero, rnp.zeros_like(zero, dtype=np.int64))
        (env, key, ep_ret, ret_sum, n_done), rows = _rollout(spec, params, carry)
        obs, actions, rewards, term, dones, values, log_probs, valid = rows
        last = forward(spec, params, env["obs"])[1]
        next_values = rnp.concatenate([values[1:], rnp.expand_dims(last, 0)], axis=0)
        adv, returns = compute_gae_scan(rewards, values, next_values, term, dones, spec.gamma,
                                        spec.gae_lambda)
        data = {"obs": _rows(obs), "actions": _rows(actions), "old_log_prob": _rows(log_probs),
                "old_values": _rows(values), "advantages": _rows(adv), "returns": _rows(returns)}
        params, opt, key = _update(spec, params, state["opt"], key, data, _rows(valid), sched)
        new = {"params": params, "opt": opt, "env": env, "key": key, "ep_ret": ep_ret}
        return new, (ret_sum, n_done)

    return body


def make_program(spec: LoopSpec) -> Callable:
    """``update(state, row) -> (state, (episode return sums, episode counts))``: one update of a
    training run, ``row`` its schedule's values (``lr``, ``clip``, ``clip_vf``: 0-d arrays).
    ``learn`` calls it once per update. One update, not a scan over all of them: tracing runs
    the traced program once on real values (and the native backend checks its C against that
    run), so a program of the whole training would be trained once more while compiling."""
    return _iteration(spec)
