"""Environment ids typed on the command line.

Besides a registered id (``CartPole-v1``), Gymnasium's own ``module:EnvId`` form is accepted, as
``gymnasium.make`` accepts it: ``module`` is imported first, and importing it registers ``EnvId``
(``gymnasium.register(...)`` at its top level). The whole string is what the run directory
records, so ``rlgrad resume`` and ``rlgrad eval`` import the module again. The module is looked
up on ``sys.path`` as ``python -m`` would: installed packages, ``PYTHONPATH``, then the current
directory (appended last, so it never shadows an installed package).
"""

from __future__ import annotations

import importlib
import os
import sys

from rlgrad.cli.errors import CLIError, did_you_mean


def import_env_module(module: str, env_id: str) -> None:
    """Import the module part of ``module:EnvId``, or say in one line why it cannot be."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise CLIError(f"environment id {env_id!r}: cannot import module {module!r} ({e}); "
                       "install it, or put the folder that holds it on PYTHONPATH") from None
    except Exception as e:  # the module's own code failed (a syntax error, a missing name, ...)
        raise CLIError(f"environment id {env_id!r}: importing module {module!r} failed: "
                       f"{type(e).__name__}: {e}") from None


def check_env_id(env_id: str) -> None:
    """``env_id`` is registered (after importing its module, for ``module:EnvId``), else a
    one-line ``CLIError`` with the closest registered ids."""
    import gymnasium as gym

    from rlgrad.rl.atari import pixel_env_kind, register_pixel_envs

    if pixel_env_kind(env_id):  # Atari / MinAtar: registered by their package (the atari extra)
        try:
            register_pixel_envs(env_id)
        except (ImportError, ValueError) as e:
            raise CLIError(str(e)) from None
        return
    module, sep, name = env_id.rpartition(":")
    where = ""
    if sep:
        if not module or not name or ":" in module:
            raise CLIError(f"environment id {env_id!r}: expected a registered id or "
                           "module:EnvId with one ':' (e.g. mypkg.envs:MyEnv-v0)")
        import_env_module(module, env_id)
        where = f" (module {module!r} was imported but registered no such id)"
    if name not in gym.registry:
        raise CLIError(f"unknown environment id {name!r}{where}{did_you_mean(name, gym.registry)}")
