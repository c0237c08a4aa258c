"""``sb3_contrib.common.maskable.utils``."""

from rlgrad.rl.maskable import get_action_masks, is_masking_supported

__all__ = ["get_action_masks", "is_masking_supported"]
