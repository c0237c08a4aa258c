"""Curvature of a loss over a model's parameters, from Hessian-vector products.

``H v`` costs about two backward passes and never forms H: differentiate the gradient (recorded
with ``create_graph=True``) dotted with a constant ``v``. Everything else here is built on it:
the dense Hessian (one HVP per coordinate, for small models and for checking), the top
eigenvalues (power iteration with deflation, or Lanczos with full reorthogonalisation; the sharpness
of the loss surface) and Hutchinson's trace estimate ``E[z^T H z] = tr H`` for random +-1 ``z``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import autograd
from rlgrad.analysis._common import param_list
from rlgrad.tensor import Tensor, constant

__all__ = [
    "HessianOperator", "hessian_vector_product", "dense_hessian", "top_hessian_eigenvalues",
    "lanczos", "hutchinson_trace",
]


class HessianOperator:
    """The Hessian of a scalar ``loss`` w.r.t. ``params`` as a linear operator on flat vectors.

    The first-order gradient is recorded once; each :meth:`matvec` differentiates it again with
    ``retain_graph=True``, so any number of products share one forward and one backward.
    Parameters the loss does not depend on get zero rows and columns.
    """

    def __init__(self, loss: Tensor, params: Any) -> None:
        if not isinstance(loss, Tensor) or loss._value.size != 1:
            raise ValueError("the Hessian needs a scalar loss Tensor")
        self.params = [p for p in param_list(params) if p.requires_grad]
        if not self.params:
            raise ValueError("no parameter requires grad")
        if not loss.requires_grad:
            raise RuntimeError("the loss does not depend on the parameters (every path was cut)")
        self.shapes = [p.shape for p in self.params]
        self.sizes = [int(p._value.size) for p in self.params]
        self.dim = int(sum(self.sizes))
        self.dtype = np.result_type(*[p._value.dtype for p in self.params])
        grads = autograd.grad(loss, self.params, create_graph=True, retain_graph=True,
                              allow_unused=True)
        self.grads = grads
        self.gradient = np.concatenate(
            [np.zeros(n) if g is None else np.ravel(g._value) for g, n in zip(grads, self.sizes)])

    def _split(self, v: np.ndarray) -> list[np.ndarray]:
        out, i = [], 0
        for p, n, shape in zip(self.params, self.sizes, self.shapes):
            out.append(np.asarray(v[i:i + n], dtype=p._value.dtype).reshape(shape))
            i += n
        return out

    def matvec(self, v: Any) -> np.ndarray:
        """``H @ v`` for a flat vector ``v`` of length ``dim`` (float64 result)."""
        v = np.asarray(v, dtype=np.float64).ravel()
        if v.size != self.dim:
            raise ValueError(f"vector has {v.size} entries, the parameters have {self.dim}")
        dot = None
        for g, vi in zip(self.grads, self._split(v)):
            if g is None or not g.requires_grad:
                continue  # a gradient that is constant in the params: its block of H is zero
            term = (g * constant(vi)).sum()
            dot = term if dot is None else dot + term
        if dot is None:
            return np.zeros(self.dim)
        hv = autograd.grad(dot, self.params, retain_graph=True, allow_unused=True)
        return np.concatenate([np.zeros(n) if h is None else np.ravel(h._value).astype(np.float64)
                               for h, n in zip(hv, self.sizes)])

    __matmul__ = matvec

    def dense(self) -> np.ndarray:
        """The full ``dim x dim`` Hessian, one HVP per column (symmetrised against rounding)."""
        eye = np.eye(self.dim)
        h = np.stack([self.matvec(eye[i]) for i in range(self.dim)], axis=1)
        return (h + h.T) / 2


def hessian_vector_product(loss: Tensor, params: Any, vector: Any) -> list[Tensor]:
    """``H v`` with H the Hessian of ``loss`` w.r.t. ``params`` and ``v`` given per parameter
    (a list of arrays/tensors with the parameters' shapes) or flat; returned per parameter."""
    op = HessianOperator(loss, params)
    if isinstance(vector, list | tuple):
        flat = np.concatenate([np.ravel(v._value if isinstance(v, Tensor) else v) for v in vector])
    else:
        flat = np.ravel(vector._value if isinstance(vector, Tensor) else vector)
    hv = op.matvec(flat)
    return [constant(h) for h in op._split(hv)]


def dense_hessian(loss: Tensor, params: Any) -> np.ndarray:
    """The Hessian of ``loss`` over all ``params`` flattened and concatenated (small models)."""
    return HessianOperator(loss, params).dense()


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal(n)
    return v / np.linalg.norm(v)


def _power_iteration(op: HessianOperator, k: int, iters: int, tol: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    vals: list[float] = []
    vecs: list[np.ndarray] = []
    for _ in range(k):
        v = _unit(rng, op.dim)
        lam = 0.0
        for _ in range(iters):
            for u in vecs:  # deflation: stay orthogonal to the eigenvectors already found
                v -= (u @ v) * u
            hv = op.matvec(v)
            for u in vecs:
                hv -= (u @ hv) * u
            new_lam = float(v @ hv)  # Rayleigh quotient
            norm = np.linalg.norm(hv)
            if norm == 0:
                new_lam = 0.0
                break
            v = hv / norm
            if abs(new_lam - lam) <= tol * (abs(lam) + 1e-12):
                lam = new_lam
                break
            lam = new_lam
        vals.append(lam)
        vecs.append(v)
    return np.array(vals), np.stack(vecs)


def lanczos(op: HessianOperator, steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Ritz values and vectors of ``op`` after ``steps`` Lanczos steps (full reorthogonalisation:
    the dimension is small enough and it keeps the Ritz values free of ghost copies)."""
    m = min(steps, op.dim)
    q = np.zeros((m, op.dim))
    alpha = np.zeros(m)
    beta = np.zeros(max(m - 1, 0))
    q[0] = _unit(rng, op.dim)
    j = 0
    for j in range(m):
        w = op.matvec(q[j])
        alpha[j] = q[j] @ w
        w -= alpha[j] * q[j]
        if j > 0:
            w -= beta[j - 1] * q[j - 1]
        w -= q[:j + 1].T @ (q[:j + 1] @ w)  # reorthogonalise
        if j == m - 1:
            break
        b = np.linalg.norm(w)
        if b < 1e-10 * (abs(alpha[j]) + 1):  # invariant subspace found: T is exact
            m = j + 1
            break
        beta[j] = b
        q[j + 1] = w / b
    t = np.diag(alpha[:m]) + np.diag(beta[:m - 1], 1) + np.diag(beta[:m - 1], -1)
    theta, s = np.linalg.eigh(t)
    return theta, s.T @ q[:m]


def top_hessian_eigenvalues(loss: Tensor, params: Any, k: int = 1, *, method: str = "power",
                            which: str = "LM", iters: int = 100, tol: float = 1e-6,
                            seed: int = 0, return_eigenvectors: bool = False) -> Any:
    """The ``k`` top eigenvalues of the Hessian of ``loss`` w.r.t. ``params``.

    ``which="LM"`` (largest magnitude, what power iteration finds) or ``"LA"`` (largest
    algebraic, Lanczos only). ``method="power"`` runs power iteration with deflation (``iters``
    HVPs per eigenvalue at most); ``"lanczos"`` builds a Krylov space of ``iters`` HVPs. Results
    are sorted (by magnitude for LM, by value for LA), largest first; flat eigenvectors (rows)
    are returned too with ``return_eigenvectors=True``.
    """
    op = HessianOperator(loss, params)
    rng = np.random.default_rng(seed)
    k = min(k, op.dim)
    if which not in ("LM", "LA"):
        raise ValueError(f"which must be 'LM' or 'LA', got {which!r}")
    if method == "power":
        if which != "LM":
            raise ValueError("power iteration finds the largest-magnitude eigenvalues: use "
                             "which='LM' or method='lanczos'")
        vals, vecs = _power_iteration(op, k, iters, tol, rng)
    elif method == "lanczos":
        vals, vecs = lanczos(op, max(iters, k), rng)
    else:
        raise ValueError(f"method must be 'power' or 'lanczos', got {method!r}")
    order = np.argsort(-np.abs(vals) if which == "LM" else -vals, kind="stable")[:k]
    vals, vecs = vals[order], vecs[order]
    return (vals, vecs) if return_eigenvectors else vals


def hutchinson_trace(loss: Tensor, params: Any, samples: int = 100, *, seed: int = 0,
                     distribution: str = "rademacher", return_std: bool = False) -> Any:
    """Hutchinson's estimate of the Hessian's trace: the mean of ``z^T H z`` over ``samples``
    random vectors with E[z z^T] = I (Rademacher +-1 by default, or ``"normal"``). With
    ``return_std=True`` also returns the standard error of the mean."""
    op = HessianOperator(loss, params)
    rng = np.random.default_rng(seed)
    est = np.empty(samples)
    for i in range(samples):
        if distribution == "rademacher":
            z = rng.integers(0, 2, op.dim) * 2.0 - 1.0
        elif distribution == "normal":
            z = rng.standard_normal(op.dim)
        else:
            raise ValueError(f"distribution must be 'rademacher' or 'normal', got {distribution!r}")
        est[i] = z @ op.matvec(z)
    mean = float(est.mean())
    if return_std:
        return mean, float(est.std(ddof=1) / np.sqrt(samples)) if samples > 1 else float("nan")
    return mean
