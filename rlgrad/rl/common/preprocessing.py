"""``stable_baselines3.common.preprocessing``: what a space's observations and actions look like
to a network, with SB3's names and results. ``preprocess_obs`` takes NumPy arrays or rlgrad
Tensors (where SB3 takes torch tensors) and returns rlgrad Tensors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces


def is_image_space_channels_first(observation_space: spaces.Box) -> bool:
    """Channels first (C, H, W) when the first dimension is the smallest (SB3's heuristic; the
    second being smallest warns and counts as channels last)."""
    smallest = int(np.argmin(observation_space.shape))
    if smallest == 1:
        warnings.warn("Treating image space as channels-last, while second dimension was "
                      "smallest of the three.", stacklevel=2)
    return smallest == 0


def is_image_space(observation_space: spaces.Space, check_channels: bool = False,
                   normalized_image: bool = False) -> bool:
    """A ``Box`` of 3 dimensions, uint8 in [0, 255] (unless ``normalized_image``), with 1, 3 or
    4 channels when ``check_channels``. Wider than ``rlgrad.rl.envs.is_image_space``, which
    names what rlgrad's own policies feed to a CNN (uint8, channels first)."""
    if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
        return False
    if not normalized_image:
        if observation_space.dtype != np.uint8:
            return False
        if np.any(observation_space.low != 0) or np.any(observation_space.high != 255):
            return False
    if not check_channels:
        return True
    shape = observation_space.shape
    n_channels = shape[0] if is_image_space_channels_first(observation_space) else shape[-1]
    return n_channels in (1, 3, 4)


def transpose_image(image: np.ndarray) -> np.ndarray:
    """Channels last to channels first: (H, W, C) -> (C, H, W), batched (N, H, W, C) too."""
    axes = (2, 0, 1) if np.ndim(image) == 3 else (0, 3, 1, 2)
    # (an array's own method: np.transpose's dispatch is most of a step's transpose)
    return image.transpose(axes) if isinstance(image, np.ndarray) else np.transpose(image, axes)


def maybe_transpose(observation: np.ndarray, observation_space: spaces.Space) -> np.ndarray:
    """An image observation (or batch) in the space's layout: transposed to channels first when
    that is what makes it fit the space, unchanged otherwise."""
    if not is_image_space(observation_space):
        return observation
    shape = observation_space.shape
    if observation.shape == shape or observation.shape[1:] == shape:
        return observation
    transposed = transpose_image(observation)
    if transposed.shape == shape or transposed.shape[1:] == shape:
        return transposed
    return observation


def preprocess_obs(obs: Any, observation_space: spaces.Space,
                   normalize_images: bool = True) -> Any:
    """A batch of observations as float32 network input: images scaled to [0, 1]
    (``normalize_images``), Discrete one-hot, MultiDiscrete one one-hot per entry side by side,
    MultiBinary and Box as floats; a Dict space gives a dict of them. rlgrad Tensors come out,
    torch tensors when a torch tensor went in (SB3's own signature)."""
    import rlgrad
    import rlgrad.nn.functional as F

    if type(obs).__module__ == "torch":  # SB3's own call: torch in, torch out (same values)
        import sys

        out = preprocess_obs(obs.detach().cpu().numpy(), observation_space, normalize_images)
        return sys.modules["torch"].from_numpy(np.array(out._value))
    if isinstance(observation_space, spaces.Dict):
        if not isinstance(obs, dict):
            raise TypeError(f"preprocess_obs: a Dict space takes a dict of observations, got "
                            f"{type(obs).__name__}")
        return {key: preprocess_obs(o, observation_space[key], normalize_images)
                for key, o in obs.items()}
    t = rlgrad.as_tensor(obs)
    if isinstance(observation_space, spaces.Box):
        scale = normalize_images and is_image_space(observation_space)
        return t.float() / 255.0 if scale else t.float()
    if isinstance(observation_space, spaces.Discrete):
        return F.one_hot(t.long(), num_classes=int(observation_space.n)).float()
    if isinstance(observation_space, spaces.MultiDiscrete):
        cols = [F.one_hot(t[:, i].long(), num_classes=int(n)).float()
                for i, n in enumerate(observation_space.nvec)]
        return rlgrad.cat(cols, dim=-1)
    if isinstance(observation_space, spaces.MultiBinary):
        return t.float()
    raise NotImplementedError(f"preprocess_obs: {observation_space} observations are not "
                              "supported (Box, Discrete, MultiDiscrete, MultiBinary and Dict are)")


def get_obs_shape(observation_space: spaces.Space) -> tuple[int, ...] | dict[str, Any]:
    """The shape of one observation as a buffer stores it: a Discrete one is ``(1,)``, a
    MultiDiscrete one ``(len(nvec),)``; a Dict space gives a dict of shapes."""
    if isinstance(observation_space, spaces.Box | spaces.MultiBinary):
        return observation_space.shape
    if isinstance(observation_space, spaces.Discrete):
        return (1,)
    if isinstance(observation_space, spaces.MultiDiscrete):
        return (len(observation_space.nvec),)
    if isinstance(observation_space, spaces.Dict):
        return {key: get_obs_shape(sub) for key, sub in observation_space.spaces.items()}
    raise NotImplementedError(f"{observation_space} observation space is not supported (Box, "
                              "Discrete, MultiDiscrete, MultiBinary and Dict are)")


def get_flattened_obs_dim(observation_space: spaces.Space) -> int:
    """The length of one observation flattened: one-hot widths for (Multi)Discrete."""
    if isinstance(observation_space, spaces.MultiDiscrete):
        return int(sum(observation_space.nvec))
    return int(spaces.utils.flatdim(observation_space))


def get_action_dim(action_space: spaces.Space) -> int:
    """The number of numbers in one action (1 for Discrete)."""
    if isinstance(action_space, spaces.Box):
        return int(np.prod(action_space.shape))
    if isinstance(action_space, spaces.Discrete):
        return 1
    if isinstance(action_space, spaces.MultiDiscrete):
        return len(action_space.nvec)
    if isinstance(action_space, spaces.MultiBinary):
        if not isinstance(action_space.n, int | np.integer):
            raise ValueError(f"Multi-dimensional MultiBinary({action_space.n}) action space is "
                             "not supported: flatten it to MultiBinary(n)")
        return int(action_space.n)
    raise NotImplementedError(f"{action_space} action space is not supported (Box, Discrete, "
                              "MultiDiscrete and MultiBinary are)")


def check_for_nested_spaces(obs_space: spaces.Space) -> None:
    """Raise for a Dict or Tuple space inside a Dict or Tuple space (not supported)."""
    if isinstance(obs_space, spaces.Dict | spaces.Tuple):
        subs = obs_space.spaces.values() if isinstance(obs_space, spaces.Dict) else obs_space.spaces
        if any(isinstance(s, spaces.Dict | spaces.Tuple) for s in subs):
            raise NotImplementedError("Nested observation spaces are not supported (Tuple/Dict "
                                      "space inside Tuple/Dict space): flatten the inner one")


__all__ = ["check_for_nested_spaces", "get_action_dim", "get_flattened_obs_dim", "get_obs_shape",
           "is_image_space", "is_image_space_channels_first", "maybe_transpose", "preprocess_obs",
           "transpose_image"]
