"""``stable_baselines3.common.logger`` -> ``rlgrad.rl.logger``."""

from rlgrad.rl.logger import CSVWriter, HumanWriter, Logger, TensorBoardWriter, configure

__all__ = ["CSVWriter", "HumanWriter", "Logger", "TensorBoardWriter", "configure"]
