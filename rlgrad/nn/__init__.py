"""``rlgrad.nn``: modules, layers, initializers and losses with PyTorch's names.

``import rlgrad.nn as nn`` and ``import rlgrad.nn.functional as F`` read like PyTorch code.
"""

from __future__ import annotations

from rlgrad.nn import functional, init, utils
from rlgrad.nn import layers_extra as _layers_extra
from rlgrad.nn import torch_modules as _torch_modules  # noqa: F401 - converts torch layers
from rlgrad.nn.attention import MultiheadAttention, TransformerEncoder, TransformerEncoderLayer
from rlgrad.nn.layers import (
    ELU,
    GELU,
    MLP,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    Mish,
    ModuleDict,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from rlgrad.nn.layers_extra import *  # noqa: F403 - Conv1d, the poolings, more activations
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
from rlgrad.nn.normalization import BatchNorm1d, BatchNorm2d
from rlgrad.nn.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell

__all__ = [
    "Module", "Parameter", "IncompatibleKeys", "StateDictError", "functional", "init", "utils",
    "Identity", "Linear", "Conv2d", "Flatten", "Sequential", "ModuleList", "ModuleDict", "ReLU",
    "Tanh", "Sigmoid", "SiLU", "ELU", "Softplus", "LeakyReLU", "LayerNorm", "MLP",
    "GELU", "Mish", "Dropout", "Embedding", "BatchNorm1d", "BatchNorm2d",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
    "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
    "MSELoss", "HuberLoss", "SmoothL1Loss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss",
    "BCELoss", "KLDivLoss",
]
__all__ += _layers_extra.__all__
