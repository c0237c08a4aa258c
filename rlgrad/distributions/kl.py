"""``kl_divergence(p, q)`` = KL(p || q) = E_p[log p(x) - log q(x)], in closed form for the pairs RL
uses; new pairs are added with ``@register_kl(TypeP, TypeQ)`` (as in torch.distributions)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rlgrad import ops
from rlgrad.distributions.beta import Beta
from rlgrad.distributions.categorical import Bernoulli, Categorical
from rlgrad.distributions.distribution import Distribution, _sum_rightmost
from rlgrad.distributions.exponential_family import Binomial, Exponential, Laplace, Poisson
from rlgrad.distributions.gamma import Dirichlet, Gamma
from rlgrad.distributions.mvn import MultivariateNormal, _mahalanobis
from rlgrad.distributions.normal import Independent, Normal
from rlgrad.distributions.onehot import OneHotCategorical
from rlgrad.distributions.transformed import TransformedDistribution
from rlgrad.distributions.uniform import Uniform
from rlgrad.special import betaln, digamma, gammaln
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


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot(p: OneHotCategorical, q: OneHotCategorical) -> Tensor:
    return _kl_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform(p: Uniform, q: Uniform) -> Tensor:
    out = ops.log((q.high - q.low) / (p.high - p.low))
    outside = (q.low._value > p.low._value) | (q.high._value < p.high._value)
    return ops.where(outside, np.inf, out) if outside.any() else out


@register_kl(Gamma, Gamma)
def _kl_gamma(p: Gamma, q: Gamma) -> Tensor:
    a1, r1, a2, r2 = p.concentration, p.rate, q.concentration, q.rate
    return (a2 * ops.log(r1 / r2) + gammaln(a2) - gammaln(a1) + (a1 - a2) * digamma(a1)
            + (r2 - r1) * (a1 / r1))


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet(p: Dirichlet, q: Dirichlet) -> Tensor:
    a, b = p.concentration, q.concentration
    sa, sb = ops.sum(a, axis=-1), ops.sum(b, axis=-1)
    t1 = gammaln(sa) - gammaln(sb)
    t2 = ops.sum(gammaln(a) - gammaln(b), axis=-1)
    t4 = digamma(a) - ops.expand_dims(digamma(sa), -1)
    return t1 - t2 + ops.sum((a - b) * t4, axis=-1)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn(p: MultivariateNormal, q: MultivariateNormal) -> Tensor:
    if p.event_shape != q.event_shape:
        raise ValueError("kl_divergence(MultivariateNormal, MultivariateNormal): the event "
                         f"shapes differ ({p.event_shape} vs {q.event_shape})")
    n = p.event_shape[0]
    lp, lq = p._raw_tril, q._unbroadcasted_scale_tril  # torch: solve_triangular(L_q, L_p)
    batch = np.broadcast_shapes(p.batch_shape, q.batch_shape)
    lpb, lqb = ops.broadcast_to(lp, batch + (n, n)), ops.broadcast_to(lq, batch + (n, n))
    half_term1 = q._half_log_det() - p._half_log_det()
    m = ops.solve(lqb, lpb)  # L_q^{-1} L_p: its squared Frobenius norm is tr(S_q^{-1} S_p)
    term2 = ops.sum(ops.sum(m * m, axis=-1), axis=-1)
    term3 = _mahalanobis(lq, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed(p: TransformedDistribution, q: TransformedDistribution) -> Tensor:
    # a bijection leaves the KL unchanged: that of the bases, when both use the same transforms
    if p.transforms != q.transforms or p.event_shape != q.event_shape:
        raise NotImplementedError(
            "kl_divergence(TransformedDistribution, TransformedDistribution) needs the same "
            "transforms and event shape on both sides; estimate it by sampling otherwise")
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Laplace, Laplace)
def _kl_laplace(p: Laplace, q: Laplace) -> Tensor:
    ratio = p.scale / q.scale
    gap = ops.absolute(p.loc - q.loc)
    return gap / q.scale + ratio * ops.exp(-gap / p.scale) - ops.log(ratio) - 1


@register_kl(Exponential, Exponential)
def _kl_exponential(p: Exponential, q: Exponential) -> Tensor:
    r = q.rate / p.rate
    return r - ops.log(r) - 1


@register_kl(Poisson, Poisson)
def _kl_poisson(p: Poisson, q: Poisson) -> Tensor:
    return p.rate * (ops.log(p.rate) - ops.log(q.rate)) - (p.rate - q.rate)


@register_kl(Binomial, Binomial)
def _kl_binomial(p: Binomial, q: Binomial) -> Tensor:
    """Defined for the same number of trials; infinite where p has more than q (q cannot
    reach p's largest counts), not implemented where q has more, as torch's."""
    np_, nq = p.total_count._value, q.total_count._value
    if np.any(np_ < nq):
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count is "
                                  "not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + ops.log1p(-p.probs)
                          - ops.log1p(-q.probs))
    more = np.broadcast_to(np_ > nq, kl.shape)
    return ops.where(more, np.inf, kl) if more.any() else kl


_EULER_GAMMA = 0.57721566490153286060


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p: Exponential, q: Gamma) -> Tensor:
    r, a = q.rate / p.rate, q.concentration
    return r - a * ops.log(r) + gammaln(a) + a * _EULER_GAMMA - (1 + _EULER_GAMMA)


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p: Gamma, q: Exponential) -> Tensor:
    return -p.entropy() - ops.log(q.rate) + q.rate * p.concentration / p.rate


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p: Exponential, q: Normal) -> Tensor:
    # -H(p) - E_p[log q]: E_p[x] = 1/rate, E_p[x^2] = 2/rate^2
    var, rate = q.scale * q.scale, p.rate
    cross = 1 / (rate * rate) - q.loc / rate + 0.5 * q.loc * q.loc
    return 0.5 * ops.log(rate * rate * var * (2 * math.pi)) - 1 + cross / var


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p: Laplace, q: Normal) -> Tensor:
    var = q.scale * q.scale
    ratio = p.scale * p.scale / var
    d = p.loc - q.loc
    return -0.5 * ops.log(ratio * (2 / math.pi)) + ratio + 0.5 * d * d / var - 1
