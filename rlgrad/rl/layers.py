"""The building blocks of the policies, with Stable-Baselines3's names and arguments.

* activations: ``activation_fn`` as a name, rlgrad's class, or an SB3 script's ``th.nn.ReLU``
  (rlgrad's module of the same name: torch's own runs on torch tensors, not on rlgrad's);
* ``mlp`` / ``create_mlp``: Linear layers with an activation between them;
* ``net_arch`` in SB3's forms: ``on_policy_arch`` (``[64, 64]``, ``dict(pi=[..], vf=[..])``, the
  pre-1.8 ``[dict(pi=[..], vf=[..])]`` with SB3's warning) and ``get_actor_critic_arch``
  (``dict(pi=[..], qf=[..])`` for SAC, TD3, DDPG);
* features extractors: ``BaseFeaturesExtractor`` (what a custom one subclasses),
  ``FlattenExtractor`` (vector observations), ``CombinedExtractor`` (Dict observations: a CNN
  per image entry, the vectors flattened, all concatenated);
* ``MlpExtractor``: the policy and value towers of an actor-critic policy (``policy_net``,
  ``value_net``; the keys of SB3's state dicts).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad import nn, ops, optim
from rlgrad.rl.cnn import PLAIN_FEATURES, MinAtarCNN, NatureCNN, plain_features
from rlgrad.rl.common.preprocessing import get_flattened_obs_dim
from rlgrad.rl.envs import dict_columns, is_image_space, preprocess_obs
from rlgrad.tensor import Tensor

#: the activation modules a policy's layers take, by name (torch's class of the same name maps here)
ACTIVATION_NAMES = ("ReLU", "Tanh", "Sigmoid", "SiLU", "GELU", "Mish", "ELU", "Softplus",
                    "LeakyReLU", "Identity")
_ACTIVATIONS = {n.lower(): getattr(nn, n) for n in ACTIVATION_NAMES}


class PolicyArgumentError(ValueError, AssertionError):
    """A policy argument SB3 refuses with an assertion: catchable as either type."""


def _act_cls(activation_fn: Any) -> Any:
    """``activation_fn`` as an rlgrad module class: a name ("tanh"), rlgrad's class, or an SB3
    script's ``th.nn.ReLU`` (rlgrad's module of that name)."""
    name = activation_fn
    if isinstance(activation_fn, type) and activation_fn.__module__.startswith("torch."):
        name = activation_fn.__name__
    if isinstance(name, str):
        try:
            return _ACTIVATIONS[name.lower()]
        except KeyError:
            raise ValueError(f"activation_fn must be one of {', '.join(ACTIVATION_NAMES)} "
                             f"(rlgrad.nn's or torch.nn's class, or its name), got "
                             f"{activation_fn!r}") from None
    return activation_fn


def module_class(cls: Any, what: str) -> Any:
    """An rlgrad ``nn`` class for ``cls``: itself, or rlgrad's class of the same name for a
    ``torch.nn`` class (``th.nn.BatchNorm1d`` -> ``rlgrad.nn.BatchNorm1d``)."""
    if isinstance(cls, type) and cls.__module__.startswith("torch."):
        mapped = getattr(nn, cls.__name__, None)
        if mapped is None:
            raise ValueError(f"{what}: torch's {cls.__name__} has no rlgrad.nn counterpart; "
                             "use a class of rlgrad.nn")
        return mapped
    return cls


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
    out_act = None if output_activation is None else _act_cls(output_activation)
    return nn.MLP(sizes, activation=_act_cls(activation_fn), output_activation=out_act)


def tower(in_dim: int, arch: list[int], activation_fn: Any) -> nn.Module:
    """Hidden layers ``in_dim -> arch`` with the activation after each; none for ``arch == []``."""
    if not arch:
        return nn.Sequential()
    return mlp([in_dim, *arch], activation_fn, output_activation=activation_fn)


def create_mlp(input_dim: int, output_dim: int, net_arch: list[int],
               activation_fn: Any = "relu", squash_output: bool = False,
               with_bias: bool = True, pre_linear_modules: list[Any] | None = None,
               post_linear_modules: list[Any] | None = None) -> list[nn.Module]:
    """SB3's ``create_mlp``: the layers (a list, for ``nn.Sequential(*layers)``) of an MLP
    ``input_dim -> net_arch -> output_dim`` (no output layer for ``output_dim <= 0``), tanh at
    the end with ``squash_output``; ``pre_linear_modules`` / ``post_linear_modules`` (classes
    taking the layer's width, e.g. BatchNorm1d, LayerNorm) around every Linear but the last's
    post."""
    act = _act_cls(activation_fn)
    pre = [module_class(m, "create_mlp") for m in pre_linear_modules or []]
    post = [module_class(m, "create_mlp") for m in post_linear_modules or []]
    layers: list[nn.Module] = []
    dims = [int(input_dim), *(int(d) for d in net_arch)]
    for n_in, n_out in zip(dims, dims[1:]):
        layers += [m(n_in) for m in pre]
        layers.append(nn.Linear(n_in, n_out, bias=with_bias))
        layers += [m(n_out) for m in post]
        layers.append(act())
    if output_dim > 0:
        layers += [m(dims[-1]) for m in pre]
        layers.append(nn.Linear(dims[-1], int(output_dim), bias=with_bias))
    if squash_output:
        layers.append(nn.Tanh())
    return layers


def _int_list(arch: Any, what: str) -> list[int]:
    if not isinstance(arch, list | tuple) or not all(isinstance(n, int | np.integer) for n in arch):
        raise PolicyArgumentError(f"policy_kwargs.net_arch{what} must be a list of layer sizes, "
                                  f"got {arch!r}")
    return [int(n) for n in arch]


def on_policy_arch(net_arch: Any, default: list[int]) -> tuple[list[int], list[int]]:
    """(policy layers, value layers) of an actor-critic policy from SB3's ``net_arch`` forms:
    None (``default`` for both), a list (both), ``dict(pi=[..], vf=[..])`` (a missing key: no
    hidden layer), or the pre-1.8 ``[dict(..)]`` (SB3's warning, then its dict)."""
    if isinstance(net_arch, list | tuple) and net_arch and isinstance(net_arch[0], dict):
        warnings.warn("As shared layers in the mlp_extractor are removed since SB3 v1.8.0, you "
                      "should now pass directly a dictionary and not a list (net_arch=dict(pi=..., "
                      "vf=...) instead of net_arch=[dict(pi=..., vf=...)])", UserWarning,
                      stacklevel=3)
        net_arch = net_arch[0]
    if net_arch is None:
        return list(default), list(default)
    if isinstance(net_arch, dict):
        unknown = sorted(set(net_arch) - {"pi", "vf"})
        if unknown:
            raise PolicyArgumentError(f"policy_kwargs.net_arch has keys {unknown}; it takes "
                                      "'pi' (the policy's layers) and 'vf' (the value's)")
        return (_int_list(net_arch.get("pi", []), "['pi']"),
                _int_list(net_arch.get("vf", []), "['vf']"))
    arch = _int_list(net_arch, "")
    return arch, list(arch)


def get_actor_critic_arch(net_arch: Any) -> tuple[list[int], list[int]]:
    """SB3's (actor layers, critic layers) for SAC, TD3 and DDPG: a list for both, or
    ``dict(pi=[..], qf=[..])`` (both keys required, as in SB3)."""
    if isinstance(net_arch, dict):
        for key, what in (("pi", "actor"), ("qf", "critic")):
            if key not in net_arch:
                raise PolicyArgumentError(f"Error: no key '{key}' was provided in net_arch for the "
                                          f"{what} network (net_arch=dict(pi=[..], qf=[..]))")
        return _int_list(net_arch["pi"], "['pi']"), _int_list(net_arch["qf"], "['qf']")
    arch = _int_list(net_arch, "")
    return arch, list(arch)


def optimizer_class_of(cls: Any) -> Any:
    """An rlgrad optimizer class for ``optimizer_class``: itself, or rlgrad's class of the same
    name for a ``torch.optim`` class (``th.optim.AdamW`` -> ``rlgrad.optim.AdamW``) or a name
    (``"RMSpropTFLike"``, as a preset file gives it)."""
    if isinstance(cls, str):
        found = getattr(optim, cls, None)
        if not (isinstance(found, type) and issubclass(found, optim.Optimizer)):
            raise ValueError(f"optimizer_class={cls!r} is not an optimizer of rlgrad.optim")
        return found
    if isinstance(cls, type) and not cls.__module__.startswith("rlgrad."):
        # torch's (or SB3's sb2_compat RMSpropTFLike): rlgrad's optimizer of that name
        mapped = getattr(optim, cls.__name__, None)
        if mapped is None:
            raise ValueError(f"optimizer_class: {cls.__module__.split('.')[0]}'s "
                             f"{cls.__name__} has no rlgrad.optim counterpart; use a class of "
                             "rlgrad.optim")
        return mapped
    return cls


def make_optimizer(params: Any, lr: float, optimizer_class: Any = None,
                   optimizer_kwargs: dict[str, Any] | None = None, default: Any = None,
                   **defaults: Any) -> Any:
    """``policy_kwargs``' ``optimizer_class`` / ``optimizer_kwargs`` over an algorithm's own
    optimizer (``default``, Adam, with its ``defaults``, e.g. PPO's ``eps=1e-5``): as in SB3, a
    class given by the user takes only the user's keywords."""
    if optimizer_class is None:
        cls, kwargs = default or optim.Adam, {**defaults, **(optimizer_kwargs or {})}
    else:
        cls, kwargs = optimizer_class_of(optimizer_class), dict(optimizer_kwargs or {})
    return cls(params, lr=lr, **kwargs)


# ---- features extractors ---------------------------------------------------------------------
#: the observation spaces the policies take (for the one line that refuses another)
SUPPORTED_OBSERVATIONS = "Box (vectors or images), Discrete, MultiDiscrete, MultiBinary and Dict of these"


def check_policy_space(space: spaces.Space) -> None:
    """ValueError, one line, naming an observation space no policy takes (Graph, Sequence,
    Text, ...) and what is supported."""
    if isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            if isinstance(sub, spaces.Dict):
                raise ValueError(f"nested Dict observation spaces are not supported (got {space}); "
                                 f"supported: {SUPPORTED_OBSERVATIONS}")
            check_policy_space(sub)
        return
    if not isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete
                      | spaces.MultiBinary):
        raise ValueError(f"{type(space).__name__} observation spaces are not supported (got "
                         f"{space}); supported: {SUPPORTED_OBSERVATIONS}")


class BaseFeaturesExtractor(nn.Module):
    """What a custom features extractor subclasses (SB3's): ``forward(observations)`` -> a batch
    of ``features_dim`` features."""

    def __init__(self, observation_space: spaces.Space, features_dim: int = 0) -> None:
        super().__init__()
        if int(features_dim) <= 0:
            raise PolicyArgumentError(f"{type(self).__name__}: features_dim={features_dim} must "
                                      "be > 0")
        self._observation_space = observation_space
        self._features_dim = int(features_dim)

    @property
    def features_dim(self) -> int:
        return self._features_dim


class FlattenExtractor(BaseFeaturesExtractor):
    """The observation, flattened (the preprocessed vectors already are: nothing to compute)."""

    def __init__(self, observation_space: spaces.Space) -> None:
        super().__init__(observation_space, get_flattened_obs_dim(observation_space))
        self.flatten = nn.Flatten()

    def forward(self, observations: Any) -> Any:
        return self.flatten(observations)


def _as_batch(x: Any, space: spaces.Space) -> Any:
    """One entry of a Dict observation batch as the networks take it: images as they are,
    everything else a float matrix (Discrete one-hot)."""
    if isinstance(x, Tensor) and isinstance(space, spaces.Box):
        return x if is_image_space(space) else x.reshape(x.shape[0], -1)
    x = x._value if isinstance(x, Tensor) else np.asarray(x)  # integers: no gradient to keep
    if isinstance(space, spaces.MultiDiscrete):
        cols = [preprocess_obs(x.reshape(len(x), -1)[:, i], spaces.Discrete(int(n)))
                for i, n in enumerate(np.asarray(space.nvec).ravel())]
        return np.concatenate(cols, axis=1)
    return preprocess_obs(x, space)


class CombinedExtractor(BaseFeaturesExtractor):
    """SB3's extractor for Dict observations: a CNN (``cnn_output_dim`` features) per image
    entry, every other entry flattened, the results concatenated in the space's key order."""

    def __init__(self, observation_space: spaces.Dict, cnn_output_dim: int = 256,
                 normalize_images: bool = True) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise PolicyArgumentError(f"CombinedExtractor takes a Dict observation space, got "
                                      f"{observation_space}")
        check_policy_space(observation_space)
        extractors: dict[str, nn.Module] = {}
        total = 0
        for key, sub in observation_space.spaces.items():
            if is_image_space(sub):
                extractors[key] = cnn_trunk(sub, cnn_output_dim, normalize_images)
                total += int(cnn_output_dim)
            else:
                extractors[key] = nn.Flatten()
                total += get_flattened_obs_dim(sub)
        super().__init__(observation_space, total)
        self.extractors = nn.ModuleDict(extractors)
        self._flat_layout = _flat_layout(observation_space)

    def forward(self, observations: Any) -> Any:
        """Features of a dict of observation batches, or of the batch the algorithms' loops
        hold: the entries flattened side by side (``forward_flat``)."""
        if not isinstance(observations, dict):
            return self.forward_flat(observations)
        parts = [self.extractors[k](_as_batch(observations[k], sub))
                 for k, sub in self._observation_space.spaces.items()]
        return ops.concatenate(parts, axis=1)

    def forward_flat(self, flat: Any) -> Any:
        """The same features of a batch flattened as ``rlgrad.rl.envs.preprocess_obs`` flattens a
        Dict (its entries preprocessed and side by side, an image as its pixel values): each
        image's columns reshaped for its CNN, every other entry's columns as they are."""
        parts, extractors = [], self.extractors
        for k, start, stop, image_shape in self._flat_layout:
            x = flat[:, start:stop]
            parts.append(x if image_shape is None else extractors[k](x.reshape(-1, *image_shape)))
        return ops.concatenate(parts, axis=1)


def _flat_layout(space: spaces.Dict) -> tuple[tuple[str, int, int, tuple[int, ...] | None], ...]:
    """(key, first column, end column, image shape or None) of each entry of ``space`` in the
    rows ``preprocess_obs`` flattens it to (computed once: the space does not change, and a
    rollout step reads it)."""
    return tuple((k, a, b, tuple(sub.shape) if is_image_space(sub) else None)
                 for k, sub, a, b in dict_columns(space))


def _combined_plain(m: CombinedExtractor, flat: np.ndarray) -> np.ndarray | None:
    """``forward_flat``'s features as an array on the plain acting path (rlgrad.rl.cnn's
    PLAIN_FEATURES): each image's CNN on its columns, the other columns as they are."""
    parts = []
    for k, start, stop, image_shape in m._flat_layout:
        x: np.ndarray | None = flat[:, start:stop]
        if image_shape is not None:
            x = plain_features(m.extractors[k], x.reshape(-1, *image_shape))
            if x is None:
                return None
        parts.append(x)
    return np.concatenate(parts, axis=1)


PLAIN_FEATURES[CombinedExtractor] = _combined_plain


def cnn_trunk(observation_space: spaces.Space, features_dim: int | None = None,
              normalize_images: bool | None = None) -> NatureCNN | MinAtarCNN:
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


#: layers whose training-mode forward changes state (BatchNorm's running statistics) or draws
#: (Dropout's mask): a network holding one runs in evaluation mode to act, in training mode to
#: learn, eagerly (SB3's ``set_training_mode``; rlgrad.jit does not replay them)
STATEFUL_LAYERS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.Dropout)


def copy_running_stats(online: nn.Module, target: nn.Module) -> None:
    """The target network's BatchNorm statistics become the online network's (copied, not
    averaged: SB3's ``polyak_update(batch_norm_stats, batch_norm_stats_target, 1.0)``)."""
    for (_, a), (_, b) in zip(online.named_buffers(), target.named_buffers()):
        if a is not None and b is not None:
            np.copyto(b._value, a._value)


#: the features-extractor keys of an off-policy algorithm's ``policy_kwargs`` (SB3's defaults)
EXTRACTOR_DEFAULTS: dict[str, Any] = {
    "features_extractor_class": None, "features_extractor_kwargs": None,
    "normalize_images": None, "share_features_extractor": False}


def offpolicy_extractor(space: spaces.Space, cnn: bool, options: dict[str, Any]
                        ) -> nn.Module | None:
    """A new features extractor for an off-policy network (``options``: the keys of
    ``EXTRACTOR_DEFAULTS``): the user's ``features_extractor_class``, ``CombinedExtractor`` on a
    Dict with image entries (reading the flat rows the loops hold), the CNN trunk on images
    (``cnn``: CnnPolicy); None for vector observations, whose networks read the rows as they
    are (SB3's ``FlattenExtractor``, which has no parameters)."""
    fe_kwargs = dict(options.get("features_extractor_kwargs") or {})
    cls = options.get("features_extractor_class")
    normalize = options.get("normalize_images")
    if cls is not None:
        return module_class(cls, "features_extractor_class")(space, **fe_kwargs)
    if isinstance(space, spaces.Dict) and any(is_image_space(s) for s in space.spaces.values()):
        if normalize is not None:
            fe_kwargs.setdefault("normalize_images", normalize)
        return CombinedExtractor(space, **fe_kwargs)
    if not cnn:
        return None
    return cnn_trunk(space, fe_kwargs.get("features_dim"), normalize)


class MlpExtractor(nn.Module):
    """The policy and value towers of an actor-critic policy on the features: ``policy_net``
    and ``value_net`` (SB3's names and state-dict keys), ``latent_dim_pi`` / ``latent_dim_vf``
    their output widths."""

    def __init__(self, feature_dim: int, net_arch: Any, activation_fn: Any,
                 device: Any = "auto") -> None:
        super().__init__()
        pi_arch, vf_arch = on_policy_arch(net_arch, [])
        self.policy_net = tower(feature_dim, pi_arch, activation_fn)
        self.value_net = tower(feature_dim, vf_arch, activation_fn)
        self.latent_dim_pi = pi_arch[-1] if pi_arch else int(feature_dim)
        self.latent_dim_vf = vf_arch[-1] if vf_arch else int(feature_dim)

    def forward(self, features: Any) -> tuple[Any, Any]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: Any) -> Any:
        return self.policy_net(features)

    def forward_critic(self, features: Any) -> Any:
        return self.value_net(features)
