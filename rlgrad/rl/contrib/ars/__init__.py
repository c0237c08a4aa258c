"""``sb3_contrib.ars``: ``ARS`` and its policies (``rlgrad.rl.ars``)."""

from rlgrad.rl.ars import ARS, ARSLinearPolicy, ARSPolicy, LinearPolicy, MlpPolicy

__all__ = ["ARS", "ARSLinearPolicy", "ARSPolicy", "LinearPolicy", "MlpPolicy"]
