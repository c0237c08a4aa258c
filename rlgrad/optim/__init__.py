"""``rlgrad.optim``: optimizers, learning-rate schedules and target-network updates."""

from __future__ import annotations

from rlgrad.nn.utils import clip_grad_norm_, clip_grad_value_
from rlgrad.optim import lr_scheduler
from rlgrad.optim.algorithms import (
    ASGD,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    RAdam,
    RMSprop,
    RMSpropTFLike,
    Rprop,
)
from rlgrad.optim.factored import Adafactor, SparseAdam
from rlgrad.optim.lbfgs import LBFGS
from rlgrad.optim.lr_scheduler import (
    ChainedScheduler,
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiplicativeLR,
    MultiStepLR,
    OneCycleLR,
    PolynomialLR,
    ReduceLROnPlateau,
    SequentialLR,
    StepLR,
    constant_schedule,
    linear_schedule,
    update_learning_rate,
)
from rlgrad.optim.optimizer import Optimizer
from rlgrad.optim.target import hard_update, polyak_update, soft_update

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "RMSpropTFLike", "Adagrad", "RAdam", "NAdam",
    "Adamax", "Adadelta", "Rprop", "ASGD", "LBFGS", "Adafactor", "SparseAdam",
    "clip_grad_norm_",
    "clip_grad_value_", "lr_scheduler", "LRScheduler", "LambdaLR", "LinearLR", "ConstantLR",
    "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "OneCycleLR", "ReduceLROnPlateau",
    "MultiplicativeLR", "PolynomialLR", "CosineAnnealingWarmRestarts", "SequentialLR",
    "constant_schedule", "linear_schedule", "update_learning_rate", "polyak_update",
    "soft_update", "hard_update", "CyclicLR", "ChainedScheduler",
]
