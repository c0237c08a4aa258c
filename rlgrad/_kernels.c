/* rlgrad._kernels: loops that NumPy runs as several passes (two of every MLP's backward pass,
   and an on-policy rollout's advantages).

   * sum_rows(x, out): the column sums of a (rows, cols) array, i.e. np.add.reduce(x, axis=0),
     the bias gradient of a linear layer. NumPy adds the rows one after another (for cols >= 2 of
     a C-contiguous array), one inner-loop call per row: ~25 ns of setup per row, which on a
     (256, 64) batch is most of the cost. Here the same additions, row after row, in one loop.
   * tanh_grad(g, y, out): g * (1 - y * y), tanh's backward, which NumPy runs as three ufunc
     passes with two temporaries.
   * gae(...): RolloutBuffer's GAE(lambda) advantages and returns (rlgrad.rl.buffers), which NumPy
     runs as ~25 small operations per rollout: most of the cost of A2C's 5-step rollouts.

   The arithmetic is NumPy's operation for operation in the array's precision: correctly rounded
   IEEE adds and multiplies, nothing contracted into an FMA (-ffp-contract=off) or reassociated
   (no -ffast-math), so the results are bitwise NumPy's (tests/test_kernels.py checks it). The
   module is optional: setup.py builds it when a C compiler is there, and rlgrad.ops falls back
   to NumPy without it (or with RLGRAD_KERNELS=0). Each function returns False, having written
   nothing, when an array does not fit (dtype, layout, shape), so the caller takes NumPy's path. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_buffers.h"

static int overlap(const Py_buffer *a, const Py_buffer *b) {
    const char *pa = a->buf, *pb = b->buf;
    return pa < pb + b->len && pb < pa + a->len;
}

#define SUM_ROWS_LOOP(T)                                                                           \
    CLONES static void sum_rows_##T(const T *restrict x, T *restrict out, Py_ssize_t rows,         \
                                    Py_ssize_t cols) {                                             \
        /* NumPy starts from its identity, 0: 0 + x is x but for -0.0 (which becomes +0.0) */     \
        for (Py_ssize_t j = 0; j < cols; j++) out[j] = (T)0 + x[j];                                \
        for (Py_ssize_t i = 1; i < rows; i++) {                                                    \
            const T *r = x + i * cols;                                                             \
            for (Py_ssize_t j = 0; j < cols; j++) out[j] = out[j] + r[j];                          \
        }                                                                                          \
    }

SUM_ROWS_LOOP(float)
SUM_ROWS_LOOP(double)

PyDoc_STRVAR(sum_rows_doc,
"sum_rows(x, out) -> bool\n\n"
"out = np.add.reduce(x, axis=0) for a C-contiguous (rows >= 1, cols >= 2) float32/float64 x and\n"
"a C-contiguous out of cols entries of the same dtype. False (nothing written) if they do not fit.");

static PyObject *sum_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sum_rows(x, out) takes 2 arguments");
        return NULL;
    }
    Py_buffer xb, ob;
    if (PyObject_GetBuffer(args[0], &xb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[1], &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&xb);
        Py_RETURN_FALSE;
    }
    char k = kind_of(&xb);
    int fits = k && kind_of(&ob) == k && xb.ndim == 2 && ob.ndim == 1 && xb.shape[0] >= 1
               && xb.shape[1] >= 2 && ob.shape[0] == xb.shape[1] && !overlap(&xb, &ob);
    if (fits) {
        Py_ssize_t rows = xb.shape[0], cols = xb.shape[1];
        if (k == 'f')
            sum_rows_float(xb.buf, ob.buf, rows, cols);
        else
            sum_rows_double(xb.buf, ob.buf, rows, cols);
    }
    PyBuffer_Release(&xb);
    PyBuffer_Release(&ob);
    return Py_NewRef(fits ? Py_True : Py_False);
}

/* out may be g or y itself (a compiled step reuses buffers): each element is read before it is
   written, so only partial overlaps are refused. */
#define TANH_GRAD_LOOP(T)                                                                          \
    CLONES static void tanh_grad_##T(const T *g, const T *y, T *out, Py_ssize_t n) {               \
        for (Py_ssize_t i = 0; i < n; i++) {                                                       \
            T yi = y[i];                                                                           \
            T d = (T)1 - yi * yi;                                                                  \
            out[i] = g[i] * d;                                                                     \
        }                                                                                          \
    }

TANH_GRAD_LOOP(float)
TANH_GRAD_LOOP(double)

PyDoc_STRVAR(tanh_grad_doc,
"tanh_grad(g, y, out) -> bool\n\n"
"out = g * (1 - y * y) for C-contiguous float32/float64 arrays of one dtype and size (out may\n"
"be g or y). False (nothing written) if they do not fit.");

static int same_or_apart(const Py_buffer *a, const Py_buffer *b) {
    return a->buf == b->buf || !overlap(a, b);
}

static PyObject *tanh_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tanh_grad(g, y, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer gb, yb, ob;
    if (PyObject_GetBuffer(args[0], &gb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[1], &yb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&gb);
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[2], &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&gb);
        PyBuffer_Release(&yb);
        Py_RETURN_FALSE;
    }
    char k = kind_of(&gb);
    int fits = k && kind_of(&yb) == k && kind_of(&ob) == k && gb.len == yb.len
               && gb.len == ob.len && same_or_apart(&ob, &gb) && same_or_apart(&ob, &yb);
    if (fits) {
        Py_ssize_t n = gb.len / gb.itemsize;
        if (k == 'f')
            tanh_grad_float(gb.buf, yb.buf, ob.buf, n);
        else
            tanh_grad_double(gb.buf, yb.buf, ob.buf, n);
    }
    PyBuffer_Release(&gb);
    PyBuffer_Release(&yb);
    PyBuffer_Release(&ob);
    return Py_NewRef(fits ? Py_True : Py_False);
}

/* The advantages and returns of a (steps, n) rollout as RolloutBuffer.compute_returns_and_
   advantage computes them with NumPy (compute_gae), each element by the same operations in the
   same precision: next value = bootstrap where it is not NaN, else the next row's value (the
   last row: last_values); delta = (r + (gamma * next) * (1 - terminated)) - v; carry = (gamma *
   lambda) * (1 - done); adv = delta + carry * adv_next (from 0); returns = adv + v. gamma and
   gamma * lambda are rounded to the rollout's precision as NumPy rounds a Python float. */
#define GAE_LOOP(T)                                                                                \
    CLONES static void gae_##T(const T *r, const T *v, const T *last, const T *boot,              \
                               const char *term, const char *done, double gamma, double lam,      \
                               T *adv, T *ret, Py_ssize_t steps, Py_ssize_t n) {                  \
        const T g = (T)gamma, gl = (T)(gamma * lam);                                               \
        for (Py_ssize_t j = 0; j < n; j++) {                                                       \
            T a = (T)0;                                                                            \
            for (Py_ssize_t t = steps - 1; t >= 0; t--) {                                          \
                Py_ssize_t k = t * n + j;                                                          \
                T b = boot[k];                                                                     \
                T next = b == b ? b : (t + 1 < steps ? v[k + n] : last[j]);                        \
                T delta = (r[k] + (g * next) * ((T)1 - (T)(term[k] != 0))) - v[k];                 \
                a = delta + (gl * ((T)1 - (T)(done[k] != 0))) * a;                                 \
                adv[k] = a;                                                                        \
                ret[k] = a + v[k];                                                                 \
            }                                                                                      \
        }                                                                                          \
    }

GAE_LOOP(float)
GAE_LOOP(double)

PyDoc_STRVAR(gae_doc,
"gae(rewards, values, last_values, bootstrap, terminated, dones, gamma, gae_lambda, adv, ret)\n"
"-> bool\n\n"
"RolloutBuffer's GAE: C-contiguous (steps, n) rewards, values, bootstrap (NaN: none), adv and\n"
"ret and (n,) last_values of one float dtype, (steps, n) bool terminated and dones. False\n"
"(nothing written) if they do not fit.");

static PyObject *gae(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "gae takes 10 arguments");
        return NULL;
    }
    double gamma = PyFloat_AsDouble(args[6]), lam = PyFloat_AsDouble(args[7]);
    if (PyErr_Occurred()) return NULL;
    const int arrays[8] = {0, 1, 2, 3, 4, 5, 8, 9};
    Py_buffer b[8];
    int held = 0, fits = 1;
    for (; held < 8; held++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (held >= 6 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[arrays[held]], &b[held], flags) < 0) {
            PyErr_Clear();
            fits = 0;
            break;
        }
    }
    if (fits) {
        char k = kind_of(&b[0]);
        Py_ssize_t steps = b[0].ndim == 2 ? b[0].shape[0] : 0, n = b[0].ndim == 2 ? b[0].shape[1] : 0;
        for (int i = 0; i < 8 && fits; i++) {
            int is_bool = i == 4 || i == 5;
            const char *f = b[i].format ? b[i].format : "B";
            fits = is_bool ? (f[0] == '?' && f[1] == '\0' && b[i].len == steps * n)
                           : (kind_of(&b[i]) == k && b[i].len == (i == 2 ? n : steps * n) * b[i].itemsize);
        }
        fits = fits && k && steps > 0 && n > 0 && !overlap(&b[6], &b[7]);
        for (int i = 0; i < 6 && fits; i++) fits = !overlap(&b[i], &b[6]) && !overlap(&b[i], &b[7]);
        if (fits && k == 'f')
            gae_float(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, gamma, lam,
                      b[6].buf, b[7].buf, steps, n);
        else if (fits)
            gae_double(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, gamma, lam,
                       b[6].buf, b[7].buf, steps, n);
    }
    for (int i = 0; i < held; i++) PyBuffer_Release(&b[i]);
    return Py_NewRef(fits ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"sum_rows", (PyCFunction)(void (*)(void))sum_rows, METH_FASTCALL, sum_rows_doc},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL, tanh_grad_doc},
    {"gae", (PyCFunction)(void (*)(void))gae, METH_FASTCALL, gae_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Loops of an MLP's backward pass in one pass each, bitwise NumPy's (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
