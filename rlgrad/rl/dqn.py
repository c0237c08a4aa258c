"""Deep Q-Network as in DeepMind's DQN 3.0 (Mnih et al., 2015), with Double DQN as an option.

* replay buffer, uniform sampling; epsilon-greedy behaviour with epsilon linear from
  ``exploration_initial_eps`` to ``exploration_final_eps`` over ``exploration_fraction`` of training
  (SB3's convention: a fraction of the ``total_timesteps`` given to ``learn``), or over the first
  ``exploration_steps`` environment steps when that is set (DQN 3.0's and MinAtar's absolute
  schedule, the same whatever the run's length);
* a target network synchronised every ``target_update_interval`` environment steps: copied
  (``tau=1``) or Polyak-averaged (``tau<1``: ``target <- tau * online + (1 - tau) * target``;
  ``tau`` is SB3's name for the Polyak coefficient);
* the Huber loss of the TD error ``Q(s, a) - y`` with ``delta = clip_delta``, whose gradient is the
  TD error clipped to ``[-clip_delta, clip_delta]``, as DQN 3.0's ``delta:clamp(-1, 1)`` did
  (SB3's ``smooth_l1_loss`` is the case ``clip_delta=1``);
* Double DQN (van Hasselt et al., 2016): the online network picks ``argmax_a Q(s', a)``, the
  target network evaluates it.

A variant overrides the hooks, each documented below, and inherits the rest (replay, exploration,
target sync, the compiled gradient step, checkpoints): ``make_q_net`` (the network),
``q_values`` (acting; ``q_of`` the same from the network's output in engine operations),
``bootstrap_target`` (the target of each transition from the networks' outputs at s', written
once in engine operations; every way ``train`` computes targets calls it) and ``loss`` (the loss
on a batch against those targets; ``loss_of`` the same from the network's output, which
``compile_loop=True`` calls). ``target_path`` names the way
``train`` computes the targets. ``rlgrad.rl.QRDQN`` and ``rlgrad.rl.C51`` are such variants.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from rlgrad import nn, ops, optim
from rlgrad.nn import functional as F
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.envs import EnvLike, dict_has_images
from rlgrad.rl.finite import check_update
from rlgrad.rl.layers import CombinedExtractor, module_class
from rlgrad.rl.network_policy import attach
from rlgrad.rl.off_policy import OffPolicyAlgorithm, target_network, td_target_of
from rlgrad.rl.policies import cnn_trunk, mlp, mlp_numpy
from rlgrad.rl.schedules import ScheduleLike, linear_schedule
from rlgrad.rl.steps import step_with_grads
from rlgrad.typing import Array


def gather_actions(q: Any, actions: Any) -> Any:
    """``q[i, actions[i], ...]`` for every row ``i`` of ``q`` (batch, n_actions, ...); engine
    operations only, so ``actions`` may be a traced input of a compiled step. A one-hot select
    and sum (exact: the other terms are zeros), for a few actions cheaper than a gather and its
    scatter-add backward."""
    n, k, extra = q.shape[0], q.shape[1], (1,) * (len(q.shape) - 2)
    hit = ops.reshape(actions, (n, 1) + extra) == np.arange(k).reshape((k,) + extra)
    return ops.sum(ops.where(hit, q, 0.0), axis=1)


def stacked_rows(stacked: ReplayBatch, rows: slice) -> ReplayBatch:
    """Rows ``rows`` of every array of a stacked minibatch."""
    return ReplayBatch._make(None if part is None else part[rows] for part in stacked)


def bootstrap(b: dict[str, Any], v: Any) -> Any:
    """``r + gamma (1 - terminated) v`` on a ``batch_dict`` (arrays or traced), ``v`` one value
    per transition (batch,) or a row of them (batch, k), over which rewards broadcast; a row
    (1, k) gives every transition the same k values (C51's atoms)."""
    if len(v.shape) > 1:
        shape = (b["rewards"].shape[0],) + (1,) * (len(v.shape) - 1)
        b = {**b, "rewards": ops.reshape(b["rewards"], shape),
             "not_terminated": ops.reshape(b["not_terminated"], shape)}
        if len(b["gamma"].shape) == 1:  # a discount per row (n-step returns)
            b["gamma"] = ops.reshape(b["gamma"], shape)
    return td_target_of(b, v)


#: The values of ``DQN.target_path``.
TARGET_PATHS = ("stacked", "step", "batch")


class DQN(OffPolicyAlgorithm):
    action_spaces = (spaces.Discrete,)
    action_space: spaces.Discrete
    cnn_policy = True  # image observations: a CNN trunk (Nature / MinAtar) under the Q head
    dict_images = True  # Dict image entries: CombinedExtractor under the Q head
    trace_settings = ("clip_delta", "double_q")  # the Huber loss's delta; Double DQN's branch
    #: Where ``train`` computes the targets (``bootstrap_target``); the paths give the same
    #: numbers to float32 rounding (other matrix shapes, traced vs NumPy forwards).
    #: "stacked": those of all the minibatches of a ``train`` call in one NumPy pass before the
    #: steps, once per distinct transition (the target network is fixed during the call), or
    #: "step" when the call makes one step or the targets read the online network
    #: (``double_q``). "step": inside the compiled gradient step (``td_loss``). "batch": each
    #: minibatch's in NumPy before its step (``td_target``; for a hook that cannot be traced).
    target_path: ClassVar[str] = "stacked"

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 1e-4, buffer_size: int = 1_000_000,
                 learning_starts: int = 100, batch_size: int = 32, tau: float = 1.0,
                 gamma: float = 0.99, train_freq: Any = 4, gradient_steps: int = 1,
                 target_update_interval: int = 10_000, exploration_fraction: float = 0.1,
                 exploration_initial_eps: float = 1.0, exploration_final_eps: float = 0.05,
                 exploration_steps: int | None = None, max_grad_norm: float | None = 10.0,
                 clip_delta: float = 1.0, double_q: bool = False,
                 n_steps: int = 1, replay_buffer_class: str | None = None,
                 replay_buffer_kwargs: dict | None = None,
                 n_envs: int = 1, normalize: bool | dict = False,
                 policy_kwargs: dict | None = None, seed: int | None = None, verbose: int = 0,
                 compile_loop: bool = False, **env_options: Any) -> None:
        self.compile_loop = bool(compile_loop)
        if self.compile_loop and isinstance(env, str) and env_options.get("vectorization_mode") is None:
            env_options["vectorization_mode"] = "functional"  # the id's functional form
        super().__init__(env, learning_rate, buffer_size, learning_starts, batch_size, tau, gamma,
                         train_freq, gradient_steps, n_envs, normalize, policy_kwargs, seed,
                         verbose, n_steps=n_steps, replay_buffer_class=replay_buffer_class,
                         replay_buffer_kwargs=replay_buffer_kwargs, **env_options)
        self.target_update_interval = int(target_update_interval)
        if self.n_envs > self.target_update_interval:  # SB3's warning, word for word
            warnings.warn("The number of environments used is greater than the target network "
                          f"update interval ({self.n_envs} > {self.target_update_interval}), "
                          "therefore the target network will be updated after each call to "
                          f"env.step() which corresponds to {self.n_envs} steps.", stacklevel=3)
        self.exploration_schedule = linear_schedule(exploration_initial_eps,
                                                    exploration_final_eps, exploration_fraction)
        self.exploration_rate = float(exploration_initial_eps)
        self.exploration_steps = exploration_steps
        if exploration_steps is not None:  # absolute: progress over exploration_steps, not the run
            self.exploration_schedule = linear_schedule(exploration_initial_eps,
                                                        exploration_final_eps, 1.0)
        self.max_grad_norm = max_grad_norm
        self.clip_delta = float(clip_delta)
        self.double_q = bool(double_q)
        self.n_actions = int(self.action_space.n)
        self.q_net = self.network_policy(self.make_q_net())
        self.q_net_target = target_network(self.q_net)
        self._params = list(self.q_net.parameters())
        self._target_params = list(self.q_net_target.parameters())  # cached: synced often
        self.optimizer = self.make_optimizer(self._params)
        self._check_compile_loop()

    def _check_compile_loop(self) -> None:
        """compile_loop=True: refused in one line unless the env is functional and the setup
        one the compiled loop runs (``rlgrad.rl.compiled_loop.dqn``)."""
        if self.compile_loop:
            from rlgrad.rl.compiled_loop.dqn import dqn_spec

            dqn_spec(self)

    # ---- hooks a variant overrides --------------------------------------------------------------
    def make_q_net(self) -> nn.Module:
        """The online network, ``obs -> (batch, n_actions)`` (the target network is a copy).

        ``policy_kwargs``: ``net_arch`` (hidden sizes, [64, 64]; with a CNN, [] as in SB3) and
        ``activation_fn`` ("relu"); with a CNN also ``features_dim`` and ``normalize_images``.
        """
        return self.q_network(self.n_actions)

    def network_policy(self, net: nn.Module) -> nn.Module:
        """``net`` predicting on its own too (SB3's ``QNetwork.predict``, ``save``, ``load``):
        the greedy action of its output."""
        return attach(net, self.observation_space, self.action_space)

    def q_network(self, n_out: int, **defaults: Any) -> nn.Module:
        """An MLP ``obs -> n_out`` on vector observations; on images (``CnnPolicy``) the CNN trunk
        (``policies.cnn_trunk``: Nature CNN for 84x84, MinAtar's for 10x10) then the MLP head.
        ``defaults``: a variant's own ``policy_kwargs`` keys (read by the variant)."""
        cnn = self.policy_name == "CnnPolicy"
        space = self.observation_space
        multi = isinstance(space, spaces.Dict) and dict_has_images(space)  # on the flat rows
        extra = {"features_dim": None, "normalize_images": None} if cnn else {}
        kw = self.net_kwargs(net_arch=None, activation_fn="relu", features_extractor_class=None,
                             features_extractor_kwargs=None, **defaults, **extra)
        arch = kw["net_arch"] if kw["net_arch"] is not None else ([] if cnn else [64, 64])
        if kw["features_extractor_class"] is not None:  # SB3's: the user's extractor, then the MLP
            ext = module_class(kw["features_extractor_class"], "features_extractor_class")(
                space, **(kw["features_extractor_kwargs"] or {}))
            return nn.Sequential(ext, *mlp([ext.features_dim, *arch, n_out], kw["activation_fn"]))
        if multi:
            assert isinstance(space, spaces.Dict)  # (multi says so; for the type checker)
            ext = CombinedExtractor(space, **(kw["features_extractor_kwargs"] or {}))
            return nn.Sequential(ext, *mlp([ext.features_dim, *arch, n_out], kw["activation_fn"]))
        if not cnn:
            return mlp([self.obs_dim, *arch, n_out], kw["activation_fn"])
        # SB3's features_extractor_kwargs=dict(features_dim=...) or rlgrad's features_dim
        dim = (kw["features_extractor_kwargs"] or {}).get("features_dim", kw["features_dim"])
        trunk = cnn_trunk(self.observation_space, dim, kw["normalize_images"])
        return nn.Sequential(trunk, *mlp([trunk.features_dim, *arch, n_out], kw["activation_fn"]))

    def q_values(self, obs: np.ndarray, net: nn.Module | None = None) -> np.ndarray:
        """Q(s, .) of ``net`` (the online network by default) in NumPy, shape (batch, n_actions):
        what acting takes the argmax of."""
        return mlp_numpy(self.q_net if net is None else net, obs)

    def bootstrap_target(self, b: dict[str, Any], target_out: Any,
                         online_out: Callable[[], Any]) -> Any:
        """The target ``loss`` regresses onto, for each transition of ``b`` (a ``batch_dict``;
        read ``rewards``, ``not_terminated``, ``gamma``), from the networks' outputs at s':
        ``target_out`` the target network's, ``online_out()`` the online network's (computed
        when called; read only with ``double_q``). Engine operations on arrays or traced Tensors
        alike: every ``target_path`` calls it. DQN's: ``r + gamma (1 - terminated) max_a
        Q'(s', a)``, for Double DQN ``Q'(s', argmax_a Q(s', a))``; shape (batch,)."""
        if self.double_q:
            v = gather_actions(target_out, ops.argmax(online_out(), axis=1))
        else:
            v = ops.max(target_out, axis=1)
        return bootstrap(b, v)

    def q_of(self, out: Array) -> Array:
        """Q(s, .) (batch, n_actions) from the Q-network's output rows ``out``, in engine
        operations (``q_values``'s value; the compiled loop acts on it). DQN's: ``out``."""
        return out

    def loss(self, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The training loss on ``batch`` = {"obs", "actions", "target"}: the Huber loss
        (delta = ``clip_delta``) of ``Q(s, a) - y``. Returns (loss, statistics to log), as every
        algorithm's ``loss``; run eagerly or compiled by ``train``."""
        return self.loss_of(self.q_net(batch["obs"]), batch), {}

    def loss_of(self, out: Array, batch: dict[str, Any]) -> Array:
        """``loss``'s value from the online network's output ``out`` at ``batch["obs"]`` (engine
        operations: the compiled loop calls it on its own forward pass)."""
        return F.huber_loss(gather_actions(out, batch["actions"]), batch["target"],
                            delta=self.clip_delta)

    def td_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``loss`` with the target computed in the step from a ``batch_dict`` ("step")."""
        x = b["next_obs"]
        y = self.bootstrap_target(b, self.q_net_target(x), lambda: self.q_net(x))
        return self.loss({"obs": b["obs"], "actions": b["actions"],
                          "target": ops.stop_gradient(y)})

    # ---- acting -------------------------------------------------------------------------------
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        greedy = self.q_values(obs).argmax(axis=1)
        if deterministic:
            return greedy
        return self._epsilon_greedy(obs, greedy)

    def _epsilon_greedy(self, obs: np.ndarray, greedy: np.ndarray | None = None) -> np.ndarray:
        n, eps, rng = len(obs), self.exploration_rate, self.rng
        if n == 1:  # the same draws as below (random() is random(1)'s one double), as scalars
            if rng.random() < eps:
                return rng.integers(0, self.n_actions, n)
            return greedy if greedy is not None else self.q_values(obs).argmax(axis=1)
        explore = rng.random(n) < eps
        if explore.all():  # skip the forward pass when every env explores
            return rng.integers(0, self.n_actions, n)
        if greedy is None:
            greedy = self.q_values(obs).argmax(axis=1)
        if explore.any():
            greedy = np.where(explore, rng.integers(0, self.n_actions, n), greedy)
        return greedy

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        return self._epsilon_greedy(obs)

    def _on_step(self) -> None:
        self._n_calls += 1
        if self._n_calls % max(self.target_update_interval // self.n_envs, 1) == 0:
            optim.polyak_update(self._params, self._target_params, self.tau)
            self._sync_running_stats((self.q_net, self.q_net_target))
        progress = self._current_progress_remaining if self.exploration_steps is None else \
            max(0.0, 1.0 - self.num_timesteps / self.exploration_steps)
        self.exploration_rate = self.exploration_schedule(progress)

    # ---- learning -------------------------------------------------------------------------------
    def _iteration(self, callback: BaseCallback | None) -> bool:
        if not self.compile_loop:
            return super()._iteration(callback)
        if callback is not None:
            raise ValueError(f"{type(self).__name__}(compile_loop=True) runs the whole training "
                             "as one program and calls no callback: pass callback=None, or "
                             "leave compile_loop False")
        self.learn_compiled_loop([self], self._total_timesteps - self.num_timesteps)
        self.logger.dump(self.num_timesteps)
        return True

    @staticmethod
    def learn_compiled_loop(models: Sequence[DQN], total_timesteps: int) -> None:
        """``models`` (one per seed, built alike with ``compile_loop=True``) trained for
        ``total_timesteps`` more steps each as one program (``compiled_loop.learn_compiled``
        and ``train_seeds`` call it for DQN)."""
        from rlgrad.rl.compiled_loop.dqn import learn_compiled_dqn

        learn_compiled_dqn(models, total_timesteps)

    def td_target(self, b: ReplayBatch) -> np.ndarray:
        """``bootstrap_target`` of a minibatch in NumPy (no graph): the "batch" path."""
        return self._numpy_target(self.batch_dict(b))

    def _numpy_target(self, d: dict[str, Any]) -> np.ndarray:
        x = d["next_obs"]
        y = self.bootstrap_target(d, mlp_numpy(self.q_net_target, x),
                                  lambda: mlp_numpy(self.q_net, x))
        return np.asarray(y, dtype=np.float32)

    def train_target_path(self, gradient_steps: int) -> str:
        """The path a ``train`` call of ``gradient_steps`` steps takes: ``target_path``, with
        "stacked" turned into "step" when it would not pay or not hold (see ``target_path``)."""
        if self.target_path not in TARGET_PATHS:
            raise ValueError(f"{type(self).__name__}.target_path is {self.target_path!r}; "
                             f"set one of {', '.join(TARGET_PATHS)}")
        if self.target_path == "stacked" and (self.double_q or gradient_steps == 1
                                              or self._sb3_rows is not None):
            return "step"  # (SB3's buffer classes: relabelled rows, per-row discounts)
        return self.target_path

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """``gradient_steps`` updates on minibatches drawn at once, their targets computed
        where ``train_target_path`` says."""
        self._set_lr(self.optimizer)
        losses = np.empty(gradient_steps)
        # All the minibatches in one draw (the same rows as drawing them one by one), stacked.
        stacked, idx = self.sample_many(gradient_steps, batch_size)
        path = self.train_target_path(gradient_steps)
        targets = None
        if path == "stacked":
            y = self._stacked_targets(stacked, idx)
            targets = y.reshape((gradient_steps, batch_size) + y.shape[1:])
        in_step = path == "step"
        step, params = self.compiled_step("td_loss" if in_step else "loss",
                                          self.td_loss if in_step else self.loss, [self.optimizer])
        for i in range(gradient_steps):
            rows = slice(i * batch_size, (i + 1) * batch_size)
            if in_step:
                batch = self.batch_dict(stacked_rows(stacked, rows))
            else:  # slice only what the step reads
                y = targets[i] if targets is not None else \
                    self.td_target(stacked_rows(stacked, rows))
                batch = {"obs": stacked.observations[rows], "actions": stacked.actions[rows],
                         "target": y}
            loss, _, grads = step(batch)
            check_update({"loss": loss})
            step_with_grads((self.optimizer,), params, grads, self.max_grad_norm)
            losses[i] = loss
        self._n_updates += gradient_steps
        self.logger.record("train/loss", float(losses.mean()))
        self.logger.record("train/n_updates", self._n_updates)
        self.logger.record("rollout/exploration_rate", self.exploration_rate)

    _TARGET_CHUNK = 1024

    def _stacked_targets(self, b: ReplayBatch, idx: np.ndarray) -> np.ndarray:
        """``td_target`` of the stacked minibatches (``idx``: the buffer rows drawn), computed
        once per distinct transition (a draw of 8,192 from a young buffer repeats many) and in
        chunks of ``_TARGET_CHUNK`` rows, whose activations stay in cache: ~30% faster than one
        product over the whole stack (the last chunk overlaps the one before to keep its size).
        Small stacks take ``td_target`` directly."""
        C = self._TARGET_CHUNK
        if len(idx) < 2 * C:
            return self.td_target(b)
        d = self.batch_dict(b)
        uniq, first, inverse = np.unique(idx, return_index=True, return_inverse=True)
        repeats = len(uniq) < len(idx)
        rows = {k: d[k][first] if repeats else d[k] for k in ("next_obs", "rewards",
                                                               "not_terminated")}
        n = len(rows["rewards"])
        if n < C:  # pad: every product has C rows
            rows = {k: np.concatenate([v, np.repeat(v[:1], C - n, axis=0)]) for k, v in rows.items()}
        starts = [min(a, len(rows["rewards"]) - C) for a in range(0, len(rows["rewards"]), C)]
        chunks = [(a, self._numpy_target({**{k: v[a:a + C] for k, v in rows.items()},
                                          "gamma": d["gamma"]})) for a in starts]
        y = np.empty((len(rows["rewards"]),) + chunks[0][1].shape[1:], np.float32)
        for a, chunk in chunks:
            y[a:a + C] = chunk
        return y[:n][inverse] if repeats else y

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

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        # checkpoints written when the MLP sat inside a QNetwork ("q_net.0.weight")
        mods = state.get("modules", {})
        if any(k.startswith("q_net.") for m in mods.values() for k in m):
            mods = {name: {k.removeprefix("q_net."): v for k, v in m.items()}
                    for name, m in mods.items()}
            state = {**state, "modules": mods}
        return state
