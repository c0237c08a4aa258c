"""``stable_baselines3.common.sb2_compat.rmsprop_tf_like`` -> ``rlgrad.optim``."""

from rlgrad.optim import RMSpropTFLike

__all__ = ["RMSpropTFLike"]
