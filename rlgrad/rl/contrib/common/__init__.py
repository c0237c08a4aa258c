"""``sb3_contrib.common``: envs, wrappers and the maskable helpers."""
