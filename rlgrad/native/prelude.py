"""The fixed parts of every generated module: the C prelude (headers, vector-math declarations,
the scalar helpers lowerings call, the GEMM entry points) and the module's boilerplate."""

from __future__ import annotations

# glibc's libmvec has vector versions of these (x86-64, glibc >= 2.35): declared "simd", a loop
# marked `omp simd` over them calls 4 or 8 lanes at a time, as NumPy's own SIMD loops do
MVEC = tuple(("acos acosh asin asinh atan atanh cbrt cos cosh erf erfc exp exp10 exp2 expm1 log log10 "
         "log1p log2 sin sinh tan tanh").split())

PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "_adam.h"
#ifndef RLGRAD_NO_MVEC
#define VEC __attribute__((simd("notinbranch")))
@MVEC@
VEC float atan2f(float, float); VEC double atan2(double, double);
VEC float powf(float, float); VEC double pow(double, double);
VEC float hypotf(float, float); VEC double hypot(double, double);
#endif

static inline float logaddexp_f(float x, float y) {
    if (x == y) return x + 0.693147180559945309417232121458176568f;  /* both +-inf too */
    float t = x - y;
    if (t > 0) return x + log1pf(expf(-t));
    if (t <= 0) return y + log1pf(expf(t));
    return t;  /* NaN */
}
static inline double logaddexp_d(double x, double y) {
    if (x == y) return x + 0.693147180559945309417232121458176568;
    double t = x - y;
    if (t > 0) return x + log1p(exp(-t));
    if (t <= 0) return y + log1p(exp(t));
    return t;
}
/* w * minimum(adv * r, adv * clip(r, lo, hi)), NaN-propagating as NumPy's minimum/maximum */
#define PPO_TERM(T, S) static inline T ppo_term##S(T r, T adv, T lo, T hi, T w) { \
    T c = (r != r || r >= lo) ? r : lo; c = (c != c || c <= hi) ? c : hi;        \
    T a = adv * r, b = adv * c; return w * ((a != a || a <= b) ? a : b); }
PPO_TERM(float, _f)
PPO_TERM(double, _d)
/* Huber's term as nn.functional._huber_fwd computes it: q (|d| - q / 2), q = min(|d|, delta) */
#define HUBER(T, S, F) static inline T huber##S(T d, T delta) {                          \
    T l = F(d), q = (l != l || l <= delta) ? l : delta; return (l - q * (T)0.5) * q; }
HUBER(float, _f, fabsf)
HUBER(double, _d, fabs)

/* NumPy's floor_divide and remainder (npymath's npy_divmod): the quotient rounded down, the
   remainder with the divisor's sign; an integer divisor 0 gives 0 (NumPy warns), a float one
   fmod's NaN and a / b */
#define FDIVMOD(T, S, F) static inline T fdiv##S(T a, T b) {                                   \
    if (!b) return a / b;                                                                      \
    T mod = fmod##F(a, b), div = (a - mod) / b, fl;                                            \
    if (mod) { if ((b < 0) != (mod < 0)) div -= 1; }                                           \
    if (!div) return copysign##F(0, a / b);                                                    \
    fl = floor##F(div); if (div - fl > (T)0.5) fl += 1; return fl; }                           \
    static inline T fmod_py##S(T a, T b) {                                                     \
    T mod = fmod##F(a, b); if (!b) return mod;                                                 \
    if (mod) { if ((b < 0) != (mod < 0)) mod += b; } else mod = copysign##F(0, b); return mod; }
FDIVMOD(float, _f, f)
FDIVMOD(double, _d, )
static inline int64_t idiv_s(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a);  /* INT64_MIN / -1 wraps, as NumPy's */
    int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q--; return q; }
static inline int64_t imod_s(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline uint64_t idiv_u(uint64_t a, uint64_t b) { return b ? a / b : 0; }
static inline uint64_t imod_u(uint64_t a, uint64_t b) { return b ? a % b : 0; }

/* a stable argsort of n values x[0], x[s], ... (NumPy's kind="stable": ties keep their order,
   NaN last): runs of 16 by insertion, then bottom-up merges between idx and tmp. LT(a, b): a
   goes before b (a < b, or b is NaN and a is not) */
#define LT(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define ARGSORT(T, S) static void argsort##S(const T *x, npy_intp s, npy_intp n, int64_t *idx,  \
                                             int64_t *tmp) {                                      \
    for (npy_intp lo = 0; lo < n; lo += 16) {                                                     \
        npy_intp hi = lo + 16 < n ? lo + 16 : n;                                                  \
        for (npy_intp i = lo; i < hi; i++) {                                                      \
            T a = x[i * s]; npy_intp j = i;                                                       \
            while (j > lo && LT(a, x[idx[j - 1] * s])) { idx[j] = idx[j - 1]; j--; }              \
            idx[j] = i; } }                                                                       \
    int64_t *src = idx, *dst = tmp;                                                               \
    for (npy_intp w = 16; w < n; w *= 2) {                                                        \
        for (npy_intp lo = 0; lo < n; lo += 2 * w) {                                              \
            npy_intp mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;         \
            npy_intp l = lo, r = mid, k = lo;                                                     \
            while (l < mid && r < hi)                                                             \
                dst[k++] = LT(x[src[r] * s], x[src[l] * s]) ? src[r++] : src[l++];                \
            while (l < mid) dst[k++] = src[l++];                                                  \
            while (r < hi) dst[k++] = src[r++]; }                                                 \
        int64_t *t = src; src = dst; dst = t; }                                                   \
    if (src != idx) memcpy(idx, src, n * sizeof(int64_t)); }
ARGSORT(float, _f)
ARGSORT(double, _d)
ARGSORT(int64_t, _i64)
ARGSORT(int32_t, _i32)
ARGSORT(uint64_t, _u64)
ARGSORT(uint32_t, _u32)
ARGSORT(npy_bool, _b)

/* cblas_?gemm with 64-bit integers (row-major: 101, no transpose: 111, transpose: 112) */
typedef void (*sgemm_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t,
                        const double *, int64_t, double, double *, int64_t);
static sgemm_t sgemm_p;
static dgemm_t dgemm_p;
#define GEMM(T, S, P) static void gemm##S(int ta, int tb, int64_t m, int64_t n, int64_t k,       \
        const T *A, int64_t lda, const T *B, int64_t ldb, T *C) {                              \
    if (P) { P(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1, A, lda, B, ldb, 0, C, n); return; } \
    for (int64_t i = 0; i < m; i++) for (int64_t j = 0; j < n; j++) {  /* no BLAS: plain loops */ \
        double acc = 0;                                                                         \
        for (int64_t p = 0; p < k; p++)                                                         \
            acc += (double)A[ta ? p * lda + i : i * lda + p] * (double)B[tb ? j * ldb + p : p * ldb + j]; \
        C[i * n + j] = (T)acc; } }
GEMM(float, _s, sgemm_p)
GEMM(double, _d, dgemm_p)

/* an argument as the program was traced with: an aligned C-contiguous array of this dtype and shape */
static int arg_ok(PyObject *o, int type, int nd, const npy_intp *dims) {
    if (!PyArray_Check(o)) return 0;
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_NDIM(a) != nd || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) return 0;
    if (PyArray_TYPE(a) != type && !PyArray_EquivTypenums(PyArray_TYPE(a), type)) return 0;
    for (int k = 0; k < nd; k++) if (PyArray_DIMS(a)[k] != dims[k]) return 0;
    return 1;
}
static void index_error(long long i, long long n, int axis) {
    PyErr_Format(PyExc_IndexError, "rlgrad.jit (native): index %lld is out of bounds for axis %d "
                 "with size %lld", i, axis, n);
}
"""

MODULE_END = r"""
static PyObject *setup(PyObject *self, PyObject *args) {
    unsigned long long s, d;
    if (!PyArg_ParseTuple(args, "KK", &s, &d)) return NULL;
    sgemm_p = (sgemm_t)(uintptr_t)s;
    dgemm_p = (dgemm_t)(uintptr_t)d;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "the BLAS entry points (addresses; 0: plain loops)"},
    {"step", (PyCFunction)(void (*)(void))step, METH_FASTCALL, "the program"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "@MODULE@", NULL, -1, methods};
PyMODINIT_FUNC PyInit_@MODULE@(void) {
    import_array();
    return PyModule_Create(&module);
}
"""


def prelude() -> str:
    decl = "\n".join(f"VEC float {f}f(float); VEC double {f}(double);" for f in MVEC)
    return PRELUDE.replace("@MVEC@", decl)
