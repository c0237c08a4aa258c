"""Differentiable special functions in pure NumPy (rlgrad's core depends on NumPy only, no SciPy).

* :func:`gammaln` (``lgamma``): log |Gamma(x)|, by the Lanczos approximation (g = 7, 9 terms) for
  x >= 1/2 and the reflection formula below; its derivative is :func:`digamma`.
* :func:`digamma` (psi) and :func:`polygamma` (``polygamma(1, x)`` is :func:`trigamma`): the
  recurrence psi^(n)(x) = psi^(n)(x + 1) - (-1)^n n! / x^(n+1) moves x up to where the asymptotic
  (Bernoulli-number) series is accurate to double precision; reflection handles x < 1/2 for
  n <= 1.  The derivative of ``polygamma(n, .)`` is ``polygamma(n + 1, .)``, so gradients of
  every order exist (``create_graph=True``, ``rlgrad.hessian``).
* :func:`betaln`, :func:`xlogy`, :func:`xlog1py`: compositions used by the Beta distribution.

All compute in float64 internally and return the input's floating dtype (float32 stays float32).
Poles (x = 0, -1, -2, ...) give ``inf`` for ``gammaln`` and ``nan`` for the psi family.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.exports import export
from rlgrad.tensor import Tensor, _Trace
from rlgrad.tracer import VMAP_LEVELS, defbatch, defjvp, defjvp_elementwise, defvjp, primitive
from rlgrad.typing import Array, ArrayLike

__all__ = [
    "gammaln", "lgamma", "digamma", "psi", "polygamma", "trigamma", "betaln", "xlogy", "xlog1py",
    "erf", "erfinv", "erfc", "erfcx", "entr", "expit", "logit", "ndtr", "log_ndtr", "exp2",
    "expm1", "log1p", "sinc", "round", "softmax", "log_softmax", "logsumexp", "multigammaln",
    "i0", "i0e", "i1", "i1e", "modified_bessel_i0", "modified_bessel_i1", "gammainc", "gammaincc",
]

# Lanczos coefficients for g = 7, n = 9 (Godfrey): relative error about 1e-15 for x >= 1/2.
_LANCZOS_G = 7.0
_LANCZOS = (
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
    1.5056327351493116e-7,
)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# Bernoulli numbers B_2, B_4, ..., B_16 for the asymptotic series of psi^(n).
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)


def _as_f64(x: Any) -> tuple[np.ndarray, np.dtype]:
    """``x`` as a float64 array, and the dtype to return (the input's float dtype, or float64)."""
    a = np.asarray(x)
    out = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
    return a.astype(np.float64, copy=False), out


def _is_pole(x: np.ndarray) -> np.ndarray:
    return (x <= 0) & (x == np.floor(x))


def _sinpi(x: np.ndarray) -> np.ndarray:
    """sin(pi x) with the argument reduced first, so large |x| keeps its accuracy."""
    r = x - 2.0 * np.round(0.5 * x)  # in [-1, 1], exact
    return np.sin(np.pi * r)


def _cotpi(x: np.ndarray) -> np.ndarray:
    """cot(pi x) (period 1), reduced to [-1/2, 1/2] first."""
    r = x - np.round(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.tan(np.pi * r)


def _lgamma_lanczos(x: np.ndarray) -> np.ndarray:
    """log Gamma(x) for x >= 1/2."""
    z = x - 1.0
    a = np.full_like(z, _LANCZOS[0])
    for i in range(1, len(_LANCZOS)):
        a += _LANCZOS[i] / (z + i)
    t = z + (_LANCZOS_G + 0.5)
    return _HALF_LOG_2PI + (z + 0.5) * np.log(t) - t + np.log(a)


def _gammaln(x: Any) -> Any:
    x64, dt = _as_f64(x)
    small = x64 < 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        if not small.any():
            out = _lgamma_lanczos(x64)
        else:
            # Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
            xr = np.where(small, 1.0 - x64, x64)
            out = _lgamma_lanczos(xr)
            refl = np.log(np.pi / np.abs(_sinpi(x64))) - out
            out = np.where(small, refl, out)
            out = np.where(_is_pole(x64), np.inf, out)
    return out.astype(dt, copy=False)


def _shift_up(x: np.ndarray, threshold: float, term: Any) -> tuple[np.ndarray, np.ndarray]:
    """Apply the recurrence until every element is >= threshold.

    Returns (shifted x, sum of term(x + k) over the steps taken by each element)."""
    steps = np.ceil(threshold - x)
    steps = np.where(np.isfinite(steps) & (steps > 0), steps, 0)
    acc = np.zeros_like(x)
    n_max = int(steps.max()) if steps.size else 0
    for k in range(n_max):
        active = k < steps
        acc += np.where(active, term(np.where(active, x + k, 1.0)), 0.0)
    return x + steps, acc


def _digamma_asymptotic(x: np.ndarray) -> np.ndarray:
    inv2 = 1.0 / (x * x)
    series = np.zeros_like(x)
    for k in range(len(_BERNOULLI) - 1, -1, -1):  # Horner in 1/x^2
        series = (series + _BERNOULLI[k] / (2 * (k + 1))) * inv2
    return np.log(x) - 0.5 / x - series


def _digamma(x: Any) -> Any:
    x64, dt = _as_f64(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        small = x64 < 0.5
        xr = np.where(small, 1.0 - x64, x64)  # reflection: psi(1-x) - psi(x) = pi cot(pi x)
        xs, acc = _shift_up(xr, 10.0, lambda z: -1.0 / z)  # psi(x) = psi(x+1) - 1/x
        out = acc + _digamma_asymptotic(xs)
        if small.any():
            out = np.where(small, out - np.pi * _cotpi(x64), out)
            out = np.where(_is_pole(x64), np.nan, out)
    return out.astype(dt, copy=False)


def _polygamma_asymptotic(n: int, x: np.ndarray) -> np.ndarray:
    # psi^(n)(x) ~ (-1)^(n+1) [(n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B_2k (2k+n-1)!/((2k)! x^(2k+n))]
    inv = 1.0 / x
    total = math.factorial(n - 1) * inv**n + math.factorial(n) * 0.5 * inv ** (n + 1)
    for k, b in enumerate(_BERNOULLI, start=1):
        coef = b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
        total = total + coef * inv ** (2 * k + n)
    return total if n % 2 == 1 else -total


def _polygamma(x: Any, n: int = 1) -> Any:
    if n == 0:
        return _digamma(x)
    x64, dt = _as_f64(x)
    sign = 1.0 if n % 2 == 1 else -1.0  # (-1)^(n+1)
    fact = float(math.factorial(n))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reflect = n == 1 and bool((x64 < 0.5).any())
        if reflect:  # trigamma: psi1(1 - x) + psi1(x) = pi^2 / sin^2(pi x)
            small = x64 < 0.5
            xr = np.where(small, 1.0 - x64, x64)
        else:
            xr = x64
        # psi^(n)(x) = psi^(n)(x + 1) + (-1)^(n+1) n! / x^(n+1)
        xs, acc = _shift_up(xr, 10.0 + 2.0 * n, lambda z: sign * fact / z ** (n + 1))
        out = acc + _polygamma_asymptotic(n, xs)
        if reflect:
            out = np.where(small, (np.pi / _sinpi(x64)) ** 2 - out, out)
        out = np.where(_is_pole(x64), np.nan, out)
    return out.astype(dt, copy=False)


gammaln = primitive(_gammaln, "gammaln", arity=1)
digamma = primitive(_digamma, "digamma", arity=1)
_polygamma_p = primitive(_polygamma, "polygamma", arity=1)

defvjp(gammaln, lambda g, ans, x: g * digamma(x))
defvjp(digamma, lambda g, ans, x: g * _polygamma_p(x, n=1))
defvjp(_polygamma_p, lambda g, ans, x, n=1: g * _polygamma_p(x, n=n + 1))
defjvp_elementwise(gammaln)
defjvp_elementwise(digamma)
defjvp_elementwise(_polygamma_p)

lgamma = gammaln  # PyTorch's name
psi = digamma  # SciPy's alias


def polygamma(n: int, x: Any) -> Any:
    """The n-th derivative of digamma (``scipy.special.polygamma`` / ``torch.polygamma`` order)."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"polygamma: the order n must be a non-negative integer, got {n!r}")
    if n == 0:
        return digamma(x)
    return _polygamma_p(x, n=int(n))


def trigamma(x: Any) -> Any:
    """``polygamma(1, x)``: the derivative of digamma."""
    return _polygamma_p(x, n=1)


def betaln(a: Any, b: Any) -> Any:
    """log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def xlogy(x: Any, y: Any) -> Any:
    """x * log(y), defined as 0 where x == 0 (also when y <= 0), with NaN-free gradients."""
    return _x_log(x, y, ops.log, 0.0, 1.0)


def xlog1py(x: Any, y: Any) -> Any:
    """x * log1p(y), defined as 0 where x == 0 (also when y <= -1), with NaN-free gradients."""
    return _x_log(x, y, ops.log1p, -1.0, 0.0)


def _x_log(x: Any, y: Any, log: Any, edge: float, safe: float) -> Any:
    """x * log(y) masked only where x == 0 and log(y) is not finite (y <= edge): where y is
    inside the domain x * log(y) is 0 at x == 0 by itself, and its gradient in x is log(y), not
    0 (a mask there would cut it)."""
    def raw(v: Any) -> Any:
        return v._value if isinstance(v, Tensor) else np.asarray(v)

    traced = _Trace.compiling or bool(VMAP_LEVELS)  # (a vmapped value has no values to read)
    if not traced:
        with np.errstate(invalid="ignore"):
            masked = (raw(x) == 0) & (raw(y) <= edge)
        if not np.any(masked):
            return x * log(y)
    else:  # the mask from the live values at every call of the step, or from every slice
        masked = ops.logical_and(ops.equal(x, 0), ops.less_equal(y, edge))
    return ops.where(masked, 0.0, x * log(ops.where(masked, safe, y)))


# ---- the error function and its inverse (Normal.cdf / Normal.icdf) ----------------------------
_erf_scalar = np.frompyfunc(math.erf, 1, 1)
_erfc_scalar = np.frompyfunc(math.erfc, 1, 1)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf(x: Any) -> Any:
    x64, dt = _as_f64(x)
    return np.asarray(_erf_scalar(x64), dtype=np.float64).astype(dt, copy=False)


def _erfinv(y: Any) -> Any:
    """Giles' single-precision approximation (2010), then four Newton steps on math.erf / math.erfc: float64
    accuracy inside (-1, 1); +-inf at +-1 and NaN outside, as torch.erfinv."""
    y64, dt = _as_f64(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log((1.0 - y64) * (1.0 + y64))
        c = w < 5.0
        wc = np.where(c, w - 2.5, np.sqrt(np.where(c, 5.0, w)) - 3.0)
        central = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
        tail = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
        pc, pt = np.full_like(wc, central[0]), np.full_like(wc, tail[0])
        for a, b in zip(central[1:], tail[1:], strict=True):
            pc, pt = a + pc * wc, b + pt * wc
        ay = np.abs(y64)
        x = np.where(c, pc, pt) * ay
        inside = ay < 1
        # Newton on erf near 0 and on erfc in the tails, where 1 - |y| is exact but erf(x)
        # rounds to 1 (|x| is solved, the sign put back last)
        tail_ = ay > 0.5
        target = np.where(tail_, 1.0 - ay, ay)
        for _ in range(4):
            xs = np.where(inside, x, 0.0)
            dens = _TWO_OVER_SQRT_PI * np.exp(-xs * xs)
            ec = np.asarray(_erfc_scalar(xs), dtype=np.float64)
            # tails: Newton on log erfc(x) = log(1 - |y|), nearly linear where erfc is not
            step = np.where(tail_, (np.log(target) - np.log(ec)) * ec / dens,
                            (np.asarray(_erf_scalar(xs), dtype=np.float64) - target) / dens)
            x = np.where(inside, xs - step, x)
        x = np.copysign(x, y64)
        x = np.where(np.abs(y64) == 1, np.copysign(np.inf, y64), x)
        x = np.where((np.abs(y64) > 1) | np.isnan(y64), np.nan, x)
    return x.astype(dt, copy=False)


erf = primitive(_erf, "erf", arity=1)
erfinv = primitive(_erfinv, "erfinv", arity=1)
defvjp(erf, lambda g, ans, x: g * (_TWO_OVER_SQRT_PI * ops.exp(-x * x)))
defvjp(erfinv, lambda g, ans, y: g * ((0.5 * math.sqrt(math.pi)) * ops.exp(ans * ans)))
defjvp_elementwise(erf)
defjvp_elementwise(erfinv)
export(erf, numpy=False, torch="erf()", top=True, promote="float")
export(erfinv, numpy=False, torch="erfinv()", top=True, promote="float")



# ---- modified Bessel functions of the first kind, orders 0 and 1 (VonMises) --------------------
# |x| < 30: the power series sum_k (x/2)^(2k+n) / (k! (k+n)!), positive terms (no cancellation),
# 80 of them reach float64 there; |x| >= 30: Hankel's asymptotic series of e^-|x| I_n(|x|),
# whose 20th term is below 1e-17 from x = 30 on.
_BESSEL_SERIES_TERMS = 80
_BESSEL_ASYMPTOTIC_TERMS = 20


def _bessel_series(x: np.ndarray, n: int) -> np.ndarray:
    q = 0.25 * x * x
    term = (0.5 * x) ** n / math.factorial(n)
    total = term.copy()
    for k in range(1, _BESSEL_SERIES_TERMS):
        term = term * q / (k * (k + n))
        total += term
    return total


def _bessel_asymptotic(ax: np.ndarray, n: int) -> np.ndarray:
    """e^-x I_n(x) for large positive x: (2 pi x)^-1/2 sum_k (-1)^k a_k(n) / x^k."""
    mu = 4.0 * n * n
    term, total = np.ones_like(ax), np.ones_like(ax)
    for k in range(1, _BESSEL_ASYMPTOTIC_TERMS):
        term = -term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * ax)
        total += term
    return total / np.sqrt(2.0 * math.pi * ax)


def _bessel(x: Any, n: int, scaled: bool) -> Any:
    """I_n(x) (``scaled``: e^-|x| I_n(x)) for n in (0, 1); I_0 is even, I_1 odd."""
    x64, dt = _as_f64(x)
    ax = np.abs(x64)
    big = ax >= 30.0
    with np.errstate(over="ignore", invalid="ignore"):
        small = _bessel_series(np.where(big, 0.0, x64), n)
        if scaled:
            small = small * np.exp(-np.where(big, 0.0, ax))
        large = _bessel_asymptotic(np.where(big, ax, 30.0), n)
        if not scaled:
            large = large * np.exp(np.where(big, ax, 0.0))
        if n == 1:
            large = np.copysign(large, x64)
        out = np.where(big, large, small)
    return np.asarray(out, dtype=np.float64).astype(dt, copy=False)


def _i1_over_x(x: Any, i1x: Any) -> Any:
    """I_1(x) / x, 1/2 at x = 0 (its limit), from I_1(x) (or e^-|x| I_1(x): then scaled)."""
    zero = ops.equal(x, 0)
    return ops.where(zero, 0.5, i1x / ops.where(zero, 1.0, x))


i0 = primitive(lambda x: _bessel(x, 0, False), "i0", arity=1)
i0e = primitive(lambda x: _bessel(x, 0, True), "i0e", arity=1)
i1 = primitive(lambda x: _bessel(x, 1, False), "i1", arity=1)
i1e = primitive(lambda x: _bessel(x, 1, True), "i1e", arity=1)
# I0' = I1, I1' = I0 - I1/x; the scaled ones subtract sign(x) times themselves
defvjp(i0, lambda g, ans, x: g * i1(x))
defvjp(i0e, lambda g, ans, x: g * (i1e(x) - ops.sign(x) * ans))
defvjp(i1, lambda g, ans, x: g * (i0(x) - _i1_over_x(x, ans)))
defvjp(i1e, lambda g, ans, x: g * (i0e(x) - _i1_over_x(x, ans) - ops.sign(x) * ans))
for _f in (i0, i0e, i1, i1e):
    defjvp_elementwise(_f)
export(i0, numpy=False, torch="i0()", top=True, promote="float")
for _f in (i0e, i1, i1e):
    _f.__doc__ = f"``torch.special.{_f.__name__}``"


# ---- the implicit reparameterization of Gamma draws (distributions.Gamma.rsample) ----------
_GAMMA_SERIES_CAP = 20000


def _standard_gamma_grad_np(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """dx/da for a draw x of Gamma(a, 1) held at its quantile: -(dP(a, x)/da) / p(a, x) =
    -sum_n r_n (log x - digamma(a + n + 1)), r_n = x^(n+1) / (a (a+1) ... (a+n)), the power
    series of P divided by the density term by term (no overflow; float64 inside)."""
    x64, a64 = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(a, np.float64))
    xs = np.maximum(x64, np.finfo(np.float64).tiny)
    log_x = np.log(xs)
    r = xs / a64
    psi = np.asarray(_digamma(a64 + 1.0), np.float64)
    total = r * (log_x - psi)
    n_max = int(min(_GAMMA_SERIES_CAP, np.max(np.maximum(xs - a64, 0) + 12 * np.sqrt(xs + a64) + 40)))
    for n in range(1, n_max):
        r = r * xs / (a64 + n)
        psi = psi + 1.0 / (a64 + n)
        total += r * (log_x - psi)
        if n % 32 == 0 and np.all(np.abs(r) < 1e-17 * np.maximum(np.abs(total), 1e-300)):
            break
    return (-total).astype(np.result_type(x), copy=False)


def _no_second_derivative(*_: Any) -> Any:
    raise NotImplementedError(
        "Gamma.rsample: no second derivative w.r.t. the concentration (torch has none either); "
        "take one backward pass through rsample, or differentiate log_prob instead")


standard_gamma_grad = primitive(_standard_gamma_grad_np, "standard_gamma_grad", arity=2)
defvjp(standard_gamma_grad, _no_second_derivative, _no_second_derivative)
defjvp(standard_gamma_grad, _no_second_derivative, _no_second_derivative)
# the draw itself, as a function of the concentration: its value is the draw given
# (the value is x broadcast with a: elementwise, so vmap batches both by broadcasting)
gamma_draw = primitive(lambda a, x: x + np.zeros_like(a), "standard_gamma", arity=2)
defvjp(gamma_draw, lambda g, ans, a, x: g * standard_gamma_grad(ans, a), None)
defjvp(gamma_draw, lambda t, ans, a, x: t * standard_gamma_grad(ans, a), None)
defbatch(gamma_draw, "elementwise")
defbatch(standard_gamma_grad, "elementwise")


# ---- torch.special's other functions RL code calls -------------------------------------------
def _erfc(x: Any) -> Any:
    x64, dt = _as_f64(x)
    return np.asarray(_erfc_scalar(x64), dtype=np.float64).astype(dt, copy=False)


# erfcx(z) ~ 1/(z sqrt(pi)) * sum_k (-1)^k (2k-1)!! / (2 z^2)^k: 1e-16 from z = 26 on, where
# exp(z^2) erfc(z) would underflow
_ERFCX_TERMS = tuple((-1) ** k * math.prod(range(1, 2 * k, 2)) / 2.0 ** k for k in range(8))


def _erfcx(x: Any) -> Any:
    """exp(x^2) erfc(x), accurate where erfc underflows (x >= 26); +inf below about -26.6."""
    x64, dt = _as_f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        big = x64 >= 26.0
        direct = np.exp(np.square(np.where(big, 0.0, x64))) * np.asarray(
            _erfc_scalar(np.where(big, 0.0, x64)), dtype=np.float64)
        z = np.where(big, x64, 26.0)
        inv2 = 1.0 / (z * z)
        series = np.zeros_like(z)
        for c in reversed(_ERFCX_TERMS):  # Horner in 1/z^2
            series = series * inv2 + c
        out = np.where(big, series / (z * math.sqrt(math.pi)), direct)
    return out.astype(dt, copy=False)


def _entr(x: Any) -> Any:
    """-x log x for x > 0, 0 at 0, -inf for x < 0 (and NaN stays NaN), as torch.special.entr."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x > 0, -x * np.log(np.where(x > 0, x, 1)), np.where(x == 0, 0, -np.inf))
    return np.where(np.isnan(x), x, out).astype(np.result_type(x), copy=False)


erfc = primitive(_erfc, "erfc", arity=1)
defvjp(erfc, lambda g, ans, x: g * (-_TWO_OVER_SQRT_PI * ops.exp(-x * x)))
defjvp_elementwise(erfc)
export(erfc, numpy=False, torch="erfc()", top=True, promote="float")
erfcx = primitive(_erfcx, "erfcx", arity=1)
defvjp(erfcx, lambda g, ans, x: g * (2.0 * x * ans - _TWO_OVER_SQRT_PI))
defjvp_elementwise(erfcx)
entr = primitive(_entr, "entr", arity=1)
defvjp(entr, lambda g, ans, x: g * -(ops.log(x) + 1.0))
defjvp_elementwise(entr)

_SQRT_HALF = math.sqrt(0.5)


def ndtr(input: Any) -> Any:  # noqa: A002 - torch's name
    """The standard normal CDF, 0.5 erfc(-x / sqrt 2) (accurate in the lower tail)."""
    return 0.5 * erfc(-_SQRT_HALF * _float_tensor(input, "ndtr"))


def log_ndtr(input: Any) -> Any:  # noqa: A002 - torch's name
    """log ndtr(x), finite far in the lower tail: log(erfcx(-x/sqrt 2) / 2) - x^2/2 for x < 0,
    log1p(-ndtr(-x)) above (each branch fed safe values, so neither's gradient is NaN)."""
    x = _float_tensor(input, "log_ndtr")
    pos = ops.greater(x, 0)
    xn, xp = ops.where(pos, 0.0, x), ops.where(pos, x, 0.0)
    low = ops.log(0.5 * erfcx(-_SQRT_HALF * xn)) - 0.5 * xn * xn
    return ops.where(pos, ops.log1p(-0.5 * erfc(_SQRT_HALF * xp)), low)


def _float_tensor(x: Any, name: str) -> Any:
    """torch.special's input: a Tensor, an integer one in the default float dtype."""
    if not isinstance(x, Tensor):
        raise TypeError(f"special.{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    return x if x.dtype.kind == "f" else x.float()


def _method_call(name: str, method: str | None = None) -> Any:
    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 - torch's name
        if not isinstance(input, Tensor):
            raise TypeError(f"special.{name}(): argument 'input' must be Tensor, not "
                            f"{type(input).__name__}")
        return getattr(input, method or name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.special.{name}``: ``input.{method or name}(...)``."
    return fn


expit = _method_call("expit", "sigmoid")
logit = _method_call("logit")
exp2 = _method_call("exp2")
expm1 = _method_call("expm1")
log1p = _method_call("log1p")
sinc = _method_call("sinc")
round = _method_call("round")  # noqa: A001 - torch.special's name
softmax = _method_call("softmax")
log_softmax = _method_call("log_softmax")
logsumexp = _method_call("logsumexp")


def multigammaln(input: Any, p: int) -> Any:  # noqa: A002 - torch's name
    """log of the multivariate gamma function of dimension ``p`` (inf at and below (p - 1) / 2,
    where a term reaches a pole, as torch's)."""
    x = _float_tensor(input, "multigammaln")
    c = 0.25 * p * (p - 1) * math.log(math.pi)
    return c + sum(gammaln(x - 0.5 * j) for j in range(p))


# ---- the regularized incomplete gamma functions (Gamma.cdf, Chi2.cdf) ----------------------
_IGAMMA_CAP = 20000
_TINY = 1e-300


def _igamma_series(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n)) (for x < a + 1)."""
    term = np.ones_like(x)
    total = np.ones_like(x)
    for n in range(1, _IGAMMA_CAP):
        term = term * x / (a + n)
        total += term
        if n % 16 == 0 and np.all(np.abs(term) <= 1e-17 * np.abs(total)):
            break
    return np.exp(a * np.log(x) - x - _gammaln(a + 1.0)) * total


def _igammac_fraction(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Q(a, x) by Legendre's continued fraction, evaluated by the modified Lentz method (for
    x >= a + 1)."""
    b = x + 1.0 - a
    c = np.full_like(x, 1.0 / _TINY)
    d = 1.0 / np.where(np.abs(b) < _TINY, _TINY, b)
    h = d.copy()
    for i in range(1, _IGAMMA_CAP):
        an = -i * (i - a)
        b = b + 2.0
        d = an * d + b
        d = 1.0 / np.where(np.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        delta = d * c
        h = h * delta
        if i % 8 == 0 and np.all(np.abs(delta - 1.0) <= 1e-16):
            break
    return np.exp(a * np.log(x) - x - _gammaln(a)) * h


def _igamma_pair(a: Any, x: Any, upper: bool) -> Any:
    """P(a, x) (or Q = 1 - P if ``upper``), float64 inside, each from the side where it is
    accurate; torch's values at the edges: NaN for a < 0, x < 0, a = x = 0; P(0, x > 0) = 1,
    P(a, 0) = 0, P(a, inf) = 1."""
    dt = np.result_type(a, x, np.float32) if np.result_type(a, x).kind == "f" else np.dtype(np.float64)
    a64, x64 = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    bad = ~((a64 >= 0) & (x64 >= 0)) | ((a64 == 0) & (x64 == 0))
    edge = (a64 == 0) | (x64 == 0) | np.isinf(x64) | bad
    ok = ~edge
    low = ok & (x64 < a64 + 1.0)
    out = np.where(x64 == 0, 0.0, 1.0)  # P at the edges (a = 0 or x = inf: 1)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        if low.any():
            p = _igamma_series(a64[low], x64[low])
            out[low] = 1.0 - p if upper else p
        high = ok & ~low
        if high.any():
            q = _igammac_fraction(a64[high], x64[high])
            out[high] = q if upper else 1.0 - q
    out = np.where(edge & upper, 1.0 - out, out)
    return np.where(bad, np.nan, out).astype(dt, copy=False)


def _igamma_density(a: Any, x: Any) -> Any:
    """dP/dx = x^(a-1) e^-x / Gamma(a), written as torch's (NaN at x = 0 for a = 1 and at
    x = inf, 0 where Gamma(a) is infinite)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return ops.exp((a - 1.0) * ops.log(x) - x - gammaln(a))


def _no_concentration_grad(name: str) -> Any:
    def rule(*_: Any) -> Any:
        raise NotImplementedError(f"the derivative for '{name}: input' is not implemented.")
    return rule


_gammainc_p = primitive(lambda a, x: _igamma_pair(a, x, False), "gammainc", arity=2)
defvjp(_gammainc_p, _no_concentration_grad("igamma"), lambda g, ans, a, x: g * _igamma_density(a, x))
defjvp(_gammainc_p, _no_concentration_grad("igamma"), lambda t, ans, a, x: t * _igamma_density(a, x))
defbatch(_gammainc_p, "elementwise")
_gammaincc_p = primitive(lambda a, x: _igamma_pair(a, x, True), "gammaincc", arity=2)
defvjp(_gammaincc_p, _no_concentration_grad("igammac"), lambda g, ans, a, x: -g * _igamma_density(a, x))
defjvp(_gammaincc_p, _no_concentration_grad("igammac"), lambda t, ans, a, x: -t * _igamma_density(a, x))
defbatch(_gammaincc_p, "elementwise")


def gammainc(input: ArrayLike, other: ArrayLike) -> Array:  # noqa: A002 - torch's names
    """``torch.special.gammainc``: the regularized lower incomplete gamma function P(a, x),
    a = ``input``, x = ``other``; differentiable in x only (torch raises for a, and so does the
    backward pass here when a needs a gradient)."""
    return _gammainc_p(input, other)


def gammaincc(input: ArrayLike, other: ArrayLike) -> Array:  # noqa: A002 - torch's names
    """``torch.special.gammaincc``: Q(a, x) = 1 - P(a, x), computed directly where P is near 1."""
    return _gammaincc_p(input, other)


# ---- torch.special's dtype rule: an integer Tensor is computed in the default float dtype -----
def _on_floats(fn: Any) -> Any:
    """``fn`` with integer/bool Tensor operands cast to the default float first (torch gives
    float32 for ``special.gammaln(int64)``; plain arrays keep NumPy's float64)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        args = tuple(a.float() if isinstance(a, Tensor) and a.dtype.kind in "biu" else a for a in args)
        return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "special")
    call.__doc__ = fn.__doc__
    return call


gammaln, digamma, erf, erfinv, erfc, erfcx, entr, i0, i0e, i1, i1e, gammainc, gammaincc = (
    _on_floats(f) for f in (gammaln, digamma, erf, erfinv, erfc, erfcx, entr, i0, i0e, i1, i1e,
                            gammainc, gammaincc))
modified_bessel_i0, modified_bessel_i1 = i0, i1
psi, polygamma, trigamma, xlogy, xlog1py = (
    digamma, _on_floats(polygamma), _on_floats(trigamma), _on_floats(xlogy), _on_floats(xlog1py))
