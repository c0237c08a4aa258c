"""Everything is in pyproject.toml but the optional C modules: the fused optimizer updates
(rlgrad/optim/_fused.c), the backward pass's loop (rlgrad/_engine.c) and an MLP's elementwise
loops (rlgrad/_kernels.c: bias add, ReLU and its backward, tanh's backward, dead-unit skipping).
Without a C compiler the install still succeeds and rlgrad uses its NumPy / Python paths, which
give the same bits."""

import sys

from setuptools import Extension, setup

# Bitwise equality with the NumPy path needs IEEE arithmetic as written: no FMA contraction, no
# reassociation. errno is never read, so sqrt may stay a vector instruction.
flags = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-math-errno"]

# rlgrad._engine: the backward pass's loop in C (core.py falls back to its Python loop without it).
# (rlgrad/_adam.h: Adam's arithmetic, also included by the native backend's generated C)
setup(ext_modules=[Extension("rlgrad.optim._fused", ["rlgrad/optim/_fused.c"],
                             depends=["rlgrad/_buffers.h", "rlgrad/_adam.h"],
                             extra_compile_args=flags, optional=True),
                   Extension("rlgrad._engine", ["rlgrad/_engine.c"], extra_compile_args=flags[:1],
                             optional=True),
                   Extension("rlgrad._kernels", ["rlgrad/_kernels.c"], depends=["rlgrad/_buffers.h"],
                             extra_compile_args=flags, optional=True)])
