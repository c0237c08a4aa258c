"""``sb3_contrib.common.maskable``: masked distributions, policies and helpers."""
