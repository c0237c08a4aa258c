"""The hand-written NumPy floor of the on-policy benchmarks: PPO, REINFORCE (and A2C) on CartPole.

What a competent NumPy programmer would write for one algorithm and one network, with no engine:
the forward and backward of the 64-64 tanh actor and critic by hand, the optimizer by hand on one
flat float32 buffer, preallocated buffers written with ``out=``, no per-step allocation beyond
what Gymnasium's own ``step`` returns. It steps the same environment as rlgrad's runs (Gymnasium's
NumPy-vectorised CartPole, ``gym.make_vec(..., vectorization_mode="vector_entry_point")``,
NEXT_STEP autoreset) with rlgrad's bookkeeping: the reset step after a done is dropped from the
batch, a truncated episode is bootstrapped with V(final observation) (the NEXT_STEP row after a
done holds it), a terminated one is not, the rollout's last step with V(next observation).

Fusions the algorithm allows (the same arithmetic, fewer NumPy calls):
* every layer's bias rides in its product: inputs carry a column of ones and each weight block
  is ``[W; b]`` (``(in + 1, out)``), so one matmul gives ``x W + b`` and one matmul its gradient;
* the actor's and critic's first layers read the same observation: one ``(obs + 1, 2 H)`` product,
  their activations kept as ``(n, 2, H + 1)`` so that each tower's half (with its ones column) is
  a view and one ``tanh`` / one ``1 - h^2`` covers both towers;
* acting uses block-diagonal copies of the second layers and heads (refilled once per rollout),
  so one step's actor and critic are three products and two ``tanh`` on ``n_envs`` rows.

The losses (the gradient of each written out in ``_ppo_head`` / ``_pg_head``):
* ``style="purejaxrl"``: PureJaxRL's ``ppo.py`` (``bench/_purejaxrl_jax.py``): advantages normalised
  per minibatch with the population std, clipped surrogate, clipped value loss
  ``vf * 0.5 * mean(max((V - R)^2, (V_clip - R)^2))``, entropy bonus; optax's global-norm clip
  (``g * c / max(|g|, c)``) and Adam (eps 1e-5), the learning rate annealed per update;
* ``style="sb3"``: SB3's / rlgrad's PPO (the zoo presets): unbiased std, unclipped value loss
  ``vf * mean((V - R)^2)``, PyTorch's ``clip_grad_norm_`` (``c / (|g| + 1e-6)``), learning rate and
  clip range from the remaining progress after each rollout;
* ``algo="reinforce"``: rlgrad's REINFORCE (GAE with lambda 1, one Adam step per rollout on
  ``-mean(log pi(a|s) A) + vf * mean((G - V)^2)`` over the valid rows, A = G - V normalised).

``train(cfg, seed)`` returns the run's time, steps and return; ``timers=True`` adds CPU time per
part (acting, environment, rollout bookkeeping, GAE, update), at the cost of the timer calls.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

F32 = np.float32


def orthogonal(rng: np.random.Generator, n_in: int, n_out: int, gain: float) -> np.ndarray:
    """An (n_in, n_out) matrix with orthonormal rows or columns, times ``gain`` (flax's and
    PyTorch's orthogonal initialisation: QR of a Gaussian matrix, signs fixed by R's diagonal)."""
    a = rng.standard_normal((max(n_in, n_out), min(n_in, n_out)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    return gain * (q if n_in >= n_out else q.T)[:n_in, :n_out]


class ActorCritic:
    """Separate actor and critic MLPs ``obs -> H -> H`` (tanh) with a logits and a value head.

    All weights live in one flat float32 buffer ``params`` (gradients in ``grad``, the same
    layout), as blocks ``[W; b]``: ``w1`` (obs + 1, 2 H) holds both first layers (actor columns
    first), ``w2a``/``w2c`` (H + 1, H), ``w3a`` (H + 1, A), ``w3c`` (H + 1, 1).
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, batch: int = 128,
                 n_envs: int = 4, seed: int = 0, dtype: Any = F32) -> None:
        self.obs_dim, self.A, self.H, self.dtype = obs_dim, n_actions, hidden, dtype
        H, A, d = hidden, n_actions, obs_dim
        shapes = {"w1": (d + 1, 2 * H), "w2a": (H + 1, H), "w2c": (H + 1, H),
                  "w3a": (H + 1, A), "w3c": (H + 1, 1)}
        sizes = [int(np.prod(s)) for s in shapes.values()]
        self.params = np.zeros(sum(sizes), dtype=dtype)
        self.grad = np.zeros_like(self.params)
        offs = np.cumsum([0, *sizes])
        for (k, s), o0, o1 in zip(shapes.items(), offs[:-1], offs[1:]):
            setattr(self, k, self.params[o0:o1].reshape(s))
            setattr(self, "g" + k, self.grad[o0:o1].reshape(s))
        rng = np.random.default_rng(seed)
        r2 = 2 ** 0.5  # biases stay zero (the last row of each block)
        self.w1[:d, :H] = orthogonal(rng, d, H, r2)
        self.w1[:d, H:] = orthogonal(rng, d, H, r2)
        self.w2a[:H] = orthogonal(rng, H, H, r2)
        self.w2c[:H] = orthogonal(rng, H, H, r2)
        self.w3a[:H] = orthogonal(rng, H, A, 0.01)
        self.w3c[:H] = orthogonal(rng, H, 1, 1.0)
        self._alloc(batch, n_envs)

    def _alloc(self, n: int, n_envs: int) -> None:
        H, A, dt = self.H, self.A, self.dtype
        self.n_max = n
        self.h1 = np.ones((n, 2, H + 1), dtype=dt)  # [tanh(layer 1), 1] for each tower
        self.h2 = np.ones((n, 2, H + 1), dtype=dt)
        self.z1 = np.empty((n, 2, H), dtype=dt)
        self.logits = np.empty((n, A), dtype=dt)
        self.value = np.empty((n, 1), dtype=dt)
        self.dh2 = np.empty((n, 2, H), dtype=dt)
        self.dh1 = np.empty((n, 2, H), dtype=dt)
        self.tmp = np.empty((n, 2, H), dtype=dt)
        # acting: block-diagonal second layer and heads, their biases apart (on n_envs rows a
        # contiguous tanh and an add cost less than a tanh on a strided [h, 1] view)
        self.act_w2 = np.zeros((2 * H, 2 * H), dtype=dt)
        self.act_b2 = np.zeros(2 * H, dtype=dt)
        self.act_w3 = np.zeros((2 * H, A + 1), dtype=dt)
        self.act_b3 = np.zeros(A + 1, dtype=dt)
        self.act_h1 = np.empty((n_envs, 2 * H), dtype=dt)
        self.act_h2 = np.empty((n_envs, 2 * H), dtype=dt)
        self.act_out = np.empty((n_envs, A + 1), dtype=dt)

    # ---- acting ------------------------------------------------------------------------------
    def refresh_acting(self) -> None:
        """Copy the current weights into the block-diagonal acting blocks (once per rollout)."""
        H, A = self.H, self.A
        w2, w3 = self.act_w2, self.act_w3
        w2[:H, :H] = self.w2a[:H]
        w2[H:, H:] = self.w2c[:H]
        self.act_b2[:H] = self.w2a[H]
        self.act_b2[H:] = self.w2c[H]
        w3[:H, :A] = self.w3a[:H]
        w3[H:, A] = self.w3c[:H, 0]
        self.act_b3[:A] = self.w3a[H]
        self.act_b3[A] = self.w3c[H, 0]

    def act_forward(self, x1: np.ndarray) -> np.ndarray:
        """(n_envs, A + 1): logits and value of the rows ``x1`` = [obs, 1] (contiguous)."""
        h1, h2, out = self.act_h1, self.act_h2, self.act_out
        np.dot(x1, self.w1, out=h1)  # np.dot: ~0.3 us less than matmul on these shapes
        np.tanh(h1, out=h1)
        np.dot(h1, self.act_w2, out=h2)
        np.add(h2, self.act_b2, out=h2)
        np.tanh(h2, out=h2)
        np.dot(h2, self.act_w3, out=out)
        return np.add(out, self.act_b3, out=out)

    # ---- the minibatch forward and backward ---------------------------------------------------
    def forward(self, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits (n, A), values (n, 1)) of the rows ``x1`` = [obs, 1]; activations kept."""
        n, H = len(x1), self.H
        z1, h1, h2 = self.z1[:n], self.h1[:n], self.h2[:n]
        np.matmul(x1, self.w1, out=z1.reshape(n, 2 * H))
        np.tanh(z1, out=h1[:, :, :H])
        np.matmul(h1[:, 0], self.w2a, out=z1[:, 0])
        np.matmul(h1[:, 1], self.w2c, out=z1[:, 1])
        np.tanh(z1, out=h2[:, :, :H])
        lg, v = self.logits[:n], self.value[:n]
        np.matmul(h2[:, 0], self.w3a, out=lg)
        np.matmul(h2[:, 1], self.w3c, out=v)
        return lg, v

    def backward(self, x1: np.ndarray, dlogits: np.ndarray, dvalue: np.ndarray) -> np.ndarray:
        """The gradient of the loss into ``grad`` (flat), from d loss / d logits (n, A) and
        d loss / d values (n, 1), through the activations of the last ``forward``."""
        n, H = len(x1), self.H
        h1, h2, dh1, dh2, t = self.h1[:n], self.h2[:n], self.dh1[:n], self.dh2[:n], self.tmp[:n]
        np.matmul(h2[:, 0].T, dlogits, out=self.gw3a)
        np.matmul(h2[:, 1].T, dvalue, out=self.gw3c)
        np.matmul(dlogits, self.w3a[:H].T, out=dh2[:, 0])
        np.matmul(dvalue, self.w3c[:H].T, out=dh2[:, 1])
        self._dtanh(h2, dh2, t)
        np.matmul(h1[:, 0].T, dh2[:, 0], out=self.gw2a)
        np.matmul(h1[:, 1].T, dh2[:, 1], out=self.gw2c)
        np.matmul(dh2[:, 0], self.w2a[:H].T, out=dh1[:, 0])
        np.matmul(dh2[:, 1], self.w2c[:H].T, out=dh1[:, 1])
        self._dtanh(h1, dh1, t)
        np.matmul(x1.T, dh1.reshape(n, 2 * H), out=self.gw1)
        return self.grad

    def _dtanh(self, h: np.ndarray, dh: np.ndarray, t: np.ndarray) -> None:
        hv = h[:, :, :self.H]  # dh *= 1 - h^2, both towers at once
        np.multiply(hv, hv, out=t)
        np.subtract(1, t, out=t)
        np.multiply(dh, t, out=dh)


class Adam:
    """Adam on one flat buffer (Kingma & Ba; optax's and PyTorch's: ``lr * m_hat / (sqrt(v_hat)
    + eps)``), the gradient's clip factor folded into the moment updates."""

    def __init__(self, params: np.ndarray, eps: float, b1: float = 0.9, b2: float = 0.999) -> None:
        self.p, self.eps, self.b1, self.b2 = params, eps, b1, b2
        self.m, self.v = np.zeros_like(params), np.zeros_like(params)
        self.t1, self.t2 = np.empty_like(params), np.empty_like(params)
        self.t = 0

    def step(self, g: np.ndarray, lr: float, scale: float = 1.0) -> None:
        self.t += 1
        b1, b2, m, v, t1, t2 = self.b1, self.b2, self.m, self.v, self.t1, self.t2
        np.multiply(g, (1 - b1) * scale, out=t1)
        np.multiply(m, b1, out=m)
        np.add(m, t1, out=m)
        np.multiply(g, g, out=t2)
        np.multiply(t2, (1 - b2) * scale * scale, out=t2)
        np.multiply(v, b2, out=v)
        np.add(v, t2, out=v)
        np.multiply(v, 1.0 / (1 - b2 ** self.t), out=t2)
        np.sqrt(t2, out=t2)
        np.add(t2, self.eps, out=t2)
        np.divide(m, t2, out=t1)
        np.multiply(t1, lr / (1 - b1 ** self.t), out=t1)
        np.subtract(self.p, t1, out=self.p)


class RMSprop:
    """SB3's ``RMSpropTFLike`` (TensorFlow's form, as A2C uses it): the squared-gradient average
    starts at one, ``v = a v + (1 - a) g^2``, ``p -= lr g / sqrt(v + eps)``; alpha 0.99, eps 1e-5."""

    def __init__(self, params: np.ndarray, eps: float = 1e-5, alpha: float = 0.99) -> None:
        self.p, self.eps, self.alpha = params, eps, alpha
        self.v = np.ones_like(params)
        self.t1, self.t2 = np.empty_like(params), np.empty_like(params)

    def step(self, g: np.ndarray, lr: float, scale: float = 1.0) -> None:
        a, v, t1, t2 = self.alpha, self.v, self.t1, self.t2
        np.multiply(g, g, out=t2)
        np.multiply(t2, (1 - a) * scale * scale, out=t2)
        np.multiply(v, a, out=v)
        np.add(v, t2, out=v)
        np.add(v, self.eps, out=t2)
        np.sqrt(t2, out=t2)
        np.divide(g, t2, out=t1)
        np.multiply(t1, lr * scale, out=t1)
        np.subtract(self.p, t1, out=self.p)


def clip_factor(g: np.ndarray, max_norm: float | None, style: str) -> float:
    """The factor of a global-norm clip: optax's ``c / max(|g|, c)`` or PyTorch's
    ``min(1, c / (|g| + 1e-6))``."""
    if max_norm is None:
        return 1.0
    norm = float(np.sqrt(np.dot(g, g)))
    if style == "purejaxrl":
        return 1.0 if norm < max_norm else max_norm / norm
    return min(1.0, max_norm / (norm + 1e-6))


# ---- the loss heads: d loss / d logits and d loss / d values, written out --------------------------
class Heads:
    """Scratch buffers (``n_max`` rows) and the gradients of the PPO and policy-gradient losses
    with respect to the network's outputs; ``dlogits`` (n, A) and ``dvalue`` (n, 1) are returned."""

    def __init__(self, n_max: int, n_actions: int, dtype: Any = F32) -> None:
        n, A = n_max, n_actions
        self.A = A
        self.s, self.p, self.t = (np.empty((n, A), dtype=dtype) for _ in range(3))
        self.onehot = np.empty((n, A), dtype=bool)
        self.arange_a = np.arange(A)
        self.rowbase = np.arange(n) * A
        self.fi = np.empty(n, dtype=np.int64)
        self.r = [np.empty(n, dtype=dtype) for _ in range(8)]
        self.mask = np.empty(n, dtype=bool)
        self.mask2 = np.empty(n, dtype=bool)
        self.dlogits = np.empty((n, A), dtype=dtype)
        self.dvalue = np.empty((n, 1), dtype=dtype)

    def _softmax(self, lg: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
        """(log-softmax or shifted logits, softmax) of ``lg`` in the scratch buffers."""
        n = len(lg)
        s, p, z = self.s[:n], self.p[:n], self.r[0][:n]
        np.max(lg, axis=1, out=z)
        np.subtract(lg, z[:, None], out=s)
        np.exp(s, out=p)
        np.sum(p, axis=1, out=z)
        np.divide(p, z[:, None], out=p)
        if log:
            np.log(z, out=z)
            np.subtract(s, z[:, None], out=s)
        return s, p

    def _dlogits_pg(self, p: np.ndarray, actions: np.ndarray, dlogp: np.ndarray) -> np.ndarray:
        """d loss / d logits = (onehot(a) - p) * d loss / d log pi(a)."""
        n = len(p)
        oh, dl = self.onehot[:n], self.dlogits[:n]
        np.equal(actions[:, None], self.arange_a, out=oh)
        np.subtract(oh, p, out=dl)
        np.multiply(dl, dlogp[:, None], out=dl)
        return dl

    def _add_entropy(self, dl: np.ndarray, logp_all: np.ndarray, p: np.ndarray,
                     coef: float) -> None:
        """+ the gradient of ``-coef * mean(H)``: ``coef / n * p * (log p + H)``."""
        n = len(p)
        t, negh = self.t[:n], self.r[1][:n]
        np.multiply(p, logp_all, out=t)
        np.sum(t, axis=1, out=negh)  # -H
        np.subtract(logp_all, negh[:, None], out=t)
        np.multiply(t, p, out=t)
        np.multiply(t, coef / n, out=t)
        np.add(dl, t, out=dl)

    def normalise(self, adv: np.ndarray, ddof: int) -> np.ndarray:
        n = len(adv)
        out = self.r[2][:n]
        mean, std = adv.mean(), adv.std(ddof=ddof)
        np.subtract(adv, mean, out=out)
        np.multiply(out, 1.0 / (std + 1e-8), out=out)
        return out

    def ppo(self, lg: np.ndarray, v: np.ndarray, b: dict[str, np.ndarray], clip: float,
            ent: float, vf: float, style: str) -> tuple[np.ndarray, np.ndarray]:
        """The clipped surrogate + value loss - ent * entropy: gradients w.r.t. logits, values."""
        n = len(lg)
        logp_all, p = self._softmax(lg, log=True)
        fi, logp, ratio, u, c = self.fi[:n], self.r[3][:n], self.r[4][:n], self.r[5][:n], self.r[6][:n]
        np.add(self.rowbase[:n], b["actions"], out=fi)
        np.take(logp_all.reshape(-1), fi, out=logp)
        np.subtract(logp, b["old_logp"], out=ratio)
        np.exp(ratio, out=ratio)
        adv = self.normalise(b["adv"], 0 if style == "purejaxrl" else 1)
        np.multiply(ratio, adv, out=u)
        np.clip(ratio, 1 - clip, 1 + clip, out=c)
        np.multiply(c, adv, out=c)
        m = self.mask[:n]
        np.less_equal(u, c, out=m)  # min() passes the unclipped term's gradient: d(rA)/dlogp = rA
        np.multiply(u, m, out=u)
        np.multiply(u, -1.0 / n, out=u)
        dl = self._dlogits_pg(p, b["actions"], u)
        if ent:
            self._add_entropy(dl, logp_all, p, ent)
        return dl, self._dvalue(v, b, clip, vf, style)

    def _dvalue(self, v: np.ndarray, b: dict[str, np.ndarray], clip: float, vf: float,
                style: str) -> np.ndarray:
        n = len(v)
        dv = self.dvalue[:n]
        d1 = dv[:, 0]
        np.subtract(v[:, 0], b["ret"], out=d1)
        if style != "purejaxrl":  # vf * mean((V - R)^2)
            np.multiply(d1, 2.0 * vf / n, out=d1)
            return dv
        # PureJaxRL: vf * 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old) - R)^2))
        dd, d2, sq1 = self.r[5][:n], self.r[6][:n], self.r[7][:n]
        np.subtract(v[:, 0], b["old_v"], out=dd)
        np.clip(dd, -clip, clip, out=d2)
        inside = self.mask2[:n]
        np.equal(dd, d2, out=inside)  # the clipped prediction moves with V only inside the clip
        np.add(d2, b["old_v"], out=d2)
        np.subtract(d2, b["ret"], out=d2)
        np.multiply(d1, d1, out=sq1)
        np.multiply(d2, d2, out=dd)
        take1 = self.mask[:n]
        np.greater_equal(sq1, dd, out=take1)
        np.multiply(d2, inside, out=d2)
        np.copyto(d2, d1, where=take1)
        np.multiply(d2, vf / n, out=d1)  # 2 * (vf * 0.5) / n
        return dv

    def pg(self, lg: np.ndarray, v: np.ndarray, b: dict[str, np.ndarray], ent: float,
           vf: float) -> tuple[np.ndarray, np.ndarray]:
        """-mean(log pi(a|s) A) + vf * mean((R - V)^2) - ent * mean(H) (REINFORCE, A2C)."""
        n = len(lg)
        logp_all, p = self._softmax(lg, log=bool(ent))
        dlogp = self.r[3][:n]
        np.multiply(b["adv"], -1.0 / n, out=dlogp)
        dl = self._dlogits_pg(p, b["actions"], dlogp)
        if ent:
            self._add_entropy(dl, logp_all, p, ent)
        return dl, self._dvalue(v, b, 0.0, vf, "sb3")


# ---- the run ---------------------------------------------------------------------------------------
PUREJAXRL = {"algo": "ppo", "style": "purejaxrl", "n_envs": 4, "n_steps": 128, "total": 500_000,
             "batch_size": 128, "n_epochs": 4, "lr": 2.5e-4, "anneal_lr": True, "clip": 0.2,
             "anneal_clip": False, "gamma": 0.99, "lam": 0.95, "ent": 0.01, "vf": 0.5,
             "max_grad_norm": 0.5, "optimizer": "adam", "eps": 1e-5}


def zoo_ppo(hp: dict[str, Any], n_envs: int, total: int) -> dict[str, Any]:
    """The floor's configuration for an rlgrad PPO preset (SB3's defaults filled in)."""
    lr, clip = hp.get("learning_rate", 3e-4), hp.get("clip_range", 0.2)
    return {"algo": "ppo", "style": "sb3", "n_envs": n_envs, "n_steps": hp.get("n_steps", 2048),
            "total": total, "batch_size": hp.get("batch_size", 64), "n_epochs": hp.get("n_epochs", 10),
            "lr": _lin(lr), "anneal_lr": str(lr).startswith("lin_"), "clip": _lin(clip),
            "anneal_clip": str(clip).startswith("lin_"), "gamma": hp.get("gamma", 0.99),
            "lam": hp.get("gae_lambda", 0.95), "ent": hp.get("ent_coef", 0.0),
            "vf": hp.get("vf_coef", 0.5), "max_grad_norm": hp.get("max_grad_norm", 0.5),
            "optimizer": "adam", "eps": 1e-5}


def pg_config(algo: str, hp: dict[str, Any], n_envs: int, total: int) -> dict[str, Any]:
    """The floor's configuration for rlgrad's REINFORCE or A2C preset (defaults filled in)."""
    a2c = algo == "a2c"
    return {"algo": algo, "style": "sb3", "n_envs": n_envs, "n_steps": hp.get("n_steps", 5 if a2c else 256),
            "total": total, "lr": _lin(hp.get("learning_rate", 7e-4 if a2c else 1e-3)),
            "anneal_lr": str(hp.get("learning_rate", "")).startswith("lin_"),
            "gamma": hp.get("gamma", 0.99), "lam": hp.get("gae_lambda", 1.0) if a2c else 1.0,
            "ent": hp.get("ent_coef", 0.0), "vf": hp.get("vf_coef", 0.5),
            "max_grad_norm": hp.get("max_grad_norm", 0.5 if a2c else None),
            "normalize_advantage": hp.get("normalize_advantage", not a2c),
            "optimizer": "rmsprop" if a2c else "adam", "eps": 1e-5 if a2c else 1e-8}


def _lin(v: Any) -> float:
    return float(v[4:]) if isinstance(v, str) and v.startswith("lin_") else float(v)


class Timers:
    """CPU seconds per part of the run (``time.process_time`` around each)."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}
        self.clock = time.process_time
        self.t = self.clock()

    def lap(self, name: str) -> None:
        t = self.clock()
        self.acc[name] = self.acc.get(name, 0.0) + t - self.t
        self.t = t


class _Null:
    def lap(self, name: str) -> None:
        pass


def make_env(env_id: str, n_envs: int, mode: str = "vector_entry_point") -> Any:
    """Gymnasium's vector env as rlgrad builds it: its NumPy-vectorised implementation
    (``vector_entry_point``) or ``sync`` (``SyncVectorEnv``), NEXT_STEP autoreset."""
    import gymnasium as gym

    return gym.make_vec(env_id, num_envs=n_envs, vectorization_mode=mode)


def train(cfg: dict[str, Any], seed: int = 0, env_id: str = "CartPole-v1",
          timers: bool = False, mode: str = "vector_entry_point") -> dict[str, Any]:
    """One training run; returns its wall and CPU seconds, steps, returns (and per-part CPU)."""
    t0, c0 = time.perf_counter(), time.process_time()
    N, T = cfg["n_envs"], cfg["n_steps"]
    env = make_env(env_id, N, mode)
    d, A = env.single_observation_space.shape[0], int(env.single_action_space.n)
    ppo = cfg["algo"] == "ppo"
    B = cfg["batch_size"] if ppo else T * N
    net = ActorCritic(d, A, 64, batch=min(B, T * N), n_envs=N, seed=seed)
    heads = Heads(min(B, T * N), A)
    opt = (Adam(net.params, cfg["eps"]) if cfg["optimizer"] == "adam"
           else RMSprop(net.params, cfg["eps"]))
    rng = np.random.default_rng(seed)
    ro = Rollout(T, N, d, cfg["gamma"], cfg["lam"])
    ro.scratch(A)
    obs, _ = env.reset(seed=seed)
    ro.obs1[0, :, :d] = obs
    per_rollout = T * N
    n_updates = (cfg["total"] // per_rollout if cfg["style"] == "purejaxrl"
                 else -(-cfg["total"] // per_rollout))
    tm = Timers() if timers else _Null()
    ends: list[tuple[int, float]] = []  # (update, return) of every finished episode
    steps = 0
    for k in range(n_updates):
        ro.collect(env, net, rng, k, ends, tm)
        steps += per_rollout
        ro.gae(net)
        tm.lap("GAE")
        if cfg["style"] == "purejaxrl":
            lr, clip = cfg["lr"] * (1.0 - k / n_updates), cfg.get("clip", 0.0)
        else:
            progress = 1.0 - steps / cfg["total"]
            lr = cfg["lr"] * (progress if cfg["anneal_lr"] else 1.0)
            clip = cfg.get("clip", 0.0) * (progress if cfg.get("anneal_clip") else 1.0)
        if ppo:
            mb = _ppo_update(cfg, ro, net, heads, opt, rng, lr, clip, tm)
        else:
            mb = _pg_update(cfg, ro, net, heads, opt, lr, tm)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    last = [r for u, r in ends if u >= n_updates - 10]
    return {"train_s": wall, "cpu_s": cpu, "steps": steps, "updates": n_updates,
            "return": float(np.mean(last)) if last else float("nan"),
            "last20": float(np.mean([r for _, r in ends[-20:]])) if ends else float("nan"),
            "episodes": len(ends), "params": net.params, "net": net, "rollout": ro,
            "update": _update_parts(cfg, ro, net, heads, opt, rng, mb, lr, clip),
            **({"parts": tm.acc} if timers else {})}


def _update_parts(cfg: dict[str, Any], ro: Rollout, net: ActorCritic, heads: Heads, opt: Any,
                  rng: np.random.Generator, mb: dict[str, np.ndarray], lr: float,
                  clip: float) -> dict[str, Any]:
    """The update's parts as calls, for bench/onpolicy_floor.py: one update's minibatch
    gathering ("glue") and one minibatch step ("step", on the last minibatch of the run)."""
    if cfg["algo"] == "ppo":
        return {"glue": lambda: [None for _ in _ppo_epochs(cfg, ro, rng)],
                "step": lambda: _ppo_step(cfg, net, heads, opt, mb, lr, clip),
                "whole": lambda: _ppo_update(cfg, ro, net, heads, opt, rng, lr, clip, _Null())}

    def pg_step() -> None:
        lg, v = net.forward(mb["x1"])
        dl, dv = heads.pg(lg, v, mb, cfg["ent"], cfg["vf"])
        g = net.backward(mb["x1"], dl, dv)
        opt.step(g, lr, clip_factor(g, cfg["max_grad_norm"], "sb3"))

    def pg_glue() -> None:
        R = ro.T * ro.N
        valid = ro.valid.reshape(R)
        b = {k: a.reshape(R, *a.shape[2:])[valid] for k, a in
             (("x1", ro.obs1[:ro.T]), ("actions", ro.actions), ("ret", ro.ret), ("adv", ro.adv))}
        if cfg["normalize_advantage"]:
            heads.normalise(b["adv"], 1)

    return {"glue": pg_glue, "step": pg_step,
            "whole": lambda: _pg_update(cfg, ro, net, heads, opt, lr, _Null())}


def greedy(net: ActorCritic, obs: np.ndarray) -> np.ndarray:
    """The most probable actions of ``obs`` (deterministic evaluation)."""
    obs = np.asarray(obs, dtype=net.dtype).reshape(-1, net.obs_dim)
    x1 = np.ones((len(obs), net.obs_dim + 1), dtype=net.dtype)
    x1[:, :-1] = obs
    h1 = np.tanh(x1 @ net.w1)
    H = net.H
    ha = np.tanh(h1[:, :H] @ net.w2a[:H] + net.w2a[H])
    return (ha @ net.w3a[:H] + net.w3a[H]).argmax(axis=1)


class Rollout:
    """``T`` x ``N`` preallocated transitions; observations carry their column of ones."""

    def __init__(self, T: int, N: int, d: int, gamma: float, lam: float) -> None:
        self.T, self.N, self.d, self.gamma, self.lam = T, N, d, gamma, lam
        self.obs1 = np.ones((T + 1, N, d + 1), dtype=F32)  # row T: the observation after the rollout
        self.actions = np.zeros((T, N), dtype=np.int64)
        self.logp = np.zeros((T, N), dtype=F32)
        self.values = np.zeros((T + 1, N), dtype=F32)  # row T: V(observation after the rollout)
        self.rewards = np.zeros((T, N), dtype=F32)
        self.term = np.zeros((T, N), dtype=F32)
        self.done = np.zeros((T, N), dtype=bool)
        self.valid = np.ones((T, N), dtype=bool)
        self.adv = np.zeros((T, N), dtype=F32)
        self.ret = np.zeros((T, N), dtype=F32)
        self.prev_done = np.zeros(N, dtype=bool)
        self.ep_ret = np.zeros(N)
        self.u = np.empty(N)
        self.rows = np.arange(N)

    def scratch(self, n_actions: int) -> None:
        self.z = np.empty(self.N, dtype=F32)
        self.cmp = np.empty(self.N, dtype=bool)
        self.s = np.empty((self.N, n_actions), dtype=F32)

    def collect(self, env: Any, net: ActorCritic, rng: np.random.Generator, k: int,
                ends: list[tuple[int, float]], tm: Any) -> None:
        """``T`` steps of every env copy with the current policy."""
        net.refresh_acting()
        act, record, step = self.act, self.record, env.step
        for t in range(self.T):
            a = act(t, net, rng)
            tm.lap("acting")
            obs, r, term, trunc, _ = step(a)
            tm.lap("environment")
            record(t, obs, r, term, trunc, k, ends)
            tm.lap("bookkeeping")

    def act(self, t: int, net: ActorCritic, rng: np.random.Generator) -> np.ndarray:
        """Sample row ``t``'s actions (inverse CDF), store them, their log-probability and value.

        Row reductions over a few actions go column by column: one ufunc call per column
        costs less than a reduction's setup on ``n_envs`` x ``A``."""
        A, u, z, s, cmp = net.A, self.u, self.z, self.s, self.cmp
        out = net.act_forward(self.obs1[t])
        cols = [out[:, j] for j in range(A)]
        np.copyto(z, cols[0])
        for c in cols[1:]:
            np.maximum(z, c, out=z)
        np.subtract(out[:, :A], z[:, None], out=s)
        np.exp(s, out=out[:, :A])
        for j in range(1, A):  # the unnormalised CDF; its last column is the sum
            np.add(cols[j - 1], cols[j], out=cols[j])
        rng.random(out=u)
        np.multiply(u, cols[-1], out=u)
        a = self.actions[t]
        np.less(cols[0], u, out=cmp)
        np.copyto(a, cmp)
        for c in cols[1:-1]:
            np.less(c, u, out=cmp)
            np.add(a, cmp, out=a)
        np.log(cols[-1], out=z)
        np.subtract(s[self.rows, a], z, out=self.logp[t])
        self.values[t] = out[:, A]
        return a

    def record(self, t: int, obs: np.ndarray, r: np.ndarray, term: np.ndarray,
               trunc: np.ndarray, k: int, ends: list[tuple[int, float]]) -> None:
        """Store step ``t``'s outcome; the valid mask and the finished episodes' returns."""
        ep_ret = self.ep_ret
        self.obs1[t + 1, :, :self.d] = obs
        self.rewards[t] = r
        self.term[t] = term
        done = np.logical_or(term, trunc, out=self.done[t])
        np.logical_not(self.prev_done, out=self.valid[t])
        np.add(ep_ret, r, out=ep_ret)  # the reset step's reward is 0: nothing to mask
        if np.count_nonzero(done):
            for i in np.flatnonzero(done):
                ends.append((k, float(ep_ret[i])))
                ep_ret[i] = 0.0
        self.prev_done = done

    def gae(self, net: ActorCritic) -> None:
        """GAE(lambda) over the rollout, then the first observation of the next one."""
        T, A = self.T, net.A
        self.values[T] = net.act_forward(self.obs1[T])[:, A]
        g, gl = self.gamma, self.gamma * self.lam
        # delta_t = r_t + g V(s_t+1) (1 - term_t) - V(s_t); A_t = delta_t + g l (1 - done_t) A_t+1
        delta = self.rewards + g * self.values[1:] * (1.0 - self.term) - self.values[:T]
        carry = np.where(self.done, 0.0, gl).astype(F32)
        adv, last = self.adv, np.zeros(self.N, dtype=F32)
        for t in range(T - 1, -1, -1):
            last = delta[t] + carry[t] * last
            adv[t] = last
        np.add(adv, self.values[:T], out=self.ret)
        self.obs1[0] = self.obs1[T]


def _ppo_update(cfg: dict[str, Any], ro: Rollout, net: ActorCritic, heads: Heads, opt: Any,
                rng: np.random.Generator, lr: float, clip: float, tm: Any) -> dict[str, Any]:
    """``n_epochs`` passes over the valid rows in shuffled minibatches (ragged last one kept)."""
    mb = None
    for mbs in _ppo_epochs(cfg, ro, rng):
        tm.lap("update glue")
        for mb in mbs:
            _ppo_step(cfg, net, heads, opt, mb, lr, clip)
            tm.lap("minibatch step")
    return mb


def _ppo_epochs(cfg: dict[str, Any], ro: Rollout, rng: np.random.Generator) -> Any:
    """Each epoch's minibatches: views of one gather of the shuffled valid rows (or, when one
    minibatch holds them all, the same gathered rows every epoch, their order irrelevant)."""
    R = ro.T * ro.N
    flat = {"x1": ro.obs1[:ro.T].reshape(R, -1), "actions": ro.actions.reshape(R),
            "old_logp": ro.logp.reshape(R), "adv": ro.adv.reshape(R), "ret": ro.ret.reshape(R),
            "old_v": ro.values[:ro.T].reshape(R)}
    idx = np.flatnonzero(ro.valid.reshape(R))
    n, bs = len(idx), cfg["batch_size"]
    if bs >= n:
        whole = [{k: v[idx] for k, v in flat.items()}]
        for _ in range(cfg["n_epochs"]):
            yield whole
        return
    for _ in range(cfg["n_epochs"]):
        perm = rng.permutation(idx)
        epoch = {k: v[perm] for k, v in flat.items()}
        yield [{k: v[s:s + bs] for k, v in epoch.items()} for s in range(0, n, bs)]


def _ppo_step(cfg: dict[str, Any], net: ActorCritic, heads: Heads, opt: Any,
              mb: dict[str, np.ndarray], lr: float, clip: float) -> None:
    """One minibatch: forward, the loss's gradient, backward, norm clip, Adam."""
    lg, v = net.forward(mb["x1"])
    dl, dv = heads.ppo(lg, v, mb, clip, cfg["ent"], cfg["vf"], cfg["style"])
    g = net.backward(mb["x1"], dl, dv)
    opt.step(g, lr, clip_factor(g, cfg["max_grad_norm"], cfg["style"]))


def _pg_update(cfg: dict[str, Any], ro: Rollout, net: ActorCritic, heads: Heads, opt: Any,
               lr: float, tm: Any) -> dict[str, np.ndarray]:
    """One gradient step on the valid rows of the rollout (REINFORCE, A2C)."""
    R = ro.T * ro.N
    valid = ro.valid.reshape(R)
    all_valid = bool(valid.all())
    pick = (lambda a: a) if all_valid else (lambda a: a[valid])
    b = {"x1": pick(ro.obs1[:ro.T].reshape(R, -1)), "actions": pick(ro.actions.reshape(R)),
         "ret": pick(ro.ret.reshape(R)), "adv": pick(ro.adv.reshape(R))}
    if cfg["normalize_advantage"] and len(b["adv"]) > 1:
        b["adv"] = heads.normalise(b["adv"], 1)
    tm.lap("update glue")
    lg, v = net.forward(b["x1"])
    dl, dv = heads.pg(lg, v, b, cfg["ent"], cfg["vf"])
    g = net.backward(b["x1"], dl, dv)
    opt.step(g, lr, clip_factor(g, cfg["max_grad_norm"], "sb3"))
    tm.lap("minibatch step")
    return b


def env_alone(cfg: dict[str, Any], seed: int = 0, env_id: str = "CartPole-v1",
              mode: str = "vector_entry_point") -> dict[str, Any]:
    """The run's environment steps alone: the same vector env and number of steps, uniformly
    random actions (drawn once per rollout), the same per-step bookkeeping (``Rollout.record``:
    buffer writes, valid mask, episode returns); no network, no update."""
    t0, c0 = time.perf_counter(), time.process_time()
    N, T = cfg["n_envs"], cfg["n_steps"]
    env = make_env(env_id, N, mode)
    d, A = env.single_observation_space.shape[0], int(env.single_action_space.n)
    rng = np.random.default_rng(seed)
    ro = Rollout(T, N, d, cfg["gamma"], cfg["lam"])
    obs, _ = env.reset(seed=seed)
    ro.obs1[0, :, :d] = obs
    per_rollout = T * N
    n_updates = (cfg["total"] // per_rollout if cfg["style"] == "purejaxrl"
                 else -(-cfg["total"] // per_rollout))
    ends: list[tuple[int, float]] = []
    step, record = env.step, ro.record
    for k in range(n_updates):
        actions = rng.integers(0, A, size=(T, N))
        for t in range(T):
            obs, r, term, trunc, _ = step(actions[t])
            record(t, obs, r, term, trunc, k, ends)
        ro.obs1[0] = ro.obs1[T]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return {"train_s": wall, "cpu_s": cpu, "steps": n_updates * per_rollout,
            "return": float(np.mean([r for _, r in ends])) if ends else float("nan"),
            "episodes": len(ends)}
