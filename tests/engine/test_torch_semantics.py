"""PyTorch's semantics where rlgrad used to differ silently (issue 29 section 1): each snippet runs
under both ``torch`` and ``rlgrad`` (``lib``) and the two results are compared: values, dtypes,
shapes, gradients, and the exceptions raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

torch = pytest.importorskip("torch")

LIBS = {"torch": torch, "rlgrad": rlgrad}


def _np(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, rlgrad.Tensor):
        return np.asarray(x.detach())
    return np.asarray(x)


def _dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def same(ours: Any, theirs: Any, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    """One rlgrad result against torch's: structure, dtype, shape and values."""
    if isinstance(theirs, tuple | list):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            same(a, b, rtol, atol)
        return
    if theirs is None:
        assert ours is None
        return
    if isinstance(theirs, torch.Tensor):
        assert _dtype_name(ours) == _dtype_name(theirs), (ours.dtype, theirs.dtype)
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=rtol, atol=atol)


def both(snippet: Callable[[Any], Any], **tol: float) -> Any:
    """Run ``snippet(lib)`` under torch and rlgrad and compare what they return."""
    theirs = snippet(torch)
    ours = snippet(rlgrad)
    same(ours, theirs, **tol)
    return ours


def _data(lib: Any) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "f32": lib.tensor(rng.standard_normal(4).astype(np.float32)),
        "f64": lib.tensor(rng.standard_normal(4)),
        "z64": lib.tensor(np.float64(0.3)),
        "i64": lib.tensor(np.array([0, 2, 1, 3])),
        "i32": lib.tensor(np.array([3, -1, 2, 5], np.int32)),
        "u8": lib.tensor(np.array([0, 17, 128, 255], np.uint8)),
        "b": lib.tensor(np.array([True, False, True, True])),
    }


# ---- 1. dtype promotion -----------------------------------------------------------------------
PROMOTION_CASES: dict[str, Callable[[Any, dict], Any]] = {
    "f32 + i64": lambda lib, d: d["f32"] + d["i64"],
    "f32 * one_hot": lambda lib, d: d["f32"][:3] * lib.nn.functional.one_hot(d["i64"][:3], 3)[1],
    "td target": lambda lib, d: d["f32"] + 0.99 * (1 - d["i64"].clamp(max=1)) * d["f32"].flip(0),
    "u8 / 255.0": lambda lib, d: d["u8"] / 255.0,
    "f32 * np.float64": lambda lib, d: d["f32"] * np.float64(0.5),
    "np.float64 * f32": lambda lib, d: np.float64(0.5) * d["f32"],
    "f32 + 0-d f64": lambda lib, d: d["f32"] + d["z64"],
    "0-d f64 - f32": lambda lib, d: d["z64"] - d["f32"],
    "where f32 0-d f64": lambda lib, d: lib.where(d["b"], d["f32"], d["z64"]),
    "where f32 float": lambda lib, d: lib.where(d["b"], d["f32"], 0.25),
    "where i64 float": lambda lib, d: lib.where(d["b"], d["i64"], 0.5),
    "where floats": lambda lib, d: lib.where(d["b"], 1.0, 0.0),
    "clamp f32 min 0-d f64": lambda lib, d: lib.clamp(d["f32"], min=d["z64"]),
    "clamp f32 min f64": lambda lib, d: lib.clamp(d["f32"], min=d["f64"]),
    "clamp i64 min 0.5": lambda lib, d: d["i64"].clamp(min=0.5),
    "clamp i64 max 1": lambda lib, d: d["i64"].clamp(max=1),
    "i64 / i64": lambda lib, d: d["i64"] / (d["i64"] + 1),
    "1 / i64": lambda lib, d: 1 / (d["i64"] + 1),
    "i64 + 0.5": lambda lib, d: d["i64"] + 0.5,
    "i64 ** 0.5": lambda lib, d: d["i64"] ** 0.5,
    "2 ** i64": lambda lib, d: 2 ** d["i64"],
    "2.0 ** i64": lambda lib, d: 2.0 ** d["i64"],
    "i64 // 2.0": lambda lib, d: d["i64"] // 2.0,
    "i64 % 2.5": lambda lib, d: d["i64"] % 2.5,
    "f32 // 0-d f64": lambda lib, d: d["f32"] // d["z64"],
    "i64.exp()": lambda lib, d: d["i64"].exp(),
    "exp(i64)": lambda lib, d: lib.exp(d["i64"]),
    "u8.sqrt()": lambda lib, d: d["u8"].sqrt(),
    "b.sigmoid()": lambda lib, d: d["b"].sigmoid(),
    "tanh(i32)": lambda lib, d: lib.tanh(d["i32"]),
    "i64.logsumexp(0)": lambda lib, d: d["i64"].logsumexp(0),
    "f32 + i32 + u8": lambda lib, d: d["f32"] + d["i32"] + d["u8"],
    "u8 + i32": lambda lib, d: d["u8"] + d["i32"],
    "u8 + 0-d i64": lambda lib, d: d["u8"] + lib.tensor(3),
    "i32 + np.int64": lambda lib, d: d["i32"] + np.int64(3),
    "b + b": lambda lib, d: d["b"] + d["b"],
    "b * 2.0": lambda lib, d: d["b"] * 2.0,
    "b + 1": lambda lib, d: d["b"] + 1,
    "i64 + True": lambda lib, d: d["i64"] + True,
    "f16 + i64": lambda lib, d: d["f32"].half() + d["i64"],
    "f32 + f64": lambda lib, d: d["f32"] + d["f64"],
    "i64 + 0-d f64": lambda lib, d: d["i64"] + d["z64"],
    "f32 < np.float64": lambda lib, d: d["f32"] < np.float64(0.1),
    "f32 == 0-d f64": lambda lib, d: d["f32"] == d["z64"],
    "maximum i64 f32": lambda lib, d: lib.maximum(d["i64"], d["f32"]),
    "f32.max(f64)": lambda lib, d: d["f32"].max(d["f64"]),
    "masked_fill i64 0.5": lambda lib, d: d["i64"].masked_fill(d["b"], 0.5),
    "masked_fill f32 0-d f64": lambda lib, d: d["f32"].masked_fill(d["b"], d["z64"]),
    "u8.sum()": lambda lib, d: d["u8"].sum(),
    "i32.sum()": lambda lib, d: d["i32"].sum(),
    "b.sum()": lambda lib, d: d["b"].sum(),
    "i32.prod()": lambda lib, d: d["i32"].prod(),
    "u8.cumsum(0)": lambda lib, d: d["u8"].cumsum(0),
    "f32.sum()": lambda lib, d: d["f32"].sum(),
    "f32 + 1j": lambda lib, d: d["f32"] + 1j,
    "i64 + 1j": lambda lib, d: d["i64"] + 1j,
    "f64 + 1j": lambda lib, d: d["f64"] + 1j,
}


@pytest.mark.parametrize("name", list(PROMOTION_CASES))
def test_promotion_as_torch(name: str) -> None:
    case = PROMOTION_CASES[name]
    both(lambda lib: case(lib, _data(lib)))


def test_promotion_follows_the_default_dtype() -> None:
    torch.set_default_dtype(torch.float64)
    rlgrad.set_default_dtype(np.float64)
    try:
        for name in ("i64 + 0.5", "u8 / 255.0", "i64.exp()", "f32 * np.float64", "where floats"):
            case = PROMOTION_CASES[name]
            both(lambda lib, case=case: case(lib, _data(lib)))
    finally:
        torch.set_default_dtype(torch.float32)
        rlgrad.set_default_dtype(np.float32)


@pytest.mark.parametrize("pair", [("int64", "float16"), ("uint8", "int8"), ("bool", "int32"),
                                  ("int32", "float32"), ("float32", "float64"),
                                  ("complex64", "float64"), ("int16", "uint8"), ("bool", "bool")])
def test_promote_types(pair: tuple[str, str]) -> None:
    a, b = pair
    theirs = torch.promote_types(getattr(torch, a), getattr(torch, b))
    assert rlgrad.promote_types(getattr(np, a if a != "bool" else "bool_"),
                                np.dtype(b)).name == str(theirs).replace("torch.", "")


def test_result_type() -> None:
    def run(lib: Any) -> list[str]:
        d = _data(lib)
        operands = [(d["f32"], 2.0), (d["i64"], 2.0), (d["i64"], d["z64"]), (d["u8"], 300),
                    (d["b"], True), (d["f32"], d["f64"]), (d["z64"], 1)]
        return [str(lib.result_type(a, b)).replace("torch.", "") for a, b in operands]

    assert run(rlgrad) == run(torch)
    with pytest.raises(TypeError, match="expected Tensors or numbers"):
        rlgrad.result_type(rlgrad.ones(2), "a")


def test_matmul_of_two_dtypes_raises_as_torch() -> None:
    for lib in (torch, rlgrad):
        a = lib.ones((2, 2))
        with pytest.raises(RuntimeError, match="same dtype"):
            a @ a.double()


def _grads_of(fn: Callable[[Any, Any, Any], Any]) -> Callable[[Any], Any]:
    """A snippet: ``fn(lib, x, z)`` on a float32 vector and a float64 0-d tensor that require
    grad, returning the output and both gradients."""
    def snippet(lib: Any) -> Any:
        x = lib.tensor(np.array([0.5, -1.5, 2.0], np.float32), requires_grad=True)
        z = lib.tensor(np.float64(0.7), requires_grad=True)
        out = fn(lib, x, z)
        out.sum().backward()
        return out, x.grad, z.grad

    return snippet


@pytest.mark.parametrize("name, fn", [
    ("mul", lambda lib, x, z: x * z),
    ("div", lambda lib, x, z: z / x),
    ("pow", lambda lib, x, z: x.abs() ** z),
    ("where", lambda lib, x, z: lib.where(x > 0, x, z)),
    ("clamp", lambda lib, x, z: lib.clamp(x, min=z)),
    ("i64 as float", lambda lib, x, z: (lib.tensor([1, 2, 3]) / 2 + x) * z),
])
def test_promoted_gradients_keep_each_inputs_dtype(name: str, fn: Any) -> None:
    both(_grads_of(fn), rtol=1e-6)


def test_rlgrad_numpy_keeps_numpys_rules() -> None:
    f32 = np.ones(3, np.float32)
    i64 = np.arange(3)
    assert rnp.add(f32, i64).dtype == np.float64
    assert rnp.multiply(f32, np.float64(0.5)).dtype == np.float64
    assert rnp.exp(i64).dtype == np.float64
    t32, t64 = rlgrad.tensor(f32), rlgrad.tensor(i64)
    assert rnp.add(t32, t64).dtype == np.float64  # rlgrad.numpy on Tensors: NumPy's too
    assert rnp.divide(t64, t64 + 1).dtype == np.float64
    assert (t32 + t64).dtype == np.float32  # the Tensor's operator: torch's
    x = rlgrad.tensor(np.ones(3, np.float32), requires_grad=True)
    g = rlgrad.grad(lambda v: rnp.sum(rnp.multiply(v, np.float64(2.0))))(f32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2.0)
    assert x.dtype == np.float32


def test_promotion_is_recorded_for_jit() -> None:
    """A cast the promotion adds is a recorded op: a compiled step reads each call's input."""
    step = rlgrad.jit(lambda obs: obs / 255.0)
    for v in (3, 200):
        obs = rlgrad.tensor(np.full(4, v, np.uint8))
        out = step(obs)
        assert out.dtype == np.float32
        np.testing.assert_allclose(np.asarray(out), np.float32(v) / np.float32(255.0))


def test_transforms_given_arrays_keep_numpys_rules() -> None:
    """A function handed NumPy arrays by jit or grad is NumPy code: called on the arrays it is
    plain NumPy, so its traced operators promote as NumPy does; handed Tensors, as torch."""
    f32 = np.ones(3, np.float32)

    def fn(x: Any) -> Any:
        return x * np.float64(2.0) + np.arange(3)

    assert fn(f32).dtype == np.float64
    assert np.asarray(rlgrad.jit(fn)(f32)).dtype == np.float64
    assert rlgrad.value_and_grad(lambda x: fn(x).sum())(f32)[0].dtype == np.float64
    assert rlgrad.jit(fn)(rlgrad.tensor(f32)).dtype == np.float32
    assert fn(rlgrad.tensor(f32)).dtype == np.float32


# ---- 3. cross-entropy with every target ignored -----------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("targets", [[-100, -100, -100], [1, -100, 3]])
def test_cross_entropy_ignored_targets(smoothing: float, targets: list[int]) -> None:
    def snippet(lib: Any) -> Any:
        x = lib.tensor(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32),
                       requires_grad=True)
        loss = lib.nn.functional.cross_entropy(x, lib.tensor(np.array(targets)),
                                               label_smoothing=smoothing)
        loss.backward()
        return loss, x.grad

    with np.errstate(all="raise"):  # no 0/0 on the way either
        both(snippet, rtol=1e-6, atol=1e-7)


def test_nll_loss_every_target_ignored_with_weights() -> None:
    def snippet(lib: Any) -> Any:
        x = lib.tensor(np.log(np.full((2, 3), 1 / 3, np.float32)), requires_grad=True)
        w = lib.tensor(np.array([1.0, 2.0, 0.5], np.float32))
        loss = lib.nn.functional.nll_loss(x, lib.tensor(np.array([-100, -100])), weight=w)
        loss.backward()
        return loss, x.grad

    both(snippet)


# ---- 4. retained gradients own their memory; .grad accumulates into the same tensor ----------
def test_retain_grad_does_not_share_memory_and_grad_accumulates_in_place() -> None:
    def snippet(lib: Any) -> Any:
        x = lib.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        y = x + 0.0
        y.retain_grad()
        (y * y).sum().backward()
        assert not np.shares_memory(_np(y.grad), _np(x.grad))
        y.grad.mul_(10.0)  # touches y's gradient only
        kept = x.grad
        (x * 3.0).sum().backward()
        assert x.grad is kept  # the same tensor holds the sum
        return y.grad, kept

    both(snippet)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_grad_accumulation_with_create_graph_and_shared_views() -> None:
    """Two leaves whose gradients are views of one array (reshape's rule and add's pass-through):
    accumulating into one never changes the other."""
    def snippet(lib: Any) -> Any:
        a = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        b = lib.tensor(np.arange(6.0), requires_grad=True)
        for _ in range(2):
            (a.reshape(6) + b).pow(2).sum().backward()
        x = lib.tensor(np.array([0.5, 1.5]), requires_grad=True)
        (x ** 3).sum().backward(create_graph=True)
        (x ** 2).sum().backward(create_graph=True)
        gx = x.grad
        return a.grad, b.grad, gx

    both(snippet)


# ---- 5. double backward through ReLU / LeakyReLU: zeros where torch gives zeros ---------------
@pytest.mark.parametrize("act", ["ReLU", "LeakyReLU", "Tanh"])
def test_gradient_penalty_parameters_get_zeros_as_torch(act: str) -> None:
    rng = np.random.default_rng(2)
    sizes = [(5, 3), (5,), (4, 5), (4,), (1, 4), (1,)]
    values = [rng.standard_normal(s) * 0.7 for s in sizes]
    x0 = rng.standard_normal((6, 3))

    def snippet(lib: Any) -> Any:
        nn = lib.nn
        a = getattr(nn, act)(0.1) if act == "LeakyReLU" else getattr(nn, act)()
        net = nn.Sequential(nn.Linear(3, 5), a, nn.Linear(5, 4), a, nn.Linear(4, 1)).double()
        with lib.no_grad():
            for p, v in zip(net.parameters(), values, strict=True):
                p.copy_(lib.tensor(v))
        x = lib.tensor(x0, requires_grad=True)
        g, = lib.autograd.grad(net(x).sum(), x, create_graph=True)
        (((g * g).sum(1).sqrt() - 1) ** 2).mean().backward()
        return [p.grad for p in net.parameters()]

    both(snippet, rtol=1e-10, atol=1e-12)


# ---- 6. no_grad on generators, integer sums, tensor() of NumPy floats, state_dict aliasing -----
@pytest.mark.parametrize("bare", [False, True])
def test_no_grad_decorates_a_generator_function(bare: bool) -> None:
    def snippet(lib: Any) -> Any:
        x = lib.ones(2, requires_grad=True)
        deco = lib.no_grad if bare else lib.no_grad()

        @deco
        def gen(n: int) -> Any:
            got = []
            for i in range(n):
                got.append((yield (x * i).requires_grad))
            return got

        g = gen(3)
        seen = [next(g)]
        seen.append(lib.is_grad_enabled())  # the caller's mode between resumptions
        seen.append(g.send("a"))
        seen.append((x * 2).requires_grad)
        with pytest.raises(ValueError, match="stop"):
            g.throw(ValueError("stop"))
        return seen

    assert snippet(rlgrad) == snippet(torch) == [False, True, False, True]


def test_enable_grad_generator_inside_no_grad() -> None:
    for lib in (torch, rlgrad):
        x = lib.ones(2, requires_grad=True)

        @lib.enable_grad()
        def gen(x: Any = x) -> Any:
            yield (x * 2).requires_grad

        with lib.no_grad():
            assert list(gen()) == [True]


@pytest.mark.parametrize("data", [[np.float64(1.0)], [1.0, np.float64(2.0)], [np.float32(1.0)],
                                  [1.0, 2.0], [[np.float64(1.0)], [2.0]], [np.int32(1)],
                                  [np.int32(1), 2], [np.float16(1.0)], [1, np.float32(1.0)],
                                  (np.float64(1.0),), np.float64(3.0), 1.5])
def test_tensor_dtype_of_numpy_scalars(data: Any) -> None:
    both(lambda lib: lib.tensor(data))


def test_state_dict_aliases_parameters() -> None:
    def snippet(lib: Any) -> Any:
        lib.manual_seed(0)
        net = lib.nn.Linear(3, 2)
        sd = net.state_dict()
        kept = sd["weight"].clone()
        assert not sd["weight"].requires_grad
        sd["weight"].mul_(2.0)  # writes into the parameter
        with lib.no_grad():
            net.bias.add_(1.0)  # seen through the state dict
        return np.array_equal(_np(net.weight), 2 * _np(kept)), _np(sd["bias"]) - _np(net.bias)

    ours, theirs = snippet(rlgrad), snippet(torch)
    assert ours[0] and theirs[0]
    np.testing.assert_array_equal(ours[1], 0.0)
    np.testing.assert_array_equal(theirs[1], 0.0)


# ---- 2. advanced indexing: torch's placement of the broadcast dimensions ----------------------
INDEX_CASES = {
    "0, :, [1, 3]": lambda lib: (0, slice(None), [1, 3]),
    "0-d tensor, :, [1, 3]": lambda lib: (lib.tensor(0), slice(None), [1, 3]),
    "np.int64, :, [3, 1, 1]": lambda lib: (np.int64(1), slice(None), [3, 1, 1]),
    "[0], :, [1, 3]": lambda lib: ([0], slice(None), [1, 3]),
    ":, 0, [1, 3]": lambda lib: (slice(None), 0, [1, 3]),
    "[1, 0], :, 0": lambda lib: ([1, 0], slice(None), 0),
    "0, None, :, [1, 2]": lambda lib: (0, None, slice(None), [1, 2]),
    "0, ..., [1, 2]": lambda lib: (0, Ellipsis, [1, 2]),
    "[[0, 1]], :, [[1], [2]]": lambda lib: ([[0, 1]], slice(None), [[1], [2]]),
    "0, :, mask": lambda lib: (0, slice(None), lib.tensor(np.array([True, False, True, True]))),
    "-1, 1:, tensor": lambda lib: (-1, slice(1, None), lib.tensor(np.array([2, 0]))),
}


@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_advanced_indexing_as_torch(name: str) -> None:
    def snippet(lib: Any) -> Any:
        t = lib.tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
        out = t[INDEX_CASES[name](lib)]
        w = lib.tensor(np.random.default_rng(3).standard_normal(tuple(out.shape)))
        (out * w).sum().backward()
        return out, t.grad

    both(snippet)


@pytest.mark.parametrize("name", ["0, :, [1, 3]", "0, ..., [1, 2]", "-1, 1:, tensor"])
def test_advanced_index_assignment_as_torch(name: str) -> None:
    def snippet(lib: Any) -> Any:
        t = lib.tensor(np.zeros((2, 3, 4)))
        key = INDEX_CASES[name](lib)
        shape = tuple(t[key].shape)
        t[key] = lib.tensor(np.arange(float(np.prod(shape))).reshape(shape))
        return t

    both(snippet)


def test_indexing_in_a_transform_given_arrays_is_numpys() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)

    def fn(t: Any) -> Any:
        return t[0, :, [1, 3]]

    assert fn(x).shape == (2, 3)
    assert np.asarray(rlgrad.jit(fn)(x)).shape == (2, 3)
    assert rlgrad.grad(lambda t: fn(t).sum())(x).shape == x.shape
    assert fn(rlgrad.tensor(x)).shape == (3, 2)


# ---- 7. clip's gradient at its bounds (docs/engine.md, Conventions) ---------------------------
def test_clamp_gradient_at_the_bounds_as_torch() -> None:
    def snippet(lib: Any) -> Any:
        x = lib.tensor(np.array([0.0, 0.5, 1.0, 1.5]), requires_grad=True)
        lo = lib.tensor(np.float64(0.0), requires_grad=True)
        lib.clamp(x, min=lo, max=lib.tensor(np.float64(1.0))).sum().backward()
        return x.grad, lo.grad

    both(snippet)
    x = np.array([0.0, 0.5, 1.0, 1.5])
    g = rlgrad.grad(lambda v: rnp.sum(rnp.clip(v, 0.0, 1.0)))(x)  # rlgrad.numpy's: the same
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0, 0.0])


def test_jit_compiles_apart_for_tensors_and_arrays() -> None:
    step = rlgrad.jit(lambda x: x * np.float64(2.0))
    f32 = np.ones(3, np.float32)
    assert np.asarray(step(f32)).dtype == np.float64  # NumPy code on arrays
    assert step(rlgrad.tensor(f32)).dtype == np.float32  # torch's on Tensors, not the cached one
    assert np.asarray(step(f32)).dtype == np.float64
