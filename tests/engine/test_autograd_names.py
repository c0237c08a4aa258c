"""Every name HIPS autograd's ``autograd.numpy`` (and ``.linalg``) differentiates is in
``rlgrad.numpy`` (issue 15 part 2), and, called the generic ways autograd takes it, gives
autograd's gradient.

The list is hard-coded (autograd 1.9's ``numpy_vjps.py`` and ``numpy_wrapper.py``: the names with
a VJP rule and the wrappers built on them); autograd itself is only the comparator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

AUTOGRAD_NUMPY = """
abs absolute acos acosh add amax amin angle append arccos arccosh arcsin arcsinh arctan arctan2
arctanh array array_split asin asinh astype atan atan2 atanh atleast_1d atleast_2d atleast_3d
broadcast_to c_ clip column_stack concatenate conj conjugate cos cosh cross cumsum deg2rad degrees
diag diagonal diff divide dot dsplit einsum exp exp2 expand_dims expm1 fabs fliplr flipud fmax
fmin full gradient hsplit hstack hypot imag inner kron linspace log log10 log1p log2 logaddexp
logaddexp2 make_diagonal matmul max maximum mean min minimum mod moveaxis multiply nan_to_num
negative outer pad partition permute_dims pow power prod r_ rad2deg radians ravel real
real_if_close reciprocal remainder repeat reshape roll rollaxis rot90 row_stack select sin sinc
sinh sort split sqrt square squeeze stack std subtract sum swapaxes tan tanh tensordot tile trace
transpose tril triu true_divide var vsplit vstack where
""".split()
AUTOGRAD_LINALG = "cholesky det eig eigh inv norm pinv slogdet solve svd".split()


@pytest.mark.parametrize("name", AUTOGRAD_NUMPY)
def test_autograd_numpy_name_exists(name):
    assert hasattr(rnp, name), f"rlgrad.numpy has no {name} (autograd.numpy differentiates it)"


@pytest.mark.parametrize("name", AUTOGRAD_LINALG)
def test_autograd_linalg_name_exists(name):
    assert callable(getattr(rnp.linalg, name, None)), f"rlgrad.numpy.linalg has no {name}"


R = np.random.RandomState(1)
X, Y = R.uniform(0.2, 0.9, (3, 4)), R.uniform(0.2, 0.9, (3, 4))
# Generic calls: the first one autograd differentiates (to a finite gradient) is compared.
CALLS = [((X,), {}), ((X, Y), {}), ((X, 2), {}), ((X, 1), {}), ((X + 1.5,), {}), ((X, 0.5), {}),
         (([X, Y],), {}), ((X, X.T), {}), ((X[:, :3] + np.eye(3) * 2,), {}),
         ((X[:, :3],), {}), ((X[0], Y[0]), {}), ((X, Y, 1), {})]
ODD = {"where": ((X > 0.5, X, Y), {}), "select": (([X > 0.5], [X], Y), {}),
       "einsum": (("ij,ij->i", X, Y), {}), "astype": ((X, np.float64), {}),
       "full": (((2, 3), X[0, 0]), {}), "make_diagonal": ((X[:2],), {"axis1": -1, "axis2": -2}),
       "broadcast_to": ((X[:1], (3, 4)), {}), "moveaxis": ((X[None], 0, 2), {}),
       "pad": ((X, ((1, 0), (0, 2))), {"mode": "constant"}), "reshape": ((X, (2, 6)), {}),
       "swapaxes": ((X[None], 0, 2), {}), "solve": ((X[:, :3] + np.eye(3) * 2, Y[:, :2]), {}),
       "linspace": ((X[0, 0], Y[0, 0], 4), {}), "cross": ((X[:, :3], Y[:, :3]), {}),
       "clip": ((X, 0.3, 0.7), {}), "rot90": ((X,), {}), "dsplit": ((X[None], 2), {}),
       "cholesky": ((X[:, :3] @ X[:, :3].T + np.eye(3),), {}),
       "eigh": ((X[:, :3] + X[:, :3].T,), {}), "eig": ((np.triu(X[:, :3]) + np.diag([0, 1.0, 2.0]),), {})}
SKIP_COMPARE = {"r_", "c_",  # index objects, not functions
                # autograd returns a boxed list / takes no arrays where rlgrad differs (documented)
                "hsplit", "vsplit", "dsplit", "split", "array_split", "partition", "gradient"}


def _flat(m, out):
    if not hasattr(out, "shape") and hasattr(out, "__len__"):  # (autograd's tuples are boxes)
        return m.concatenate([m.ravel(out[i]) for i in range(len(out))])
    return out


@pytest.mark.parametrize("name", [*AUTOGRAD_NUMPY, *("linalg." + n for n in AUTOGRAD_LINALG)])
def test_same_gradient_as_autograd(name):
    autograd = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    if name in SKIP_COMPARE:
        return
    sub, _, short = name.rpartition(".")
    fa = getattr(anp.linalg if sub else anp, short)
    fr = getattr(rnp.linalg if sub else rnp, short)
    for args, kw in [ODD[short]] if short in ODD else CALLS:
        arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]

        def run(m, f, *xs, args=args, kw=kw, arrays=arrays):
            full = [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # (out= args)
            for i, x in zip(arrays, xs):
                full[i] = x
            return m.sum(_flat(m, f(*full, **kw)) ** 2)

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                want = autograd.grad(lambda *xs: run(anp, fa, *xs), list(range(len(arrays))))(
                    *[args[i].copy() for i in arrays])
            except Exception:  # noqa: BLE001 - autograd does not take this call
                continue
        if not all(np.all(np.isfinite(w)) for w in want):
            continue
        got = rlgrad.grad(lambda *xs: run(rnp, fr, *xs), argnums=tuple(range(len(arrays))))(
            *[args[i].copy() for i in arrays])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=f"{name}{args}")
        return
    pytest.fail(f"no generic call of {name} was differentiated by autograd: add one to ODD")
