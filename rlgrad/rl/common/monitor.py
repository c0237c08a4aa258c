"""``stable_baselines3.common.monitor`` -> ``rlgrad.rl.monitor``."""

from rlgrad.rl.monitor import (
    LoadMonitorResultsError,
    Monitor,
    ResultsWriter,
    get_monitor_files,
    load_results,
)

__all__ = ["LoadMonitorResultsError", "Monitor", "ResultsWriter", "get_monitor_files",
           "load_results"]
