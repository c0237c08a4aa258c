"""Environment ids typed on the command line.

Besides a registered id (``CartPole-v1``), Gymnasium's own ``module:EnvId`` form is accepted, as
``gymnasium.make`` accepts it: ``module`` is imported first, and importing it registers ``EnvId``
(``gymnasium.register(...)`` at its top level). The module is looked up on ``sys.path`` as
``python -m`` would: installed packages, ``PYTHONPATH``, then the current directory (appended
last, so it never shadows an installed package).

Importing a module runs its code, so a module is imported only when the person typing names it:
in ``rlgrad train``'s ENV_ID, or with ``--env-module MODULE`` / ``--trust-run`` of ``resume`` and
``eval``. The ``module:EnvId`` a run's config.yaml records (a run directory may come from anyone)
is refused in one line that says how to allow it (``check_file_env_id``); a module already
imported runs no code when named again, so it is accepted.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ModuleTrust:
    """The modules the user named for a run's environment: ``--env-module`` (imported first) and
    ``--trust-run`` (whatever the run's files name)."""

    modules: tuple[str, ...] = ()
    trust_run: bool = False

    def import_named(self) -> None:
        for module in self.modules:
            import_env_module(module, f"--env-module {module}")


def check_file_env_id(env_id: str, source: str, trust: ModuleTrust, command: str) -> None:
    """``check_env_id`` of an id read from a file (``source``): its module part is imported
    only if the user named it (``trust``) or it is imported already (no code runs then)."""
    module, sep, _ = env_id.rpartition(":")
    if sep and module and not (trust.trust_run or module in trust.modules
                               or module in sys.modules):
        raise CLIError(
            f"{source} names the environment {env_id!r}, so using it would import module "
            f"{module!r}: code chosen by a file, not by you. rlgrad imports only modules you "
            f"name; if you trust it: {command} --env-module {module} (or --trust-run)")
    check_env_id(env_id)
