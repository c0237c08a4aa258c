"""Hyperparameter presets: ``rlgrad/presets/<algo>.yaml``, one entry per environment id.

Values equal rl-baselines3-zoo's tuned ones where the zoo has them. Besides an algorithm's
constructor arguments an entry may hold ``n_timesteps`` (the training budget), ``n_envs`` and
``normalize`` (``true`` or a dict of ``Normalizer`` options), which are environment settings.

Two entries stand for a family of ids, as the zoo's ``atari`` does: ``atari`` applies to every
Atari id (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``), ``minatar`` to every MinAtar id; an entry
for the id itself comes first.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

ENV_KEYS = ("n_timesteps", "n_envs", "normalize")


def _read(algo: str) -> dict[str, Any]:
    try:
        text = resources.files("rlgrad").joinpath("presets", f"{algo.lower()}.yaml").read_text()
    except FileNotFoundError:
        known = sorted(list_presets())
        raise ValueError(f"no presets for algorithm {algo!r}; known: {known}") from None
    return yaml.safe_load(text) or {}


def list_presets() -> dict[str, list[str]]:
    """{algorithm: [environment ids]} for every preset file shipped with rlgrad."""
    out = {}
    for f in resources.files("rlgrad").joinpath("presets").iterdir():
        if f.name.endswith(".yaml"):
            out[f.name[:-5]] = sorted((yaml.safe_load(f.read_text()) or {}).keys())
    return dict(sorted(out.items()))


def preset_key(env_id: str, keys: Any) -> str | None:
    """The entry of a preset table (``keys``) that applies to ``env_id``: the id itself, else its
    family's (``atari`` / ``minatar``), else None."""
    from rlgrad.rl.atari import pixel_env_kind

    if env_id in keys:
        return env_id
    family = pixel_env_kind(env_id)
    return family if family in keys else None


def load_preset(algo: str, env_id: str) -> dict[str, Any]:
    """The preset of ``algo`` for ``env_id`` (a fresh dict: callers may modify it); Atari and
    MinAtar ids fall back to their family's entry."""
    table = _read(algo)
    env_id = preset_key(env_id, table) or env_id
    if env_id not in table:
        raise ValueError(
            f"no {algo} preset for {env_id!r}; {algo} presets exist for: {', '.join(sorted(table))}"
        )
    return dict(table[env_id])


def split_preset(preset: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(algorithm hyperparameters, environment settings) of a preset."""
    hp = {k: v for k, v in preset.items() if k not in ENV_KEYS}
    env = {k: v for k, v in preset.items() if k in ENV_KEYS}
    return hp, env
