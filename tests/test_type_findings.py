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
