/* rlgrad._kernels: two loops of every MLP's backward pass that NumPy runs as several passes.

   * sum_rows(x, out): the column sums of a (rows, cols) array, i.e. np.add.reduce(x, axis=0),
     the bias gradient of a linear layer. NumPy adds the rows one after another (for cols >= 2 of
     a C-contiguous array), one inner-loop call per row: ~25 ns of setup per row, which on a
     (256, 64) batch is most of the cost. Here the same additions, row after row, in one loop.
   * tanh_grad(g, y, out): g * (1 - y * y), tanh's backward, which NumPy runs as three ufunc
     passes with two temporaries.

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

static PyMethodDef methods[] = {
    {"sum_rows", (PyCFunction)(void (*)(void))sum_rows, METH_FASTCALL, sum_rows_doc},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL, tanh_grad_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Loops of an MLP's backward pass in one pass each, bitwise NumPy's (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
