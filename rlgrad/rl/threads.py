"""Moved to ``rlgrad.rl.runtime``; this path keeps working."""

from rlgrad.rl.runtime import limit_blas_threads

__all__ = ["limit_blas_threads"]
