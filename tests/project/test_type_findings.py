"""The bugs the type checker (mypy over the public modules, `make lint`) found, each pinned
against PyTorch's behaviour."""

from __future__ import annotations

import pytest

import rlgrad.nn as nn

torch = pytest.importorskip("torch")


def test_get_parameter_of_a_parameter_registered_as_none_raises() -> None:
    """``register_parameter(name, None)`` keeps the name; torch's ``get_parameter`` then raises
    (it is not an nn.Parameter). rlgrad returned None from a method typed ``-> Parameter``."""
    ours, theirs = nn.Linear(2, 3), torch.nn.Linear(2, 3)
    ours.register_parameter("extra", None)
    theirs.register_parameter("extra", None)
    with pytest.raises(AttributeError):
        theirs.get_parameter("extra")
    with pytest.raises(AttributeError, match="no parameter 'extra'"):
        ours.get_parameter("extra")
    assert ours.get_parameter("weight") is ours.weight


def test_vectorized_observation_of_a_shapeless_dict_entry_is_a_value_error() -> None:
    """A Dict space with an entry of no fixed shape (Text): SB3 raises ValueError; rlgrad raised
    ``TypeError: 'NoneType' object is not iterable`` from ``tuple(space.shape)``."""
    import numpy as np
    from gymnasium import spaces

    from rlgrad.rl.common.utils import is_vectorized_observation

    sb3_utils = pytest.importorskip("stable_baselines3.common.utils")
    space = spaces.Dict({"a": spaces.Text(5), "b": spaces.Box(0, 1, (2,))})
    obs = {"a": np.zeros(()), "b": np.zeros(2)}
    with pytest.raises(ValueError):
        sb3_utils.is_vectorized_observation(obs, space)
    with pytest.raises(ValueError, match="no fixed shape"):
        is_vectorized_observation(obs, space)
