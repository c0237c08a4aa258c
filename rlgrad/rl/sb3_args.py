"""Stable-Baselines3's calling conventions, mapped onto rlgrad's constructors in one place.

SB3 builds an algorithm as ``PPO("MlpPolicy", env, ...)`` or ``PPO(policy=..., env=...)``;
rlgrad as ``PPO(env, ...)``. ``split_policy`` takes a call in either form and returns the
policy name and the call in rlgrad's form (the metaclass of ``BaseAlgorithm`` applies it before
the hyperparameters are captured, so every algorithm accepts both without code of its own).
Also here: the policy names and what they need of the observation space, ``device=``, a fresh
seed for ``seed=None``, and the checkpoint file extension ``save("name")`` adds.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Generic, TypeVar, cast

import numpy as np
from gymnasium import spaces

#: SB3's policy names; rlgrad builds the network from the spaces and ``policy_kwargs``
POLICY_NAMES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")
DEFAULT_POLICY = "MlpPolicy"
#: sb3-contrib's RecurrentPPO policy names: the three above with an LSTM (RecurrentPPO only)
LSTM_POLICY_NAMES = ("MlpLstmPolicy", "CnnLstmPolicy", "MultiInputLstmPolicy")
#: sb3-contrib's ARS policy names besides MlpPolicy (ARS only)
ARS_POLICY_NAMES = ("LinearPolicy",)
#: what ``save("name")`` appends (SB3 appends ".zip"; rlgrad's checkpoints are safetensors files)
CHECKPOINT_EXTENSION = ".safetensors"


def _policy_name(policy: Any) -> str | None:
    """The SB3 policy name ``policy`` stands for (a name, or a class so named), else None."""
    name = policy if isinstance(policy, str) else getattr(policy, "__name__", None)
    known = name in POLICY_NAMES or name in LSTM_POLICY_NAMES or name in ARS_POLICY_NAMES
    return name if known else None


def is_policy_class(policy: Any) -> bool:
    """A policy class of the user's (a subclass of one of rlgrad.rl's policies' modules)."""
    from rlgrad.nn import Module

    return isinstance(policy, type) and issubclass(policy, Module)


def split_policy(algo: str, args: tuple, kwargs: dict[str, Any]
                 ) -> tuple[str | type | None, tuple, dict[str, Any]]:
    """(policy name, a custom policy class, or None; args, kwargs) with SB3's leading
    ``policy`` argument taken out."""
    if "policy" in kwargs:
        kwargs = dict(kwargs)
        policy = kwargs.pop("policy")
    elif args and (_policy_name(args[0]) is not None or isinstance(args[0], type)
                   or (isinstance(args[0], str) and args[0].endswith("Policy"))):
        policy, args = args[0], args[1:]
    else:
        return None, args, kwargs
    name = _policy_name(policy)
    if name is None and is_policy_class(policy):
        name = policy  # a custom policy class (SB3's "Custom Policy Network"): built as given
    if name is None:
        raise ValueError(f"{algo}: unknown policy {policy!r}; use one of "
                         f"{', '.join(map(repr, POLICY_NAMES))} (rlgrad builds the networks from "
                         "the spaces and policy_kwargs)")
    if not args and "env" not in kwargs:
        raise TypeError(f"{algo}({name!r}) needs an environment: {algo}({name!r}, 'CartPole-v1') "
                        f"or {algo}({name!r}, env)")
    return name, args, kwargs


def action_noise_kwargs(algo: str, takes_noise: bool, noise: Any) -> dict[str, Any]:
    """SB3's ``action_noise=`` object as rlgrad's ``noise_type`` / ``noise_std``."""
    if noise is None:
        return {}
    if not takes_noise:
        raise ValueError(f"{algo}: action_noise is not supported: {algo} explores by its own rule "
                         "(rlgrad's TD3, DDPG and SAC take it)")
    kind = getattr(noise, "kind", None) or {
        "NormalActionNoise": "normal", "OrnsteinUhlenbeckActionNoise": "ornstein-uhlenbeck",
    }.get(type(noise).__name__)
    mean = np.asarray(getattr(noise, "mean", getattr(noise, "_mu", 0.0)), dtype=np.float64)
    sigma = np.asarray(getattr(noise, "sigma", getattr(noise, "_sigma", np.nan)), dtype=np.float64)
    if kind is None or np.any(mean != 0) or sigma.size == 0 or np.any(sigma != sigma.flat[0]):
        raise ValueError(f"{algo}: action_noise={noise!r} cannot be expressed: rlgrad takes normal "
                         "or Ornstein-Uhlenbeck noise of mean 0 and one sigma for every action "
                         "(noise_type=, noise_std=)")
    return {"noise_type": kind, "noise_std": float(sigma.flat[0])}


def is_image_space(space: spaces.Space) -> bool:
    """A Box of uint8 images, (H, W, C) or (C, H, W) with 1, 3 or 4 channels (SB3's test)."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3 or space.dtype != np.uint8:
        return False
    return bool(np.all(space.low == 0) and np.all(space.high == 255)
                and (space.shape[0] in (1, 3, 4) or space.shape[-1] in (1, 3, 4)))


def multi_input_error(algo: str, space: spaces.Space) -> str:
    """The one line for SB3's MultiInputPolicy on observations that are not a Dict."""
    return (f"{algo}: MultiInputPolicy is for Dict observation spaces, got {space}: use "
            "MlpPolicy (or CnnPolicy for images)")


#: SB3's buffer classes the algorithms take (``replay_buffer_class=``, ``rollout_buffer_class=``)
REPLAY_BUFFER_CLASSES = {"ReplayBuffer": "rlgrad.rl.common.buffers",
                         "DictReplayBuffer": "rlgrad.rl.common.buffers",
                         "NStepReplayBuffer": "rlgrad.rl.common.buffers",
                         "HerReplayBuffer": "rlgrad.rl.her.her_replay_buffer"}
ROLLOUT_BUFFER_CLASSES = {"RolloutBuffer": "rlgrad.rl.common.buffers",
                          "DictRolloutBuffer": "rlgrad.rl.common.buffers"}
_BUFFER_ARGS = (("replay_buffer", REPLAY_BUFFER_CLASSES), ("rollout_buffer", ROLLOUT_BUFFER_CLASSES))


def buffer_class_args(algo: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """SB3's ``replay_buffer_class`` / ``rollout_buffer_class`` (classes) and their ``_kwargs``
    as savable values: a class by its name, a ``GoalSelectionStrategy`` by its lower-case name;
    a class rlgrad has not got (a user's subclass) is refused in one line."""
    kwargs = dict(kwargs)
    for arg, table in _BUFFER_ARGS:
        cls = kwargs.get(f"{arg}_class")
        if cls is not None and not isinstance(cls, str):
            name = getattr(cls, "__name__", None)
            if table.get(name) != getattr(cls, "__module__", None):
                raise ValueError(f"{algo}: {arg}_class={cls!r} is not supported: rlgrad.rl "
                                 f"takes {', '.join(table)} (rlgrad.rl.common.buffers, "
                                 "rlgrad.rl.her)")
            kwargs[f"{arg}_class"] = name
        kw = kwargs.get(f"{arg}_kwargs")
        if kw and hasattr(kw.get("goal_selection_strategy"), "name"):
            kwargs[f"{arg}_kwargs"] = {
                **kw, "goal_selection_strategy": kw["goal_selection_strategy"].name.lower()}
    return kwargs


def buffer_class(name: str) -> type:
    """The class ``buffer_class_args`` named."""
    import importlib

    module = REPLAY_BUFFER_CLASSES.get(name) or ROLLOUT_BUFFER_CLASSES[name]
    return getattr(importlib.import_module(module), name)


def device_ok(device: Any) -> bool:
    """``device=`` as SB3 takes it: "auto" or a CPU device (rlgrad computes on the CPU)."""
    return str(device).split(":")[0] in ("auto", "cpu")


def fresh_seed() -> int:
    """A seed from the operating system's entropy, for ``seed=None`` (recorded, so a run can
    still be repeated from its checkpoint)."""
    return int(np.random.SeedSequence().entropy % (2**31))


def with_extension(path: str | os.PathLike) -> str:
    """``path`` with rlgrad's checkpoint extension when it has none (SB3 appends ".zip")."""
    path = os.fspath(path)
    return path if os.path.splitext(path)[1] else path + CHECKPOINT_EXTENSION


def existing_checkpoint(path: str | os.PathLike) -> str:
    """The file ``load(path)`` reads: ``path``, or ``path`` + the extension if only that exists."""
    path = os.fspath(path)
    if not os.path.exists(path) and not os.path.splitext(path)[1]:
        if os.path.exists(path + CHECKPOINT_EXTENSION):
            return path + CHECKPOINT_EXTENSION
    return path


def space_summary(space: spaces.Space) -> str:
    """The space as a string that two equal spaces share (type, shape, dtype, bounds)."""
    return str(space)


_P = TypeVar("_P")


def unwrap_compiled(value: object) -> object:
    """What ``torch.compile`` wrapped, else ``value``: SB3's ``model.policy = th.compile(
    model.policy)``. torch cannot compile rlgrad's NumPy code, so the policy itself is kept
    (with a warning; ``rlgrad.jit`` is rlgrad's compiler); torch is the caller's module."""
    if not callable(value) or not hasattr(value, "_torchdynamo_orig_callable"):
        return value
    inner = value
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    warnings.warn("torch.compile cannot compile rlgrad's policy (NumPy code): the policy is kept "
                  "as it was; rlgrad.jit compiles rlgrad code", UserWarning, stacklevel=3)
    return inner


class PolicySlot(Generic[_P]):
    """The ``policy`` attribute of an algorithm: as assigned, except ``torch.compile``'s wrapper
    of a policy, which is unwrapped (``unwrap_compiled``). Stored in the instance's ``__dict__``
    under its own name, as a plain attribute would be."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> _P:
        if obj is None:
            return self  # type: ignore[return-value]  # (the class attribute: the slot)
        try:
            return cast(_P, obj.__dict__[self.name])
        except KeyError:
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute "
                                 f"{self.name!r}") from None

    def __set__(self, obj: object, value: object) -> None:
        obj.__dict__[self.name] = unwrap_compiled(value)

    def __delete__(self, obj: object) -> None:
        del obj.__dict__[self.name]
