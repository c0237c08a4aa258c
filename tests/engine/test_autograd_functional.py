"""``rlgrad.autograd.functional`` against ``torch.autograd.functional``: ``vjp``, ``jvp``,
``jacobian``, ``hessian``, ``vhp``, ``hvp`` for one input and tuples of inputs and outputs, their
result structures, ``create_graph`` (results differentiable again, compared with torch and with
finite differences), ``strict`` and the errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2930)
A = RNG.normal(size=3)
B = RNG.normal(size=(2, 3))
V3, V23, VOUT = RNG.normal(size=3), RNG.normal(size=(2, 3)), RNG.normal(size=3)


def _two(lib: Any) -> Callable:
    return lambda a, b: (lib.sin(a) * b).sum(0) ** 2


def _pair(lib: Any) -> Callable:
    return lambda a, b: (lib.sin(a) * b, (a * a).sum())


def _scalar(lib: Any) -> Callable:
    return lambda a, b: (lib.sin(a) * b).sum() ** 2 + (a ** 3).sum()


def _flat(x: Any) -> list:
    if isinstance(x, tuple | list):
        return [y for z in x for y in _flat(z)]
    return [x]


def _same(got: Any, want: Any, tol: float = 1e-10) -> None:
    assert type(got) is tuple if isinstance(want, tuple) else not isinstance(got, tuple)
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, tol)
        return
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)


CALLS: dict[str, Callable] = {
    "jacobian one": lambda AF, lib, t: AF.jacobian(lambda a: lib.sin(a) * a.sum(), t(A)),
    "jacobian tuple in": lambda AF, lib, t: AF.jacobian(_two(lib), (t(A), t(B))),
    "jacobian tuple out": lambda AF, lib, t: AF.jacobian(lambda a: _pair(lib)(a, t(B)), t(A)),
    "jacobian tuples": lambda AF, lib, t: AF.jacobian(_pair(lib), (t(A), t(B))),
    "jacobian vectorize": lambda AF, lib, t: AF.jacobian(_two(lib), (t(A), t(B)), vectorize=True),
    "jacobian 0-d": lambda AF, lib, t: AF.jacobian(lambda a: a * a, t(np.float64(1.5))),
    "hessian one": lambda AF, lib, t: AF.hessian(lambda a: _scalar(lib)(a, t(B)), t(A)),
    "hessian tuple": lambda AF, lib, t: AF.hessian(_scalar(lib), (t(A), t(B))),
    "vjp": lambda AF, lib, t: AF.vjp(_two(lib), (t(A), t(B)), t(VOUT)),
    "vjp scalar": lambda AF, lib, t: AF.vjp(lambda a: (a * a).sum(), t(A)),
    "vjp tuple out": lambda AF, lib, t: AF.vjp(_pair(lib), (t(A), t(B)), (t(V23), t(np.float64(0.7)))),
    "jvp": lambda AF, lib, t: AF.jvp(_two(lib), (t(A), t(B)), (t(V3), t(V23))),
    "jvp tuple out": lambda AF, lib, t: AF.jvp(_pair(lib), (t(A), t(B)), (t(V3), t(V23))),
    "hvp": lambda AF, lib, t: AF.hvp(_scalar(lib), (t(A), t(B)), (t(V3), t(V23))),
    "vhp one": lambda AF, lib, t: AF.vhp(lambda a: _scalar(lib)(a, t(B)), t(A), t(V3)),
    "unused input": lambda AF, lib, t: AF.jacobian(lambda a, b: a * 2, (t(A), t(B))),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_results_and_structures_match_torch(name: str) -> None:
    got = CALLS[name](rlgrad.autograd.functional, rlgrad, rlgrad.tensor)
    want = CALLS[name](torch.autograd.functional, torch, torch.tensor)
    _same(got, want)
    assert all(not g.requires_grad for g in _flat(got))


@pytest.mark.parametrize("name", ["jacobian tuple in", "hessian tuple", "vjp", "jvp", "hvp", "vhp one"])
def test_create_graph_results_are_differentiable_as_torchs(name: str) -> None:
    grads = []
    for AF, lib in ((rlgrad.autograd.functional, rlgrad), (torch.autograd.functional, torch)):
        leaves: list = []

        def t(x: np.ndarray, lib: Any = lib, leaves: list = leaves) -> Any:
            leaves.append(lib.tensor(x, requires_grad=True))
            return leaves[-1]

        fn = CALLS[name]
        out = _call_graph(fn, AF, lib, t)
        total = sum((o * o).sum() for o in _flat(out) if o.requires_grad)
        total.backward()
        grads.append([x.grad.numpy() if x.grad is not None else np.zeros(x.shape) for x in leaves])
    for g, w in zip(*grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


def _call_graph(fn: Callable, AF: Any, lib: Any, t: Callable) -> Any:
    """``fn``'s call with ``create_graph=True``."""
    class WithGraph:
        def __getattr__(self, name: str) -> Callable:
            return lambda *a, **k: getattr(AF, name)(*a, create_graph=True, **k)

    return fn(WithGraph(), lib, t)


def test_hessian_with_create_graph_matches_finite_differences_of_the_hessian() -> None:
    def h(a: np.ndarray) -> np.ndarray:
        x = rlgrad.tensor(a, requires_grad=True)
        return rlgrad.autograd.functional.hessian(lambda z: _scalar(rlgrad)(z, rlgrad.tensor(B)), x,
                                                  create_graph=True)

    x = rlgrad.tensor(A, requires_grad=True)
    hess = rlgrad.autograd.functional.hessian(lambda z: _scalar(rlgrad)(z, rlgrad.tensor(B)), x,
                                              create_graph=True)
    w = RNG.normal(size=(3, 3))
    (hess * rlgrad.tensor(w)).sum().backward()
    eps = 1e-5
    fd = np.array([((h(A + eps * e) - h(A - eps * e)).detach().numpy() * w).sum() / (2 * eps)
                   for e in np.eye(3)])
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-7)


def test_strict_and_bad_input_raise_as_torch() -> None:
    for AF, lib in ((rlgrad.autograd.functional, rlgrad), (torch.autograd.functional, torch)):
        a, b = lib.tensor(A), lib.tensor(B)
        with pytest.raises(RuntimeError, match="independent of input 1"):
            AF.jacobian(lambda x, y: x * 2, (a, b), strict=True)
        with pytest.raises(RuntimeError, match="v can only be None"):
            AF.vjp(lambda x: x * 2, a)
        with pytest.raises(RuntimeError, match="should contain a single element"):
            AF.hessian(lambda x: x * 2, a)
        with pytest.raises(TypeError):
            AF.jacobian(lambda x: x * 2, [1.0, 2.0])
        with pytest.raises(TypeError):
            AF.jacobian(lambda x: 3.0, a)
        with pytest.raises(RuntimeError):
            AF.vjp(lambda x: x * 2, a, lib.tensor(B))
