"""On plain arrays every ``rlgrad.numpy`` function returns NumPy's own result: the same values
(NaN where NumPy has NaN), dtype, shape and type, for ordinary, empty, NaN- and inf-holding,
integer, boolean and 0-d inputs (issue 19: the mean of nothing was 0.0, NumPy says NaN).

The sweep calls every function under a set of generic call patterns; a pattern NumPy refuses is
skipped (rlgrad may accept more), one NumPy accepts must give NumPy's result.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

_RNG = np.random.default_rng(0)
_WIDE = np.array([[-3.0, 0.0, 2.5], [np.nan, np.inf, -np.inf]])
ARRAYS: dict[str, Any] = {
    "f64": _RNG.uniform(-0.9, 0.9, (2, 3)),
    "f64_wide": _WIDE,
    "f32": _RNG.uniform(-2, 2, (2, 3)).astype(np.float32),
    "f32_nan": _WIDE.astype(np.float32),
    "f16": _RNG.uniform(-2, 2, (2, 3)).astype(np.float16),
    "i64": np.array([[-2, 0, 3], [5, -1, 1]]),
    "u8": np.array([[2, 0, 3], [5, 1, 1]], dtype=np.uint8),
    "bool": np.array([[True, False, True], [False, False, True]]),
    "vec": np.array([0.5, -1.5, 2.0, 0.25]),
    "vec_nan": np.array([np.nan, 1.0, np.nan]),
    "empty": np.ones((0, 3)),
    "empty1": np.ones((0,)),
    "empty_i": np.ones((3, 0), dtype=np.int64),
    "scalar": np.array(0.5),
    "pyfloat": 0.75,
    "square": np.array([[2.0, 0.5, 0.1], [0.3, 1.5, -0.2], [0.0, 0.4, 3.0]]),
}
PATTERNS: list[tuple[tuple, dict]] = [
    ((), {}),
    ((), {"axis": 0}),
    ((), {"axis": -1}),
    ((), {"axis": 0, "keepdims": True}),
    ((), {"axis": None, "keepdims": True}),
    ((1,), {}),
    ((2,), {}),
    ((0.5,), {}),
    ((0, -1), {}),
    ((1, 0), {}),
    (("same",), {}),  # a second array of the same shape
    (("row",), {}),  # a second array that broadcasts
]


def _own_numpy(name: str) -> bool:
    return getattr(rnp, name) is getattr(np, name, None)


NAMES = sorted(
    n for n in dir(rnp)
    if not n.startswith("_") and callable(getattr(rnp, n)) and hasattr(np, n)
    and not isinstance(getattr(rnp, n), type) and not _own_numpy(n)
)


def _second(kind: str, a: Any) -> Any:
    arr = np.asarray(a)
    if kind == "same":
        return arr[::-1].copy() if arr.ndim else arr * 0.5
    return arr[..., :1] if arr.ndim else arr  # broadcasts against a


def _call(fn: Any, a: Any, args: tuple, kwargs: dict) -> Any:
    """fn on copies (some forms write into an argument: nan_to_num(a, False), a ufunc's out)."""
    args = tuple(_second(x, a) if isinstance(x, str) else x for x in args)
    a, args, kwargs = copy.deepcopy((a, args, kwargs))
    return fn(a, *args, **kwargs)


def _same(want: Any, got: Any, where: str, exact: bool = True) -> None:
    """``got`` is NumPy's ``want``: the same structure, type (``exact``), dtype, shape and values
    (NaN where NumPy has NaN); without ``exact``, floats within a few ulp of the dtype
    (compositions round differently) and any array-like type."""
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want), where
        for w, g in zip(want, got):
            _same(w, g, where, exact)
        return
    if exact:
        assert type(got) is type(want), (f"{where}: type {type(got).__name__}, NumPy "
                                          f"{type(want).__name__}")
    w, g = np.asarray(want), np.asarray(got)
    assert g.dtype == w.dtype, f"{where}: dtype {g.dtype}, NumPy {w.dtype}"
    assert g.shape == w.shape, f"{where}: shape {g.shape}, NumPy {w.shape}"
    if not exact and w.dtype.kind in "fc":
        tol = 8 * np.finfo(w.dtype).eps
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=where)
    else:
        np.testing.assert_array_equal(g, w, err_msg=where)


# Forms of NumPy's signatures that rlgrad does not take (it raises TypeError, never a wrong value).
NOT_TAKEN = {
    ("where", 0): "where(cond) alone is nonzero(cond): use rlgrad.numpy.nonzero",
    ("broadcast_to", 2): "the positional subok= of broadcast_to",
}
UNINITIALISED = ("empty_like",)  # values are whatever memory held: dtype and shape only


def _patterns(ref: Any) -> list[tuple[tuple, dict]]:
    if isinstance(ref, np.ufunc):  # further positional arguments of a ufunc are its out=
        return [p for p in PATTERNS if len(p[0]) == ref.nin - 1]
    return PATTERNS


def _compare(name: str, fn: Any, ref: Any, a: Any, args: tuple, kwargs: dict, where: str) -> bool:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            want = _call(ref, a, args, kwargs)
        except Exception:  # noqa: BLE001 - NumPy refuses this call: nothing to match
            return False
        try:
            got = _call(fn, a, args, kwargs)
        except Exception as e:  # noqa: BLE001
            if isinstance(e, TypeError) and (name, len(args)) in NOT_TAKEN:
                return False
            raise AssertionError(f"{where} raised {type(e).__name__}: {e}; NumPy returned "
                                 f"{want!r}") from None
    if name in UNINITIALISED:
        want, got = np.zeros_like(want), np.zeros_like(got)
    _same(want, got, where)
    return True


@pytest.mark.parametrize("name", NAMES)
def test_rlgrad_numpy_on_plain_arrays_is_numpy(name):
    fn, ref = getattr(rnp, name), getattr(np, name)
    checked = 0
    for key, a in ARRAYS.items():
        for args, kwargs in _patterns(ref):
            checked += _compare(name, fn, ref, a, args, kwargs, f"{name}({key}, {args}, {kwargs})")
    extra = EXTRA.get(name, [])
    for args, kwargs in extra:
        checked += _compare(name, fn, ref, args[0], args[1:], kwargs, f"{name}{args} {kwargs}")
    assert checked, f"no call pattern of {name} was accepted by NumPy: add one to EXTRA"


_A, _V, _E = ARRAYS["f64_wide"], ARRAYS["vec"], ARRAYS["empty"]
_B = ARRAYS["bool"]
# Calls the generic patterns cannot make (several arrays, subscripts, weights ...).
EXTRA: dict[str, list[tuple[tuple, dict]]] = {
    "einsum": [(("ij->j", _A), {}), (("ij,kj->ik", _A, _A), {}), (("i,i", _V, _V), {}),
               (("ij->i", _E), {}), (("ii", ARRAYS["square"]), {})],
    "where": [((_B, _A, 0.0), {}), ((_B, 1, ARRAYS["f32"]), {}), ((_B, _A, np.nan), {})],
    "clip": [((_A, -1, 1), {}), ((ARRAYS["f32"], -1.0, None), {}), ((_E, 0, 1), {}),
             ((ARRAYS["i64"], 0, 2), {}), ((_A, None, 0.5), {})],
    "concatenate": [(([_A, _A],), {}), (([_A, _A],), {"axis": 1}), (([_E, _E],), {}),
                    (([_V, ARRAYS["vec_nan"]],), {})],
    "stack": [(([_A, _A],), {}), (([_E, _E],), {"axis": -1})],
    "hstack": [(([_A, _A],), {}), (([_V, _V],), {})],
    "vstack": [(([_A, _A],), {}), (([_V, _V],), {})],
    "take_along_axis": [((_A, np.argsort(_A, axis=1), 1), {}), ((_E, np.zeros((0, 1), int), 1), {})],
    "pad": [((_A, 1), {}), ((_A, ((0, 1), (2, 0))), {"mode": "edge"}), ((_E, 1), {})],
    "searchsorted": [((np.sort(_V), 0.3), {}), ((np.sort(_V), _V), {"side": "right"})],
    "average": [((_A,), {"weights": np.ones_like(_A)}), ((_V,), {"weights": _V ** 2}),
                ((_A,), {"axis": 1, "weights": np.ones(3)})],
    "var": [((_A,), {"ddof": 1}), ((_V,), {"ddof": 1}), ((_E,), {"axis": 0, "ddof": 1}),
            ((ARRAYS["f32"],), {"axis": 1, "keepdims": True})],
    "std": [((_A,), {"ddof": 1}), ((_V,), {"ddof": 4}), ((ARRAYS["f16"],), {"axis": 0})],
    "round": [((_A * 1.234,), {"decimals": 2}), ((ARRAYS["f32"],), {"decimals": 1})],
    "tensordot": [((_A, _A.T), {"axes": 1}), ((_A, _A), {"axes": ([0, 1], [0, 1])})],
    "split": [((_V, 2), {}), ((_A, [1, 2]), {"axis": 1})],
    "array_split": [((_V, 3), {}), ((_A, 2), {"axis": 1})],
    "take": [((_A, [0, 5, -1]), {}), ((_A, np.array([2, 0])), {"axis": 1})],
    "heaviside": [((_A, 0.5), {}), ((ARRAYS["f32"], np.float32(1)), {})],
    "nan_to_num": [((_A,), {"nan": -1.0}), ((ARRAYS["f32_nan"],), {})],
    "diagonal": [((np.ones((2, 3, 4)), 1, 1, 2), {}), ((ARRAYS["square"], -1), {})],
    "trace": [((np.ones((2, 3, 4)), 0, 1, 2), {}), ((ARRAYS["square"],), {})],
    "diff": [((_A,), {"n": 2, "axis": 0}), ((_V,), {"n": 3})],
    "moveaxis": [((np.ones((2, 3, 4)), [0, 1], [-1, 0]), {})],
    "matmul": [((_A, _A.T), {}), ((_V, _V), {}), ((_E.T, _E), {})],
    "repeat": [((_V, [1, 0, 2, 1]), {}), ((_A, 2), {"axis": 1}), ((_E, 2), {"axis": 0})],
    "dsplit": [((np.ones((2, 3, 4)), 2), {}), ((np.ones((2, 3, 4)), [1, 3]), {})],
    "vsplit": [((np.ones((4, 3)), 2), {}), ((np.ones((4, 3, 2)), [1]), {})],
    "hsplit": [((np.ones((2, 4)), 2), {}), ((_V, 2), {})],
    "append": [((_A, _A), {}), ((_A, _A), {"axis": 1}), ((_V, 1.0), {})],
    "column_stack": [(([_V, _V],), {}), (([_A.T, _A.T],), {})],
    "row_stack": [(([_A, _A],), {}), (([_V, _V],), {})],
    "atleast_3d": [((_A, _V, ARRAYS["scalar"]), {})],
    "select": [(([_A > 0, _A < -1], [_A, -_A], 0.5), {})],
    "kron": [((_A, ARRAYS["square"]), {}), ((_V, _A), {})],
    "cross": [((np.ones((2, 3)), _A), {}), ((_A, _A), {"axis": 1}), ((_V[:2], _V[1:3]), {})],
    "linspace": [((0.0, 1.0, 5), {}), ((_V, _V * 2, 3), {"axis": 1}),
                 ((_V, 2.0, 4), {"endpoint": False, "retstep": True})],
    "rot90": [((_A,), {"k": 3}), ((np.ones((2, 3, 4)), 2, (2, 1)), {})],
    "rollaxis": [((np.ones((2, 3, 4)), 2), {}), ((np.ones((2, 3, 4)), 0, 3), {})],
    "partition": [((_V, 2), {}), ((_A, 1), {"axis": 0})],
    "gradient": [((_V,), {}), ((_A, 0.5), {}), ((np.ones((3, 4)),), {"edge_order": 2, "axis": 1})],
    "full": [(((2, 3), 1.5), {}), ((3, _V[:1]), {}), (((2, 4), _V), {"dtype": np.float32})],
    "permute_dims": [((np.ones((2, 3, 4)), (1, 2, 0)), {})],
    "hypot": [((_A, _A[:, :1]), {})],
    "fmax": [((_A, ARRAYS["f64"]), {}), ((ARRAYS["vec_nan"], 0.0), {})],
    "fmin": [((_A, ARRAYS["f64"]), {}), ((ARRAYS["vec_nan"], 0.0), {})],
}


# ---- the same functions on Tensors: NumPy's values (to rounding), dtype and shape ----------------
TENSOR_ARRAYS = ("f64", "f64_wide", "f32", "f32_nan", "vec", "vec_nan", "empty", "empty1", "scalar")
TENSOR_PATTERNS = [p for p in PATTERNS if all(not isinstance(x, int) for x in p[0])]


def _unwrap(x: Any) -> Any:
    if isinstance(x, tuple | list):
        return type(x)(_unwrap(v) for v in x)
    return x._value if isinstance(x, rlgrad.Tensor) else x


@pytest.mark.parametrize("name", [n for n in NAMES if n not in UNINITIALISED])
def test_rlgrad_numpy_on_tensors_gives_numpy_values(name):
    """A call NumPy takes either gives NumPy's values on a Tensor or is refused with a
    TypeError/NotImplementedError (a form rlgrad does not differentiate): never another value."""
    fn, ref = getattr(rnp, name), getattr(np, name)
    for key in TENSOR_ARRAYS:
        a = ARRAYS[key]
        for args, kwargs in [p for p in _patterns(ref) if p in TENSOR_PATTERNS]:
            where = f"{name}(Tensor {key}, {args}, {kwargs})"
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    want = _call(ref, a, args, kwargs)
                except Exception:  # noqa: BLE001
                    continue
                t = rlgrad.tensor(a, requires_grad=np.asarray(a).dtype.kind == "f")
                try:
                    got = _call(fn, t, args, kwargs)
                except (TypeError, NotImplementedError):
                    continue
            _same(want, _unwrap(got), where, exact=False)


def _tensors(x: Any) -> Any:
    """Float arrays (also inside lists and tuples) as Tensors that require grad."""
    if isinstance(x, list | tuple):
        return type(x)(_tensors(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return rlgrad.tensor(x, requires_grad=True)
    return x


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_extra_calls_on_tensors_give_numpy_values(name):
    """The EXTRA calls with their float arrays as Tensors: NumPy's values, or a refusal."""
    fn, ref = getattr(rnp, name), getattr(np, name)
    for args, kwargs in EXTRA[name]:
        where = f"{name}{args} {kwargs} on Tensors"
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = ref(*copy.deepcopy(args), **kwargs)
            try:
                got = fn(*_tensors(args), **kwargs)
            except (TypeError, NotImplementedError):
                continue
        _same(want, _unwrap(got), where, exact=False)
