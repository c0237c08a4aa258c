"""F.binary_cross_entropy / nn.BCELoss, F.kl_div / nn.KLDivLoss, F.normalize and F.pad against
torch 2.x (values and gradients, float64) and finite differences (1st and 2nd order)."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _both(r_fn, t_fn, *arrays, grad_of=None):
    """Values and the gradients of sum(out * w) w.r.t. the arrays listed in ``grad_of``."""
    grad_of = range(len(arrays)) if grad_of is None else grad_of
    ra = [rlgrad.tensor(a.copy(), requires_grad=i in grad_of) for i, a in enumerate(arrays)]
    ta = [torch.tensor(a.copy(), requires_grad=i in grad_of) for i, a in enumerate(arrays)]
    r_out, t_out = r_fn(*ra), t_fn(*ta)
    np.testing.assert_allclose(r_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-12, atol=1e-14)
    w = np.random.default_rng(5).normal(size=tuple(t_out.shape))
    (r_out * rlgrad.tensor(w)).sum().backward()
    (t_out * torch.tensor(w)).sum().backward()
    for i in grad_of:
        np.testing.assert_allclose(ra[i].grad.numpy(), ta[i].grad.numpy(), rtol=1e-10, atol=1e-12)


RNG = np.random.default_rng(0)
PROBS = RNG.uniform(0.02, 0.98, size=(4, 3))
TARGETS = RNG.uniform(0, 1, size=(4, 3))
WEIGHT = RNG.uniform(0.5, 2.0, size=(3,))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy_matches_torch(reduction, weighted):
    w = WEIGHT if weighted else None
    _both(lambda x, t: F.binary_cross_entropy(x, t, None if w is None else rlgrad.tensor(w),
                                              reduction=reduction),
          lambda x, t: TF.binary_cross_entropy(x, t, None if w is None else torch.tensor(w),
                                               reduction=reduction), PROBS, TARGETS)
    m_r, m_t = nn.BCELoss(reduction=reduction), torch.nn.BCELoss(reduction=reduction)
    _both(m_r, m_t, PROBS, TARGETS, grad_of=[0])


def test_binary_cross_entropy_at_0_and_1_is_torchs():
    """log clamped at -100 and torch's finite input gradient where x is exactly 0 or 1."""
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    t = np.array([1.0, 0.0, 0.0, 1.0, 0.3])
    _both(lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
          lambda a, b: TF.binary_cross_entropy(a, b, reduction="none"), x, t)


def test_binary_cross_entropy_after_sigmoid_and_second_order():
    z = RNG.normal(size=(5,))
    _both(lambda a, b: F.binary_cross_entropy(rlgrad.sigmoid(a), b),
          lambda a, b: TF.binary_cross_entropy(torch.sigmoid(a), b), z, TARGETS[0, :1].repeat(5))
    rlgrad.check_grads(lambda x, t: F.binary_cross_entropy(x, t), modes=["rev", "fwd"], order=2)(
        PROBS, TARGETS)


def test_binary_cross_entropy_bad_input():
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.binary_cross_entropy(rlgrad.tensor([0.5, 1.5]), rlgrad.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        F.binary_cross_entropy(rlgrad.tensor(PROBS), rlgrad.tensor(TARGETS[:, :1]))
    with pytest.raises(ValueError, match="reduction"):
        nn.BCELoss(reduction="avg")


LOGP = np.log(np.random.default_rng(1).dirichlet(np.ones(5), size=4))
TGT = np.random.default_rng(2).dirichlet(np.ones(5), size=4)
TGT0 = TGT.copy()
TGT0[0, 1] = 0.0  # a zero target: 0 * log 0 = 0, as torch's xlogy


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", ["mean", "batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    tgt = np.log(TGT + 1e-3) if log_target else TGT
    _both(lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target),
          lambda x, t: TF.kl_div(x, t, reduction=reduction, log_target=log_target), LOGP, tgt)
    _both(nn.KLDivLoss(reduction, log_target), torch.nn.KLDivLoss(reduction=reduction,
                                                                   log_target=log_target),
          LOGP, tgt, grad_of=[0])
    if not log_target:  # a zero target: same values and input gradient (torch's target one: NaN)
        _both(lambda x, t: F.kl_div(x, t, reduction=reduction),
              lambda x, t: TF.kl_div(x, t, reduction=reduction), LOGP, TGT0, grad_of=[0])


def test_kl_div_batchmean_is_the_kl_divergence_and_second_order():
    q, p = np.exp(LOGP), TGT
    kl = np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1) / q), 0)) / len(p)
    assert F.kl_div(rlgrad.tensor(LOGP), rlgrad.tensor(TGT), reduction="batchmean").item() == \
        pytest.approx(kl, rel=1e-12)
    rlgrad.check_grads(lambda x, t: F.kl_div(x, t, reduction="sum"), order=2)(LOGP, TGT + 0.1)
    rlgrad.check_grads(lambda x, t: F.kl_div(x, t, log_target=True), order=2)(LOGP, LOGP[::-1])
    with pytest.raises(ValueError, match="reduction"):
        nn.KLDivLoss(reduction="avg")


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, -1), (3.0, 0), (float("inf"), 1)])
def test_normalize_matches_torch(p, dim):
    x = np.random.default_rng(3).normal(size=(4, 5))
    _both(lambda a: F.normalize(a, p=p, dim=dim), lambda a: TF.normalize(a, p=p, dim=dim), x)


def test_normalize_zero_rows_and_second_order():
    x = np.random.default_rng(4).normal(size=(3, 4))
    x[1] = 0.0  # torch: the row stays 0, its gradient is finite
    _both(lambda a: F.normalize(a), lambda a: TF.normalize(a), x)
    rlgrad.check_grads(lambda a: F.normalize(a, dim=0), modes=["rev", "fwd"], order=2)(x[[0, 2]])


@pytest.mark.parametrize("pad,mode,value", [
    ((1, 2), "constant", None),
    ((1, 0, 2, 1), "constant", 3.5),
    ((0, 1, 1, 1, 2, 0), "constant", -1.0),
    ((2, 1), "reflect", None),
    ((1, 2, 2, 1), "reflect", None),
    ((2, 3), "replicate", None),
    ((1, 1, 0, 2), "replicate", None),
    ((1, 2, 2, 0), "circular", None),
])
def test_pad_matches_torch(pad, mode, value):
    shape = (2, 3, 4, 5) if mode == "constant" else (2, 3, 4, 5)[:len(pad) // 2 + 2]
    x = np.random.default_rng(6).normal(size=shape)  # torch pads the last 1-3 dims of 2-5D inputs
    kw = {} if value is None else {"value": value}
    _both(lambda a: F.pad(a, pad, mode=mode, **kw), lambda a: TF.pad(a, pad, mode=mode, **kw), x)


def test_pad_second_order_and_bad_input():
    x = np.random.default_rng(7).normal(size=(2, 4))
    rlgrad.check_grads(lambda a: F.pad(a, (1, 2), mode="reflect") ** 2, order=2)(x)
    rlgrad.check_grads(lambda a: F.pad(a, (1, 2, 1, 0), value=2.0) ** 2, modes=["rev", "fwd"],
                       order=2)(x)
    t = rlgrad.tensor(x)
    with pytest.raises(ValueError, match="even"):
        F.pad(t, (1, 2, 3))
    with pytest.raises(ValueError, match="smaller than"):
        F.pad(t, (4, 0), mode="reflect")
    with pytest.raises(ValueError, match="mode"):
        F.pad(t, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="negative"):
        F.pad(t, (-1, 1))


def test_float32_stays_float32_as_in_torch():
    x32, t32 = PROBS.astype(np.float32), TARGETS.astype(np.float32)
    cases = [
        (lambda a, b: F.binary_cross_entropy(a, b), lambda a, b: TF.binary_cross_entropy(a, b)),
        (lambda a, b: F.kl_div(a, b, reduction="batchmean"),
         lambda a, b: TF.kl_div(a, b, reduction="batchmean")),
        (lambda a, b: F.normalize(a) * b, lambda a, b: TF.normalize(a) * b),
        (lambda a, b: F.pad(a, (1, 1), mode="reflect"), lambda a, b: TF.pad(a, (1, 1), mode="reflect")),
    ]
    for r_fn, t_fn in cases:
        ra = rlgrad.tensor(x32, requires_grad=True)
        ta = torch.tensor(x32, requires_grad=True)
        r, t = r_fn(ra, rlgrad.tensor(t32)), t_fn(ta, torch.tensor(t32))
        r.sum().backward()
        t.sum().backward()
        assert r.dtype == rlgrad.float32 and ra.grad.dtype == rlgrad.float32
        np.testing.assert_allclose(r.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ra.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-5)
