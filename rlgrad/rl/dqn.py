"""Deep Q-Network as in DeepMind's DQN 3.0 (Mnih et al., 2015), with Double DQN as an option.

* replay buffer, uniform sampling; epsilon-greedy behaviour with epsilon linear from
  ``exploration_initial_eps`` to ``exploration_final_eps`` over ``exploration_fraction`` of training;
* a target network synchronised every ``target_update_interval`` environment steps (``tau=1``)
  or Polyak-averaged (``tau<1``);
* the TD error ``Q(s, a) - y`` clipped to ``[-clip_delta, clip_delta]`` in the backward pass, as
  DQN 3.0's ``delta:clamp(-clip_delta, clip_delta)`` did: exactly the gradient of the Huber loss
  with ``delta = clip_delta``, which is the loss minimised here;
* Double DQN (van Hasselt et al., 2016): the online network picks ``argmax_a Q(s', a)``, the
  target network evaluates it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlgrad
from rlgrad import autograd, optim
from rlgrad.nn import functional as F
from rlgrad.ops import take_along_axis
from rlgrad.rl.base import constructor_hyperparams, linear_schedule, set_grads
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.fused import FusedMLP, Layer, clip_and_install, flat_gradients, mlp_forward, mlp_layers
from rlgrad.rl.off_policy import OffPolicyAlgorithm
from rlgrad.rl.policies import QNetwork


class FusedQStep:
    """DQN's gradient step for an MLP Q-network written out in NumPy (``rlgrad.rl.fused``): the
    forward pass, Q(s, a), the Huber TD loss (its gradient: the TD error clipped to +-delta, over
    the batch size) and the backward pass, on buffers allocated once for a batch size, with the
    operations of the compiled engine step (the same bits)."""

    def __init__(self, layers: list[Layer], batch_size: int, delta: float) -> None:
        self.mlp = FusedMLP(layers, batch_size)
        self.batch_size = int(batch_size)
        dtype = layers[0][0].data.dtype
        self.rows = np.arange(self.batch_size)
        self.eye = np.eye(layers[-1][0].shape[0], dtype=dtype)
        self.scale = dtype.type(1.0 / self.batch_size)  # the mean's 1/B, as the engine has it
        self.delta = float(delta)

    def __call__(self, obs: np.ndarray, actions: np.ndarray, target: np.ndarray,
                 grads: list[np.ndarray]) -> np.ndarray:
        """Write d loss / d (weight, bias) of every layer, in order, into ``grads``; return the
        TD errors ``Q(s, a) - y`` (the loss is the mean Huber of them)."""
        mlp = self.mlp
        td = mlp.forward(obs)[self.rows, actions] - target
        g = np.minimum(np.maximum(td, -self.delta), self.delta) * self.scale  # np.clip's values
        np.multiply(self.eye[actions], g[:, None], out=mlp.grad_out)  # d loss / d Q(s, .)
        mlp.backward(obs, grads)
        return td


def huber_means(td: np.ndarray, delta: float) -> np.ndarray:
    """The mean Huber loss of each row of TD errors (``F.huber_loss``'s arithmetic)."""
    a = np.abs(td)
    loss = np.where(a < delta, 0.5 * td * td, delta * (a - 0.5 * delta))
    return np.add.reduce(loss, axis=-1) / td.shape[-1]


class DQN(OffPolicyAlgorithm):
    def __init__(self, env: EnvLike, learning_rate: Any = 1e-4, buffer_size: int = 1_000_000,
                 learning_starts: int = 100, batch_size: int = 32, tau: float = 1.0,
                 gamma: float = 0.99, train_freq: Any = 4, gradient_steps: int = 1,
                 target_update_interval: int = 10_000, exploration_fraction: float = 0.1,
                 exploration_initial_eps: float = 1.0, exploration_final_eps: float = 0.05,
                 max_grad_norm: float | None = 10.0, clip_delta: float = 1.0,
                 double_q: bool = False, n_envs: int = 1, normalize: bool | dict = False,
                 policy_kwargs: dict | None = None, seed: int | None = 0, verbose: int = 0,
                 **env_options: Any) -> None:
        self._hyperparams = constructor_hyperparams(locals())
        super().__init__(env, learning_rate, buffer_size, learning_starts, batch_size, tau, gamma,
                         train_freq, gradient_steps, n_envs, normalize, policy_kwargs, seed,
                         verbose, continuous=False, **env_options)
        self.target_update_interval = int(target_update_interval)
        self.exploration_schedule = linear_schedule(exploration_initial_eps,
                                                    exploration_final_eps, exploration_fraction)
        self.exploration_rate = float(exploration_initial_eps)
        self.max_grad_norm = max_grad_norm
        self.clip_delta = float(clip_delta)
        self.double_q = bool(double_q)
        self.q_net = QNetwork(self.observation_space, self.action_space, **self.policy_kwargs)
        self.q_net_target = QNetwork(self.observation_space, self.action_space,
                                     **self.policy_kwargs)
        optim.hard_update(self.q_net_target, self.q_net)
        self.q_net_target.requires_grad_(False)
        self._params = list(self.q_net.parameters())
        self._target_params = list(self.q_net_target.parameters())  # cached: synced often
        self.optimizer = optim.Adam(self._params, lr=self.lr_schedule(1.0))
        self.n_actions = int(self.action_space.n)
        self._eye = np.eye(self.n_actions, dtype=np.float32)
        self._step_fn: Any = None  # the compiled gradient step, built on first use
        #: the gradient step written out in NumPy (FusedQStep) for MLP Q-networks; False: always
        #: the compiled engine step
        self.fused_update = True
        self._layers: list[Layer] | None = None
        self._target_layers: list[Layer] | None = None
        self._not_mlp = False
        self._fused_step: FusedQStep | None = None
        self._grad_cache: dict[str, Any] = {}

    # ---- acting -------------------------------------------------------------------------------
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        greedy = self._q_values(obs).argmax(axis=1)
        if deterministic:
            return greedy
        return self._epsilon_greedy(obs, greedy)

    def _q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(obs, .) in NumPy, as ``q_net.q_numpy`` computes it (the same operations), without
        walking the modules when the network is a plain MLP (once per environment step)."""
        layers = self._mlp_layers()
        if layers is None:
            return self.q_net.q_numpy(obs)
        h = obs
        for w, b, act in layers:
            h = h @ w.data.T
            h += b.data
            if act == "relu":
                np.maximum(h, 0, out=h)
            elif act == "tanh":
                h = np.tanh(h)
        return h

    def _epsilon_greedy(self, obs: np.ndarray, greedy: np.ndarray | None = None) -> np.ndarray:
        n, eps, rng = len(obs), self.exploration_rate, self.rng
        explore = rng.random(n) < eps
        if n == 1:  # the same draws as below, without the reductions over one element
            if explore[0]:
                return rng.integers(0, self.n_actions, n)
            return greedy if greedy is not None else self._q_values(obs).argmax(axis=1)
        if explore.all():  # skip the forward pass when every env explores
            return rng.integers(0, self.n_actions, n)
        if greedy is None:
            greedy = self._q_values(obs).argmax(axis=1)
        if explore.any():
            greedy = np.where(explore, rng.integers(0, self.n_actions, n), greedy)
        return greedy

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        return self._epsilon_greedy(obs)

    def _on_step(self) -> None:
        self._n_calls += 1
        if self._n_calls % max(self.target_update_interval // self.n_envs, 1) == 0:
            optim.polyak_update(self._params, self._target_params, self.tau)
        self.exploration_rate = self.exploration_schedule(self._current_progress_remaining)

    # ---- learning -------------------------------------------------------------------------------
    def td_target(self, b: Any) -> np.ndarray:
        """y = r + gamma * (1 - terminated) * Q_target(s', a*), a* greedy (online net if double_q)."""
        q_next = self.q_net_target.q_numpy(b.next_observations)
        if self.double_q:
            a_star = self.q_net.q_numpy(b.next_observations).argmax(axis=1)
            q_next = q_next[np.arange(len(a_star)), a_star]
        else:
            q_next = q_next.max(axis=1)
        not_term = 1.0 - b.terminated.astype(np.float32)
        return (b.rewards + self.gamma * not_term * q_next).astype(np.float32)

    def loss(self, b: Any, target: np.ndarray | None = None) -> Any:
        """Huber(Q(s, a) - y; delta = clip_delta): its gradient is the TD error clipped to +-delta."""
        if target is None:
            target = self.td_target(b)
        q = self.q_net(b.observations)
        q_a = take_along_axis(q, b.actions[:, None], 1).reshape(-1)
        return F.huber_loss(q_a, target, delta=self.clip_delta), q_a

    def train(self, gradient_steps: int, batch_size: int) -> None:
        self._set_lr(self.optimizer)
        b, idx = self.sample_many(gradient_steps, batch_size)
        targets = None
        if not self.double_q:
            # The target network only changes between calls to train() (it is synced from
            # _on_step): the targets of all the minibatches are one forward pass.
            targets = self._all_targets(b, idx)
        if self._use_fused():
            losses = self._train_fused(b, targets, gradient_steps, batch_size)
        else:
            losses = self._train_compiled(b, targets, gradient_steps, batch_size)
        self._n_updates += gradient_steps
        self.logger.record("train/loss", float(losses.mean()))
        self.logger.record("train/n_updates", self._n_updates)
        self.logger.record("rollout/exploration_rate", self.exploration_rate)

    def _mlp_layers(self) -> list[Layer] | None:
        """The online network's layers when the Q-networks are plain MLPs (ReLU/Tanh), else
        None; the target network's are then in ``_target_layers``."""
        if self._layers is None and not self._not_mlp:
            layers = mlp_layers(self.q_net.q_net)
            target = mlp_layers(self.q_net_target.q_net)
            if layers is None or target is None or \
                    [p for w, b, _ in layers for p in (w, b)] != self._params:
                self._not_mlp = True
            else:
                self._layers, self._target_layers = layers, target
        return self._layers

    def _use_fused(self) -> bool:
        """Whether train() runs the NumPy step (``fused_update``, an MLP, this class's loss)."""
        return (self.fused_update and type(self).loss is DQN.loss
                and type(self).td_target is DQN.td_target and self._mlp_layers() is not None)

    def _all_targets(self, b: ReplayBatch, idx: np.ndarray) -> np.ndarray:
        """``td_target`` of the stacked minibatches (without double Q). For an MLP and a large
        stack the target network runs once per distinct transition drawn, in cache-sized chunks
        (``mlp_forward``): the same bits as ``td_target``'s one product over the whole stack,
        which OpenBLAS computes with the same kernels from ~1,000 rows on (below, its
        small-matrix kernels round otherwise: ``td_target`` itself then)."""
        if type(self).td_target is not DQN.td_target or self._mlp_layers() is None \
                or len(idx) < 2048:
            return self.td_target(b)
        uniq, first, inverse = np.unique(idx, return_index=True, return_inverse=True)
        if len(uniq) < len(idx):
            q_next = mlp_forward(self._target_layers, b.next_observations[first])[inverse]
        else:
            q_next = mlp_forward(self._target_layers, b.next_observations)
        not_term = 1.0 - b.terminated.astype(np.float32)
        return (b.rewards + self.gamma * not_term * q_next.max(axis=1)).astype(np.float32)

    def _train_fused(self, b: ReplayBatch, targets: np.ndarray | None, gradient_steps: int,
                     batch_size: int) -> np.ndarray:
        B = batch_size
        step = self._fused_step
        if step is None or step.batch_size != B:
            step = self._fused_step = FusedQStep(self._layers, B, self.clip_delta)
        # gradients go straight into the optimizer's flat gradient array (no gather in step())
        flat_grad, views, grad_tensors = flat_gradients(self.optimizer, self._params,
                                                        self._grad_cache)
        step.mlp.forget()  # the array may have been written by others since the last train()
        tds = np.empty((gradient_steps, B), flat_grad.dtype)
        max_norm, params, opt = self.max_grad_norm, self._params, self.optimizer
        for i in range(gradient_steps):
            sl = slice(i * B, (i + 1) * B)
            if targets is not None:
                y = targets[sl]
            else:  # double Q: the online network as it is now picks a*
                y = self.td_target(ReplayBatch(*(a[sl] for a in b)))
            tds[i] = step(b.observations[sl], b.actions[sl], y, views)
            clip_and_install(params, flat_grad, views, grad_tensors, max_norm)
            opt.step()
        return huber_means(tds, self.clip_delta).astype(np.float64)

    def _train_compiled(self, b: ReplayBatch, targets: np.ndarray | None, gradient_steps: int,
                        batch_size: int) -> np.ndarray:
        """The gradient step as an ``rlgrad.jit``-compiled program of the engine's operations
        (any Q-network; the reference the NumPy step is tested against)."""
        losses = np.empty(gradient_steps)
        B = batch_size
        if self._step_fn is None:
            params, q_net, delta = self._params, self.q_net, self.clip_delta

            def step(obs: Any, onehot: Any, target: Any) -> Any:
                # Q(s, a) picked by a one-hot product: the same value as take_along_axis
                q_a = (q_net(obs) * onehot).sum(-1)
                loss = F.huber_loss(q_a, target, delta=delta)
                return loss, autograd.grad(loss, params)

            # forward and backward compiled once into straight-line NumPy (fixed batch shape)
            self._step_fn = rlgrad.jit(step)
        eye = self._eye
        for i in range(gradient_steps):
            sl = slice(i * B, (i + 1) * B)
            bi = ReplayBatch(*(a[sl] for a in b))
            target = targets[sl] if targets is not None else self.td_target(bi)
            loss, grads = self._step_fn(bi.observations, eye[bi.actions], target)
            set_grads(self._params, grads, self.max_grad_norm)
            self.optimizer.step()
            losses[i] = loss
        return losses

    def _modules(self) -> dict[str, Any]:
        return {"q_net": self.q_net, "q_net_target": self.q_net_target}

    def _optimizers(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer}

    def _extra_state(self) -> dict[str, Any]:
        out = super()._extra_state()
        out["dqn"] = {"exploration_rate": self.exploration_rate}
        return out

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        super()._set_extra_state(state)
        self.exploration_rate = float(state.get("dqn", {}).get("exploration_rate", 1.0))
