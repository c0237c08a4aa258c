"""The hand-written NumPy floor of the DQN benchmark: the zoo's CartPole-v1 preset, no engine.

What a competent NumPy programmer would write for this one algorithm and network (256-256 ReLU
Q-network, two actions): forward and backward by hand, Adam and PyTorch's global-norm clip on one
flat float32 buffer (``_numpy_ppo.Adam`` / ``clip_factor``), preallocated activations written with
``out=``. It steps the same environment as rlgrad's row (Gymnasium's ``SyncVectorEnv`` with one
CartPole, NEXT_STEP autoreset: the reset step after a done is not stored, the done step's
observation is the true final one) and runs the preset's schedule as rlgrad and SB3 do: rollouts
of ``train_freq`` steps, then (once past ``learning_starts``) ``gradient_steps`` updates of
``batch_size``; epsilon linear over ``exploration_fraction`` of the run; the target network copied
every ``target_update_interval`` steps; the Huber loss (delta 1) of ``Q(s, a) - y`` with
``y = r + gamma (1 - terminated) max_a Q'(s', a)``.

Fusions the algorithm allows (the same arithmetic, fewer NumPy calls):
* every layer's bias rides in its product: inputs carry a column of ones and each weight block
  is ``[W; b]`` (``(in + 1, out)``), so one matmul gives ``x W + b`` and one its gradient; the
  replay buffer stores observations with that column, so a sampled batch is the first input;
* the targets of a ``train()``'s minibatches come from the target network, fixed during it: one
  pass over the distinct next observations drawn (in chunks of 1,024 rows), as rlgrad does.

``train(cfg, seed)`` returns the run's wall and CPU time, steps, updates and the network.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _numpy_ppo import Adam, clip_factor, make_env

F32 = np.float32


class QNet:
    """Q(s, .) = relu(relu([s 1] W1) 1] W2) 1] W3, the three blocks views of one flat buffer."""

    def __init__(self, d: int, n_actions: int, hidden: int = 256, batch: int = 64, seed: int = 0,
                 dtype: Any = F32) -> None:
        H, A = hidden, n_actions
        self.d, self.H, self.A = d, H, A
        self.shapes = [(d + 1, H), (H + 1, H), (H + 1, A)]
        sizes = [a * b for a, b in self.shapes]
        self.offsets = np.cumsum([0, *sizes])
        self.params = np.empty(self.offsets[-1], dtype)
        self.grad = np.empty_like(self.params)
        rng = np.random.default_rng(seed)
        for W in self.blocks(self.params):  # PyTorch's Linear: U(-1/sqrt(in), 1/sqrt(in))
            W[...] = rng.uniform(-1, 1, W.shape) / np.sqrt(W.shape[0] - 1)
        self._acts: dict[int, tuple[np.ndarray, ...]] = {}
        self.scratch(batch)

    def blocks(self, flat: np.ndarray) -> list[np.ndarray]:
        o = self.offsets
        return [flat[o[i]:o[i + 1]].reshape(s) for i, s in enumerate(self.shapes)]

    def scratch(self, n: int) -> tuple[np.ndarray, ...]:
        """The activations of an ``n``-row pass (with their ones columns), kept per ``n``."""
        acts = self._acts.get(n)
        if acts is None:
            H, dt = self.H, self.params.dtype
            a1, a2 = np.ones((n, H + 1), dt), np.ones((n, H + 1), dt)
            acts = self._acts[n] = (a1, a2, np.empty((n, self.A), dt), np.empty((n, H), dt),
                                    np.empty((n, H), dt))
        return acts

    def forward(self, x1: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        """Q of the rows of ``x1`` (observations with a ones column); the activations stay in
        this size's scratch for ``backward``. ``params``: another flat buffer (the target's)."""
        W1, W2, W3 = self.blocks(self.params if params is None else params)
        a1, a2, q, _, _ = self.scratch(len(x1))
        h1, h2 = a1[:, :self.H], a2[:, :self.H]
        np.matmul(x1, W1, out=h1)
        np.maximum(h1, 0, out=h1)
        np.matmul(a1, W2, out=h2)
        np.maximum(h2, 0, out=h2)
        return np.matmul(a2, W3, out=q)

    def backward(self, x1: np.ndarray, dq: np.ndarray) -> np.ndarray:
        """The gradient (flat, ``self.grad``) of ``sum(dq * Q(x1))`` after ``forward(x1)``."""
        W1, W2, W3 = self.blocks(self.params)
        G1, G2, G3 = self.blocks(self.grad)
        a1, a2, _, d1, d2 = self.scratch(len(x1))
        H = self.H
        np.matmul(a2.T, dq, out=G3)
        np.matmul(dq, W3[:H].T, out=d2)
        d2 *= a2[:, :H] > 0
        np.matmul(a1.T, d2, out=G2)
        np.matmul(d2, W2[:H].T, out=d1)
        d1 *= a1[:, :H] > 0
        np.matmul(x1.T, d1, out=G1)
        return self.grad


class FlushAdam(Adam):
    """``_numpy_ppo.Adam`` whose moments below ``tiny * 1e13`` become 0 every 50 steps (as
    rlgrad's Adam does): a ReLU unit dead for a while has exact-zero gradients, its second moment
    decays into subnormal numbers, and subnormal arithmetic made the update ~6x slower."""

    def step(self, g: np.ndarray, lr: float, scale: float = 1.0) -> None:
        super().step(g, lr, scale)
        if self.t % 50 == 0:
            floor = np.finfo(self.p.dtype).tiny * 1e13
            for a in (self.m, self.v):
                np.less(np.abs(a, out=self.t1), floor, out=self.t2.view(bool)[:len(a)])
                np.putmask(a, self.t2.view(bool)[:len(a)], 0)


def huber_grad(q: np.ndarray, actions: np.ndarray, y: np.ndarray, dq: np.ndarray,
               rows: np.ndarray) -> float:
    """The Huber loss (delta 1, mean) of ``Q(s, a) - y``; its gradient w.r.t. ``q`` into ``dq``
    (zero but at each row's action: the TD error clipped to [-1, 1], over the batch size)."""
    d = q[rows, actions] - y
    a = np.abs(d)
    m = np.minimum(a, 1.0)
    loss = float(np.mean(m * (a - 0.5 * m)))
    dq.fill(0)
    dq[rows, actions] = np.clip(d, -1.0, 1.0) * (1.0 / len(d))
    return loss


def zoo_dqn(hp: dict[str, Any], total: int) -> dict[str, Any]:
    """The floor's configuration from a zoo DQN preset (rlgrad/SB3 defaults where it is silent)."""
    arch = hp.get("policy_kwargs", {}).get("net_arch", [64, 64])
    if len(arch) != 2 or arch[0] != arch[1]:
        raise ValueError(f"the DQN floor is written for two equal hidden layers, got {arch}")
    return {"total": total, "lr": float(hp.get("learning_rate", 1e-4)),
            "batch_size": int(hp.get("batch_size", 32)),
            "buffer_size": int(hp.get("buffer_size", 1_000_000)),
            "learning_starts": int(hp.get("learning_starts", 100)),
            "gamma": float(hp.get("gamma", 0.99)),
            "target_update_interval": int(hp.get("target_update_interval", 10_000)),
            "train_freq": int(hp.get("train_freq", 4)),
            "gradient_steps": int(hp.get("gradient_steps", 1)),
            "exploration_fraction": float(hp.get("exploration_fraction", 0.1)),
            "exploration_initial_eps": float(hp.get("exploration_initial_eps", 1.0)),
            "exploration_final_eps": float(hp.get("exploration_final_eps", 0.05)),
            "max_grad_norm": float(hp.get("max_grad_norm", 10.0)), "hidden": int(arch[0])}


class Replay:
    """The ring buffer; observations stored with their ones column (a batch is ``x1``)."""

    def __init__(self, size: int, d: int) -> None:
        self.obs, self.next_obs = np.ones((size, d + 1), F32), np.ones((size, d + 1), F32)
        self.actions = np.zeros(size, np.int64)
        self.rewards, self.not_term = np.zeros(size, F32), np.zeros(size, F32)
        self.size, self.pos, self.n, self.d = size, 0, 0, d

    def add(self, obs: np.ndarray, next_obs: np.ndarray, a: int, r: float, term: bool) -> None:
        p, d = self.pos, self.d
        self.obs[p, :d] = obs
        self.next_obs[p, :d] = next_obs
        self.actions[p], self.rewards[p], self.not_term[p] = a, r, 0.0 if term else 1.0
        self.pos = (p + 1) % self.size
        self.n = min(self.n + 1, self.size)


def targets(net: QNet, target: np.ndarray, rb: Replay, idx: np.ndarray, gamma: float,
            chunk: int = 1024) -> np.ndarray:
    """``r + gamma (1 - terminated) max_a Q'(s', a)`` of rows ``idx``, Q' run once per distinct
    row, ``chunk`` rows at a time (the last chunk padded by repeating a row: one scratch size)."""
    uniq, inv = np.unique(idx, return_inverse=True)
    x = rb.next_obs[uniq]
    n = len(x)
    if n % chunk:
        x = np.concatenate([x, np.repeat(x[:1], chunk - n % chunk, axis=0)])
    v = np.empty(len(x), F32)
    for a in range(0, len(x), chunk):
        v[a:a + chunk] = net.forward(x[a:a + chunk], target).max(axis=1)
    return rb.rewards[idx] + F32(gamma) * rb.not_term[idx] * v[:n][inv]


def _train_round(cfg: dict[str, Any], net: QNet, target: np.ndarray, opt: FlushAdam, rb: Replay,
                 rng: np.random.Generator) -> None:
    """``gradient_steps`` updates on minibatches drawn at once; targets from the fixed target."""
    B, n_steps = cfg["batch_size"], cfg["gradient_steps"]
    idx = rng.integers(0, rb.n, size=n_steps * B)
    y = targets(net, target, rb, idx, cfg["gamma"])
    dq, rows = np.empty((B, net.A), F32), np.arange(B)
    for i in range(n_steps):
        sl = idx[i * B:(i + 1) * B]
        x1 = rb.obs[sl]
        q = net.forward(x1)
        huber_grad(q, rb.actions[sl], y[i * B:(i + 1) * B], dq, rows)
        g = net.backward(x1, dq)
        opt.step(g, cfg["lr"], clip_factor(g, cfg["max_grad_norm"], "sb3"))


def greedy(net: QNet, obs: np.ndarray) -> np.ndarray:
    """The greedy actions of a batch of raw observations (for evaluation)."""
    x1 = np.ones((len(obs), net.d + 1), F32)
    x1[:, :net.d] = obs
    return net.forward(x1).argmax(axis=1)


def train(cfg: dict[str, Any], seed: int = 0, env_id: str = "CartPole-v1",
          mode: str = "sync") -> dict[str, Any]:
    """One training run; returns its wall and CPU seconds, steps, updates and the network."""
    t0, c0 = time.perf_counter(), time.process_time()
    env = make_env(env_id, 1, mode)
    d, A = env.single_observation_space.shape[0], int(env.single_action_space.n)
    net = QNet(d, A, cfg["hidden"], cfg["batch_size"], seed)
    tgt = net.params.copy()
    opt = FlushAdam(net.params, 1e-8)  # PyTorch's (and SB3's) Adam eps
    rng = np.random.default_rng(seed)
    rb = Replay(cfg["buffer_size"], d)
    total, freq = cfg["total"], cfg["train_freq"]
    e0, e1, frac = (cfg["exploration_initial_eps"], cfg["exploration_final_eps"],
                    cfg["exploration_fraction"])
    x1 = np.ones((1, d + 1), F32)
    obs, _ = env.reset(seed=seed)
    steps = updates = 0
    eps, prev_done = e0, False
    while steps < total:
        for _ in range(freq):
            if steps < cfg["learning_starts"] or rng.random() < eps:
                a = int(rng.integers(0, A))
            else:
                x1[0, :d] = obs[0]
                a = int(net.forward(x1).argmax())
            nxt, r, term, trunc, _ = env.step(np.array([a]))
            if not prev_done:  # NEXT_STEP: the step after a done is the reset, not a transition
                rb.add(obs[0], nxt[0], a, float(r[0]), bool(term[0]))
            prev_done, obs = bool(term[0] or trunc[0]), nxt
            steps += 1
            if steps % cfg["target_update_interval"] == 0:
                tgt[...] = net.params
            eps = e0 + (e1 - e0) * min(1.0, steps / total / frac)
        if steps > cfg["learning_starts"]:
            _train_round(cfg, net, tgt, opt, rb, rng)
            updates += cfg["gradient_steps"]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return {"train_s": wall, "cpu_s": cpu, "steps": steps, "updates": updates, "net": net}


def env_alone(cfg: dict[str, Any], seed: int = 0, env_id: str = "CartPole-v1",
              mode: str = "sync") -> dict[str, Any]:
    """The run's environment steps alone: the same vector env and number of steps, uniformly
    random actions, the same replay writes (the NEXT_STEP reset rows skipped); no network."""
    t0, c0 = time.perf_counter(), time.process_time()
    env = make_env(env_id, 1, mode)
    d, A = env.single_observation_space.shape[0], int(env.single_action_space.n)
    rng = np.random.default_rng(seed)
    rb = Replay(cfg["buffer_size"], d)
    freq = cfg["train_freq"]
    n = -(-cfg["total"] // freq) * freq
    actions = rng.integers(0, A, n)
    obs, _ = env.reset(seed=seed)
    prev_done = False
    for t in range(n):
        a = int(actions[t])
        nxt, r, term, trunc, _ = env.step(np.array([a]))
        if not prev_done:
            rb.add(obs[0], nxt[0], a, float(r[0]), bool(term[0]))
        prev_done, obs = bool(term[0] or trunc[0]), nxt
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return {"train_s": wall, "cpu_s": cpu, "steps": n}


def gemm_floor(cfg: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The run's network passes alone: per training round, the target network over the
    round's sampled rows (in 1,024-row chunks, as ``targets``), then ``gradient_steps`` forward
    and backward passes of ``batch_size`` rows (``QNet``: the matrix products and the ReLUs'
    masks), on random data, with no env, replay, loss or optimizer: the floor of any
    implementation that runs these products through this BLAS (the compiled loop's, too)."""
    B, G, F_ = cfg["batch_size"], cfg["gradient_steps"], cfg["train_freq"]
    n_iter = -(-cfg["total"] // F_)
    rounds = sum(1 for i in range(1, n_iter + 1) if i * F_ > cfg["learning_starts"])
    rng = np.random.default_rng(seed)
    net = QNet(4, 2, cfg["hidden"], B, seed)
    x1, xt = (np.ones((n, 5), F32) for n in (B, 1024))
    x1[:, :4], xt[:, :4] = rng.standard_normal((B, 4)), rng.standard_normal((1024, 4))
    dq = rng.standard_normal((B, 2)).astype(F32)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for _ in range(-(-G * B // 1024)):
            net.forward(xt, net.params)
        for _ in range(G):
            net.forward(x1)
            net.backward(x1, dq)
    return {"train_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "updates": rounds * G}
