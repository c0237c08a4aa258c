"""rlgrad: reverse-mode autodiff on NumPy with the gradient semantics deep RL relies on.

Two APIs over one engine:
* PyTorch-style: ``rlgrad.tensor``, ``Tensor.backward``, ``rlgrad.autograd.grad``, ``rlgrad.nn``,
  ``rlgrad.optim``, ``rlgrad.distributions``;
* HIPS-autograd / JAX-style: ``rlgrad.grad``, ``vjp``, ``hessian`` ... over ``rlgrad.numpy``.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys

from rlgrad import (
    autograd,  # noqa: F401 - installs Tensor.backward
    fft,  # noqa: F401 - torch.fft
    func,  # noqa: F401 - torch.func's transforms (vmap, grad, functional_call ...)
    numpy,  # noqa: F401 - installs NumPy dispatch on Tensors
)
from rlgrad import autograd_functional as _autograd_functional
from rlgrad import exports as _exports
from rlgrad import tensor_methods as _tensor_methods  # noqa: F401 - installs the Tensor operators
from rlgrad import toplevel as _toplevel
from rlgrad.creation import (  # noqa: F401
    arange,
    as_tensor,
    cat,
    concatenate,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    stack,
    zeros,
    zeros_like,
)
from rlgrad.custom_derivatives import custom_jvp, custom_vjp
from rlgrad.device import autocast, backends, cuda, device
from rlgrad.func import vmap_axes as vmap
from rlgrad.gradcheck import check_grads, gradcheck
from rlgrad.indexing import gather, gather_nd, one_hot, put_along_axis, scatter_add
from rlgrad.jit import compile, jit  # noqa: A004 - torch.compile's name
from rlgrad.ops import stop_gradient
from rlgrad.random import Generator, bernoulli, multinomial, randperm
from rlgrad.tensor import Tensor, constant, get_default_dtype, set_default_dtype, tensor
from rlgrad.threads import get_num_interop_threads, get_num_threads, set_num_interop_threads, set_num_threads
from rlgrad.toplevel import *  # noqa: F403 - PyTorch's top-level functions and dtypes
from rlgrad.toplevel import __all__ as _toplevel_all
from rlgrad.tracer import (
    defjvp,
    defvjp,
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    primitive,
    set_grad_enabled,
)
from rlgrad.transforms import (
    elementwise_grad,
    grad,
    grad_and_aux,
    hessian,
    hessian_tensor_product,
    hvp,
    jacfwd,
    jacobian,
    jacrev,
    jvp,
    linearize,
    make_hvp,
    make_jvp,
    make_vjp,
    tensor_jacobian_product,
    value_and_grad,
    vector_jacobian_product,
    vjp,
)
from rlgrad.windows import bartlett_window, blackman_window, hamming_window, hann_window, kaiser_window

autograd.functional = _autograd_functional  # type: ignore[attr-defined]  # torch.autograd.functional
_sys.modules["rlgrad.autograd.functional"] = _autograd_functional

__version__ = "0.1.0"

__all__ = [
    "Tensor", "tensor", "constant", "autograd", "numpy", "no_grad", "enable_grad", "set_grad_enabled",
    "is_grad_enabled", "stop_gradient", "grad", "value_and_grad", "elementwise_grad", "jacobian",
    "hessian", "make_vjp", "vjp", "hessian_tensor_product", "hvp", "make_hvp", "grad_and_aux",
    "tensor_jacobian_product", "vector_jacobian_product", "make_jvp", "jvp", "check_grads",
    "gradcheck", "primitive", "defvjp", "defjvp", "gather", "gather_nd", "one_hot", "put_along_axis",
    "scatter_add", "get_default_dtype", "set_default_dtype", "jit", "linearize", "jacfwd", "jacrev",
    "device", "cuda", "backends", "as_tensor", "from_numpy", "empty_like", "full_like",
    "set_num_threads", "get_num_threads", "compile", "set_num_interop_threads", "get_num_interop_threads",
    "custom_vjp", "custom_jvp", "vmap", "func",
    "inference_mode", "is_inference_mode_enabled",  # (helper inplace: torch's, in tracer.py)
    "Generator", "multinomial", "randperm", "bernoulli",  # (helper inplace: rlgrad/random.py)
    "fft", "autocast", "hann_window", "hamming_window", "blackman_window", "bartlett_window",
    "kaiser_window",
    *_toplevel_all,
]


def _add_declared(e: _exports.Export) -> None:
    """A primitive declared after ``import rlgrad`` (``export(..., top=True)``) is ``rlgrad.<name>``
    too; the ones of ops.py came with ``from rlgrad.toplevel import *``."""
    for name in e.top:
        _exports.add_names(globals(), (name,), getattr(_toplevel, name), "rlgrad")
        if name not in __all__:
            __all__.append(name)


_exports.on_export(_add_declared)


def __getattr__(name: str):  # noqa: ANN202 - lazy subpackages keep `import rlgrad` light
    if name in ("nn", "optim", "distributions", "random", "estimators", "analysis", "rl", "functional",
                "utils", "tree_util", "lax"):
        return _importlib.import_module(f"rlgrad.{name}")
    if name in ("save", "load"):
        from rlgrad import serialization

        return getattr(serialization, name)
    if name == "explain":
        from rlgrad.analysis import explain

        return explain
    raise AttributeError(f"module 'rlgrad' has no attribute {name!r}")
