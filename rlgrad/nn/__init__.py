"""``rlgrad.nn``: modules, layers, initializers and losses with PyTorch's names.

``import rlgrad.nn as nn`` and ``import rlgrad.nn.functional as F`` read like PyTorch code.
"""

from __future__ import annotations

from rlgrad.nn import functional, init, utils
from rlgrad.nn.layers import (
    ELU,
    MLP,
    Conv2d,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    ModuleDict,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from rlgrad.nn.losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from rlgrad.nn.module import IncompatibleKeys, Module, Parameter, StateDictError

__all__ = [
    "Module", "Parameter", "IncompatibleKeys", "StateDictError", "functional", "init", "utils",
    "Identity", "Linear", "Conv2d", "Flatten", "Sequential", "ModuleList", "ModuleDict", "ReLU",
    "Tanh", "Sigmoid", "SiLU", "ELU", "Softplus", "LeakyReLU", "LayerNorm", "MLP",
    "MSELoss", "HuberLoss", "SmoothL1Loss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss",
    "BCELoss", "KLDivLoss",
]
