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
import pickle
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad import nn, no_grad, ops
from rlgrad.device import device as cpu_device
from rlgrad.distributions import Categorical, Independent, Normal, TanhNormal
from rlgrad.distributions.categorical import logits_draw
from rlgrad.distributions.sde import StateDependentNoiseDistribution, sde_std, sde_std_numpy
from rlgrad.nn import init
from rlgrad.nn.functional import (
    _MISSING,
    _add_bias,
    _keep,
    _kept_get,
    _linear,
    _linear_relu,
    kept_while_fixed,
)
from rlgrad.nn.module import fill_shared_names
from rlgrad.rl import action_dists, cnn
from rlgrad.rl.cnn import plain_features
from rlgrad.rl.common.preprocessing import maybe_transpose
from rlgrad.rl.envs import flat_obs_dim, is_image_space, preprocess_obs, space_str
from rlgrad.rl.layers import (  # noqa: F401  (names the algorithms import from here)
    TRAINING_BYTES_PER_PARAM,
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    MlpExtractor,
    PolicyArgumentError,
    check_mlp_memory,
    check_policy_space,
    cnn_trunk,
    make_optimizer,
    mlp,
    module_class,
    physical_memory,
    tower,
)
from rlgrad.tensor import Tensor
from rlgrad.tracer import is_grad_enabled

#: activations acting computes in NumPy directly (others: their module, without a graph)
_NP_ACT = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out=None: np.maximum(x, 0, out=x if out is None else out)}


def mlp_numpy(net: Any, x: np.ndarray, head: nn.Module | None = None) -> np.ndarray:
    """``net(x)`` (then ``head``'s, a policy's output layer) in plain NumPy for a Sequential of
    Linear / Tanh / ReLU (acting, no graph; a layer with a ``forward_numpy``, BatchRenorm's
    evaluation mode, through it), with ``linear``'s forward; a Linear followed by a ReLU runs as
    the pair a compiled step runs (``_linear_relu``: the bias add and the ReLU in one pass, the
    same bits). Inside ``weights_fixed()`` (an on-policy rollout) the layers' arrays are read
    once per rollout, not at every step (kept as the conv weights' columns are, and with them
    made at every call with KEEP_WEIGHT_COLS off: the reference)."""
    if type(net) is list:  # (a list: made per call)
        return _run_steps(_mlp_steps([*net] if head is None else [*net, head]), x)
    hit = _kept_get(id(net), net)
    if hit is not _MISSING and hit[0] is head:
        return _run_steps(hit[1], x)
    steps = _mlp_steps([*net] if head is None else [*net, head])
    _keep(id(net), net, (head, steps))
    return _run_steps(steps, x)


def _run_steps(steps: list[tuple[int, Any, Any, bool]], x: np.ndarray) -> np.ndarray:
    for kind, a, b, relu in steps:
        if kind == _LINEAR:
            x = (_linear_relu if relu else _linear)(x, a, b)
        elif kind == _ACTIVATION:
            x = a(x)
        else:  # anything else (a CNN trunk): its NumPy step if it has one, else the module
            step = getattr(a, "forward_numpy", None) if cnn.PLAIN_ACTING else None
            y = step(x) if step is not None else None  # (None: not on arrays, or training)
            x = trunk_numpy(a, x) if y is None else y
    return x


_LINEAR, _ACTIVATION, _MODULE = 0, 1, 2


def _mlp_steps(mods: list[nn.Module]) -> list[tuple[int, Any, Any, bool]]:
    """What ``mlp_numpy`` runs for ``mods``: (_LINEAR, weight, bias, a ReLU follows) per Linear
    (its arrays; the ReLU is then skipped), (_ACTIVATION, the NumPy function, None, False) per
    Tanh / ReLU, (_MODULE, the module, None, False) for anything else."""
    steps: list[tuple[int, Any, Any, bool]] = []
    i = 0
    while i < len(mods):
        m = mods[i]
        t = type(m)
        if t is nn.Linear:
            pair = i + 1 < len(mods) and type(mods[i + 1]) is nn.ReLU
            steps.append((_LINEAR, m.weight._value, None if m.bias is None else m.bias._value,
                          pair))
            i += pair
        elif t in _NP_ACT:
            steps.append((_ACTIVATION, _NP_ACT[t], None, False))
        else:
            steps.append((_MODULE, m, None, False))
        i += 1
    return steps


# Acting with two towers of one shape (SB3's default net_arch: pi and vf alike) on the same
# features: each layer's two products as one NumPy matmul over the weights stacked (per tower
# the same BLAS call as apart: the same bits), the bias adds per tower as apart (_add_bias), each
# activation one call over both; the output layers apart (~5 us of a batch-1 step: the two towers
# and heads 14 -> 9 us). Inside weights_fixed() only (the stacked copies made once per rollout);
# off: each tower through mlp_numpy (the reference: tests/rl/test_rollout_step.py).
STACKED_TOWERS = True
_LATER = object()  # kept for towers seen once: stacked at the next step (if the store lasts)
_Layers = tuple[list[tuple[Any, Any, Any, bool]], tuple[list[Any], list[Any]]]


def _stack_towers(pi: Any, vf: Any, heads: tuple[nn.Module, nn.Module]) -> _Layers | None:
    """(the towers' layers stacked: (weights (2, in, out) as transposed views, the two biases,
    None, a ReLU follows) per Linear, (None, None, the function, False) per activation; the two
    output layers' steps), or None when the towers differ or hold another kind of layer."""
    sp, sv = _mlp_steps([*pi]), _mlp_steps([*vf])
    if not sp or len(sp) != len(sv):
        return None
    layers: list[tuple[Any, Any, Any, bool]] = []
    for (kp, wp, bp, rp), (kv, wv, bv, rv) in zip(sp, sv):
        if kp != kv or kp == _MODULE or (kp == _ACTIVATION and wp is not wv):
            return None
        if kp == _ACTIVATION:
            layers.append((None, None, wp, False))
        elif (wp.shape != wv.shape or wp.dtype != wv.dtype or rp != rv or bp is None
              or bv is None):
            return None
        else:
            layers.append((np.stack([wp, wv]).transpose(0, 2, 1), (bp, bv), None, rp))
    return layers, (_mlp_steps([heads[0]]), _mlp_steps([heads[1]]))


def stacked_towers(pi: Any, vf: Any, heads: tuple[nn.Module, nn.Module], f: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(heads[0](pi(f)), heads[1](vf(f)))`` with the towers stacked (see STACKED_TOWERS), or
    None where that does not apply (outside a rollout, towers of different shapes)."""
    if (not STACKED_TOWERS or kept_while_fixed() is None or type(f) is not np.ndarray
            or f.ndim != 2):
        return None
    key = ("towers", id(pi))
    hit = _kept_get(key, pi)
    if hit is _MISSING or hit[0] is not vf or hit[1] is not heads[0] or hit[2] is not heads[1]:
        # the first step, or the store was emptied (after a callback: at every step, where
        # stacking would cost more than it saves), so the towers run apart this time
        _keep(key, pi, (vf, *heads, _LATER))
        return None
    made = hit[3]
    if made is _LATER:  # the store outlived a step: stacking pays from here on
        made = _keep(key, pi, (vf, *heads, _stack_towers(pi, vf, heads)))[3]
    if made is None:
        return None
    y = f
    for w, b, act, relu in made[0]:
        if w is None:
            y = act(y)
        else:
            y = np.matmul(y, w)  # (2, n, out): each tower's product as its own BLAS call
            _add_bias(y[0], b[0], relu)
            _add_bias(y[1], b[1], relu)
    return _run_steps(made[1][0], y[0]), _run_steps(made[1][1], y[1])


def trunk_numpy(trunk: nn.Module | None, obs: np.ndarray) -> np.ndarray:
    """The trunk's features of ``obs`` as a NumPy array, without a graph (``obs`` itself when
    there is no trunk: MLP policies read the observation directly)."""
    if trunk is None:
        return obs
    if is_grad_enabled():  # (a rollout turned them off already)
        with no_grad():
            return trunk_numpy(trunk, obs)
    out = plain_features(trunk, obs)  # a CNN or Dict extractor's arrays directly
    if out is not None:
        return out
    out = trunk(obs)  # (a module given a NumPy array may answer with one)
    return out._value if isinstance(out, Tensor) else np.asarray(out)


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
        # channels-last image entries as the space has them (SB3's maybe_transpose)
        obs: Any = {k: maybe_transpose(np.asarray(observation[k]), sub)
                    for k, sub in space.spaces.items()}
        single = all(obs[k].shape == sub.shape for k, sub in space.spaces.items())
        if single:
            obs = {k: v[None] for k, v in obs.items()}
    else:
        obs = maybe_transpose(np.asarray(observation), space)
        check_observation(space, obs, observation)
        single = (obs.shape == space.shape if isinstance(space, spaces.Box | spaces.MultiBinary
                                                         | spaces.MultiDiscrete)
                  else obs.ndim == 0)
        if single:
            obs = obs[None]
    with no_grad():
        actions = act(preprocess_obs(obs, space))
    return (actions[0, ...] if single else actions), None  # one: an array, as SB3's (shape ())


def check_sde_args(action_space: spaces.Space, use_sde: bool, squash_output: bool) -> None:
    """SB3's checks of gSDE's arguments, one line each (PolicyArgumentError: catchable as
    SB3's AssertionError and as the ValueError of its algorithms)."""
    if squash_output and not use_sde:
        raise PolicyArgumentError("squash_output=True is only available when using gSDE "
                                  "(use_sde=True)")
    if use_sde and not isinstance(action_space, spaces.Box):
        raise PolicyArgumentError("generalized State-Dependent Exploration (gSDE) can only be "
                                  f"used with continuous actions (a Box), got {action_space}")


def check_sde_enabled(use_sde: bool, what: str) -> None:
    if not use_sde:
        raise PolicyArgumentError(f"{what}() is only available when using gSDE (use_sde=True)")


def sde_noise_numpy(latent: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """``latent @ W``: row i with matrix i when there is one matrix per row (one per environment
    copy), else every row with the first matrix (SB3's ``get_noise``)."""
    if len(matrices) == len(latent):
        return np.matmul(latent[:, None, :], matrices)[:, 0, :]
    return latent @ matrices[0]


class PolicyDistribution:
    """What SB3's ``policy.get_distribution(obs)`` returns: rlgrad's distribution as
    ``.distribution`` and SB3's methods over it (log-probabilities and entropies summed over a
    Box action's dimensions, as SB3's ``sum_independent_dims``)."""

    def __init__(self, distribution: Any) -> None:
        self.distribution = distribution

    def log_prob(self, actions: Any) -> Any:
        return self.distribution.log_prob(actions)

    def entropy(self) -> Any:
        return _entropy_or_none(self.distribution)

    def sample(self) -> Any:
        return self.distribution.sample()

    def mode(self) -> Any:
        return self.distribution.mode

    def get_actions(self, deterministic: bool = False) -> Any:
        return self.mode() if deterministic else self.sample()


def _entropy_or_none(dist: Any) -> Any:
    """SB3's: None for a distribution without a closed-form entropy (gSDE squashed)."""
    return None if getattr(dist, "squash_output", False) else dist.entropy()


def _as_tensor(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _as_tensor(v) for k, v in x.items()}
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x))


def save_policy(policy: nn.Module, path: Any, data: dict[str, Any]) -> None:
    """``policy.save(path)``: its class, constructor arguments and parameters, written to a
    temporary file renamed into place (a crash leaves the old file whole)."""
    state = {k: np.array(v) for k, v in policy.state_dict().items()}
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump({"class": type(policy), "data": data, "state_dict": state}, f)
    os.replace(tmp, path)


def load_policy(cls: type, path: Any) -> nn.Module:
    """The policy ``save_policy`` wrote (a pickle: load only files you trust, as SB3's)."""
    with open(path, "rb") as f:
        saved = pickle.load(f)  # noqa: S301  (SB3's format is a pickle too)
    if not issubclass(saved["class"], cls):
        raise ValueError(f"{path} holds a {saved['class'].__name__}, not a {cls.__name__}")
    policy = saved["class"](**saved["data"])
    # (a file written before state_dict listed a shared extractor under each of its names)
    policy.load_state_dict(fill_shared_names(policy, saved["state_dict"]))
    return policy


class SB3PolicyMethods:
    """SB3's ``BasePolicy`` methods on tensors, for a policy with ``observation_space``,
    ``_features`` and ``distribution_and_value``."""

    device = cpu_device("cpu")  # rlgrad computes on the CPU (SB3's policy.device.type)

    def obs_to_tensor(self, observation: Any) -> tuple[Any, bool]:
        """(a batch of preprocessed observations as a Tensor, whether a batch was given)."""
        space = self.observation_space
        obs = np.asarray(observation) if not isinstance(observation, dict) else observation
        vectorized = self.is_vectorized_observation(obs)
        if isinstance(space, spaces.Dict):
            return _as_tensor({k: np.asarray(v).reshape(-1, *space[k].shape)
                               for k, v in obs.items()}), vectorized
        batch = obs if vectorized else obs[None]
        return Tensor(preprocess_obs(batch.reshape(-1, *space.shape), space)), vectorized

    def is_vectorized_observation(self, observation: Any) -> bool:
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            k = next(iter(space.spaces))
            return np.asarray(observation[k]).shape != space[k].shape
        return np.asarray(observation).shape != space.shape

    def extract_features(self, obs: Any, features_extractor: Any = None) -> Any:
        return self._features(obs) if features_extractor is None else features_extractor(obs)

    def set_training_mode(self, mode: bool) -> None:
        self.train(mode)

    def forward(self, obs: Any, deterministic: bool = False) -> tuple[Any, Any, Any]:
        """SB3's: (actions, values of shape (n, 1), log-probabilities) for a batch."""
        dist, values = self.distribution_and_value(obs)
        actions = dist.mode if deterministic else dist.sample()
        return actions, values.reshape(-1, 1), dist.log_prob(actions)

    def evaluate_actions(self, obs: Any, actions: Any) -> tuple[Any, Any, Any]:
        """SB3's: (values (n, 1), log-probabilities, entropies) of ``actions``."""
        dist, values = self.distribution_and_value(obs)
        acts = actions._value if isinstance(actions, Tensor) else np.asarray(actions)
        return (values.reshape(-1, 1), dist.log_prob(self.actions_for_loss(acts)),
                _entropy_or_none(dist))

    def get_distribution(self, obs: Any) -> PolicyDistribution:
        return PolicyDistribution(self.distribution(obs))

    def predict_values(self, obs: Any) -> Any:
        """SB3's: V(obs) as a Tensor of shape (n, 1)."""
        return self.value(obs).reshape(-1, 1)

    def save(self, path: Any) -> None:
        save_policy(self, path, self._constructor_parameters())

    @classmethod
    def load(cls, path: Any, device: Any = "auto") -> Any:
        return load_policy(cls, path)


class ActorCriticPolicy(SB3PolicyMethods, nn.Module):
    """SB3's ``ActorCriticPolicy`` (its constructor and state-dict keys): a features extractor
    (``FlattenExtractor`` for vectors, the CNN for images, ``CombinedExtractor`` for Dict
    observations, or ``features_extractor_class``), the ``mlp_extractor``'s policy and value
    towers (SB3's ``MlpPolicy``: [64, 64] tanh, orthogonal initialisation), ``action_net``
    (Categorical logits, or the mean of a state-independent-std Gaussian for Box actions) and
    ``value_net``. A subclass may override ``_build_mlp_extractor`` (SB3's custom policy).

    Acting runs on the parameter arrays in NumPy (``act``, ``mode``); training and SB3's
    tensor methods (``forward``, ``evaluate_actions``, ``get_distribution``, ``predict_values``)
    go through the engine."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 lr_schedule: Any = None, net_arch: Any = None, activation_fn: Any = "tanh",
                 ortho_init: bool = True, use_sde: bool = False, log_std_init: float = 0.0,
                 full_std: bool = True, use_expln: bool = False, squash_output: bool = False,
                 features_extractor_class: Any = None,
                 features_extractor_kwargs: dict[str, Any] | None = None,
                 share_features_extractor: bool = True, normalize_images: bool | None = None,
                 optimizer_class: Any = None, optimizer_kwargs: dict[str, Any] | None = None,
                 *, init_seed: int | None = None, cnn: bool | None = None,
                 features_dim: int | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_init_args", {  # what save() writes to rebuild the policy
            "observation_space": observation_space, "action_space": action_space,
            "net_arch": net_arch, "activation_fn": activation_fn, "ortho_init": ortho_init,
            "log_std_init": log_std_init, "features_extractor_class": features_extractor_class,
            "features_extractor_kwargs": features_extractor_kwargs,
            "share_features_extractor": share_features_extractor,
            "normalize_images": normalize_images, "optimizer_class": optimizer_class,
            "optimizer_kwargs": optimizer_kwargs, "cnn": cnn, "features_dim": features_dim})
        self._init_args.update(use_sde=use_sde, full_std=full_std, use_expln=use_expln,
                               squash_output=squash_output)
        check_sde_args(action_space, use_sde, squash_output)
        self.use_sde, self.full_std = bool(use_sde), bool(full_std)
        self.use_expln, self.squash_output = bool(use_expln), bool(squash_output)
        check_policy_space(observation_space)
        self.observation_space, self.action_space = observation_space, action_space
        self.cnn = is_image_space(observation_space) if cnn is None else bool(cnn)
        self.activation_fn, self.ortho_init = activation_fn, bool(ortho_init)
        self.log_std_init, self.normalize_images = float(log_std_init), normalize_images
        self.features_extractor_class = features_extractor_class
        self.features_extractor_kwargs = dict(features_extractor_kwargs or {})
        if features_dim is not None:  # rlgrad's CnnPolicy keyword: the CNN's width
            self.features_extractor_kwargs.setdefault("features_dim", features_dim)
        self.share_features_extractor = bool(share_features_extractor)
        self.optimizer_class, self.optimizer_kwargs = optimizer_class, optimizer_kwargs
        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        # SB3's three names (>= 1.7): the actor's is the extractor; the critic's too when shared
        self.pi_features_extractor = self.features_extractor
        self.vf_features_extractor = (self.features_extractor if self.share_features_extractor
                                      else self.make_features_extractor())
        custom = features_extractor_class is not None or isinstance(observation_space, spaces.Dict)
        if net_arch is None:  # SB3's: heads right on a CNN's features, else [64, 64] towers
            net_arch = [] if self.cnn and not custom else {"pi": [64, 64], "vf": [64, 64]}
        self.net_arch = net_arch
        self._set_action_space(action_space)
        self._build(lr_schedule, init_seed)

    # ---- construction -----------------------------------------------------------------------
    def _set_action_space(self, action_space: spaces.Space) -> None:
        self.discrete = isinstance(action_space, spaces.Discrete)
        # MultiDiscrete / MultiBinary: heads of rlgrad.rl.action_dists
        self.multi = isinstance(action_space, action_dists.MULTI_ACTION_SPACES)
        if self.discrete:
            self.act_dim = int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            self.act_dim = int(np.prod(action_space.shape))
        elif self.multi:
            action_dists.check_multi_action_space(action_space)
            self.act_dim = action_dists.action_net_dim(action_space)
        else:
            raise ValueError(f"ActorCriticPolicy supports Discrete, Box, MultiDiscrete and "
                             f"MultiBinary actions, got {action_space}")
        self.action_shape = (() if self.discrete else action_dists.storage(action_space)[0]
                             if self.multi else tuple(action_space.shape))

    def make_features_extractor(self) -> nn.Module:
        """A new features extractor for the observation space (SB3's method)."""
        space, kw = self.observation_space, dict(self.features_extractor_kwargs)
        cls = self.features_extractor_class
        if cls is None and isinstance(space, spaces.Dict):
            cls = CombinedExtractor
        if cls is CombinedExtractor and self.normalize_images is not None:
            kw.setdefault("normalize_images", self.normalize_images)
        if cls is None and self.cnn:
            return cnn_trunk(space, kw.get("features_dim"), self.normalize_images)
        return module_class(cls or FlattenExtractor, "features_extractor_class")(space, **kw)

    def _build_mlp_extractor(self) -> None:
        """``self.mlp_extractor``: SB3's hook, which a custom policy overrides (its network needs
        ``latent_dim_pi``, ``latent_dim_vf``, ``forward_actor`` and ``forward_critic``)."""
        self.mlp_extractor = MlpExtractor(self.features_dim, self.net_arch, self.activation_fn)

    def _build(self, lr_schedule: Any, init_seed: int | None) -> None:
        self._build_mlp_extractor()
        self.action_net = nn.Linear(self.mlp_extractor.latent_dim_pi, self.act_dim)
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
        if self.use_sde:  # gSDE: one std per (latent feature, action), or per feature
            latent = self.mlp_extractor.latent_dim_pi
            shape = (latent, self.act_dim) if self.full_std else (latent, 1)
            self.log_std = nn.Parameter(np.full(shape, self.log_std_init, dtype=np.float32))
            self.reset_noise(1)  # a first matrix, as SB3 draws at construction
        elif not self.discrete and not self.multi:
            self.log_std = nn.Parameter(np.full(self.act_dim, self.log_std_init, dtype=np.float32))
        if self.ortho_init:  # SB3's gains: sqrt(2) trunk and hidden, 0.01 policy head, 1 value head
            g = init.default_generator() if init_seed is None else np.random.default_rng(init_seed)
            gains = [(self.features_extractor, math.sqrt(2))]
            if not self.share_features_extractor:
                gains.append((self.vf_features_extractor, math.sqrt(2)))
            gains += [(self.mlp_extractor, math.sqrt(2)), (self.action_net, 0.01),
                      (self.value_net, 1.0)]
            for net, gain in gains:
                _ortho(net, gain, g)
        # acting reads the observation itself when the extractor only flattens it (vectors)
        flat = (type(self.features_extractor) is FlattenExtractor and self.share_features_extractor
                and isinstance(self.observation_space, spaces.Box | spaces.Discrete))
        object.__setattr__(self, "_trunk", None if flat else self.features_extractor)
        object.__setattr__(self, "_plain_mlp", type(self.mlp_extractor) is MlpExtractor
                           and not self.use_sde)  # (the fused towers give no gSDE latent)
        if lr_schedule is not None:  # built on its own, as in SB3: with its optimizer
            self.optimizer = make_optimizer(self.parameters(), lr_schedule(1.0),
                                            self.optimizer_class, self.optimizer_kwargs, eps=1e-5)

    def _constructor_parameters(self) -> dict[str, Any]:
        return dict(self._init_args)

    @property
    def pi_net(self) -> nn.Module:
        return self.mlp_extractor.policy_net

    @property
    def vf_net(self) -> nn.Module:
        return self.mlp_extractor.value_net

    # ---- training (through the engine) ------------------------------------------------------
    def _features(self, obs: Any) -> Any:
        return obs if self._trunk is None else self._trunk(obs)

    def _vf_features(self, obs: Any, features: Any) -> Any:
        return features if self.share_features_extractor else self.vf_features_extractor(obs)

    def _distribution(self, features: Any) -> Any:
        latent = self.mlp_extractor.forward_actor(features)
        out = self.action_net(latent)
        if self.use_sde:  # the noise's features are not learned through it (SB3's default)
            return StateDependentNoiseDistribution(
                out, self.log_std, latent, use_expln=self.use_expln, learn_features=False,
                squash_output=self.squash_output)
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
        f = self._features(obs) if self.share_features_extractor else self.vf_features_extractor(obs)
        return self.value_net(self.mlp_extractor.forward_critic(f)).reshape(-1)

    def distribution_and_value(self, obs: Any) -> tuple[Any, Any]:
        """``(distribution(obs), value(obs))`` with a shared trunk run once."""
        f = self._features(obs)
        fv = self._vf_features(obs, f)
        return (self._distribution(f),
                self.value_net(self.mlp_extractor.forward_critic(fv)).reshape(-1))

    def actions_for_loss(self, actions: np.ndarray) -> np.ndarray:
        """Stored actions as ``distribution(obs).log_prob`` takes them (Box: flat rows)."""
        if self.discrete or self.multi:
            return actions
        return np.asarray(actions, dtype=np.float32).reshape(len(actions), self.act_dim)

    # ---- acting (NumPy, no graph) -----------------------------------------------------------
    def _latent_np(self, features: np.ndarray, actor: bool) -> np.ndarray:
        if self._plain_mlp:
            return mlp_numpy(self.pi_net if actor else self.vf_net, features)
        fn = self.mlp_extractor.forward_actor if actor else self.mlp_extractor.forward_critic
        with no_grad():  # a custom extractor: its own forward, without a graph
            out = fn(features if isinstance(features, dict) else Tensor(features))
        return np.asarray(out._value)

    def _head_np(self, obs: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        f = trunk_numpy(self._trunk, obs) if features is None else features
        if self._plain_mlp:  # the tower and its output layer as one list of layers
            return mlp_numpy(self.pi_net, f, self.action_net)
        return mlp_numpy([self.action_net], self._latent_np(f, True))

    def values_numpy(self, obs: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        """V(obs) in NumPy, shape (n,) (``features``: the shared trunk's, when computed)."""
        if not self.share_features_extractor:
            features = trunk_numpy(self.vf_features_extractor, obs)
        f = trunk_numpy(self._trunk, obs) if features is None else features
        if self._plain_mlp:
            return mlp_numpy(self.vf_net, f, self.value_net)[:, 0]
        return mlp_numpy([self.value_net], self._latent_np(f, False))[:, 0]

    def fused_numpy(self) -> list[tuple[np.ndarray, np.ndarray, Any]] | None:
        """The actor and critic towers as one network of block matrices, for acting.

        Both towers read the same observation, so layer by layer their weights can be stacked
        (first layer) or put side by side on a block diagonal (deeper layers): one matmul per
        layer instead of two, same outputs (logits or means, then the value). Refreshed once per
        rollout (the weights do not change while acting) into arrays kept from the last call
        (an A2C rollout is only a few steps long); None when the towers differ in depth or
        activation, or a CNN trunk comes first.
        """
        if self._trunk is not None or not self._plain_mlp:
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
        """Sampled actions, values and log-probabilities for a batch of observations (gSDE: the
        actions of the held exploration matrices, ``rng`` unused)."""
        if self.use_sde:
            return self._act_sde(obs)
        out, values = self.heads_numpy(obs, fused)
        actions, log_prob = self.sample_numpy(out, rng)
        return actions, values, log_prob

    def heads_numpy(self, obs: np.ndarray,
                    fused: list[tuple[np.ndarray, np.ndarray, Any]] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(the policy head's outputs: logits or means, the values) of a batch, in NumPy."""
        if fused is not None:
            x = obs
            for w, b, act in fused:
                x = np.matmul(x, w)
                x += b
                if act is not None:
                    x = act(x, out=x)  # x is this layer's own fresh array
            out, values = x[:, :-1], x[:, -1]
        else:
            f = trunk_numpy(self._trunk, obs)  # the CNN once for both heads
            both = (stacked_towers(self.pi_net, self.vf_net, (self.action_net, self.value_net),
                                   f) if self._plain_mlp and self.share_features_extractor
                    else None)
            if both is not None:
                return both[0], both[1][:, 0]
            out = self._head_np(obs, f)
            values = self.values_numpy(obs, f)
        return out, values

    def sample_numpy(self, out: np.ndarray, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
        """(actions, log-probabilities) drawn from the head's outputs ``out`` (logits or means)."""
        n = len(out)
        # ``distribution(obs).sample(generator=rng)``'s draws and rules on the NumPy outputs
        # (tests/rl/test_rl_algos.py checks both give the same actions and log-probabilities)
        if self.discrete:
            # inverse-CDF sampling on unnormalised probabilities; log p(a) = z_a - m - log(sum)
            return logits_draw(out, rng.random(n))
        if self.multi:
            actions, log_prob = action_dists.sample_numpy(self.action_space, out, rng)
            return actions, log_prob.astype(out.dtype, copy=False)
        log_std = self.log_std._value
        eps = rng.standard_normal(out.shape, dtype=out.dtype)
        actions = out + np.exp(log_std) * eps
        log_prob = (-0.5 * np.square(eps) - log_std - 0.5 * math.log(2 * math.pi)).sum(axis=1)
        return actions.reshape(n, *self.action_shape), log_prob

    # ---- gSDE (use_sde) ------------------------------------------------------------------
    def _act_sde(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``distribution(obs)``'s action for the held exploration matrices ``std * E`` and its
        log-probability, in NumPy (tests/test_sb3_sde.py checks them against the Tensors')."""
        f = trunk_numpy(self._trunk, obs)
        latent = self._latent_np(f, True)
        actions, log_prob = self.sde_sample_numpy(latent, mlp_numpy([self.action_net], latent))
        return actions, self.values_numpy(obs, f), log_prob

    def sde_sample_numpy(self, latent: np.ndarray, mean: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(actions, log-probabilities) of the gSDE distribution with means ``mean`` and noise
        features ``latent`` (the policy tower's output), for the held exploration matrices."""
        std = self.sde_std()
        u = mean + sde_noise_numpy(latent, std * self.sde_weights)
        scale = np.sqrt(np.square(latent) @ np.square(std) + 1e-6)
        log_prob = (-0.5 * np.square((u - mean) / scale) - np.log(scale)
                    - 0.5 * math.log(2 * math.pi)).sum(axis=1)
        actions = u
        if self.squash_output:  # log p(tanh u) = log p(u) - sum log(1 - tanh(u)^2 + eps)
            actions = np.tanh(u)
            log_prob -= np.log(1.0 - np.square(actions) + 1e-6).sum(axis=1)
        return (actions.reshape(len(mean), *self.action_shape).astype(np.float32, copy=False),
                log_prob.astype(np.float32, copy=False))

    def sde_std(self) -> np.ndarray:
        """The exploration matrices' std, (latent features, actions), as an array."""
        return sde_std_numpy(self.log_std._value, self.act_dim, self.use_expln)

    def get_std(self) -> Any:
        """SB3's: the gSDE std as a Tensor (differentiable w.r.t. ``log_std``)."""
        check_sde_enabled(self.use_sde, "get_std")
        return sde_std(self.log_std, self.act_dim, self.use_expln)

    def reset_noise(self, n_envs: int = 1, rng: np.random.Generator | None = None) -> None:
        """New standard-normal exploration matrices, one per environment copy (SB3's; from
        rlgrad's global generator unless ``rng`` is given)."""
        check_sde_enabled(self.use_sde, "reset_noise")
        if rng is None:
            from rlgrad.random import default_generator

            rng = default_generator.numpy
        self.sde_weights = rng.standard_normal((int(n_envs), *self.log_std.shape[:1],
                                                self.act_dim), dtype=np.float32)

    def unscale_action(self, scaled: np.ndarray) -> np.ndarray:
        """SB3's: actions in [-1, 1] mapped onto the Box action space's bounds."""
        low, high = self.action_space.low, self.action_space.high
        return low + 0.5 * (scaled + 1.0) * (high - low)

    def scale_action(self, action: np.ndarray) -> np.ndarray:
        """SB3's: actions in the Box's bounds mapped onto [-1, 1]."""
        low, high = self.action_space.low, self.action_space.high
        return 2.0 * ((action - low) / (high - low)) - 1.0

    def mode(self, obs: np.ndarray) -> np.ndarray:
        out = self._head_np(obs)
        if self.use_sde and self.squash_output:
            return np.tanh(out).reshape(len(obs), *self.action_shape)
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
        if self.squash_output:  # tanh-squashed actions: onto the bounds, as SB3's predict
            a = self.unscale_action(a)
        elif isinstance(self.action_space, spaces.Box):
            a = np.clip(a, self.action_space.low, self.action_space.high)
        elif self.multi:
            a = action_dists.to_env(self.action_space, a)
        return a


def upgrade_critic_keys(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's state with critics written before SB3's names ("q_networks.0.0.weight")
    renamed to them ("qf0.0.weight")."""
    mods = state.get("modules", {})
    if not any(k.startswith("q_networks.") for m in mods.values() for k in m):
        return state
    def rename(k: str) -> str:
        if not k.startswith("q_networks."):
            return k
        i, rest = k[len("q_networks."):].split(".", 1)
        return f"qf{i}.{rest}"
    return {**state, "modules": {n: {rename(k): v for k, v in m.items()} for n, m in mods.items()}}


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


class FeaturesNet(nn.Module):
    """An off-policy network that reads its observations through ``features_extractor`` (SB3's
    attribute: a CNN on images, ``CombinedExtractor`` on Dict observations with images), or,
    when it is None, the flat rows as they are (the MLP policies: no extractor, no cost).
    ``share_features_extractor``: a critic's extractor is the actor's, trained by the actor's
    loss only; the critic reads its features without a gradient, as SB3's does."""

    features_extractor: nn.Module | None

    def _set_extractor(self, extractor: nn.Module | None, shared: bool = False) -> None:
        self.features_extractor = extractor
        self.share_features_extractor = bool(shared)

    def extract_features(self, obs: Any) -> Any:
        fx = self.features_extractor
        if fx is None:
            return obs
        out = fx(obs)
        return ops.stop_gradient(out) if self.share_features_extractor else out

    def features_numpy(self, obs: np.ndarray) -> np.ndarray:
        """The features of ``obs`` without a graph (acting)."""
        return trunk_numpy(self.features_extractor, obs)

    def own_parameters(self) -> list[Any]:
        """What this network's optimizer trains: all its parameters but a shared extractor's."""
        if not self.share_features_extractor:
            return list(self.parameters())
        return [p for n, p in self.named_parameters() if not n.startswith("features_extractor.")]


class DeterministicActor(FeaturesNet):
    """mu(s) in [-1, 1]^d (tanh); the algorithm rescales to the action bounds. ``obs_dim`` is
    the features' width when a ``features_extractor`` is given."""

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int],
                 activation_fn: Any = "relu", features_extractor: nn.Module | None = None
                 ) -> None:
        super().__init__()
        self._set_extractor(features_extractor)
        self.mu = mlp([obs_dim, *net_arch, act_dim], activation_fn, output_activation=nn.Tanh)

    def forward(self, obs: Any) -> Any:
        return self.mu(self.extract_features(obs))

    def numpy(self, obs: np.ndarray) -> np.ndarray:
        return mlp_numpy(self.mu, self.features_numpy(obs))


class ContinuousCritic(FeaturesNet):
    """``n_critics`` independent Q(s, a) networks on the concatenation [s, a], named ``qf0``,
    ``qf1``, ... as SB3's (their state-dict keys: ``qf0.0.weight``); ``obs_dim`` is the
    features' width when a ``features_extractor`` is given (``shared``: the actor's)."""

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int], n_critics: int = 2,
                 activation_fn: Any = "relu", features_extractor: nn.Module | None = None,
                 shared: bool = False) -> None:
        super().__init__()
        self._set_extractor(features_extractor, shared)
        self.n_critics = int(n_critics)
        for i in range(self.n_critics):
            setattr(self, f"qf{i}", mlp([obs_dim + act_dim, *net_arch, 1], activation_fn))

    @property
    def q_networks(self) -> list[nn.Module]:
        return [getattr(self, f"qf{i}") for i in range(self.n_critics)]

    def forward(self, obs: Any, actions: Any) -> list[Any]:
        x = _cat(self.extract_features(obs), actions)
        return [q(x).reshape(-1) for q in self.q_networks]

    def q1_forward(self, obs: Any, actions: Any) -> Any:
        return self.q_networks[0](_cat(self.extract_features(obs), actions)).reshape(-1)


def _cat(obs: Any, actions: Any) -> Any:
    if isinstance(obs, Tensor) or isinstance(actions, Tensor):
        return ops.concatenate([obs, actions], axis=1)
    return np.concatenate([obs, actions], axis=1).astype(np.float32, copy=False)


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SquashedGaussianActor(FeaturesNet):
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
                 full_std: bool = True, use_expln: bool = False, clip_mean: float = 2.0,
                 features_extractor: nn.Module | None = None) -> None:
        super().__init__()
        self._set_extractor(features_extractor)
        self.latent_pi = tower(obs_dim, list(net_arch), activation_fn)
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
        h = self.latent_pi(self.extract_features(obs))
        if self.use_sde:
            return StateDependentNoiseDistribution(
                self._sde_mean(h), self.log_std, h, use_expln=self.use_expln,
                learn_features=True, squash_output=True)
        log_std = self.log_std(h).clip(LOG_STD_MIN, LOG_STD_MAX)
        return TanhNormal(self.mu(h), log_std.exp())

    def forward(self, obs: Any, deterministic: bool = False) -> Any:
        """SB3's ``actor(obs)``: actions in [-1, 1], sampled (pathwise) unless ``deterministic``
        (gSDE: drawn with a fresh exploration matrix)."""
        dist = self.distribution(obs)
        return dist.mode if deterministic else dist.rsample()

    # ---- gSDE noise -----------------------------------------------------------------------
    def sample_sde_weights(self, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
        """Standard-normal ``E`` of shape ``(features, actions)``, or ``(n, features, actions)``."""
        shape = self.sde_weights.shape[1:] if n is None else (n, *self.sde_weights.shape[1:])
        return rng.standard_normal(shape, dtype=np.float32)

    def reset_noise(self, rng: np.random.Generator | None = None, n_envs: int = 1) -> None:
        """New exploration matrices for acting, one per environment copy (from rlgrad's global
        generator unless ``rng`` is given)."""
        check_sde_enabled(self.use_sde, "reset_noise")
        if rng is None:
            from rlgrad.random import default_generator

            rng = default_generator.numpy
        self.sde_weights = self.sample_sde_weights(rng, n_envs)

    def sde_std(self) -> np.ndarray:
        return sde_std_numpy(self.log_std._value, self.act_dim, self.use_expln)

    def get_std(self) -> Any:
        """SB3's ``actor.get_std()``: the gSDE std as a Tensor."""
        check_sde_enabled(self.use_sde, "get_std")
        return sde_std(self.log_std, self.act_dim, self.use_expln)

    def numpy(self, obs: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """tanh(mu) when ``rng`` is None, else a sample, in [-1, 1] (with gSDE: the action of the
        held exploration matrices, ``rng`` unused)."""
        h = mlp_numpy(self.latent_pi, self.features_numpy(obs))
        mu = mlp_numpy([self.mu], h)
        if self.use_sde:
            if self.clip_mean > 0:
                mu = np.clip(mu, -self.clip_mean, self.clip_mean)
            if rng is None:
                return np.tanh(mu)
            # row i explores with environment copy i's matrix (n_envs, features, actions)
            return np.tanh(mu + sde_noise_numpy(h, self.sde_std() * self.sde_weights))
        if rng is None:
            return np.tanh(mu)
        log_std = np.clip(mlp_numpy([self.log_std], h), LOG_STD_MIN, LOG_STD_MAX)
        return np.tanh(mu + np.exp(log_std) * rng.standard_normal(mu.shape).astype(np.float32))
