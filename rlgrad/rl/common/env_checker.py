"""``stable_baselines3.common.env_checker``: Gymnasium's environment checker under SB3's name."""

from __future__ import annotations

from typing import Any


def check_env(env: Any, warn: bool = True, skip_render_check: bool = True) -> None:
    """Gymnasium's ``check_env`` (SB3's checks the same API); ``warn`` is accepted for SB3's
    signature (Gymnasium always warns)."""
    from gymnasium.utils.env_checker import check_env as gym_check_env

    gym_check_env(env, skip_render_check=skip_render_check)


__all__ = ["check_env"]
