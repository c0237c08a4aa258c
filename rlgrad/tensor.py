"""The Tensor: an ndarray, a ``requires_grad`` flag, a ``.grad``, and (when it was computed by a
recorded primitive) the link to that primitive and its arguments.

Operators and methods are attached by ``rlgrad/tensor_methods.py``; each calls a primitive of
``rlgrad/ops.py``, where every forward and gradient lives.
"""

from __future__ import annotations

import itertools
import os
import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlgrad.device import CPU, check_device

if TYPE_CHECKING:  # the methods tensor_methods installs, as the checker sees them (rlgrad/_stubs.py)
    from types import FrameType

    from rlgrad._tensor_api import TensorMethods
    from rlgrad.device import device
    from rlgrad.tracer import Primitive
    from rlgrad.typing import ArrayLike, DeviceLike, DTypeLike
else:
    TensorMethods = object

_FLOAT_KINDS = "fc"


class _Trace:
    """While a function is traced (``rlgrad.jit``, ``rlgrad.explain(fn)``), every primitive call
    on a Tensor is appended to ``tape``. ``compiling`` is set by jit only: a compiled step must
    not depend on values, so reading one then is an error."""

    tape: list | None = None
    compiling = False
    #: ``wrap(data, arr, requires_grad, copy)``: the Tensor a constructor returns for ``data``
    #: holding Tensors (``arr``: its eager array), recorded from them; set by rlgrad.creation,
    #: which can import the primitives that tensor.py cannot.
    wrap: Callable[..., Tensor | None] | None = None
    #: ``{id(t): [t, t.grad when first seen]}``: tensors whose ``.grad`` library code may set
    #: while jit traces (backward, optimizers, clipping); jit replays their changes.
    grads: dict[int, list] = {}
    touched: set[int] = set()  # ids of those whose .grad a recorded call may have changed
    #: (t, whether t.grad was None when the traced step first read it): the step is only
    #: valid for calls that find the same (else jit traces again)
    guards: list[tuple[Tensor, bool]] = []
    #: the leaves that require grad (parameters) by id (a Tensor's == is elementwise: no WeakSet),
    #: and their ``.grad`` when the trace began: a ``.grad`` the step changed without a recorded
    #: call was assigned by the step's own code
    leaves: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    entry: dict[int, tuple[Tensor, Any]] = {}
    #: ``{id(array): (array, its Tensor, its contents when made)}`` of the buffers a factory
    #: (zeros, empty, full ...) made while jit traces (``born_in_trace``)
    born: dict[int, tuple[np.ndarray, Any, np.ndarray]] = {}
    #: ``{id(t): (t, contents)}``: those a recorded in-place call writes into; the compiled step
    #: makes each again at the start of every call, as eager execution does (torch.compile too)
    fresh: dict[int, tuple[Any, np.ndarray]] = {}
    #: ids of the values a transform called directly in the jitted function returned: eagerly
    #: (at top level) plain arrays, so jit returns them as arrays (transforms._unbox notes them)
    eager_arrays: set[int] = set()


def born_in_trace(t: object) -> tuple[np.ndarray, Any, np.ndarray] | None:
    """The record in ``_Trace.born`` of the buffer a factory made during this trace that ``t``'s
    memory is (or is a view of); None if it is no such buffer."""
    arr = t._value if isinstance(t, Tensor) else None
    while isinstance(arr, np.ndarray):
        rec = _Trace.born.get(id(arr))
        if rec is not None and rec[0] is arr:
            return rec
        arr = arr.base
    return None


def user_line() -> str:
    """``file:line`` of the innermost frame outside the rlgrad package: the user's code that a
    trace-time error is about."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(pkg + os.sep):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class _Depth:
    value = 0  # how many transforms (grad, vjp, jit ...) are currently evaluating their function
    # of those, how many were given NumPy arrays (no Tensor): their function is NumPy code, so the
    # Tensor operators on its traced values keep NumPy's type promotion (rlgrad/promotion.py)
    numpy = 0


def _refuse_float(t: Any, what: str) -> None:
    """Inside a transform (autograd/JAX semantics) a float read of a value being differentiated
    would drop a gradient that is not 0: refused, as autograd and JAX refuse it. (An int read is
    piecewise constant, its derivative 0: allowed. Outside transforms, PyTorch's float(loss).)"""
    if _Depth.value and t.requires_grad:
        raise TypeError(
            f"{what} of a value being differentiated (inside rlgrad.grad, vjp ...) would drop its "
            "gradient; keep it a Tensor, or read it without one: float(rlgrad.stop_gradient(x))")


class TraceError(RuntimeError):
    """What ``rlgrad.jit`` cannot compile, found while tracing (the line is in the message)."""


def _refuse_value(what: str) -> None:
    if _Trace.compiling:
        raise TraceError(
            f"rlgrad.jit: {what} of a traced tensor at {user_line()} reads its value while "
            "tracing, so the compiled step would bake in this one value: keep data-dependent "
            "Python (if/while on tensor values, .item(), .numpy()) outside the jitted function, "
            "use rlgrad.numpy.where for a choice, or pass the value as an argument"
        )
_default_dtype: list[np.dtype] = [np.dtype(np.float32)]


def get_default_dtype() -> np.dtype:
    """dtype given to Python floats by ``rlgrad.tensor`` (float32, as in PyTorch)."""
    return _default_dtype[0]


def set_default_dtype(dtype: DTypeLike) -> None:
    d = np.dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype takes a floating dtype, got {d}")
    _default_dtype[0] = d


class Tensor(TensorMethods):
    """An n-dimensional array that can record the operations applied to it.

    ``.data`` is, as in PyTorch, a Tensor outside the graph sharing this one's memory; the NumPy
    array itself is ``._value`` (library code) or ``.detach().numpy()`` (user code).
    """

    # _cut: (op, reason, sources) where a gradient path was cut (see tracer._record), else None;
    # unset on graph nodes (they require grad, so nothing reads it), hence read with getattr.
    # _written: 0, or the creation-order number (``_seq``'s counter) of the last in-place write,
    # so a node older than that write knows the value it saved has changed (torch's version check).
    # _prev: set by an in-place op that rebased this tensor (rlgrad/inplace.py): the object now
    # holding its previous node, which older nodes' gradients go to; unset otherwise (getattr).
    # _hooks: {handle id: fn} set by register_hook (run by core.reference_backward); else unset.
    __slots__ = ("_value", "requires_grad", "grad", "_op", "_args", "_kw", "_retain", "_seq", "_cut",
                 "_written", "_prev", "_hooks", "__weakref__")
    __array_priority__ = 1000  # so ndarray <op> Tensor defers to the Tensor's reflected operator
    _value: np.ndarray
    requires_grad: bool
    grad: Tensor | None
    _op: Primitive | None
    _args: tuple | None
    _kw: dict | None
    _retain: bool
    _seq: int
    _cut: tuple | None
    _written: int
    _prev: Tensor
    _hooks: dict[int, Callable[[Tensor], Tensor | None]]

    def __init__(self, *args: ArrayLike, requires_grad: bool = False, dtype: DTypeLike = None,
                 device: DeviceLike = None) -> None:
        """``torch.Tensor(data)``: a float tensor of the default dtype (float32), whatever the
        input's dtype, sharing the memory of a NumPy array of that dtype (as PyTorch's);
        ``torch.Tensor(2, 3)``: a tensor of that shape (zeros here). ``rlgrad.tensor(data)``
        keeps the input's dtype."""
        check_device(device)
        arr = _constructor_array(args, dtype)
        if _Trace.compiling and len(args) == 1:  # Tensor(x) of a traced x: traced too
            traced = _Trace.wrap(args[0], arr, False, copy=False, into=self) if _Trace.wrap else None
            if traced is not None:
                arr = traced._value
        _init_leaf(self, arr, requires_grad)

    # ---- flags --------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place (freezing a parameter is ``requires_grad_(False)``)."""
        if requires_grad and self._value.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(
                f"only floating-point tensors can require gradients, this one is "
                f"{self._value.dtype} with shape {self.shape}: integer and boolean values "
                f"(indices, actions, masks) are never differentiable"
            )
        if not requires_grad and self._op is not None:
            raise RuntimeError(
                "requires_grad_(False) is only for leaf tensors; use .detach() to cut the "
                "gradient of a computed tensor"
            )
        self.requires_grad = bool(requires_grad)
        if requires_grad:
            _Trace.leaves[id(self)] = self
        return self

    @property
    def is_leaf(self) -> bool:
        return self._op is None

    @property
    def grad_fn(self) -> Primitive | None:
        """The primitive that produced this tensor, or None for leaves (as in PyTorch)."""
        return self._op

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after ``backward()`` (as in PyTorch)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        self._retain = True

    @property
    def retains_grad(self) -> bool:
        """Whether this non-leaf keeps its ``.grad`` (``retain_grad()``); False on leaves."""
        return self._op is not None and bool(self._retain)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """torch's: ``hook(grad)`` runs when this tensor's gradient is computed (a leaf's before
        it goes into ``.grad``); a Tensor it returns replaces the gradient. Hooks run in the
        order registered, under ``create_graph`` on the recorded gradient. The handle's
        ``remove()`` takes it out."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"register_hook takes a function of the gradient, got {type(hook).__name__}")
        hooks = getattr(self, "_hooks", None)
        if hooks is None:
            hooks = self._hooks = {}
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        HOOKED[id(self)] = self
        return handle

    def detach_(self) -> Tensor:
        self._op = self._args = self._kw = self._cut = None
        self.requires_grad = False
        return self

    @property
    def data(self) -> Tensor:
        """PyTorch's ``.data``: a Tensor that shares this one's memory, requires no grad and is
        not in the graph (``target.data.copy_(tau * p.data + (1 - tau) * target.data)``).
        Writes through it are not seen by the in-place version check, as in PyTorch."""
        if _Trace.compiling and _Trace.wrap is not None:  # rlgrad.jit: the same array, traced
            traced = _Trace.wrap(self, self._value, False, copy=False)
            if traced is not None:
                return traced
        return constant(self._value)

    @data.setter
    def data(self, value: Tensor | np.ndarray) -> None:
        """``t.data = other``: ``t`` now holds ``other``'s array (no copy), as in PyTorch (under
        rlgrad.jit, replayed: rlgrad.tensor_methods installs that setter)."""
        _set_data(self, value)

    # ---- NumPy views ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    def size(self, dim: int | None = None) -> Size | int:
        """PyTorch's: the shape as a ``Size`` (a tuple), or the length of dimension ``dim``.
        (NumPy's ``.size``, the element count, is ``numel()``.)"""
        return Size(self._value.shape) if dim is None else self._value.shape[dim]

    @property
    def device(self) -> device:
        return CPU

    is_cuda = False

    def numel(self) -> int:
        return int(self._value.size)

    def dim(self) -> int:
        return self._value.ndim

    def numpy(self) -> np.ndarray:
        _refuse_value("numpy()")
        if self.requires_grad:
            raise RuntimeError(
                "can't call numpy() on a tensor that requires grad: the gradient would be "
                "dropped; use .detach().numpy()"
            )
        return np.asarray(self._value)

    def item(self) -> float | int | bool:
        _refuse_value("item()")
        if self.dtype.kind in _FLOAT_KINDS:
            _refuse_float(self, "item()")
        if self._value.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._value.item()

    def tolist(self) -> list | float | int | bool | complex:
        _refuse_value("tolist()")
        return np.asarray(self._value).tolist()

    def __array__(self, dtype: DTypeLike = None, copy: bool | None = None) -> np.ndarray:
        _refuse_value("a NumPy conversion (np.asarray: rlgrad.numpy.asarray keeps it traced)")
        if self.requires_grad:
            raise TypeError(
                "converting a tensor that requires grad to a NumPy array would silently drop "
                "its gradient; call .detach() first, or use rlgrad.numpy's function"
            )
        arr = np.asarray(self._value)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        return arr.copy() if copy and arr is self._value else arr  # np.array(t) is a copy

    @classmethod
    def __torch_function__(cls, func: Callable[..., object], types: object,
                           args: tuple[object, ...] = (), kwargs: dict[str, object] | None = None
                           ) -> object:
        """A torch function handed rlgrad Tensors (``th.allclose(mine, theirs)`` in a script that
        compares the two): it runs on torch copies of their values and answers torch tensors.
        No graph crosses over (a ``.backward()`` of the answer raises in torch); torch is the
        caller's module, never imported by rlgrad."""
        import sys

        torch = sys.modules["torch"]

        def conv(x: object) -> object:
            if isinstance(x, Tensor):
                _refuse_value("a torch function")
                return torch.from_numpy(np.array(x._value))
            if isinstance(x, list | tuple):
                return type(x)(conv(v) for v in x)
            return x

        return func(*(conv(a) for a in args), **{k: conv(v) for k, v in (kwargs or {}).items()})

    def __len__(self) -> int:
        if self._value.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._value.shape[0]

    def __iter__(self):  # noqa: ANN204
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        _refuse_value("bool()")
        return bool(self._value)

    def __float__(self) -> float:
        _refuse_value("float()")
        _refuse_float(self, "float()")
        return float(self._one_element("float()"))

    def __int__(self) -> int:
        _refuse_value("int()")
        return int(self._one_element("int()"))

    def _one_element(self, what: str) -> float | int | bool:
        # torch converts any one-element tensor (shape (1,) or (1, 1) too), NumPy only 0-d
        if self._value.size != 1:
            raise TypeError(f"{what} needs a tensor with one element, this one has shape "
                            f"{self.shape}")
        return self._value.item()

    def __index__(self) -> int:
        _refuse_value("using it as a Python index (e.g. a NumPy array indexed by it)")
        if self._value.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self._value)

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        body = np.array2string(np.asarray(self._value), separator=", ", prefix="tensor(")
        extra = ""
        if self._value.dtype != get_default_dtype() and self._value.dtype.kind == "f":
            extra += f", dtype={self._value.dtype}"
        if self._op is not None:
            extra += f", grad_fn=<{self._op.name}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"


def _set_data(t: Tensor, value: Tensor | np.ndarray) -> None:
    arr: np.ndarray = value._value if isinstance(value, Tensor) else value
    if not isinstance(arr, np.ndarray | np.generic):
        raise TypeError(f"assigning .data needs a Tensor or a NumPy array, got {type(value).__name__}")
    t._value = arr


#: the live tensors that have hooks, by id: while any does, backward passes take the reference
#: loop (core.reference_backward), the one that runs hooks (weak: a dead tensor drops out).
HOOKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class RemovableHandle:
    """What ``register_hook`` and the Module hook registrations return (torch's
    ``torch.utils.hooks.RemovableHandle``): ``remove()`` takes the hook out; usable as a
    context manager."""

    _ids = itertools.count()

    def __init__(self, hooks: dict, *extra: dict) -> None:
        self.id = next(RemovableHandle._ids)
        self._dicts = (hooks, *extra)

    def remove(self) -> None:
        for d in self._dicts:
            d.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class Size(tuple):
    """``torch.Size``: the tuple ``Tensor.size()`` returns."""

    __slots__ = ()

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"Size({list(self)})"


def _init_leaf(t: Tensor, arr: np.ndarray, requires_grad: bool) -> None:
    t._value = arr
    t.grad = None
    t._op = None
    t._args = None
    t._kw = None
    t._retain = False
    t._cut = None
    t._written = 0
    t.requires_grad = False
    if requires_grad:
        t.requires_grad_(True)


def _constructor_array(args: tuple, dtype: Any) -> np.ndarray:
    dt = get_default_dtype() if dtype is None else np.dtype(dtype)
    if all(isinstance(a, int | np.integer) and not isinstance(a, bool) for a in args) and (
            len(args) != 1 or not isinstance(args[0], np.ndarray)):
        return np.zeros(args, dt)  # Tensor(2, 3) / Tensor(): a shape (torch leaves it unset)
    if len(args) == 1 and isinstance(args[0], Size):
        return np.zeros(tuple(args[0]), dt)
    if len(args) != 1:
        raise TypeError(f"Tensor() takes one array-like or integer sizes, got {len(args)} arguments")
    data = args[0]
    if isinstance(data, Tensor):
        data = data._value
    elif isinstance(data, list | tuple) and any(isinstance(d, Tensor) for d in data):
        data = [np.asarray(d.detach()._value if isinstance(d, Tensor) else d) for d in data]
    return np.asarray(data, dtype=dt)


def _leaf(arr: np.ndarray, requires_grad: bool = False) -> Tensor:
    """A leaf Tensor holding ``arr`` itself (no conversion, no copy)."""
    t = _new(Tensor)
    _init_leaf(t, arr, requires_grad)
    return t


def _as_array(data: Any, dtype: Any = None) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data._value
    if dtype is not None:
        return np.asarray(data, dtype=dtype)
    if isinstance(data, np.ndarray | np.generic):
        return np.asarray(data)
    arr = np.asarray(data)
    if arr.dtype == np.float64 and not _has_float64(data):
        arr = arr.astype(_default_dtype[0])  # Python floats: the default dtype, as torch's
    return arr


def _has_float64(data: Any) -> bool:
    """Whether a (nested) list holds a NumPy float64 (scalar, array or Tensor): torch.tensor
    then gives float64 (``tensor([np.float64(1.0)])``), for Python floats the default dtype."""
    if isinstance(data, list | tuple):
        return any(_has_float64(d) for d in data)
    if isinstance(data, Tensor):
        data = data._value
    return isinstance(data, np.ndarray | np.generic) and data.dtype == np.float64


def tensor(data: ArrayLike, *, dtype: DTypeLike = None, device: DeviceLike = None,
           requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """Make a leaf Tensor holding a copy of ``data`` (as ``torch.tensor``: updating one never
    changes the other). A NumPy array keeps its dtype (float64 stays float64, as in PyTorch);
    Python floats get the default dtype (float32), Python ints int64, bools bool."""
    raw = data
    if hasattr(data, "_phys") or isinstance(data, list | tuple) and any(
            hasattr(d, "_phys") for d in data if isinstance(d, Tensor)):
        return BATCHED_COPY[0](data, dtype)  # inside vmap: a copy of each slice, still batched
    if isinstance(data, list | tuple) and any(isinstance(d, Tensor) for d in data):
        raw = [np.asarray(d._value if isinstance(d, Tensor) else d) for d in data]
    check_device(device)
    arr = _as_array(raw, dtype)
    if _Trace.compiling and _Trace.wrap is not None:  # data holding traced Tensors: traced too
        traced = _Trace.wrap(data, arr, requires_grad, copy=True)
        if traced is not None:
            return traced
    if arr is (raw._value if isinstance(raw, Tensor) else raw):
        arr = arr.copy()
    return _leaf(arr, requires_grad)


#: [rlgrad.batching.copy_of]: ``tensor(x)`` of a vmapped (batched) tensor, or of a list holding
#: one, set when rlgrad.batching is imported (it imports this module)
BATCHED_COPY: list[Callable[[Any, Any], Tensor]] = []


# Creation order of recorded tensors: an argument is always created before the tensors computed
# from it, so sorting by this number gives the backward pass its topological order.
_next_seq = itertools.count().__next__

def mark_written(*tensors: object) -> None:
    """Record an in-place write into each Tensor among ``tensors``: a gradient rule recorded
    before it would read the new values, so the backward pass refuses it (as torch's version
    counter does). Every in-place API calls this; writes into ``._value``'s array are not seen."""
    for t in tensors:
        if isinstance(t, Tensor):
            t._written = _next_seq()


# The fast constructor: it bypasses __init__'s checks (the data is already an array produced by
# NumPy and the flags are known).
_new = object.__new__


def constant(data: np.ndarray | np.generic) -> Tensor:
    """``data`` as a Tensor that never requires grad, with no copy and no conversion: the result
    of an op that records nothing, a gradient handed to ``.grad``, a value put in a graph as a
    constant. ``data`` must already be a NumPy array or NumPy scalar (``rlgrad.tensor`` converts
    and copies anything else); the Tensor shares its memory, as ``torch.from_numpy`` does."""
    t = _new(Tensor)
    t._value = data  # type: ignore[assignment]  # a NumPy scalar reads as a 0-d array does
    t.requires_grad = False
    t.grad = None
    t._op = None
    t._args = None
    t._kw = None
    t._retain = False
    t._cut = None
    t._written = 0
    return t


_const = constant  # the name ~18 modules imported before it was public


# Shape queries that work on a Tensor, an ndarray or a Python scalar/list alike.
def _shape(x: Any) -> tuple[int, ...]:
    return x.shape if hasattr(x, "shape") else np.shape(x)


def _ndim(x: Any) -> int:
    return x.ndim if hasattr(x, "ndim") else np.ndim(x)


def _size(x: Any) -> int:
    return x._value.size if isinstance(x, Tensor) else np.size(x)
