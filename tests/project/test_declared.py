"""The declarations of ``rlgrad/exports.py``: every Tensor method declared with torch's
signature (``export(..., torch="cumsum(dim, *, dtype=None)")``) called with torch's keyword
names gives torch's values and gradients; the top-level names give torch's functions' values;
``logcumsumexp``, added as one declaration, against torch and finite differences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import ops
from rlgrad.exports import EXPORTS, REQUIRED, Method, export

torch = pytest.importorskip("torch")

METHODS = {m.name: (e, m) for e in EXPORTS for m in e.methods}
# Declared methods torch's Tensor does not have (NumPy's names kept as methods, and softplus)
RLGRAD_ONLY = {"astype", "expand_dims", "softplus"}
MIRRORS = sorted(n for n in METHODS if n not in RLGRAD_ONLY)

OTHER = "a second tensor"  # the value of a tensor operand (other, exponent)
ARGS = {"dim": 1, "keepdim": True, "dims": (0,), "shifts": 1, "diagonal": 1, "axis0": 0,
        "axis1": 1, "source": 0, "destination": 1, "size": (2, 3, 4), "min": 0.35, "max": 0.75,
        "decimals": 1, "other": OTHER, "exponent": OTHER, "tensor": OTHER, "vec2": OTHER,
        "values": OTHER, "n": 2, "offset": 1, "dim1": 0, "dim2": 1, "nan": 0.0, "posinf": 9.0,
        "neginf": -9.0}
# (input, other); default (3, 4) both
SHAPES = {"dot": ((4,), (4,)), "matmul": ((3, 4), (4, 2)), "outer": ((3,), (4,)),
          "det": ((3, 3), (3, 3)), "inverse": ((3, 3), (3, 3))}
NO_GRAD = {"detach"}  # a value checked, no gradient
TORCH_HAS_NO_DERIVATIVE = {"heaviside"}  # values compared; rlgrad's gradient is 0 (a step)
INTEGER_OK = {"argmax", "argmin"}


def _inputs(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xs, os = SHAPES.get(name, ((3, 4), (3, 4)))
    x = rng.uniform(0.2, 0.9, xs)  # inside every domain (log, sqrt, asin, atanh ...), no ties
    if name in ("acosh", "arccosh"):
        x = x + 1.5
    return x, rng.uniform(0.3, 1.2, os)


def _kwargs(m: Method, other: Any) -> dict[str, Any]:
    """torch's keyword names, with a value for each (dtype= is tested on its own)."""
    return {p.torch: other if ARGS[p.torch] is OTHER else ARGS[p.torch]
            for p in m.params if p.torch != "dtype"}


def test_every_declared_method_is_torchs_or_listed_as_rlgrads_own() -> None:
    own = {n for n in METHODS if not hasattr(torch.Tensor, n)}
    assert own == RLGRAD_ONLY
    for name in METHODS:
        assert getattr(rlgrad.Tensor, name).__name__ in (name, METHODS[name][0].fn.__name__)


@pytest.mark.parametrize("name", MIRRORS)
def test_method_with_torchs_keywords_matches_torch(name: str) -> None:
    """Values and gradients (of input and tensor operands) against torch, in float64, with the
    arguments passed by torch's keyword names."""
    _, m = METHODS[name]
    x, o = _inputs(name)
    tx, to = torch.tensor(x, requires_grad=True), torch.tensor(o, requires_grad=True)
    rx, ro = rlgrad.tensor(x, requires_grad=True), rlgrad.tensor(o, requires_grad=True)
    want = getattr(tx, name)(**_kwargs(m, to))
    got = getattr(rx, name)(**_kwargs(m, ro))
    assert tuple(got.shape) == tuple(want.shape)
    assert np.dtype(got.dtype) == np.dtype(str(want.dtype).removeprefix("torch."))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-14)
    if not want.requires_grad or name in NO_GRAD:
        assert not got.requires_grad
        return
    if name in TORCH_HAS_NO_DERIVATIVE:
        return
    w = np.random.default_rng(1).normal(size=tuple(want.shape))
    (want * torch.tensor(w)).sum().backward()
    (got * rlgrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    if to.grad is not None:
        np.testing.assert_allclose(ro.grad.numpy(), to.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", MIRRORS)
def test_method_with_torchs_positional_arguments_matches_torch(name: str) -> None:
    _, m = METHODS[name]
    x, o = _inputs(name)
    pos = [p.torch for p in m.params if not p.kwonly]
    args_t = [v for k, v in _kwargs(m, torch.tensor(o)).items() if k in pos]
    args_r = [v for k, v in _kwargs(m, rlgrad.tensor(o)).items() if k in pos]
    want = getattr(torch.tensor(x), name)(*args_t)
    got = getattr(rlgrad.tensor(x), name)(*args_r)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


TOP = sorted({n for e in EXPORTS for n in e.top if n in METHODS and hasattr(torch, n)})


@pytest.mark.parametrize("name", TOP)
def test_top_level_function_matches_torchs(name: str) -> None:
    """``rlgrad.cumsum(x, dim=1)`` is ``torch.cumsum(x, dim=1)``."""
    _, m = METHODS[name]
    x, o = _inputs(name)
    want = getattr(torch, name)(torch.tensor(x), **_kwargs(m, torch.tensor(o)))
    got = getattr(rlgrad, name)(rlgrad.tensor(x), **_kwargs(m, rlgrad.tensor(o)))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


def test_top_level_where_is_torchs() -> None:
    x, o = _inputs("where")
    c = x > 0.5
    want = torch.where(torch.tensor(c), torch.tensor(x), torch.tensor(o))
    got = rlgrad.where(rlgrad.tensor(c), rlgrad.tensor(x), rlgrad.tensor(o))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "cumsum", "softmax", "log_softmax"])
def test_dtype_keyword_casts_first_as_torch(name: str) -> None:
    x = np.arange(1, 13, dtype=np.int64).reshape(3, 4) if name != "softmax" else \
        np.linspace(-1, 1, 12).reshape(3, 4)
    want = getattr(torch.tensor(x), name)(dim=1, dtype=torch.float32)
    got = getattr(rlgrad.tensor(x), name)(dim=1, dtype=rlgrad.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# (method, dtype) where rlgrad's dtype is not torch's yet: rlgrad.numpy compositions that keep
# NumPy's float on integers (cumprod through exp(cumsum(log)), heaviside's step, nan_to_num's
# finfo), and NumPy's bool arithmetic (square of bool is int8, sign and diff of bool raise)
DTYPE_GAPS = {("cumprod", d) for d in ("int64", "int32", "uint8", "bool")} | \
    {("heaviside", d) for d in ("int64", "int32", "uint8", "bool")} | \
    {("nan_to_num", d) for d in ("int64", "int32", "uint8", "bool")} | \
    {("square", "bool"), ("sign", "bool"), ("diff", "bool")}


@pytest.mark.parametrize("name", MIRRORS)
def test_integer_and_bool_inputs_promote_as_torch(name: str) -> None:
    """Each declared method on int64, int32, uint8 and bool tensors (and a float32 one) gives
    torch's dtype and values, through its declaration's promote= rule (where torch computes at
    all: it refuses e.g. softmax of integers, which rlgrad computes in the default float)."""
    _, m = METHODS[name]
    for dt in ("int64", "int32", "uint8", "bool", "float32"):
        x, o = (((np.arange(12).reshape(3, 4) + k) % 3 + 1).astype(dt) for k in (0, 1))
        if name in SHAPES:
            x, o = x[0], o[0]
        try:
            want = getattr(torch.tensor(x), name)(**_kwargs(m, torch.tensor(o)))
        except (RuntimeError, NotImplementedError):
            continue
        if (name, dt) in DTYPE_GAPS:
            continue
        with np.errstate(all="ignore"):  # asin(2) is NaN in both
            got = getattr(rlgrad.tensor(x), name)(**_kwargs(m, rlgrad.tensor(o)))
        assert np.dtype(got.dtype) == np.dtype(str(want.dtype).removeprefix("torch.")), dt
        np.testing.assert_allclose(np.asarray(got, np.float64), want.double().numpy(),
                                   rtol=1e-6, err_msg=dt)


@pytest.mark.parametrize("name", ["sum", "prod", "cumsum"])
def test_integer_dtype_keyword_gives_that_dtype_and_torchs_wrapped_values(name: str) -> None:
    """``dtype=torch.int32``: the result is int32 (NumPy would accumulate in int64), with torch's
    values where the sum wraps around."""
    for x in (np.array([[2 ** 31 - 1, 5], [7, 3]]), np.array([[200, 100], [3, 250]], np.uint8)):
        want = getattr(torch.tensor(x), name)(dim=0, dtype=torch.int32)
        got = getattr(rlgrad.tensor(x), name)(dim=0, dtype=rlgrad.int32)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_numpy_keywords_still_work_on_methods_and_numpy_keeps_them() -> None:
    x = np.arange(12.0).reshape(3, 4)
    t = rlgrad.tensor(x)
    np.testing.assert_array_equal(t.sum(axis=1, keepdims=True).numpy(), x.sum(1, keepdims=True))
    np.testing.assert_array_equal(t.cumsum(axis=0).numpy(), x.cumsum(0))
    np.testing.assert_array_equal(rnp.cumsum(t, axis=1).numpy(), x.cumsum(1))
    np.testing.assert_array_equal(rnp.flip(t, axis=0).numpy(), np.flip(x, 0))
    with pytest.raises(TypeError):
        rnp.cumsum(t, dim=1)  # rlgrad.numpy is NumPy's: no torch names there


def test_bad_method_arguments_say_torchs_signature() -> None:
    t = rlgrad.tensor(np.ones((2, 3)))
    with pytest.raises(TypeError, match=r"cumsum\(\) missing required argument 'dim'; torch's "
                                        r"signature: cumsum\(dim, \*, dtype=None\)"):
        t.cumsum()
    with pytest.raises(TypeError, match=r"flip\(\) got an unexpected keyword argument 'dim'"):
        t.flip(dim=0)
    with pytest.raises(TypeError, match=r"multiple values for argument 'dim'"):
        t.sum(1, dim=1)
    with pytest.raises(TypeError, match=r"takes 2 positional argument\(s\)"):
        t.logsumexp(1, True, 3)
    with pytest.raises(RuntimeError, match="floating or complex dtype is needed"):
        rlgrad.tensor([1, 2]).mean()


def test_a_name_is_declared_once() -> None:
    def cumsum(x: Any) -> Any:
        return x

    with pytest.raises(ValueError, match="numpy name 'cumsum' is declared twice"):
        export(cumsum)
    with pytest.raises(ValueError, match="method name 'flip' is declared twice"):
        export(cumsum, numpy=False, torch="flip(dims)")
    with pytest.raises(ValueError, match="not a method signature"):
        export(cumsum, numpy=False, torch="flip(dims")
    assert rnp.cumsum is ops.cumsum  # (nothing was registered by the refused declarations)


def test_method_spec_parsing() -> None:
    m = Method.parse("swapaxes(axis0: axis1, axis1: axis2)")
    assert [(p.torch, p.numpy) for p in m.params] == [("axis0", "axis1"), ("axis1", "axis2")]
    m = Method.parse("sum(dim=None, keepdim=False, *, dtype=None)")
    assert [(p.torch, p.numpy, p.default, p.kwonly) for p in m.params] == [
        ("dim", "axis", None, False), ("keepdim", "keepdims", False, False),
        ("dtype", "dtype", None, True)]
    assert m.signature() == "sum(dim=None, keepdim=False, *, dtype=None)"
    m = Method.parse("pow(exponent, /)")
    assert m.params[0].positional and m.params[0].default is REQUIRED


# ---- logcumsumexp: one declaration beside its rules (ops.py) --------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_matches_torch_values_and_gradients(dim: int) -> None:
    x = np.random.default_rng(2).normal(size=(4, 5)) * 3
    tx, rx = torch.tensor(x, requires_grad=True), rlgrad.tensor(x, requires_grad=True)
    want, got = tx.logcumsumexp(dim=dim), rx.logcumsumexp(dim=dim)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-13)
    w = np.random.default_rng(3).normal(size=x.shape)  # signs of both kinds in the cotangent
    (want * torch.tensor(w)).sum().backward()
    (got * rlgrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(rlgrad.logcumsumexp(rx, dim).detach().numpy(),
                               torch.logcumsumexp(tx, dim).detach().numpy(), rtol=1e-13)


def test_logcumsumexp_second_order_matches_torch() -> None:
    x = np.random.default_rng(4).normal(size=(6,))
    v = np.random.default_rng(5).normal(size=(6,))
    tx = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((tx.logcumsumexp(0) ** 2).sum(), tx, create_graph=True)
    (hv,) = torch.autograd.grad((g * torch.tensor(v)).sum(), tx)
    rx = rlgrad.tensor(x, requires_grad=True)
    (rg,) = rlgrad.autograd.grad((rx.logcumsumexp(0) ** 2).sum(), rx, create_graph=True)
    (rhv,) = rlgrad.autograd.grad((rg * rlgrad.tensor(v)).sum(), rx)
    np.testing.assert_allclose(rhv.numpy(), hv.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_logcumsumexp_against_finite_differences(axis: Any) -> None:
    """1st and 2nd order, reverse and forward mode (float64 finite differences)."""
    x = np.random.default_rng(6).normal(size=(3, 4))
    rlgrad.check_grads(lambda a: rnp.logcumsumexp(a, axis=axis), modes=("rev", "fwd"),
                       order=2)(x)


def test_logcumsumexp_far_apart_values_stay_finite() -> None:
    """Each step is a logaddexp: no overflow at 1000, no underflow to -inf at -1000 (a max-shifted
    log(cumsum(exp)) gives -inf for the first entry here); gradients as torch's."""
    x = np.array([-1000.0, 0.0, 1000.0, 999.0, -np.inf, 3.0])
    tx, rx = torch.tensor(x, requires_grad=True), rlgrad.tensor(x, requires_grad=True)
    want, got = tx.logcumsumexp(0), rx.logcumsumexp(0)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-15)
    w = np.array([1.0, -2.0, 0.5, 1.5, -1.0, 2.0])
    (want * torch.tensor(w)).sum().backward()
    (got * rlgrad.tensor(w)).sum().backward()
    assert np.isfinite(rx.grad.numpy()).all()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_logcumsumexp_leading_minus_infinity_has_zero_not_nan_derivatives() -> None:
    x = np.array([-np.inf, -np.inf, 0.5, 1.0])
    g = rlgrad.grad(lambda a: rnp.sum(rnp.logcumsumexp(a) * np.array([1.0, 2.0, 3.0, 4.0])))
    np.testing.assert_array_equal(np.isfinite(g(x)), True)
    tangent = rlgrad.jvp(lambda a: rnp.logcumsumexp(a), (x,), (np.ones(4),))[1]
    assert np.isfinite(tangent).all()


def test_logcumsumexp_keeps_float32_and_numpys_flattening() -> None:
    x = np.random.default_rng(7).normal(size=(2, 3)).astype(np.float32)
    got = rlgrad.tensor(x).logcumsumexp(1)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), torch.tensor(x).logcumsumexp(1).numpy(), rtol=1e-6)
    flat = rnp.logcumsumexp(x.astype(np.float64))  # plain arrays, axis=None: flattened (cumsum's)
    np.testing.assert_allclose(flat, np.log(np.cumsum(np.exp(x.astype(np.float64)))), rtol=1e-13)
