"""The CleanRL-style scripts of tests/dropin (written for PyTorch, with rlgrad's import lines):
loaded as modules, with rlgrad or with the import lines pointed at torch."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

SCRIPTS = Path(__file__).resolve().parents[1] / "dropin"


def load(name: str, lib: str = "rlgrad") -> types.ModuleType:
    """The script ``tests/dropin/<name>.py`` as a module; ``lib="torch"``: its rlgrad import
    lines pointed at torch (nothing else changed)."""
    path = SCRIPTS / f"{name}.py"
    src = path.read_text()
    if lib == "torch":
        src = src.replace("import rlgrad as torch", "import torch")
        src = re.sub(r"\brlgrad\.(nn|optim|distributions)", r"torch.\1", src)
    mod = types.ModuleType(f"{name}_{lib}")
    mod.__file__ = str(path)
    sys.modules[mod.__name__] = mod  # (a dataclass in the script looks its module up)
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - our own test script
    return mod


def lines_naming_rlgrad(name: str) -> list[str]:
    """The lines of the script after its docstring that name rlgrad."""
    src = (SCRIPTS / f"{name}.py").read_text().split('"""', 2)[2]
    return [ln for ln in src.splitlines() if "rlgrad" in ln]


def only_imports(lines: list[str]) -> bool:
    """Whether each line is an import of rlgrad (``import rlgrad ...`` / ``from rlgrad ...``)."""
    return all(re.match(r"(import|from) rlgrad\b", ln) for ln in lines)


def copy_weights(src: Any, dst: Any) -> None:
    """``src``'s parameters (an rlgrad module) into ``dst`` (the torch twin), by name."""
    import torch

    with torch.no_grad():
        for name, p in dst.named_parameters():
            p.copy_(torch.tensor(np.asarray(dict(src.named_parameters())[name].detach().numpy())))
