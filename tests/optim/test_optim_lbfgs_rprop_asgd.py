"""LBFGS (with and without the strong-Wolfe line search), Rprop and ASGD against torch.optim in
float64: the same parameters, losses and state after the same steps; Rprop and ASGD also
against their plain forms in rlgrad/optim/reference.py (which the classes run)."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import optim
from rlgrad.optim import reference

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def torch_float64():  # noqa: ANN201
    """torch keeps scalar state (ASGD's eta and mu) as tensors of the default dtype; rlgrad in
    Python floats. With float64 as torch's default the two agree to rounding."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _rosenbrock(lib: object, x: object, y: object) -> object:
    return ((1 - x) ** 2).sum() + 100 * ((y - x * x) ** 2).sum() + (x * y).sum() * 0.1


@pytest.mark.parametrize("kw", [{}, {"line_search_fn": "strong_wolfe"},
                                {"history_size": 3, "max_iter": 7, "lr": 0.5},
                                {"line_search_fn": "strong_wolfe", "history_size": 2, "max_eval": 9}])
def test_lbfgs_trajectory_matches_torch(kw: dict) -> None:
    x0, y0 = np.array([-1.2, 0.5, 2.0]), np.array([1.0, -0.3, 0.7])
    runs = []
    for lib in (rlgrad, torch):
        x = lib.tensor(x0.copy(), requires_grad=True)
        y = lib.tensor(y0.copy(), requires_grad=True)
        opt = (optim if lib is rlgrad else torch.optim).LBFGS([x, y], **kw)

        def closure(opt=opt, x=x, y=y, lib=lib):  # noqa: ANN001, ANN202 - torch's closure idiom
            opt.zero_grad()
            loss = _rosenbrock(lib, x, y)
            loss.backward()
            return loss

        losses = [float(opt.step(closure)) for _ in range(6)]
        st = opt.state[x]
        runs.append((losses, x.detach().numpy().copy(), y.detach().numpy().copy(), st["func_evals"],
                     st["n_iter"]))
    (la, xa, ya, fa, na), (lb, xb, yb, fb, nb) = runs
    assert (fa, na) == (fb, nb)  # the same iterations and evaluations: the same branches taken
    # Rosenbrock's valley amplifies rounding (dot products summed in another order) over the
    # ~100 iterations: 1e-11 after the first steps, ~1e-8 by the last
    np.testing.assert_allclose(la[:3], lb[:3], rtol=1e-10)
    np.testing.assert_allclose(la, lb, rtol=1e-6)
    np.testing.assert_allclose(xa, xb, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ya, yb, rtol=1e-6, atol=1e-9)
    assert la[-1] < la[0]


def test_lbfgs_needs_a_closure_and_one_group() -> None:
    p = rlgrad.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="closure") as e:
        optim.LBFGS([p]).step()
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS([p], line_search_fn="armijo")


def _grad(x: np.ndarray, k: int) -> np.ndarray:
    return np.sin(3 * x + k) + 0.3 * x


@pytest.mark.parametrize(("name", "ref", "kw"), [
    ("Rprop", reference.rprop, {}),
    ("Rprop", reference.rprop, {"lr": 0.05, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.2), "maximize": True}),
    ("ASGD", reference.asgd, {}),
    ("ASGD", reference.asgd, {"lr": 0.05, "lambd": 1e-2, "alpha": 0.5, "t0": 10, "weight_decay": 0.1}),
    ("ASGD", reference.asgd, {"t0": 3, "maximize": True}),
])
def test_rprop_and_asgd_match_torch_and_their_reference(name: str, ref: object, kw: dict) -> None:
    x0 = np.random.default_rng(0).normal(size=(3, 4))
    rp = rlgrad.tensor(x0.copy(), requires_grad=True)
    tp = torch.tensor(x0.copy(), requires_grad=True)
    refp, refst = x0.copy(), {}
    r, t = getattr(optim, name)([rp], **kw), getattr(torch.optim, name)([tp], **kw)
    for k in range(40):
        rp.grad = rlgrad.tensor(_grad(rp.detach().numpy(), k))
        tp.grad = torch.tensor(_grad(tp.detach().numpy(), k))
        ref(refp, _grad(refp, k), refst, **kw)
        r.step()
        t.step()
    np.testing.assert_allclose(rp.detach().numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(rp.detach().numpy(), refp)
    for key, v in t.state[tp].items():
        np.testing.assert_allclose(np.asarray(r.state[rp][key], dtype=np.float64),
                                   np.asarray(v, dtype=np.float64), rtol=1e-12, err_msg=key)


@pytest.mark.parametrize(("name", "kw"), [("Rprop", {"etas": (1.5, 1.2)}), ("ASGD", {"lr": -1.0})])
def test_bad_hyperparameters_raise(name: str, kw: dict) -> None:
    with pytest.raises(ValueError, match="Invalid"):
        getattr(optim, name)([rlgrad.tensor([1.0], requires_grad=True)], **kw)
