"""``optim.Adafactor`` against torch 2.13's (matrices, stacks of matrices, vectors and scalars;
every option; float64 to rounding and float32; its state_dict's names and a round trip), its
argument checks, and ``SparseAdam``: torch's argument checks and its refusal of dense gradients
(rlgrad has no sparse ones: ``Embedding(sparse=True)`` is refused in one line)."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")
SHAPES = [(4, 3), (5,), (), (2, 3, 4)]
INIT = [np.random.default_rng(0).normal(size=s) for s in SHAPES]


def _train(T, kw: dict, dtype: type, steps: int = 25) -> tuple:
    ps = [T.nn.Parameter(T.tensor(a.astype(dtype))) for a in INIT]
    opt = T.optim.Adafactor(ps, **kw)
    for _ in range(steps):
        opt.zero_grad()
        loss = sum((p ** 2).sum() * (0.5 + i) + 0.1 * (p ** 3).sum() for i, p in enumerate(ps))
        loss.backward()
        opt.step()
    return [p.detach().numpy() for p in ps], opt


@pytest.mark.parametrize("kw", [{}, dict(lr=0.1, weight_decay=0.01),
                                dict(maximize=True, eps=(1e-6, 1e-2), d=2.0, beta2_decay=-0.5)])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_adafactor_matches_torch(kw: dict, dtype: type, tol: float) -> None:
    ours, opt = _train(rlgrad, kw, dtype)
    theirs, topt = _train(torch, kw, dtype)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    sd, tsd = opt.state_dict(), topt.state_dict()
    for i in range(len(SHAPES)):
        assert sorted(sd["state"][i]) == sorted(tsd["state"][i])
        for k, v in tsd["state"][i].items():
            np.testing.assert_allclose(np.asarray(sd["state"][i][k]), v.numpy(), rtol=tol * 10, atol=tol)
    assert {k: v for k, v in sd["param_groups"][0].items() if k != "params"} == {
        k: v for k, v in tsd["param_groups"][0].items() if k not in ("params",)}


def test_adafactor_state_dict_round_trip_continues_identically() -> None:
    ps = [rlgrad.nn.Parameter(rlgrad.tensor(a)) for a in INIT]
    opt = rlgrad.optim.Adafactor(ps, lr=0.05)

    def step(o: object, params: list) -> None:
        o.zero_grad()
        sum((p ** 2).sum() for p in params).backward()
        o.step()

    step(opt, ps)
    copies = [rlgrad.nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = rlgrad.optim.Adafactor(copies, lr=0.05)
    opt2.load_state_dict(opt.state_dict())
    step(opt, ps)
    step(opt2, copies)
    for a, b in zip(ps, copies, strict=True):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    bad = opt.state_dict()
    bad["state"][0]["row_var"] = np.zeros((3, 1))
    with pytest.raises(rlgrad.serialization.StateDictError, match=r"state.0.row_var: shape \(3, 1\)"):
        opt2.load_state_dict(bad)


@pytest.mark.parametrize("kw, message", [
    (dict(lr=-1.0), "Learning rate should be >= 0"), (dict(beta2_decay=0.5), "beta2_decay should be <= 0"),
    (dict(eps=(-1.0, 1e-3)), "epsilon1 should be >= 0"), (dict(eps=(None, -1.0)), "epsilon2 should be >= 0"),
    (dict(d=0.5), "Clipping threshold d should be >= 1"),
    (dict(weight_decay=-1.0), "weight_decay should be >= 0"),
])
def test_adafactor_argument_errors_as_torch(kw: dict, message: str) -> None:
    for T in (torch, rlgrad):
        with pytest.raises(ValueError, match=message):
            T.optim.Adafactor([T.nn.Parameter(T.zeros(2))], **kw)


def test_sparse_adam_arguments_and_dense_gradient_refusal_as_torch() -> None:
    for T in (torch, rlgrad):
        p = T.nn.Parameter(T.ones(3))
        opt = T.optim.SparseAdam([p], lr=0.01, betas=(0.8, 0.9))
        assert opt.defaults["lr"] == 0.01 and tuple(opt.defaults["betas"]) == (0.8, 0.9)
        opt.step()  # no gradient: nothing to do
        (p * 2).sum().backward()
        with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients"):
            opt.step()
        for kw, message in ((dict(lr=0.0), "Invalid learning rate"), (dict(eps=0.0), "Invalid epsilon"),
                            (dict(betas=(1.0, 0.9)), "index 0"), (dict(betas=(0.9, -0.1)), "index 1")):
            with pytest.raises(ValueError, match=message):
                T.optim.SparseAdam([p], **kw)
    with pytest.raises(NotImplementedError, match="no sparse gradients"):
        rlgrad.nn.Embedding(10, 3, sparse=True)
    assert rlgrad.nn.Embedding(10, 3, sparse=False).weight.shape == (10, 3)
