"""The off-policy loop shared by DQN, DDPG, TD3 and SAC: act (with exploration), store real
transitions in the replay buffer, and every ``train_freq`` steps (or episodes) run
``gradient_steps`` updates on uniformly sampled minibatches.

Box actions are handled in the policy's space [-1, 1] (what the buffer stores and the networks
output) and rescaled to the environment's bounds only when stepping it, as Stable-Baselines3 does.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import IO, Any, ClassVar, cast

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import ops
from rlgrad.device import device as cpu_device
from rlgrad.nn import Module, StateDictError
from rlgrad.nn.module import _state_value
from rlgrad.rl.base import BaseAlgorithm
from rlgrad.rl.buffers import ReplayBatch, ReplayBuffer
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.common.save_util import PathOrFile
from rlgrad.rl.common.save_util_model import (
    read_archive,
    resolve_saved,
    state_bytes,
    state_from_bytes,
)
from rlgrad.rl.envs import EnvLike, frame_stacked, is_image_space, preprocess_obs
from rlgrad.rl.finite import check_update
from rlgrad.rl.frame_replay import FrameReplayBuffer
from rlgrad.rl.layers import STATEFUL_LAYERS, copy_running_stats, offpolicy_extractor
from rlgrad.rl.policies import SB3PolicyMethods, predict_with
from rlgrad.rl.sb3_args import existing_checkpoint, unwrap_compiled, with_extension
from rlgrad.rl.sb3_storage import (
    Sb3Rows,
    default_buffer_options,
    n_step_buffer,
    sb3_batch,
    sb3_replay_buffer,
)
from rlgrad.rl.schedules import ScheduleLike
from rlgrad.rl.steps import grad_step, optimized_params, same_params, step_with_grads
from rlgrad.tensor import Tensor
from rlgrad.typing import DeviceLike


class NormalActionNoise:
    """Gaussian exploration noise N(0, sigma^2) in the [-1, 1] action space."""

    def __init__(self, sigma: np.ndarray) -> None:
        self.sigma = np.asarray(sigma, dtype=np.float32)

    def __call__(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return (self.sigma * rng.standard_normal((n, *self.sigma.shape))).astype(np.float32)

    def reset(self, rows: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class OrnsteinUhlenbeckActionNoise(NormalActionNoise):
    """Temporally correlated noise: x += theta (mu - x) dt + sigma sqrt(dt) N(0, 1), reset per episode."""

    def __init__(self, sigma: np.ndarray, n_envs: int, theta: float = 0.15, dt: float = 1e-2) -> None:
        super().__init__(sigma)
        self.theta, self.dt = theta, dt
        self.x = np.zeros((n_envs, *self.sigma.shape), dtype=np.float32)

    def __call__(self, rng: np.random.Generator, n: int) -> np.ndarray:
        self.x = (self.x - self.theta * self.x * self.dt + self.sigma * np.sqrt(self.dt)
                  * rng.standard_normal(self.x.shape)).astype(np.float32)
        return self.x

    def reset(self, rows: np.ndarray) -> None:
        self.x[rows] = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x = np.array(state["x"], dtype=np.float32)


def make_action_noise(noise_type: str | None, noise_std: float, act_dim: int, n_envs: int
                      ) -> NormalActionNoise | None:
    if noise_type is None or noise_std == 0:
        return None
    sigma = np.full(act_dim, noise_std, dtype=np.float32)
    if noise_type == "normal":
        return NormalActionNoise(sigma)
    if noise_type == "ornstein-uhlenbeck":
        return OrnsteinUhlenbeckActionNoise(sigma, n_envs)
    raise ValueError(f"noise_type must be 'normal', 'ornstein-uhlenbeck' or None, got {noise_type!r}")


def target_network(net: Module) -> Module:
    """A frozen copy of ``net`` (the target network), kept in step by ``optim.polyak_update``."""
    return target_networks(net)[0]


def target_networks(*nets: Module) -> tuple[Module, ...]:
    """Frozen copies of ``nets`` made together: a module they share (TD3's actor and critic
    with ``share_features_extractor``) is shared by the copies too, as in SB3."""
    return tuple(n.requires_grad_(False) for n in copy.deepcopy(nets))


def min_of(qs: list[Any]) -> Any:
    """The elementwise minimum of the critics' estimates (clipped double Q)."""
    out = qs[0]
    for q in qs[1:]:
        out = ops.minimum(out, q)
    return out


def td_target_of(b: dict[str, Any], next_values: Any) -> Any:
    """``r + gamma (1 - terminated) next_values`` on a ``batch_dict`` (traced or not)."""
    return b["rewards"] + b["gamma"] * b["not_terminated"] * next_values


def _unpermuted(value: Any, rows: np.ndarray) -> np.ndarray:
    """``value`` (SB3's rows: ``rows`` of ours, in its order) in rlgrad's row order."""
    arr = np.asarray(_state_value(value))
    if arr.shape[:1] != rows.shape:  # (the network's load refuses the shape in one line)
        return arr
    out = np.empty_like(arr)
    out[rows] = arr
    return out


class PolicyView:
    """``model.policy`` of an off-policy algorithm: SB3's ``policy.predict`` (observations as
    the networks see them: ``normalize=True`` statistics not applied, as SB3's policy does not
    apply VecNormalize's); other attributes are the algorithm's networks (``q_net``, ``actor``,
    ``critic``, ...)."""

    def __init__(self, algo: OffPolicyAlgorithm) -> None:
        self._algo = algo

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        algo = self._algo
        return predict_with(algo.observation_space, observation,
                            lambda x: algo._predict(x, deterministic))

    def parameters(self) -> Iterator[Any]:
        """Every parameter of the algorithm's networks (SB3's policy holds them all), once each
        (a features extractor the actor and critic share is one set)."""
        seen: set[int] = set()
        for module in self._algo._modules().values():
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def _key_map(self) -> dict[str, tuple[Module, str, np.ndarray | None]]:
        """SB3's policy key of every entry of the networks' state dicts -> (network, its own
        key, the rows of SB3's value in its order or None), in SB3's order:
        ``actor.mu.0.weight``, ``critic.qf0.0.weight``...; a Q-network (sb3-contrib's QR-DQN:
        ``quantile_net``) splits into SB3's ``features_extractor`` (the CNN, a Dict's or a
        user's extractor) and its MLP (``q_net.q_net.0.weight``)."""
        mods = self._algo._modules()
        if "q_net" not in mods:
            return {f"{n}.{k}": (mods[n], k, None) for n in ("actor", "actor_target", "critic",
                                                             "critic_target") if n in mods
                    for k in mods[n].state_dict()}
        name = getattr(self._algo, "sb3_q_net_name", "q_net")
        rows_of = getattr(self._algo, "sb3_rows", lambda net, key: None)
        out: dict[str, tuple[Module, str, np.ndarray | None]] = {}
        for attr, prefix in (("q_net", name), ("q_net_target", f"{name}_target")):
            net = mods[attr]
            split = getattr(net, "features_extractor", None) is not None
            for k in net.state_dict():
                i, rest = k.split(".", 1)
                entry = (net, k, rows_of(net, k))
                if not split:
                    out[f"{prefix}.{name}.{k}"] = entry
                elif i == "0":
                    out[f"{prefix}.features_extractor.{rest}"] = entry
                else:
                    out[f"{prefix}.{name}.{int(i) - 1}.{rest}"] = entry
        return out

    def _old_prefixes(self) -> dict[str, Module]:
        """The policy keys rlgrad wrote before SB3's Q-network layout (``q_net.q_net.0.cnn.0.weight``,
        QR-DQN's ``q_net.*``): the networks' own keys after the prefix (still read)."""
        mods = self._algo._modules()
        if "q_net" not in mods:
            return {}
        return {"q_net.q_net.": mods["q_net"], "q_net_target.q_net.": mods["q_net_target"]}

    def state_dict(self) -> dict[str, Any]:
        """The networks' parameters with SB3's policy keys (``actor.mu.0.weight``,
        ``critic.qf0.0.weight``, ``q_net.q_net.0.weight``, ``q_net.features_extractor.cnn.0.weight``,
        QR-DQN's ``quantile_net.quantile_net.0.weight``...). The values share the parameters'
        memory, except a permuted copy where SB3's rows are in another order (``sb3_rows``)."""
        states = {id(m): m.state_dict() for m in self._algo._modules().values()}
        return {key: states[id(m)][k] if rows is None else
                rlgrad.as_tensor(states[id(m)][k].numpy()[rows])
                for key, (m, k, rows) in self._key_map().items()}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        """``state_dict``'s arrays into the networks (keys as ``state_dict`` gives them, or as
        an older rlgrad wrote them: ``_old_prefixes``)."""
        key_map, old = self._key_map(), self._old_prefixes()
        local: dict[int, dict[str, Any]] = {id(m): {} for m in self._algo._modules().values()}
        unknown = []
        for key, v in state_dict.items():
            if key in key_map:
                m, k, rows = key_map[key]
                local[id(m)][k] = v if rows is None else _unpermuted(v, rows)
                continue
            prefix = next((p for p in old if key.startswith(p)), None)
            if prefix is None:
                unknown.append(key)
            else:
                local[id(old[prefix])][key[len(prefix):]] = v
        if unknown and strict:
            raise StateDictError(f"policy.load_state_dict: unexpected keys {unknown}")
        for m in {id(m): m for m, _, _ in key_map.values()}.values():
            m.load_state_dict(local[id(m)], strict=strict)

    device = cpu_device("cpu")  # rlgrad computes on the CPU (SB3's policy.device.type)

    def to(self, *args: Any, **kwargs: Any) -> PolicyView:
        """SB3's ``policy.to(device)``: the same view (rlgrad computes on the CPU)."""
        return self

    def save(self, path: PathOrFile) -> None:
        """SB3's ``policy.save(path)``: here the algorithm's archive (its networks alone would
        not rebuild the view), which ``PolicyView.load`` turns back into the policy."""
        self._algo.save(path)

    @classmethod
    def load(cls, path: PathOrFile, device: DeviceLike = "auto"
             ) -> PolicyView:
        """The policy ``save`` wrote (SB3's ``policy_class.load(path)``): predicts as before."""
        own = read_archive(resolve_saved(path), None).own
        if own is None:
            raise ValueError(f"PolicyView.load({path!r}): the file holds no rlgrad model; load "
                             "SB3's archive with its algorithm's load")
        todo: list[type[OffPolicyAlgorithm]] = [OffPolicyAlgorithm]
        name = str(own["algo"])
        while todo:  # the algorithm class of that name (subclasses: imported with rlgrad.rl)
            algo = todo.pop()
            if algo.__name__ == name:
                return cast(OffPolicyAlgorithm, algo.load(path, device=device)).policy
            todo.extend(algo.__subclasses__())
        raise ValueError(f"PolicyView.load({path!r}): {name} is not an off-policy algorithm")

    def forward(self, obs: np.ndarray | rlgrad.Tensor, deterministic: bool = False
                ) -> rlgrad.Tensor:
        """SB3's ``policy(obs)``: the networks' actions for a batch of observations (a Box's
        in [-1, 1], before ``unscale_action``, as SB3's policy gives them)."""
        obs = obs.detach().numpy() if isinstance(obs, rlgrad.Tensor) else np.asarray(obs)
        with rlgrad.no_grad():  # (preprocessed as SB3's extractors do: one-hot, /255 ...)
            act = self._algo._act(preprocess_obs(obs, self._algo.observation_space), deterministic)
        return rlgrad.as_tensor(act)

    __call__ = forward

    def set_training_mode(self, mode: bool) -> None:
        """SB3's: the actor, critic and Q-network in training or evaluation mode; the target
        networks stay in evaluation mode (SB3 builds them so)."""
        for name, m in self._algo._modules().items():
            m.train(mode and "target" not in name)

    # SB3's BasePolicy methods on tensors (observation_space: the algorithm's)
    obs_to_tensor = SB3PolicyMethods.obs_to_tensor

    def is_vectorized_observation(self, observation: Any) -> bool:
        """SB3's: whether ``observation`` is a batch of the observation space's (ValueError for
        a shape that is neither). Channels-last images count as the space's channels-first
        ones, as SB3's policy transposes them (``maybe_transpose``)."""
        from rlgrad.rl.common.preprocessing import maybe_transpose
        from rlgrad.rl.common.utils import is_vectorized_observation

        space = self.observation_space
        if isinstance(space, spaces.Dict) and isinstance(observation, dict):
            observation = {k: maybe_transpose(np.asarray(v), space[k])
                           for k, v in observation.items()}
        elif not isinstance(space, spaces.Dict):
            observation = maybe_transpose(np.asarray(observation), space)
        return is_vectorized_observation(observation, space)

    def reset_noise(self, batch_size: int = 1) -> None:
        """SB3's: new gSDE exploration matrices of the actor (SAC with ``use_sde``)."""
        actor = getattr(self._algo, "actor", None)
        if actor is None or not hasattr(actor, "reset_noise"):
            raise AttributeError(f"{type(self._algo).__name__} has no gSDE actor: reset_noise() "
                                 "is SAC's with use_sde=True")
        actor.reset_noise(None, batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._algo, name)


class OffPolicyAlgorithm(BaseAlgorithm):
    """``tau`` is the Polyak coefficient of the target networks (SB3's keyword):
    ``target <- tau * online + (1 - tau) * target``; 1 copies."""

    _abstract = True  # the loop; its arguments come from the algorithm (rlgrad.rl.hyperparams)
    log_interval = 4  # episodes between two dumps of the logger, as in SB3
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    env_runner_sampling = True  # env_runners > 0: Ape-X on Ray actors (rlgrad.rl.distributed)
    compile_updates = True  # gradient_step's updates compiled by rlgrad.jit
    #: attributes a loss reads as Python values while it is traced (a primitive's parameter, a
    #: branch), not as inputs: a compiled step is kept per tuple of their values, so changing
    #: one (``model.clip_delta = 2``, after ``load``, by a schedule) retraces instead of silently
    #: replaying the old value. Numbers that can be inputs (gamma, ent_coef) are inputs instead.
    trace_settings: tuple[str, ...] = ()

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike, buffer_size: int, learning_starts: int,
                 batch_size: int, tau: float, gamma: float, train_freq: Any, gradient_steps: int,
                 n_envs: int = 1, normalize: bool | dict[str, Any] = False,
                 policy_kwargs: dict | None = None, seed: int | None = None, verbose: int = 0,
                 n_steps: int = 1, replay_buffer_class: str | None = None,
                 replay_buffer_kwargs: dict[str, Any] | None = None,
                 optimize_memory_usage: bool = False, **env_options: Any) -> None:
        super().__init__(env, seed=seed, n_envs=n_envs, normalize=normalize,
                         learning_rate=learning_rate, gamma=gamma, policy_kwargs=policy_kwargs,
                         verbose=verbose, **env_options)
        if self.normalizer is not None and not self._env_normalizes():
            self.normalizer.norm_reward = False  # replayed rewards must keep one scale
        a = self.action_space
        self.buffer_size = int(buffer_size)
        self.learning_starts = int(learning_starts)
        self.batch_size = int(batch_size)
        self.tau = float(tau)
        if isinstance(train_freq, int):
            train_freq = (train_freq, "step")
        self.train_freq = (int(train_freq[0]), str(train_freq[1]))  # range: rl/ranges.py
        self.gradient_steps = int(gradient_steps)
        self.continuous = isinstance(a, spaces.Box)
        a_shape: tuple[int, ...]
        a_dtype: type
        if isinstance(a, spaces.Box):  # (self.continuous)
            self.act_dim = int(np.prod(a.shape))
            # flat rows, as the networks output them (a rank-2 Box's actions are flattened)
            self._low = a.low.astype(np.float32).reshape(-1)
            self._high = a.high.astype(np.float32).reshape(-1)
            a_shape, a_dtype = (self.act_dim,), np.float32
        else:
            a_shape, a_dtype = (), np.int64
        self.n_steps = int(n_steps)  # > 1: n-step returns (SB3's NStepReplayBuffer)
        #: SB3's: the buffer's option (rlgrad's storage keeps the next observations either way,
        #: so its checks apply and the memory stays the same)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        rb_kwargs = dict(replay_buffer_kwargs or {})
        if self.optimize_memory_usage:
            rb_kwargs.setdefault("optimize_memory_usage", True)
        self.replay_buffer_class, self.replay_buffer_kwargs = n_step_buffer(
            self, replay_buffer_class, rb_kwargs)
        self._rb_action = (a_shape, a_dtype)
        self.replay_buffer = self.make_replay_buffer(a_shape, a_dtype)
        self.action_noise: NormalActionNoise | None = None
        self._steps: dict[tuple, tuple[Any, list[Any]]] = {}  # compiled updates, built on first use
        self._n_calls = 0
        self._last_dump_episode = 0

    def make_replay_buffer(self, action_shape: tuple[int, ...], action_dtype: Any) -> Any:
        """Vector observations: float32 rows. Images: uint8 (C, H, W) rows; stacked frames
        (``FrameStackObservation``, as in the Atari envs) go to a ``FrameReplayBuffer``, which
        keeps each frame once (a million Atari transitions in 7.5 GB instead of 56)."""
        space = self.observation_space
        if self.replay_buffer_class is not None:  # SB3's class: its storage, the plain path
            if getattr(self, "env_runners", 0):
                raise ValueError(f"{type(self).__name__}: replay_buffer_class="
                                 f"{self.replay_buffer_class} with env_runners > 0 is not "
                                 "supported: the Ape-X runners fill rlgrad's own storage")
            self._sb3_rows: Sb3Rows | None = Sb3Rows(self.n_envs)
            return sb3_replay_buffer(self, self.replay_buffer_class, self.replay_buffer_kwargs)
        self._sb3_rows = None
        # handle_timeout_termination=False: a time limit ends the bootstrap, as a termination
        self._truncation_terminates = default_buffer_options(self.replay_buffer_kwargs)
        if not is_image_space(space):
            return ReplayBuffer(self.buffer_size, self.obs_dim, action_shape, action_dtype)
        shape = cast(spaces.Box, space).shape  # an image space is a Box
        if frame_stacked(self.vector_env):
            return FrameReplayBuffer(self.buffer_size, shape, action_shape, action_dtype,
                                     n_envs=self.n_envs)
        return ReplayBuffer(self.buffer_size, shape, action_shape, action_dtype,
                            obs_dtype=np.uint8)

    # ---- features extractors ----------------------------------------------------------------
    def make_extractors(self, options: dict[str, Any]
                        ) -> tuple[Module | None, Module | None, int]:
        """(the actor's extractor, the critic's, the actor's input width) for ``policy_kwargs``'
        extractor keys (``layers.EXTRACTOR_DEFAULTS``): None, None and the flat width for vector
        observations; with ``share_features_extractor`` the critic's is the actor's."""
        cnn = self.policy_name == "CnnPolicy"
        actor_fx = offpolicy_extractor(self.observation_space, cnn, options)
        if actor_fx is None:
            return None, None, self.obs_dim
        critic_fx = (actor_fx if options.get("share_features_extractor")
                     else offpolicy_extractor(self.observation_space, cnn, options))
        return actor_fx, critic_fx, self.features_width(actor_fx)

    def features_width(self, extractor: Module | None) -> int:
        """The width of what a network reads: the extractor's features, else the flat rows."""
        return self.obs_dim if extractor is None else int(cast(Any, extractor).features_dim)

    # ---- actions ------------------------------------------------------------------------------
    def unscale_action(self, scaled: np.ndarray) -> np.ndarray:
        return self._low + 0.5 * (scaled + 1.0) * (self._high - self._low)

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        """Buffer-space actions of the behaviour policy (noise, epsilon-greedy, sampling)."""
        raise NotImplementedError

    def _sample_action(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(action as stored in the buffer, action sent to the environment)."""
        n = self.n_envs
        act: np.ndarray
        if self.num_timesteps < self.learning_starts:  # warm-up: uniformly random actions
            if self.continuous:
                act = self.rng.uniform(-1.0, 1.0, (n, self.act_dim)).astype(np.float32)
            else:
                act = self.rng.integers(0, cast(spaces.Discrete, self.action_space).n, n)
        else:
            act = self._explore(obs)
        if not self.continuous:
            return act, act
        env_act = self.unscale_action(act).reshape(n, *cast(spaces.Box, self.action_space).shape)
        return act, env_act

    def _stateful_nets(self) -> bool:
        """Whether a network holds BatchNorm or Dropout (``STATEFUL_LAYERS``): then acting runs
        the networks in evaluation mode and the updates in training mode, eagerly (SB3's
        ``set_training_mode``); the target networks take the running statistics at each
        target update. Found once (the networks are built with the algorithm)."""
        found = self.__dict__.get("_has_stateful")
        if found is None:
            found = self._has_stateful = any(
                isinstance(m, STATEFUL_LAYERS) for net in self._modules().values()
                for m in net.modules())
            if found:  # BatchNorm writes its statistics in place: not under rlgrad.jit
                self.compile_updates = False
        return found

    def _sync_running_stats(self, *pairs: tuple[Module, Module]) -> None:
        """With BatchNorm, at a target update: (online, target) pairs' statistics copied."""
        if self._stateful_nets():
            for online, target in pairs:
                copy_running_stats(online, target)

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        if self._stateful_nets():
            self.policy.set_training_mode(False)  # (SB3's predict: evaluation mode)
        act = self._act(obs, deterministic)
        if self.continuous:  # in the space's dtype (float64 spaces get float64 actions, as SB3)
            a = cast(spaces.Box, self.action_space)
            return self.unscale_action(act).reshape(len(obs), *a.shape).astype(a.dtype, copy=False)
        return act

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def save_replay_buffer(self, path: str | os.PathLike | IO[bytes]) -> None:
        """The replay buffer alone, in an rlgrad checkpoint file (SB3's method; ``.safetensors``
        appended when ``path`` has no extension; an open binary file is written, not closed)."""
        ckpt = {"replay_buffer": self.replay_buffer.state_dict()}
        if not isinstance(path, str | os.PathLike):
            path.write(state_bytes(ckpt))
            return
        rlgrad.save(ckpt, with_extension(path))

    def load_replay_buffer(self, path: str | os.PathLike | IO[bytes],
                           truncate_last_traj: bool = True) -> None:
        """Replace the replay buffer by the one ``save_replay_buffer`` wrote (a file name or an
        open binary file). A HER buffer's running episodes are ended there
        (``truncate_last_traj``, SB3's argument) unless the training goes on in them."""
        if self.__dict__.get("replay_buffer") is None:  # deleted or set to None: rebuilt
            self.replay_buffer = self.make_replay_buffer(*self._rb_action)
        state = (rlgrad.load(existing_checkpoint(path)) if isinstance(path, str | os.PathLike)
                 else state_from_bytes(path.read()))
        self.replay_buffer.load_state_dict(state["replay_buffer"])
        self.replay_buffer.device = self.device  # (SB3's: the model's, which a user may set)
        if truncate_last_traj and hasattr(self.replay_buffer, "truncate_last_trajectory"):
            self.replay_buffer.truncate_last_trajectory()

    @property
    def policy(self) -> PolicyView:
        """SB3's ``model.policy``: ``predict`` on the observations the networks see."""
        return PolicyView(self)

    @policy.setter
    def policy(self, value: object) -> None:
        view = unwrap_compiled(value)  # (SB3's model.policy = th.compile(model.policy))
        if not (isinstance(view, PolicyView) and view._algo is self):
            raise AttributeError(f"{type(self).__name__}.policy is a view of the algorithm's "
                                 "networks (actor, critic, q_net ...): assign those instead")

    # ---- collection -----------------------------------------------------------------------------
    def _on_step(self) -> None:
        """Called after every vector-env step (DQN: target sync and epsilon)."""

    def collect_rollouts(self, callback: BaseCallback | None) -> tuple[int, bool]:
        """Run the behaviour policy for ``train_freq``; returns (env steps, keep going)."""
        if self.env_runners:  # Ape-X: the runners' transitions, asynchronously
            from rlgrad.rl.distributed.apex import ApexSampler

            return self._env_runner_sampler(ApexSampler).collect(callback)
        adapter, rb, space = self._adapter, self.replay_buffer, self.observation_space
        n_freq, by_episode = self.train_freq[0], self.train_freq[1] == "episode"
        steps = episodes = 0
        noise = self.action_noise
        if callback is not None:
            callback.on_rollout_start()
        want_locals = callback is not None and callback.wants_locals()
        if self._stateful_nets():
            self.policy.set_training_mode(False)  # SB3's: acting in evaluation mode
        raw = prev_raw = self._last_obs
        obs = preprocess_obs(raw, space)
        with rlgrad.no_grad():
            while True:
                act_obs = obs if self.normalizer is None else self.normalizer.normalize_obs(obs)
                buf_act, env_act = self._sample_action(act_obs)
                raw, rew, term, trunc, valid, final = adapter.step(env_act)
                self.num_timesteps += self.n_envs
                next_obs = preprocess_obs(raw, space)
                if self.normalizer is not None:
                    self.normalizer.update_obs(next_obs)
                final_obs = next_obs if final is raw else preprocess_obs(final, space)
                if self._sb3_rows is not None:  # SB3's buffer class: raw observations, its add
                    self._sb3_rows.add(rb, prev_raw, final, buf_act, rew, term, trunc, valid)
                    prev_raw = raw
                elif adapter.all_valid or valid.all():
                    rb.add(obs, final_obs, buf_act, rew, term, trunc)
                else:  # drop the NEXT_STEP reset transitions
                    rb.add(obs[valid], final_obs[valid], buf_act[valid], rew[valid], term[valid],
                           trunc[valid], env_ids=np.flatnonzero(valid))
                obs = next_obs
                # the adapter knows whether a row is done: build the mask only when it is read
                done = term | trunc if adapter.any_done or callback is not None else None
                if adapter.any_done and done is not None:  # (done is built when any is)
                    nd = int(done.sum())
                    episodes += nd
                    self._episode_num += nd
                    if noise is not None:
                        noise.reset(done)
                steps += 1
                self._update_progress()
                self._on_step()
                if callback is not None and not self._callback_step(
                        callback, want_locals, raw, rew, done, env_act):
                    return steps * self.n_envs, False
                if (episodes if by_episode else steps) >= n_freq:
                    break
        self._last_obs = raw
        if callback is not None:
            callback.on_rollout_end()
        return steps * self.n_envs, True

    def _iteration(self, callback: BaseCallback | None) -> bool:
        collected, keep_going = self.collect_rollouts(callback)
        if not keep_going:
            return False
        if self.num_timesteps > 0 and self.num_timesteps > self.learning_starts:
            gs = self.gradient_steps if self.gradient_steps >= 0 else collected
            if gs > 0:
                if self._stateful_nets():
                    self.policy.set_training_mode(True)  # (SB3's train() sets it)
                self.train(gs, self.batch_size)
        if self._episode_num - self._last_dump_episode >= self.log_interval:
            self._last_dump_episode = self._episode_num
            self._record_rollout_stats()
            self.logger.dump(self.num_timesteps)
        return True

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        raise NotImplementedError

    # ---- shared pieces of the updates -----------------------------------------------------------
    def sample(self, batch_size: int) -> ReplayBatch:
        if self._sb3_rows is not None:
            return self._normalized(sb3_batch(self, batch_size))
        return self._normalized(self.replay_buffer.sample(batch_size, self.rng))

    def sample_many(self, n_batches: int, batch_size: int) -> tuple[ReplayBatch, np.ndarray]:
        """The minibatches of ``n_batches`` calls to ``sample(batch_size)`` (the same draws from
        the same generator), stacked: rows ``[i * batch_size, (i + 1) * batch_size)`` are the i-th.
        Also returns the buffer rows drawn (to spot repeated transitions)."""
        if self._sb3_rows is not None:  # (relabelled rows are new transitions: no repeats)
            parts = [sb3_batch(self, batch_size) for _ in range(n_batches)]
            stacked = ReplayBatch._make(None if f[0] is None else np.concatenate(f)
                                    for f in zip(*parts))
            return self._normalized(stacked), np.arange(n_batches * batch_size)
        idx = self.replay_buffer.sample_indices(n_batches * batch_size, self.rng)
        return self._normalized(self.replay_buffer.take(idx)), idx

    def batch_dict(self, b: ReplayBatch) -> dict[str, np.ndarray]:
        """A minibatch as the inputs of a compiled update (``td_target_of`` reads the last three)."""
        return {"obs": b.observations, "actions": b.actions, "next_obs": b.next_observations,
                "rewards": b.rewards, "not_terminated": 1.0 - b.terminated.astype(np.float32),
                # n-step returns: a discount per row (gamma ** the steps summed), else gamma
                "gamma": (np.array(self.gamma, dtype=np.float32) if b.discounts is None
                          else b.discounts)}

    def next_q(self, b: dict[str, Any]) -> Tensor:
        """The critics' bootstrap values of a ``batch_dict`` (each algorithm's own)."""
        raise NotImplementedError(f"{type(self).__name__} has no next_q")

    def regression_target(self, b: dict[str, Any]) -> np.ndarray:
        """``td_target_of(b, self.next_q(b))`` outside any update, as an array (the critics'
        target of a ``batch_dict``, for inspection and tests; the updates compute it compiled)."""
        with rlgrad.no_grad():
            return td_target_of(b, self.next_q(b))._value

    def gradient_step(self, name: str, loss_fn: Any, batch: dict[str, np.ndarray],
                      *optimizers: Any) -> dict[str, np.ndarray]:
        """One update of the parameters of ``optimizers`` on ``loss_fn(batch) -> (loss, stats)``:
        forward and backward compiled by ``rlgrad.jit`` at first use (the batch's shapes are fixed;
        ``batch`` holds every input, randomness and coefficients included, as arrays), then the
        optimizers' steps (``step_with_grads``: ``.grad`` holds the gradients
        after it). Returns ``stats`` (loss terms, checked finite before the step).
        ``compile_updates = False`` (an input the loss reads as data, not traceable) runs the
        same function eagerly."""
        step, params = self.compiled_step(name, loss_fn, optimizers)
        _, stats, grads = step(batch)
        check_update(stats)
        step_with_grads(optimizers, params, grads)
        return stats

    def compiled_step(self, name: str, loss_fn: Any, optimizers: Any) -> tuple[Any, list[Any]]:
        """(``grad_step`` of ``loss_fn`` w.r.t. the parameters of ``optimizers``, those
        parameters), built at first use and kept per value of ``trace_settings``; built again
        when the optimizers' parameters change (an optimizer replaced by the user)."""
        key = (name, self.compile_updates, *[getattr(self, a) for a in self.trace_settings])
        params = optimized_params(optimizers)
        entry = self._steps.get(key)
        if entry is None or not same_params(entry[1], params):
            entry = self._steps[key] = (grad_step(loss_fn, params, self.compile_updates), params)
        return entry

    def _normalized(self, b: ReplayBatch) -> ReplayBatch:
        if self._sb3_rows is None and self._truncation_terminates:
            b = b._replace(terminated=b.terminated | b.truncated)
        if self.normalizer is None:
            return b
        nz = self.normalizer.normalize_obs
        return b._replace(observations=nz(b.observations), next_observations=nz(b.next_observations))

    def _set_lr(self, *optimizers: Any) -> None:
        lr = self.lr_schedule(self._current_progress_remaining)
        for opt in optimizers:
            for g in opt.param_groups:
                g["lr"] = lr
        self.logger.record("train/learning_rate", lr)

    def get_state(self, include_replay_buffer: bool = True) -> dict[str, Any]:
        state = super().get_state(include_replay_buffer)
        if include_replay_buffer:  # only then: its state_dict is a copy of the whole buffer
            state["replay_buffer"] = self.replay_buffer.state_dict()
        return state

    def _extra_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "off_policy": {"n_calls": self._n_calls, "last_dump_episode": self._last_dump_episode},
        }
        if self.action_noise is not None:
            out["action_noise"] = self.action_noise.state_dict()
        return {**out, **self._env_runner_state()}  # runners: their envs, streams, pending rows

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        op = state.get("off_policy", {})
        self._n_calls = int(op.get("n_calls", 0))
        self._last_dump_episode = int(op.get("last_dump_episode", 0))
        if "replay_buffer" in state:
            self.replay_buffer.load_state_dict(state["replay_buffer"])
        if self.action_noise is not None and "action_noise" in state:
            self.action_noise.load_state_dict(state["action_noise"])
        self._set_env_runner_state(state)
