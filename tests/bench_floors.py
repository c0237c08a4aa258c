"""The hand-written NumPy floors of ``bench/`` as modules for the tests, loaded by path under
their own names (so ``_numpy_dqn``'s ``import _numpy_ppo`` finds the same module); ``bench/``
goes last on ``sys.path``, so its script modules (engine.py, nn.py, ...) shadow nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_floor(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``name`` (loaded once)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
