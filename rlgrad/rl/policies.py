"""The networks of the algorithms, as ``rlgrad.nn`` modules.

* ``ActorCriticPolicy``: separate MLPs for the policy and the value (SB3's ``MlpPolicy``:
  [64, 64] tanh, orthogonal initialisation), a Categorical head for Discrete actions and a
  state-independent-std Gaussian for Box actions.
* ``QNetwork``: Q(s, .) as a module (DQN's ``make_q_net`` now builds the plain ``mlp``; this class
  stays for code written against it).
* ``DeterministicActor`` (tanh-squashed, DDPG/TD3), ``ContinuousCritic`` (n Q(s, a) heads, twin for
  TD3/SAC), ``SquashedGaussianActor`` (SAC, a ``TanhNormal`` sampled with ``rsample``, or gSDE's
  ``StateDependentNoiseDistribution`` with ``use_sde``).

Acting happens once per environment step and needs no gradient, so each network also runs as
plain NumPy (``mlp_numpy``) on the very same parameter arrays: no Tensors, no graph, a handful
of BLAS calls. Training goes through the modules (``forward``), i.e. through the engine.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad import nn, no_grad, ops
from rlgrad.distributions import Categorical, Independent, Normal, TanhNormal
from rlgrad.distributions.categorical import inverse_cdf, row_indices, row_max
from rlgrad.distributions.sde import StateDependentNoiseDistribution, sde_std_numpy
from rlgrad.nn import init
from rlgrad.nn.functional import _linear, _linear_relu
from rlgrad.rl import action_dists
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN
from rlgrad.rl.envs import flat_obs_dim, is_image_space, preprocess_obs, space_str
from rlgrad.tensor import Tensor

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
_NP_ACT = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out=None: np.maximum(x, 0, out=x if out is None else out)}


def _act_cls(activation_fn: Any) -> type:
    name = activation_fn
    if isinstance(activation_fn, type) and activation_fn.__module__.startswith("torch."):
        name = activation_fn.__name__  # an SB3 script's th.nn.ReLU: rlgrad's module of that name
    if isinstance(name, str):
        try:
            return _ACTIVATIONS[name.lower()]
        except KeyError:
            raise ValueError(f"activation_fn must be one of {sorted(_ACTIVATIONS)}, got "
                             f"{activation_fn!r}") from None
    return activation_fn


#: bytes a float32 parameter holds while training: its value, its gradient, Adam's two moments
TRAINING_BYTES_PER_PARAM = 16


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_mlp_memory(sizes: list[int]) -> None:
    """ValueError, one line, before allocating, for layers whose parameters (with gradients and
    Adam's moments) would not fit in this machine's memory: NumPy's own error comes after a
    long traceback, or the machine swaps."""
    n = sum(a * b + b for a, b in zip(sizes, sizes[1:], strict=False))
    need, have = n * TRAINING_BYTES_PER_PARAM, physical_memory()
    if have is not None and need > have:
        raise ValueError(f"policy_kwargs.net_arch: layers {sizes} (with the observation and "
                         f"action sizes) have {n:,} parameters, {need / 2**30:,.1f} GiB with "
                         f"their gradients and Adam's moments, more than this machine's "
                         f"{have / 2**30:,.1f} GiB: choose smaller layers")


def mlp(sizes: list[int], activation_fn: Any, output_activation: Any = None) -> nn.MLP:
    check_mlp_memory(sizes)
    return nn.MLP(sizes, activation=_act_cls(activation_fn), output_activation=output_activation)


def mlp_numpy(net: nn.Module, x: np.ndarray) -> np.ndarray:
    """``net(x)`` in plain NumPy for a Sequential of Linear / Tanh / ReLU (acting, no graph),
    with ``linear``'s forward; a Linear followed by a ReLU runs as the pair a compiled step runs
    (``_linear_relu``: the bias add and the ReLU in one pass, the same bits)."""
    mods = list(net)
    i = 0
    while i < len(mods):
        m = mods[i]
        t = type(m)
        if t is nn.Linear:
            pair = i + 1 < len(mods) and type(mods[i + 1]) is nn.ReLU
            b = None if m.bias is None else m.bias._value
            x = (_linear_relu if pair else _linear)(x, m.weight._value, b)
            i += pair
        elif t in _NP_ACT:
            x = _NP_ACT[t](x)
        else:  # anything else (a CNN trunk): the module itself, without a graph
            x = trunk_numpy(m, x)
        i += 1
    return x


def cnn_trunk(observation_space: spaces.Space, features_dim: int | None = None,
              normalize_images: bool | None = None) -> nn.Module:
    """The CNN for image observations (C, H, W): the Nature CNN (512 features) for frames of at
    least 36x36 (Atari's 84x84), the MinAtar paper's CNN (128 features) for smaller ones (10x10).
    ``normalize_images`` (default: when the space's high is 255) divides the input by 255."""
    if not is_image_space(observation_space):
        raise ValueError(f"a CNN needs image observations (a uint8 Box of shape (C, H, W)), got "
                         f"{observation_space}")
    shape = observation_space.shape
    if normalize_images is None:
        normalize_images = bool(np.max(observation_space.high) > 1)
    if min(shape[1:]) >= 36:
        return NatureCNN(shape, features_dim or 512, normalize=normalize_images)
    return MinAtarCNN(shape, features_dim or 128, normalize=normalize_images)


def trunk_numpy(trunk: nn.Module | None, obs: np.ndarray) -> np.ndarray:
    """The trunk's features of ``obs`` as a NumPy array, without a graph (``obs`` itself when
    there is no trunk: MLP policies read the observation directly)."""
    if trunk is None:
        return obs
    with no_grad():
        return np.asarray(trunk(obs)._value)


def _tower(in_dim: int, arch: list[int], activation_fn: Any) -> nn.Module:
    """Hidden layers ``in_dim -> arch`` with the activation after each; none for ``arch == []``."""
    if not arch:
        return nn.Sequential()
    return mlp([in_dim, *arch], activation_fn, output_activation=activation_fn)


def _ortho(net: nn.Module, gain: float, generator: np.random.Generator) -> None:
    for m in net.modules():
        if isinstance(m, nn.Linear | nn.Conv2d):
            init.orthogonal_(m.weight, gain=gain, generator=generator)
            if m.bias is not None:
                init.zeros_(m.bias)


def check_observation(space: spaces.Space, obs: np.ndarray, given: Any) -> None:
    """ValueError, one line, for what ``predict`` was given that is not one observation of
    ``space`` or a batch of them (else a matmul's shape error, or ``len() of unsized object``)."""
    if isinstance(space, spaces.Box):
        fits = obs.shape == space.shape or obs.shape[1:] == space.shape
        want = f"shape {space.shape} or a batch of shape (n, {', '.join(map(str, space.shape))})"
    elif isinstance(space, spaces.Discrete):
        fits, want = obs.ndim <= 1, "an integer or a 1-D batch of integers"
    else:
        return  # (Dict and other spaces: checked where they are flattened)
    if obs.dtype.kind not in "biuf":
        fits, want = False, f"numbers ({want})"
    if not fits:
        what = "None" if given is None else f"an array of shape {obs.shape} ({obs.dtype})"
        raise ValueError(f"predict: got {what}; the observation space is {space_str(space)}: pass one "
                         f"observation of {want}")


def predict_with(space: spaces.Space, observation: Any, act: Any) -> tuple[np.ndarray, None]:
    """``act`` on a batch of preprocessed observations, for one observation or a batch (SB3's
    ``predict`` convention: ``(actions, None)``, one action for one observation)."""
    if isinstance(space, spaces.Dict) and isinstance(observation, dict):
        obs: Any = {k: np.asarray(observation[k]) for k in space.spaces}
        single = all(obs[k].shape == sub.shape for k, sub in space.spaces.items())
        if single:
            obs = {k: v[None] for k, v in obs.items()}
    else:
        obs = np.asarray(observation)
        check_observation(space, obs, observation)
        single = (obs.shape == space.shape if isinstance(space, spaces.Box | spaces.MultiBinary
                                                         | spaces.MultiDiscrete)
                  else obs.ndim == 0)
        if single:
            obs = obs[None]
    with no_grad():
        actions = act(preprocess_obs(obs, space))
    return (actions[0] if single else actions), None


class ActorCriticPolicy(nn.Module):
    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_arch: Any = None, activation_fn: Any = "tanh", ortho_init: bool = True,
                 log_std_init: float = 0.0, init_seed: int | None = None, cnn: bool | None = None,
                 features_dim: int | None = None, normalize_images: bool | None = None) -> None:
        super().__init__()
        # SB3's CnnPolicy: one CNN trunk shared by the actor and the critic, heads right on its
        # features (net_arch [] by default); MlpPolicy: two MLP towers on the observation
        cnn = is_image_space(observation_space) if cnn is None else cnn
        self.features_extractor = (cnn_trunk(observation_space, features_dim, normalize_images)
                                   if cnn else None)
        in_dim = self.features_extractor.features_dim if cnn else flat_obs_dim(observation_space)
        if net_arch is None:
            net_arch = [] if cnn else {"pi": [64, 64], "vf": [64, 64]}
        if isinstance(net_arch, list | tuple):
            net_arch = {"pi": list(net_arch), "vf": list(net_arch)}
        pi_arch, vf_arch = list(net_arch["pi"]), list(net_arch["vf"])
        self.discrete = isinstance(action_space, spaces.Discrete)
        # MultiDiscrete / MultiBinary: heads of rlgrad.rl.action_dists
        self.multi = isinstance(action_space, action_dists.MULTI_ACTION_SPACES)
        if self.discrete:
            act_dim = int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            act_dim = int(np.prod(action_space.shape))
        elif self.multi:
            action_dists.check_multi_action_space(action_space)
            act_dim = action_dists.action_net_dim(action_space)
        else:
            raise ValueError(f"ActorCriticPolicy supports Discrete, Box, MultiDiscrete and "
                             f"MultiBinary actions, got {action_space}")
        self.act_dim = act_dim
        self.action_shape = (() if self.discrete else action_dists.storage(action_space)[0]
                             if self.multi else tuple(action_space.shape))
        self.observation_space, self.action_space = observation_space, action_space
        self.pi_net = _tower(in_dim, pi_arch, activation_fn)
        self.vf_net = _tower(in_dim, vf_arch, activation_fn)
        self.action_net = nn.Linear(pi_arch[-1] if pi_arch else in_dim, act_dim)
        self.value_net = nn.Linear(vf_arch[-1] if vf_arch else in_dim, 1)
        if not self.discrete and not self.multi:
            self.log_std = nn.Parameter(np.full(act_dim, log_std_init, dtype=np.float32))
        if ortho_init:  # SB3's gains: sqrt(2) trunk and hidden, 0.01 policy head, 1 value head
            g = init.default_generator() if init_seed is None else np.random.default_rng(init_seed)
            if cnn:
                _ortho(self.features_extractor, math.sqrt(2), g)
            _ortho(self.pi_net, math.sqrt(2), g)
            _ortho(self.vf_net, math.sqrt(2), g)
            _ortho(self.action_net, 0.01, g)
            _ortho(self.value_net, 1.0, g)

    # ---- training (through the engine) ------------------------------------------------------
    def _features(self, obs: Any) -> Any:
        return obs if self.features_extractor is None else self.features_extractor(obs)

    def _distribution(self, features: Any) -> Any:
        out = self.action_net(self.pi_net(features))
        if self.discrete:
            return Categorical(logits=out)
        if self.multi:
            return action_dists.distribution(self.action_space, out)
        return Independent(Normal(out, self.log_std.exp()), 1)

    def distribution(self, obs: Any) -> Any:
        """pi(.|obs): a ``Categorical`` over Discrete actions, a diagonal Gaussian (``Independent``
        ``Normal``: one log-probability per action vector) over Box actions, whose actions are
        rows of ``act_dim`` numbers. Eager or traced by ``rlgrad.jit`` alike."""
        return self._distribution(self._features(obs))

    def value(self, obs: Any) -> Any:
        return self.value_net(self.vf_net(self._features(obs))).reshape(-1)

    def distribution_and_value(self, obs: Any) -> tuple[Any, Any]:
        """``(distribution(obs), value(obs))`` with the shared CNN trunk run once."""
        if self.features_extractor is None:
            return self.distribution(obs), self.value(obs)
        f = self.features_extractor(obs)
        return self._distribution(f), self.value_net(self.vf_net(f)).reshape(-1)

    def actions_for_loss(self, actions: np.ndarray) -> np.ndarray:
        """Stored actions as ``distribution(obs).log_prob`` takes them (Box: flat rows)."""
        if self.discrete or self.multi:
            return actions
        return np.asarray(actions, dtype=np.float32).reshape(len(actions), self.act_dim)

    # ---- acting (NumPy, no graph) -----------------------------------------------------------
    def _head_np(self, obs: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        f = trunk_numpy(self.features_extractor, obs) if features is None else features
        return mlp_numpy([self.action_net], mlp_numpy(self.pi_net, f))

    def predict_values(self, obs: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        f = trunk_numpy(self.features_extractor, obs) if features is None else features
        return mlp_numpy([self.value_net], mlp_numpy(self.vf_net, f))[:, 0]

    def fused_numpy(self) -> list[tuple[np.ndarray, np.ndarray, Any]] | None:
        """The actor and critic towers as one network of block matrices, for acting.

        Both towers read the same observation, so layer by layer their weights can be stacked
        (first layer) or put side by side on a block diagonal (deeper layers): one matmul per
        layer instead of two, same outputs (logits or means, then the value). Refreshed once per
        rollout (the weights do not change while acting) into arrays kept from the last call
        (an A2C rollout is only a few steps long); None when the towers differ in depth or
        activation, or a CNN trunk comes first.
        """
        if self.features_extractor is not None:
            return None
        lin_pi = [m for m in self.pi_net if type(m) is nn.Linear] + [self.action_net]
        lin_vf = [m for m in self.vf_net if type(m) is nn.Linear] + [self.value_net]
        act_pi = [type(m) for m in self.pi_net if type(m) is not nn.Linear]
        act_vf = [type(m) for m in self.vf_net if type(m) is not nn.Linear]
        if len(lin_pi) != len(lin_vf) or act_pi != act_vf or any(a not in _NP_ACT for a in act_pi):
            return None
        pairs = [(p.weight._value, v.weight._value, p.bias._value, v.bias._value)
                 for p, v in zip(lin_pi, lin_vf)]
        key = tuple((wp.shape, wv.shape, wp.dtype) for wp, wv, _, _ in pairs)
        cached = self.__dict__.get("_fused_cache")
        if cached is None or cached[0] != key:
            layers = []
            for i, (wp, wv, _, _) in enumerate(pairs):
                rows = wp.shape[1] if i == 0 else wp.shape[1] + wv.shape[1]
                out = wp.shape[0] + wv.shape[0]  # zeros off the blocks, written once
                layers.append((np.zeros((rows, out), wp.dtype), np.zeros(out, wp.dtype),
                               _NP_ACT[act_pi[i]] if i < len(act_pi) else None))
            cached = (key, layers)
            object.__setattr__(self, "_fused_cache", cached)  # not a module attribute
        for i, ((wp, wv, bp, bv), (w, b, _)) in enumerate(zip(pairs, cached[1])):
            o, k = wp.shape  # (out, in): stored transposed, (in, out), for x @ w
            w[:k, :o] = wp.T
            w[(0 if i == 0 else k):, o:] = wv.T
            b[:o] = bp
            b[o:] = bv
        return cached[1]

    def act(self, obs: np.ndarray, rng: np.random.Generator,
            fused: list[tuple[np.ndarray, np.ndarray, Any]] | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled actions, values and log-probabilities for a batch of observations."""
        if fused is not None:
            x = obs
            for w, b, act in fused:
                x = np.matmul(x, w)
                x += b
                if act is not None:
                    x = act(x, out=x)  # x is this layer's own fresh array
            out, values = x[:, :-1], x[:, -1]
        else:
            f = trunk_numpy(self.features_extractor, obs)  # the CNN once for both heads
            out = self._head_np(obs, f)
            values = self.predict_values(obs, f)
        n = len(obs)
        # ``distribution(obs).sample(generator=rng)``'s draws and rules on the NumPy outputs
        # (tests/test_rl_algos.py checks both give the same actions and log-probabilities)
        if self.discrete:
            # inverse-CDF sampling on unnormalised probabilities; log p(a) = z_a - m - log(sum)
            # (ufunc methods: the same operations as .max / np.cumsum without their wrappers;
            # in place where the array is this call's own)
            z = out - row_max(out)
            cdf = np.exp(z)
            np.add.accumulate(cdf, axis=1, out=cdf)
            actions = inverse_cdf(cdf, rng.random(n))
            log_prob = z[row_indices(n), actions]
            log_prob -= np.log(cdf[:, -1])
            return actions, values, log_prob
        if self.multi:
            actions, log_prob = action_dists.sample_numpy(self.action_space, out, rng)
            return actions, values, log_prob.astype(out.dtype, copy=False)
        log_std = self.log_std._value
        eps = rng.standard_normal(out.shape, dtype=out.dtype)
        actions = out + np.exp(log_std) * eps
        log_prob = (-0.5 * np.square(eps) - log_std - 0.5 * math.log(2 * math.pi)).sum(axis=1)
        return actions.reshape(n, *self.action_shape), values, log_prob

    def mode(self, obs: np.ndarray) -> np.ndarray:
        out = self._head_np(obs)
        if self.discrete:
            return out.argmax(axis=1)
        if self.multi:
            return action_dists.mode_numpy(self.action_space, out)
        return out.reshape(len(obs), *self.action_shape)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """SB3's ``policy.predict``: actions for one observation or a batch, as the networks see
        them (an algorithm's ``normalize=True`` statistics are not applied here, as SB3's
        policy does not apply VecNormalize's); samples from rlgrad's global generator; Box
        actions clipped to the space."""
        return predict_with(self.observation_space, observation, lambda x: self._act_env(
            x, deterministic))

    def _act_env(self, x: np.ndarray, deterministic: bool) -> np.ndarray:
        from rlgrad.random import default_generator

        a = self.mode(x) if deterministic else self.act(x, default_generator.numpy)[0]
        if isinstance(self.action_space, spaces.Box):
            a = np.clip(a, self.action_space.low, self.action_space.high)
        elif self.multi:
            a = action_dists.to_env(self.action_space, a)
        return a


class QNetwork(nn.Module):
    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_arch: list[int] | None = None, activation_fn: Any = "relu") -> None:
        super().__init__()
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"a Q-network needs a Discrete action space, got {action_space}: for continuous "
                "actions use SAC, TD3 or DDPG"
            )
        arch = [64, 64] if net_arch is None else list(net_arch)
        self.n_actions = int(action_space.n)
        self.q_net = mlp([flat_obs_dim(observation_space), *arch, self.n_actions], activation_fn)

    def forward(self, obs: Any) -> Any:
        return self.q_net(obs)

    def q_numpy(self, obs: np.ndarray) -> np.ndarray:
        return mlp_numpy(self.q_net, obs)


class DeterministicActor(nn.Module):
    """mu(s) in [-1, 1]^d (tanh); the algorithm rescales to the action bounds."""

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int],
                 activation_fn: Any = "relu") -> None:
        super().__init__()
        self.mu = mlp([obs_dim, *net_arch, act_dim], activation_fn, output_activation=nn.Tanh)

    def forward(self, obs: Any) -> Any:
        return self.mu(obs)

    def numpy(self, obs: np.ndarray) -> np.ndarray:
        return mlp_numpy(self.mu, obs)


class ContinuousCritic(nn.Module):
    """``n_critics`` independent Q(s, a) networks on the concatenation [s, a]."""

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int], n_critics: int = 2,
                 activation_fn: Any = "relu") -> None:
        super().__init__()
        self.q_networks = nn.ModuleList(
            [mlp([obs_dim + act_dim, *net_arch, 1], activation_fn) for _ in range(n_critics)]
        )

    def forward(self, obs: Any, actions: Any) -> list[Any]:
        x = _cat(obs, actions)
        return [q(x).reshape(-1) for q in self.q_networks]

    def q1_forward(self, obs: Any, actions: Any) -> Any:
        return self.q_networks[0](_cat(obs, actions)).reshape(-1)


def _cat(obs: Any, actions: Any) -> Any:
    if isinstance(obs, Tensor) or isinstance(actions, Tensor):
        return ops.concatenate([obs, actions], axis=1)
    return np.concatenate([obs, actions], axis=1).astype(np.float32, copy=False)


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SquashedGaussianActor(nn.Module):
    """SAC's actor: a Gaussian in pre-tanh space, squashed into [-1, 1] (``TanhNormal``).

    With ``use_sde`` (generalized State-Dependent Exploration, SB3's SAC ``Actor``): the mean is
    ``mu(h)`` clipped to ``[-clip_mean, clip_mean]`` (0: no clip), ``log_std`` is a parameter of
    shape ``(features, actions)`` (``(features, 1)`` without ``full_std``) set to
    ``log_std_init``, and the noise is ``h @ (std * E)`` with ``h`` the last hidden layer (its
    features are learned through the noise, SB3's ``learn_features=True``) and ``E`` a
    standard-normal matrix held fixed between :meth:`reset_noise` calls
    (``rlgrad.distributions.StateDependentNoiseDistribution``).
    """

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int],
                 activation_fn: Any = "relu", use_sde: bool = False, log_std_init: float = -3.0,
                 full_std: bool = True, use_expln: bool = False, clip_mean: float = 2.0) -> None:
        super().__init__()
        self.latent_pi = mlp([obs_dim, *net_arch], activation_fn, output_activation=activation_fn)
        last = net_arch[-1] if net_arch else obs_dim
        self.act_dim = act_dim
        self.mu = nn.Linear(last, act_dim)
        self.use_sde = bool(use_sde)
        if self.use_sde:
            self.use_expln = bool(use_expln)
            self.clip_mean = float(clip_mean)
            shape = (last, act_dim) if full_std else (last, 1)
            self.log_std = nn.Parameter(np.full(shape, log_std_init, dtype=np.float32))
            # the exploration matrices' standard-normal part, one per environment copy
            self.sde_weights = np.zeros((1, last, act_dim), dtype=np.float32)
        else:
            self.log_std = nn.Linear(last, act_dim)

    def _sde_mean(self, h: Any) -> Any:
        mean = self.mu(h)
        return mean.clip(-self.clip_mean, self.clip_mean) if self.clip_mean > 0 else mean

    def distribution(self, obs: Any) -> Any:
        h = self.latent_pi(obs)
        if self.use_sde:
            return StateDependentNoiseDistribution(
                self._sde_mean(h), self.log_std, h, use_expln=self.use_expln,
                learn_features=True, squash_output=True)
        log_std = self.log_std(h).clip(LOG_STD_MIN, LOG_STD_MAX)
        return TanhNormal(self.mu(h), log_std.exp())

    # ---- gSDE noise -----------------------------------------------------------------------
    def sample_sde_weights(self, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
        """Standard-normal ``E`` of shape ``(features, actions)``, or ``(n, features, actions)``."""
        shape = self.sde_weights.shape[1:] if n is None else (n, *self.sde_weights.shape[1:])
        return rng.standard_normal(shape, dtype=np.float32)

    def reset_noise(self, rng: np.random.Generator, n_envs: int = 1) -> None:
        """New exploration matrices for acting, one per environment copy."""
        self.sde_weights = self.sample_sde_weights(rng, n_envs)

    def sde_std(self) -> np.ndarray:
        return sde_std_numpy(self.log_std._value, self.act_dim, self.use_expln)

    def numpy(self, obs: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """tanh(mu) when ``rng`` is None, else a sample, in [-1, 1] (with gSDE: the action of the
        held exploration matrices, ``rng`` unused)."""
        h = mlp_numpy(self.latent_pi, obs)
        mu = mlp_numpy([self.mu], h)
        if self.use_sde:
            if self.clip_mean > 0:
                mu = np.clip(mu, -self.clip_mean, self.clip_mean)
            if rng is None:
                return np.tanh(mu)
            w = self.sde_std() * self.sde_weights  # (n_envs, features, actions)
            if len(w) == len(h):  # row i explores with environment copy i's matrix
                noise = np.matmul(h[:, None, :], w)[:, 0, :]
            else:  # another batch size (predict on other observations): the first matrix
                noise = h @ w[0]
            return np.tanh(mu + noise)
        if rng is None:
            return np.tanh(mu)
        log_std = np.clip(mlp_numpy([self.log_std], h), LOG_STD_MIN, LOG_STD_MAX)
        return np.tanh(mu + np.exp(log_std) * rng.standard_normal(mu.shape).astype(np.float32))
