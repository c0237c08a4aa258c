"""``kl_divergence(p, q)`` = KL(p || q) = E_p[log p(x) - log q(x)], in closed form for the pairs RL
uses; new pairs are added with ``@register_kl(TypeP, TypeQ)`` (as in torch.distributions)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlgrad import ops
from rlgrad.distributions.beta import Beta
from rlgrad.distributions.categorical import Bernoulli, Categorical
from rlgrad.distributions.distribution import Distribution, _sum_rightmost
from rlgrad.distributions.normal import Independent, Normal
from rlgrad.special import betaln, digamma
from rlgrad.tensor import Tensor

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict[tuple[type, type], Callable] = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator registering ``fn(p, q)`` as the KL divergence for that pair of types."""

    def deco(fn: Callable) -> Callable:
        _KL_REGISTRY[(type_p, type_q)] = fn
        return fn

    return deco


def _lookup(tp: type, tq: type) -> Callable | None:
    # most specific registered pair, following both MROs (subclasses inherit their parents' KL)
    for cp in tp.__mro__:
        for cq in tq.__mro__:
            fn = _KL_REGISTRY.get((cp, cq))
            if fn is not None:
                return fn
    return None


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), shape ``batch_shape``; differentiable w.r.t. both distributions' parameters."""
    fn = _lookup(type(p), type(q))
    if fn is None:
        pairs = ", ".join(f"({a.__name__}, {b.__name__})" for a, b in _KL_REGISTRY)
        raise NotImplementedError(
            f"no closed-form KL divergence for ({type(p).__name__}, {type(q).__name__}); "
            f"registered pairs: {pairs}. Estimate it by sampling: x = p.sample((n,)); "
            "(p.log_prob(x) - q.log_prob(x)).mean(0), or add one with @register_kl."
        )
    return fn(p, q)


@register_kl(Categorical, Categorical)
def _kl_categorical(p: Categorical, q: Categorical) -> Tensor:
    pp = p.probs
    p_pos = pp._value > 0
    # 0 * log 0 = 0 where p has no mass; where q has none but p has, the KL is +inf
    t = pp * ops.where(p_pos, p.logits - q.logits, 0.0)
    q_zero = p_pos & (q.probs._value == 0)
    if q_zero.any():
        t = ops.where(q_zero, np.inf, t)
    return ops.sum(t, axis=-1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    pp, qp = p.probs, q.probs
    pd, qd = pp._value, qp._value
    t1 = pp * ops.where(pd > 0, ops.softplus(-q.logits) - ops.softplus(-p.logits), 0.0)
    t2 = (1 - pp) * ops.where(pd < 1, ops.softplus(q.logits) - ops.softplus(p.logits), 0.0)
    inf1 = (pd > 0) & (qd == 0)
    inf2 = (pd < 1) & (qd == 1)
    out = t1 + t2
    if inf1.any() or inf2.any():
        out = ops.where(inf1 | inf2, np.inf, out)
    return out


@register_kl(Normal, Normal)
def _kl_normal(p: Normal, q: Normal) -> Tensor:
    ratio = p.scale / q.scale
    var_ratio = ratio * ratio
    z = (p.loc - q.loc) / q.scale
    return 0.5 * (var_ratio + z * z - 1) - ops.log(ratio)


@register_kl(Independent, Independent)
def _kl_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError(
            "kl_divergence between Independent distributions with different "
            f"reinterpreted_batch_ndims ({p.reinterpreted_batch_ndims} vs "
            f"{q.reinterpreted_batch_ndims}) is not defined"
        )
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(Beta, Beta)
def _kl_beta(p: Beta, q: Beta) -> Tensor:
    a1, b1 = p.concentration1, p.concentration0
    a2, b2 = q.concentration1, q.concentration0
    s1 = a1 + b1
    return (betaln(a2, b2) - betaln(a1, b1) + (a1 - a2) * digamma(a1)
            + (b1 - b2) * digamma(b1) + (a2 - a1 + b2 - b1) * digamma(s1))
