/* rlgrad._kernels: loops that NumPy runs as several passes or slowly (an MLP's elementwise work
   around its matrix products, and an on-policy rollout's advantages).

   * sum_rows(x, out): the column sums of a (rows, cols) array, i.e. np.add.reduce(x, axis=0),
     the bias gradient of a linear layer. NumPy adds the rows one after another (for cols >= 2 of
     a C-contiguous array), one inner-loop call per row: ~25 ns of setup per row, which on a
     (256, 64) batch is most of the cost. Here the same additions, row after row, in one loop.
   * tanh_grad(g, y, out): g * (1 - y * y), tanh's backward, which NumPy runs as three ufunc
     passes with two temporaries.
   * gae(...): RolloutBuffer's GAE(lambda) advantages and returns (rlgrad.rl.buffers), which NumPy
     runs as ~25 small operations per rollout: most of the cost of A2C's 5-step rollouts.
   * relu, relu_grad, add_rows (and the two together), outer, outers, weight_cols (a conv
     weight's columns); live_columns, take_columns,
     put_rows (linear's dead-unit skipping, rlgrad/nn/functional.py); lstm_gates, lstm_dgates,
     gru_gates, gru_state, gru_dgates, gru_pre (the recurrent cells' elementwise work,
     rlgrad/nn/cells.py); conv_cols, conv_col2im (conv2d's column copies); wino_in, wino_out
     (Winograd convolutions' tile transforms, not NumPy's order of adds: see there); row_shift,
     cdf_pick (categorical sampling from logits): below, each where it is.
   * lstm_seq_fwd, lstm_seq_bwd: a float32 LSTM sequence's whole loop, GEMMs included, one call
     each way. The exception to the rule below: their tanh is their own (within 3 ulp, not
     NumPy's bits), so their reference is the NumPy loop at float32 precision
     (tests/nn/test_lstm_loop.py).

   Each kernel's reference is the NumPy line beside its call (rlgrad.ops, nn/functional.py,
   rl/buffers.py), which runs when the kernel is absent or refuses: deleting a kernel loses only
   speed. The arithmetic is NumPy's operation for operation in the array's precision: correctly
   rounded IEEE adds and multiplies, nothing contracted into an FMA (-ffp-contract=off) or
   reassociated (no -ffast-math), so the results are bitwise NumPy's
   (tests/test_reference_paths.py checks each kernel against its line, and the ops with the
   kernels against the ops without them). The module is optional: setup.py builds it when a C
   compiler is there, and rlgrad.ops falls back to NumPy without it (or with RLGRAD_KERNELS=0).
   Each function returns False, having written nothing, when an array does not fit (dtype,
   layout, shape), so the caller takes NumPy's path (tests/test_kernels.py: what each refuses). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_buffers.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

static int overlap(const Py_buffer *a, const Py_buffer *b) {
    const char *pa = a->buf, *pb = b->buf;
    return pa < pb + b->len && pb < pa + a->len;
}

/* Take the buffers of objs[0..n) (C-contiguous, with their format; writable from first_out on).
   1 if every one was taken; 0 if one was not (the error cleared, nothing held): the caller then
   answers False and NumPy runs instead. */
static int take(PyObject *const *objs, int n, int first_out, Py_buffer *b) {
    for (int i = 0; i < n; i++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (i >= first_out ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &b[i], flags) < 0) {
            PyErr_Clear();
            while (i--) PyBuffer_Release(&b[i]);
            return 0;
        }
    }
    return 1;
}

/* Release what take() held; the answer to Python. */
static PyObject *done(Py_buffer *b, int n, int fits) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&b[i]);
    return Py_NewRef(fits ? Py_True : Py_False);
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
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) Py_RETURN_FALSE;
    const Py_buffer *x = &b[0], *o = &b[1];
    char k = kind_of(x);
    int fits = k && kind_of(o) == k && x->ndim == 2 && o->ndim == 1 && x->shape[0] >= 1
               && x->shape[1] >= 2 && o->shape[0] == x->shape[1] && !overlap(x, o);
    if (fits && k == 'f')
        sum_rows_float(x->buf, o->buf, x->shape[0], x->shape[1]);
    else if (fits)
        sum_rows_double(x->buf, o->buf, x->shape[0], x->shape[1]);
    return done(b, 2, fits);
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
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *g = &b[0], *y = &b[1], *o = &b[2];
    char k = kind_of(g);
    int fits = k && kind_of(y) == k && kind_of(o) == k && g->len == y->len && g->len == o->len
               && same_or_apart(o, g) && same_or_apart(o, y);
    if (fits && k == 'f')
        tanh_grad_float(g->buf, y->buf, o->buf, g->len / g->itemsize);
    else if (fits)
        tanh_grad_double(g->buf, y->buf, o->buf, g->len / g->itemsize);
    return done(b, 3, fits);
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
"gae(rewards, values, last_values, bootstrap, terminated, dones, adv, ret, gamma, gae_lambda)\n"
"-> bool\n\n"
"RolloutBuffer's GAE: C-contiguous (steps, n) rewards, values, bootstrap (NaN: none), adv and\n"
"ret and (n,) last_values of one float dtype, (steps, n) bool terminated and dones. False\n"
"(nothing written) if they do not fit.");

static PyObject *gae(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "gae takes 10 arguments");
        return NULL;
    }
    double gamma = PyFloat_AsDouble(args[8]), lam = PyFloat_AsDouble(args[9]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer b[8];  /* rewards, values, last_values, bootstrap, terminated, dones | adv, ret */
    if (!take(args, 8, 6, b)) Py_RETURN_FALSE;
    char k = kind_of(&b[0]);
    Py_ssize_t steps = b[0].ndim == 2 ? b[0].shape[0] : 0, n = b[0].ndim == 2 ? b[0].shape[1] : 0;
    int fits = k && steps > 0 && n > 0 && !overlap(&b[6], &b[7]);
    for (int i = 0; i < 8 && fits; i++) {
        const char *f = b[i].format ? b[i].format : "B";
        fits = (i == 4 || i == 5) ? f[0] == '?' && f[1] == '\0' && b[i].len == steps * n
                                  : kind_of(&b[i]) == k && b[i].len == (i == 2 ? n : steps * n) * b[i].itemsize;
        fits = fits && (i >= 6 || (!overlap(&b[i], &b[6]) && !overlap(&b[i], &b[7])));
    }
    if (fits && k == 'f')
        gae_float(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, gamma, lam,
                  b[6].buf, b[7].buf, steps, n);
    else if (fits)
        gae_double(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, gamma, lam,
                   b[6].buf, b[7].buf, steps, n);
    return done(b, 8, fits);
}

/* ReLU's forward and backward, and a linear layer's bias add, each one pass where NumPy makes
   one ufunc call with a scalar or a broadcast operand (np.maximum(x, 0) runs ~0.2 ns per float32
   element here, g * (x > 0) a second pass plus a bool-to-float cast, out += bias a broadcast):
   * relu(x, out): np.maximum(x, 0): x where x > 0, NaN kept as it is (its bits), else +0;
   * relu_grad(g, x, out): x <= 0 ? +0 : g, torch's threshold_backward (a NaN or infinite g
     where the unit is off gives +0; a NaN x passes g);
   * add_rows(out, b, relu=False): out += b for a C-contiguous out whose last axis is b's length
     (relu: then relu(out) in the same pass, a linear layer and its ReLU in one);
   out may be an input itself (each element is read before it is written). */
#define RELU_LOOPS(T)                                                                              \
    CLONES static void relu_##T(const T *x, T *out, Py_ssize_t n) {                                \
        for (Py_ssize_t i = 0; i < n; i++) {                                                       \
            T v = x[i];                                                                            \
            T r = v > (T)0 ? v : (T)0;                                                             \
            out[i] = v != v ? v : r;                                                               \
        }                                                                                          \
    }                                                                                              \
    CLONES static void relu_grad_##T(const T *g, const T *x, T *out, Py_ssize_t n) {               \
        for (Py_ssize_t i = 0; i < n; i++) out[i] = x[i] <= (T)0 ? (T)0 : g[i];                    \
    }                                                                                              \
    CLONES static void add_rows_##T(T *out, const T *restrict b, Py_ssize_t rows,                 \
                                    Py_ssize_t cols) {                                             \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                    \
            T *r = out + i * cols;                                                                 \
            for (Py_ssize_t j = 0; j < cols; j++) r[j] = r[j] + b[j];                              \
        }                                                                                          \
    }                                                                                              \
    /* add_rows then relu in the same pass: relu(out + b), the sum rounded first */               \
    CLONES static void add_rows_relu_##T(T *out, const T *restrict b, Py_ssize_t rows,            \
                                         Py_ssize_t cols) {                                        \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                    \
            T *r = out + i * cols;                                                                 \
            for (Py_ssize_t j = 0; j < cols; j++) {                                                \
                T v = r[j] + b[j];                                                                 \
                T z = v > (T)0 ? v : (T)0;                                                         \
                r[j] = v != v ? v : z;                                                             \
            }                                                                                      \
        }                                                                                          \
    }

RELU_LOOPS(float)
RELU_LOOPS(double)

PyDoc_STRVAR(relu_doc,
"relu(x, out) -> bool\n\n"
"out = np.maximum(x, 0) for C-contiguous float32/float64 arrays of one dtype and size (out may\n"
"be x). False (nothing written) if they do not fit.");

static PyObject *relu(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "relu(x, out) takes 2 arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) Py_RETURN_FALSE;
    const Py_buffer *x = &b[0], *o = &b[1];
    char k = kind_of(x);
    int fits = k && kind_of(o) == k && x->len == o->len && same_or_apart(o, x);
    if (fits && k == 'f')
        relu_float(x->buf, o->buf, x->len / x->itemsize);
    else if (fits)
        relu_double(x->buf, o->buf, x->len / x->itemsize);
    return done(b, 2, fits);
}

PyDoc_STRVAR(relu_grad_doc,
"relu_grad(g, x, out) -> bool\n\n"
"out = where(x <= 0, 0, g) (torch's threshold_backward) for C-contiguous float32/float64 arrays of one\n"
"dtype and size (out may be g or x). False (nothing written) if they do not fit.");

static PyObject *relu_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "relu_grad(g, x, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *g = &b[0], *x = &b[1], *o = &b[2];
    char k = kind_of(g);
    int fits = k && kind_of(x) == k && kind_of(o) == k && g->len == x->len && g->len == o->len
               && same_or_apart(o, g) && same_or_apart(o, x);
    if (fits && k == 'f')
        relu_grad_float(g->buf, x->buf, o->buf, g->len / g->itemsize);
    else if (fits)
        relu_grad_double(g->buf, x->buf, o->buf, g->len / g->itemsize);
    return done(b, 3, fits);
}

PyDoc_STRVAR(add_rows_doc,
"add_rows(out, b, relu=False) -> bool\n\n"
"out += b in place for a C-contiguous float32/float64 out (ndim >= 1) whose last axis has b's\n"
"length, b a C-contiguous vector of the same dtype apart from out; relu: then out =\n"
"np.maximum(out, 0), in the same pass. False (nothing written) if they do not fit.");

static PyObject *add_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add_rows(out, b, relu=False) takes 2 or 3 arguments");
        return NULL;
    }
    int then_relu = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (then_relu < 0) return NULL;
    PyObject *objs[2] = {args[1], args[0]};  /* b read, out written */
    Py_buffer b[2];
    if (!take(objs, 2, 1, b)) Py_RETURN_FALSE;
    const Py_buffer *v = &b[0], *o = &b[1];
    char k = kind_of(o);
    Py_ssize_t cols = o->ndim >= 1 ? o->shape[o->ndim - 1] : 0;
    int fits = k && kind_of(v) == k && v->ndim == 1 && cols >= 1 && v->shape[0] == cols
               && !overlap(v, o);
    Py_ssize_t rows = fits ? o->len / o->itemsize / cols : 0;
    if (fits && k == 'f')
        (then_relu ? add_rows_relu_float : add_rows_float)(o->buf, v->buf, rows, cols);
    else if (fits)
        (then_relu ? add_rows_relu_double : add_rows_double)(o->buf, v->buf, rows, cols);
    return done(b, 2, fits);
}

/* The live units of a (rows, units) gradient (linear's backward skips the others, see
   rlgrad/nn/functional.py): the columns with an entry that is not zero (NaN counts, -0.0 does
   not, as in np.flatnonzero(g.any(axis=0))), in increasing order. NumPy makes it a bool
   reduction and a flatnonzero, ~15 us on a (256, 256) float32 array; here one pass. */
#define LIVE_LOOP(T)                                                                               \
    CLONES static void live_flags_##T(const T *g, int *restrict flag, Py_ssize_t rows,             \
                                      Py_ssize_t cols) {                                           \
        for (Py_ssize_t j = 0; j < cols; j++) flag[j] = 0;                                         \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                    \
            const T *r = g + i * cols;                                                             \
            for (Py_ssize_t j = 0; j < cols; j++) flag[j] |= r[j] != (T)0;                         \
        }                                                                                          \
    }

LIVE_LOOP(float)
LIVE_LOOP(double)

PyDoc_STRVAR(live_columns_doc,
"live_columns(g, idx) -> int\n\n"
"The indices of the columns of a C-contiguous 2-D float32/float64 g with an entry that is not\n"
"zero (NaN included), written in increasing order to the start of idx (a C-contiguous intp\n"
"vector of g's column count); returns how many, or -1 (nothing written) if they do not fit.");

static PyObject *live_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "live_columns(g, idx) takes 2 arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) return PyLong_FromLong(-1);
    const Py_buffer *g = &b[0], *o = &b[1];
    char k = kind_of(g);
    const char *f = o->format ? o->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    Py_ssize_t rows = g->ndim == 2 ? g->shape[0] : 0, cols = g->ndim == 2 ? g->shape[1] : 0;
    int fits = k && rows >= 1 && cols >= 1 && o->ndim == 1 && o->shape[0] == cols
               && o->itemsize == (Py_ssize_t)sizeof(Py_ssize_t) && (*f == 'l' || *f == 'q' || *f == 'n')
               && f[1] == '\0' && !overlap(g, o);
    int *flag = fits ? PyMem_Malloc(sizeof(int) * (size_t)cols) : NULL;
    Py_ssize_t n = -1;
    if (flag) {
        if (k == 'f')
            live_flags_float(g->buf, flag, rows, cols);
        else
            live_flags_double(g->buf, flag, rows, cols);
        Py_ssize_t *idx = o->buf;
        n = 0;
        for (Py_ssize_t j = 0; j < cols; j++)
            if (flag[j]) idx[n++] = j;
        PyMem_Free(flag);
    }
    for (int i = 0; i < 2; i++) PyBuffer_Release(&b[i]);
    return PyLong_FromSsize_t(n);
}

/* g[:, idx] of a C-contiguous (rows, cols) array into a C-contiguous (rows, len(idx)) out: the
   live units' gradient columns (NumPy's take along axis 1 runs ~2x slower here). */
#define TAKE_COLUMNS_LOOP(T)                                                                       \
    static void take_columns_##T(const T *g, const Py_ssize_t *idx, T *restrict out,              \
                                 Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t n) {                 \
        for (Py_ssize_t i = 0; i < rows; i++) {                                                    \
            const T *r = g + i * cols;                                                             \
            T *o = out + i * n;                                                                    \
            for (Py_ssize_t k = 0; k < n; k++) o[k] = r[idx[k]];                                   \
        }                                                                                          \
    }

TAKE_COLUMNS_LOOP(float)
TAKE_COLUMNS_LOOP(double)

PyDoc_STRVAR(take_columns_doc,
"take_columns(g, idx, out) -> bool\n\n"
"out = g[:, idx] for a C-contiguous 2-D float32/float64 g, a C-contiguous intp vector idx of\n"
"column indices in range and a C-contiguous (rows, len(idx)) out of g's dtype. False (nothing\n"
"written) if they do not fit.");

static PyObject *take_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take_columns(g, idx, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *g = &b[0], *ix = &b[1], *o = &b[2];
    char k = kind_of(g);
    const char *f = ix->format ? ix->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    Py_ssize_t rows = g->ndim == 2 ? g->shape[0] : 0, cols = g->ndim == 2 ? g->shape[1] : 0;
    Py_ssize_t n = ix->ndim == 1 ? ix->shape[0] : -1;
    int fits = k && kind_of(o) == k && rows >= 1 && n >= 0 && ix->itemsize == (Py_ssize_t)sizeof(Py_ssize_t)
               && (*f == 'l' || *f == 'q' || *f == 'n') && f[1] == '\0' && o->ndim == 2
               && o->shape[0] == rows && o->shape[1] == n && !overlap(o, g) && !overlap(o, ix);
    const Py_ssize_t *idx = ix->buf;
    for (Py_ssize_t j = 0; fits && j < n; j++) fits = idx[j] >= 0 && idx[j] < cols;
    if (fits && k == 'f')
        take_columns_float(g->buf, idx, o->buf, rows, cols, n);
    else if (fits)
        take_columns_double(g->buf, idx, o->buf, rows, cols, n);
    return done(b, 3, fits);
}

/* The other way: a (units, cols) out whose rows idx are part's rows in order and whose other rows
   are +0 (the weight gradient of the live units, the dead ones' rows zero), in one pass where
   NumPy zero-fills, then assigns the rows by fancy indexing. idx increasing. */
#define PUT_ROWS_LOOP(T)                                                                           \
    static void put_rows_##T(const T *part, const Py_ssize_t *idx, Py_ssize_t n, T *restrict out, \
                             Py_ssize_t units, Py_ssize_t cols) {                                  \
        Py_ssize_t k = 0;                                                                          \
        for (Py_ssize_t j = 0; j < units; j++) {                                                   \
            T *o = out + j * cols;                                                                 \
            if (k < n && idx[k] == j) {                                                            \
                memcpy(o, part + k * cols, (size_t)cols * sizeof(T));                              \
                k++;                                                                               \
            } else {                                                                               \
                memset(o, 0, (size_t)cols * sizeof(T));                                            \
            }                                                                                      \
        }                                                                                          \
    }

PUT_ROWS_LOOP(float)
PUT_ROWS_LOOP(double)

PyDoc_STRVAR(put_rows_doc,
"put_rows(part, idx, out) -> bool\n\n"
"out = zeros, then out[idx] = part, for C-contiguous 2-D float32/float64 part (len(idx), cols)\n"
"and out (units, cols) of one dtype and a C-contiguous intp idx, strictly increasing, in\n"
"[0, units). False (nothing written) if they do not fit.");

static PyObject *put_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "put_rows(part, idx, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *pt = &b[0], *ix = &b[1], *o = &b[2];
    char k = kind_of(pt);
    const char *f = ix->format ? ix->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    Py_ssize_t n = ix->ndim == 1 ? ix->shape[0] : -1;
    Py_ssize_t units = o->ndim == 2 ? o->shape[0] : -1, cols = o->ndim == 2 ? o->shape[1] : -1;
    int fits = k && kind_of(o) == k && n >= 0 && units >= 0 && pt->ndim == 2 && pt->shape[0] == n
               && pt->shape[1] == cols && ix->itemsize == (Py_ssize_t)sizeof(Py_ssize_t)
               && (*f == 'l' || *f == 'q' || *f == 'n') && f[1] == '\0' && !overlap(o, pt)
               && !overlap(o, ix);
    const Py_ssize_t *idx = ix->buf;
    for (Py_ssize_t j = 0; fits && j < n; j++)
        fits = idx[j] >= 0 && idx[j] < units && (j == 0 || idx[j] > idx[j - 1]);
    if (fits && k == 'f')
        put_rows_float(pt->buf, idx, n, o->buf, units, cols);
    else if (fits)
        put_rows_double(pt->buf, idx, n, o->buf, units, cols);
    return done(b, 3, fits);
}

/* out[i, j] = a[i] * b[j]: a value head's input gradient, (rows, 1) * (1, units), which NumPy's
   broadcast multiply runs ~5x slower (a short-stride inner loop per row). */
#define OUTER_LOOP(T)                                                                              \
    CLONES static void outer_##T(const T *a, const T *restrict b, T *restrict out, Py_ssize_t m,  \
                                 Py_ssize_t n) {                                                   \
        for (Py_ssize_t i = 0; i < m; i++) {                                                       \
            const T ai = a[i];                                                                     \
            T *o = out + i * n;                                                                    \
            for (Py_ssize_t j = 0; j < n; j++) o[j] = ai * b[j];                                   \
        }                                                                                          \
    }

OUTER_LOOP(float)
OUTER_LOOP(double)

PyDoc_STRVAR(outer_doc,
"outer(a, b, out) -> bool\n\n"
"out = a * b for C-contiguous float32/float64 arrays of one dtype, a of shape (..., 1), b of\n"
"shape (1, n) (or (n,)) and out of shape (..., n), out apart from both. False (nothing written)\n"
"if they do not fit.");

static PyObject *outer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "outer(a, b, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *x = &b[0], *y = &b[1], *o = &b[2];
    char k = kind_of(x);
    Py_ssize_t n = y->len / (y->itemsize ? y->itemsize : 1), m = x->len / (x->itemsize ? x->itemsize : 1);
    int fits = k && kind_of(y) == k && kind_of(o) == k && x->ndim >= 1 && x->shape[x->ndim - 1] == 1
               && y->ndim >= 1 && y->shape[y->ndim - 1] == n && o->ndim == x->ndim
               && o->shape[o->ndim - 1] == n && o->len == m * n * o->itemsize && !overlap(o, x)
               && !overlap(o, y);
    for (int d = 0; fits && d < x->ndim - 1; d++) fits = o->shape[d] == x->shape[d];
    if (fits && k == 'f')
        outer_float(x->buf, y->buf, o->buf, m, n);
    else if (fits)
        outer_double(x->buf, y->buf, o->buf, m, n);
    return done(b, 3, fits);
}

/* out[v, i, j] = a[v, i] * b[v, j]: a stack of outer products, vmap's per-sample weight
   gradients (rlgrad/batching.py: _bmatmul), which NumPy's einsum and broadcast multiply run as
   an inner-loop call per (v, i) row (~3x slower at (256, 64, 64)). One multiply per element,
   as np.matmul's contraction of length 1. */
#define OUTERS_LOOP(T)                                                                             \
    CLONES static void outers_##T(const T *a, const T *b, T *restrict out, Py_ssize_t v,          \
                                  Py_ssize_t m, Py_ssize_t n) {                                    \
        for (Py_ssize_t s = 0; s < v; s++) {                                                       \
            const T *bs = b + s * n;                                                               \
            for (Py_ssize_t i = 0; i < m; i++) {                                                   \
                const T ai = a[s * m + i];                                                         \
                T *o = out + (s * m + i) * n;                                                      \
                for (Py_ssize_t j = 0; j < n; j++) o[j] = ai * bs[j];                              \
            }                                                                                      \
        }                                                                                          \
    }

OUTERS_LOOP(float)
OUTERS_LOOP(double)

PyDoc_STRVAR(outers_doc,
"outers(a, b, out) -> bool\n\n"
"out[v] = the outer product of a[v] and b[v], for C-contiguous float32/float64 arrays of one\n"
"dtype: a (V, m), b (V, n), out (V, m, n) apart from both. False (nothing written) if they do\n"
"not fit.");

static PyObject *outers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "outers(a, b, out) takes 3 arguments");
        return NULL;
    }
    Py_buffer b[3];
    if (!take(args, 3, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *x = &b[0], *y = &b[1], *o = &b[2];
    char k = kind_of(x);
    int fits = k && kind_of(y) == k && kind_of(o) == k && x->ndim == 2 && y->ndim == 2
               && o->ndim == 3 && o->shape[0] == x->shape[0] && y->shape[0] == x->shape[0]
               && o->shape[1] == x->shape[1] && o->shape[2] == y->shape[1] && !overlap(o, x)
               && !overlap(o, y);
    if (fits && k == 'f')
        outers_float(x->buf, y->buf, o->buf, x->shape[0], x->shape[1], y->shape[1]);
    else if (fits)
        outers_double(x->buf, y->buf, o->buf, x->shape[0], x->shape[1], y->shape[1]);
    return done(b, 3, fits);
}

/* out[s, c, o] = w[o, c, s]: a conv weight (O, C, kh*kw) as the (kh*kw*C, O) matrix of the NHWC
   columns (rlgrad/nn/functional.py: _weight_cols), which NumPy's transposing copy writes element
   by element with a stride of C*kh*kw in its innermost loop (59 us for (64, 32, 4, 4), most of
   a batch-1 convolution). Here 16 output channels at a time: their rows of w are read side by
   side, each out row segment written contiguously. A copy: the same numbers. */
#define WEIGHT_COLS_LOOP(T)                                                                        \
    CLONES static void weight_cols_##T(const T *restrict w, T *restrict out, Py_ssize_t O,        \
                                       Py_ssize_t C, Py_ssize_t S) {                               \
        Py_ssize_t K = C * S;                                                                      \
        for (Py_ssize_t o0 = 0; o0 < O; o0 += 16) {                                                \
            Py_ssize_t o1 = o0 + 16 < O ? o0 + 16 : O;                                             \
            for (Py_ssize_t c = 0; c < C; c++)                                                     \
                for (Py_ssize_t s = 0; s < S; s++) {                                               \
                    const T *src = w + c * S + s;                                                  \
                    T *dst = out + (s * C + c) * O;                                                \
                    for (Py_ssize_t o = o0; o < o1; o++) dst[o] = src[o * K];                      \
                }                                                                                  \
        }                                                                                          \
    }

WEIGHT_COLS_LOOP(float)
WEIGHT_COLS_LOOP(double)

PyDoc_STRVAR(weight_cols_doc,
"weight_cols(w, out) -> bool\n\n"
"out (kh*kw*C, O) = w (O, C, kh, kw) transposed to (kh, kw, C, O), for C-contiguous\n"
"float32/float64 arrays of one dtype, apart. False (nothing written) if they do not fit.");

static PyObject *weight_cols(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "weight_cols(w, out) takes 2 arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) Py_RETURN_FALSE;
    const Py_buffer *w = &b[0], *o = &b[1];
    char k = kind_of(w);
    int fits = k && kind_of(o) == k && w->ndim == 4 && o->ndim == 2 && o->shape[1] == w->shape[0]
               && o->shape[0] == w->shape[1] * w->shape[2] * w->shape[3] && !overlap(o, w);
    if (fits && k == 'f')
        weight_cols_float(w->buf, o->buf, w->shape[0], w->shape[1], w->shape[2] * w->shape[3]);
    else if (fits)
        weight_cols_double(w->buf, o->buf, w->shape[0], w->shape[1], w->shape[2] * w->shape[3]);
    return done(b, 2, fits);
}

/* The LSTM cell's elementwise work around its GEMM and NumPy's tanh (rlgrad/nn/cells.py:
   _lstm_step, _lstm_dstep), which NumPy runs as ~6 passes forward and ~17 backward over
   (rows, H) blocks, in one pass each. Arrays of K gates are (K, rows, H) views with any gate and
   row strides and contiguous rows (the cells' (rows, K*H) column blocks and the sequences'
   gate-first blocks alike); a state is (rows, H). Outputs are distinct blocks from the inputs
   but for the gates updated in place, each element read before it is written. */
typedef struct {
    char *p;
    Py_ssize_t k, r; /* gate and row strides in bytes */
} grid;

static int grid_of(const Py_buffer *b, char kind, int gates, Py_ssize_t rows, Py_ssize_t h,
                   grid *g) {
    int nd = gates ? 3 : 2;
    if (kind_of(b) != kind || b->ndim != nd || b->strides[nd - 1] != b->itemsize
        || b->shape[nd - 2] != rows || b->shape[nd - 1] != h || (gates && b->shape[0] != gates))
        return 0;
    g->p = b->buf;
    g->k = gates ? b->strides[0] : 0;
    g->r = b->strides[nd - 2];
    return 1;
}

/* Whether two strided buffers' memory spans (first to last byte addressed) intersect. */
static int span_overlap(const Py_buffer *a, const Py_buffer *b) {
    if (a->len == 0 || b->len == 0) return 0;
    const Py_buffer *x[2] = {a, b};
    const char *lo[2], *hi[2];
    for (int k = 0; k < 2; k++) {
        lo[k] = hi[k] = x[k]->buf;
        for (int d = 0; d < x[k]->ndim; d++) {
            Py_ssize_t reach = (x[k]->shape[d] - 1) * x[k]->strides[d];
            if (reach < 0) lo[k] += reach; else hi[k] += reach;
        }
        hi[k] += x[k]->itemsize;
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* Buffers of objs[0..n) with their strides (None: an empty buffer, buf NULL); writable from
   first_out on. 0 (nothing held, the error cleared) if one is refused. */
static int take_strided(PyObject *const *objs, int n, int first_out, Py_buffer *b) {
    for (int i = 0; i < n; i++) {
        if (objs[i] == Py_None) {
            memset(&b[i], 0, sizeof(Py_buffer));
            continue;
        }
        int flags = PyBUF_STRIDES | PyBUF_FORMAT | (i >= first_out ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &b[i], flags) < 0) {
            PyErr_Clear();
            while (i--)
                if (b[i].obj) PyBuffer_Release(&b[i]);
            return 0;
        }
    }
    return 1;
}

static PyObject *done_strided(Py_buffer *b, int n, int fits) {
    for (int i = 0; i < n; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return Py_NewRef(fits ? Py_True : Py_False);
}

#define ROW(G_, K_, N_, T_) ((T_ *)((G_).p + (K_) * (G_).k + (N_) * (G_).r))

/* acts holds tanh of the pre-activations, i, f, o halved (sigmoid(a) = tanh(a / 2) / 2 + 1 / 2):
   i, f, o finished and all four written to gt (acts itself, or the output's gate blocks when acts
   is a scratch GEMM row block: the copy is free in this pass), and c' = f * c + g * i. */
#define LSTM_GATES_LOOP(T)                                                                         \
    CLONES static void lstm_gates_##T(grid a, grid c, grid cn, grid gt, Py_ssize_t rows,           \
                                      Py_ssize_t h) {                                              \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            const T *i = ROW(a, 0, n, T), *f = ROW(a, 1, n, T), *g = ROW(a, 2, n, T);              \
            const T *o = ROW(a, 3, n, T), *cp = ROW(c, 0, n, T);                                   \
            T *io = ROW(gt, 0, n, T), *fo = ROW(gt, 1, n, T), *go = ROW(gt, 2, n, T);              \
            T *oo = ROW(gt, 3, n, T), *cq = ROW(cn, 0, n, T);                                      \
            _Pragma("GCC ivdep") /* distinct blocks (or gt = a: each read before written) */      \
            for (Py_ssize_t j = 0; j < h; j++) {                                                   \
                T ii = i[j] * (T)0.5 + (T)0.5, ff = f[j] * (T)0.5 + (T)0.5, gg = g[j];             \
                T cc = ff * cp[j];                                                                 \
                oo[j] = o[j] * (T)0.5 + (T)0.5;                                                    \
                io[j] = ii;                                                                        \
                fo[j] = ff;                                                                        \
                go[j] = gg;                                                                        \
                cq[j] = cc + gg * ii;                                                              \
            }                                                                                      \
        }                                                                                          \
    }

LSTM_GATES_LOOP(float)
LSTM_GATES_LOOP(double)

PyDoc_STRVAR(lstm_gates_doc,
"lstm_gates(acts, c, c_new[, gates]) -> bool\n\n"
"acts (4, rows, H): tanh of the gate pre-activations, i, f, o halved; i, f, o become\n"
"tanh / 2 + 1 / 2 (in acts, or with g in gates (4, rows, H) when given, acts unchanged) and\n"
"c_new (rows, H) = f * c + g * i. float32/float64 of one dtype, contiguous rows. False\n"
"(nothing written) if they do not fit.");

static PyObject *lstm_gates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "lstm_gates(acts, c, c_new[, gates]) takes 3 or 4 arguments");
        return NULL;
    }
    int n = (int)nargs;
    Py_buffer b[4];
    if (!take_strided(args, n, n == 4 ? 2 : 0, b)) Py_RETURN_FALSE;
    grid a, c, cn, gt;
    char k = b[0].obj && b[0].ndim == 3 ? kind_of(&b[0]) : 0;
    Py_ssize_t rows = k ? b[0].shape[1] : 0, h = k ? b[0].shape[2] : 0;
    int fits = k && b[1].obj && b[2].obj && grid_of(&b[0], k, 4, rows, h, &a)
               && grid_of(&b[1], k, 0, rows, h, &c) && grid_of(&b[2], k, 0, rows, h, &cn);
    if (n == 4) /* a separate output: it must not overlap what the pass reads */
        fits = fits && b[3].obj && grid_of(&b[3], k, 4, rows, h, &gt)
               && !span_overlap(&b[3], &b[0]) && !span_overlap(&b[3], &b[1])
               && !span_overlap(&b[3], &b[2]);
    else
        gt = a;
    if (fits && k == 'f')
        lstm_gates_float(a, c, cn, gt, rows, h);
    else if (fits)
        lstm_gates_double(a, c, cn, gt, rows, h);
    return done_strided(b, n, fits);
}

/* The gradient of a step's gate pre-activations d (4, rows, H) and of the state c it read,
   for the gradient G (6, rows, H) of its output a = [h', c', i, f, g, o] plus dh, dc (the later
   steps' share of h', c'; NULL: none), t = tanh(c'). */
#define LSTM_DGATES_ROW(T, GH, GC)                                                                 \
    _Pragma("GCC ivdep")                                                                           \
    for (Py_ssize_t j = 0; j < h; j++) {                                                           \
        T gh = (GH), gc = (GC);                                                                    \
        T x = tc[j], ii = i[j], ff = f[j], gj = g[j], oo = o[j];                                   \
        T s = ((((T)1 - x * x) * oo) * gh) + gc;                                                   \
        T e0 = s * gj + gi[j], e1 = s * cp[j] + gf[j], e2 = s * ii + gg[j];                        \
        T e3 = gh * x + go[j];                                                                     \
        d0[j] = e0 * (((T)1 - ii) * ii);                                                           \
        d1[j] = e1 * (((T)1 - ff) * ff);                                                           \
        d2[j] = e2 * ((T)1 - gj * gj);                                                             \
        d3[j] = e3 * (((T)1 - oo) * oo);                                                           \
        out[j] = s * ff;                                                                           \
    }

/* (one loop per case of dh, dc given or not: a branch inside would keep it from vectorizing) */
#define LSTM_DGATES_LOOP(T)                                                                        \
    CLONES static void lstm_dgates_##T(grid G, grid dh, grid dc, grid a, grid t, grid c, grid d,   \
                                       grid dcn, Py_ssize_t rows, Py_ssize_t h) {                  \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            const T *g0 = ROW(G, 0, n, T), *g1 = ROW(G, 1, n, T), *gi = ROW(G, 2, n, T);           \
            const T *gf = ROW(G, 3, n, T), *gg = ROW(G, 4, n, T), *go = ROW(G, 5, n, T);           \
            const T *ph = dh.p ? ROW(dh, 0, n, T) : NULL, *pc = dc.p ? ROW(dc, 0, n, T) : NULL;    \
            const T *i = ROW(a, 2, n, T), *f = ROW(a, 3, n, T), *g = ROW(a, 4, n, T);              \
            const T *o = ROW(a, 5, n, T), *tc = ROW(t, 0, n, T), *cp = ROW(c, 0, n, T);            \
            T *d0 = ROW(d, 0, n, T), *d1 = ROW(d, 1, n, T), *d2 = ROW(d, 2, n, T);                 \
            T *d3 = ROW(d, 3, n, T), *out = ROW(dcn, 0, n, T);                                     \
            if (ph && pc) {                                                                        \
                LSTM_DGATES_ROW(T, g0[j] + ph[j], g1[j] + pc[j])                                   \
            } else if (ph) {                                                                       \
                LSTM_DGATES_ROW(T, g0[j] + ph[j], g1[j])                                           \
            } else if (pc) {                                                                       \
                LSTM_DGATES_ROW(T, g0[j], g1[j] + pc[j])                                           \
            } else {                                                                               \
                LSTM_DGATES_ROW(T, g0[j], g1[j])                                                   \
            }                                                                                      \
        }                                                                                          \
    }

LSTM_DGATES_LOOP(float)
LSTM_DGATES_LOOP(double)

PyDoc_STRVAR(lstm_dgates_doc,
"lstm_dgates(G, dh, dc, a, tanh_c, c, d, dc_prev) -> bool\n\n"
"An LSTM step's backward: d (4, rows, H), the gradient of the gate pre-activations, and\n"
"dc_prev (rows, H), of the state c read, for the gradient G (6, rows, H) of the step's output\n"
"a (6, rows, H) plus dh, dc (rows, H, or None), tanh_c = tanh(a[1]). One float dtype,\n"
"contiguous rows. False (nothing written) if they do not fit.");

static PyObject *lstm_dgates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "lstm_dgates takes 8 arguments");
        return NULL;
    }
    Py_buffer b[8];
    if (!take_strided(args, 8, 6, b)) Py_RETURN_FALSE;
    grid G, dh = {NULL, 0, 0}, dc = {NULL, 0, 0}, a, t, c, d, dcn;
    char k = b[3].obj && b[3].ndim == 3 ? kind_of(&b[3]) : 0;
    Py_ssize_t rows = k ? b[3].shape[1] : 0, h = k ? b[3].shape[2] : 0;
    int fits = k && grid_of(&b[3], k, 6, rows, h, &a);
    for (int i = 0; fits && i < 8; i++) fits = i == 1 || i == 2 || b[i].obj != NULL;
    fits = fits && grid_of(&b[0], k, 6, rows, h, &G) && grid_of(&b[4], k, 0, rows, h, &t)
           && grid_of(&b[5], k, 0, rows, h, &c) && grid_of(&b[6], k, 4, rows, h, &d)
           && grid_of(&b[7], k, 0, rows, h, &dcn)
           && (!b[1].obj || grid_of(&b[1], k, 0, rows, h, &dh))
           && (!b[2].obj || grid_of(&b[2], k, 0, rows, h, &dc));
    if (fits && k == 'f')
        lstm_dgates_float(G, dh, dc, a, t, c, d, dcn, rows, h);
    else if (fits)
        lstm_dgates_double(G, dh, dc, a, t, c, d, dcn, rows, h);
    return done_strided(b, 8, fits);
}

/* A whole LSTM sequence in one call each way (rlgrad/nn/cells.py: _lstm_seq_c,
   _lstm_seq_grads_c), float32: the step's GEMM through the cblas_sgemm NumPy's OpenBLAS exports
   (its address passed in: rlgrad/native/build.py's blas_pointers), the input projection's
   share added and halved into the GEMM's output per step (in L1, not a pass over all T; beta = 1
   in the GEMM instead is OpenBLAS's slower small kernel), and the gates in one pass
   with tanh_f32 below; backward, lstm_dgates' loop and the state's GEMM per step. What this
   saves is NumPy's ~8 calls a step (with their Python around them) and two passes over the
   whole input projection. tanh_f32 is not NumPy's tanh (within ~3 ulp of it, not its bits):
   the NumPy loop beside each call stays the reference (tests/nn/test_lstm_loop.py). */
typedef void (*sgemm_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                         const float *, int64_t, float, float *, int64_t);

/* tanh(x) = e / (e + 2) with e = expm1(2|x|) = 2^k (1 + q(r)) - 1, 2|x| = k ln2 + r, |r| <= ln2/2,
   q(r) = expm1(r) by its Taylor series to r^8 (truncation < 2e-9 relative), the sign put back;
   |x| > 9 is 9 (tanh is 1 in float32 there), NaN stays NaN. Integer selects and bit operations
   only (a float comparison may trap, which keeps GCC from vectorizing without
   -fno-trapping-math), so that loops of it vectorize. */
static inline float tanh_f32(float x) {
    int32_t ib, mb, tb;
    float ax = fabsf(x), s, t;
    memcpy(&ib, &ax, sizeof ib);
    int32_t nan = ((int32_t)0x7f800000 - ib) >> 31; /* -1: x is NaN */
    ib = ib < 0x41100000 ? ib : 0x41100000;          /* 9.0f */
    memcpy(&ax, &ib, sizeof ib);
    float y = ax + ax;
    float m = y * 1.44269504f + 12582912.0f; /* k = round(y / ln2) in m's low bits */
    float kf = m - 12582912.0f;
    float r = (y - kf * 0.693359375f) - kf * -2.12194440e-4f; /* ln 2 in two parts */
    float q = r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f
              + r * (8.33333377e-3f + r * (1.38888892e-3f + r * (1.98412701e-4f
              + r * 2.48015876e-5f)))))));
    memcpy(&mb, &m, sizeof mb);
    int32_t bits = (mb - 0x4B400000 + 127) << 23; /* 2^k */
    memcpy(&s, &bits, sizeof s);
    float e = s * q + (s - 1.0f);
    t = copysignf(e / (e + 2.0f), x);
    memcpy(&tb, &t, sizeof tb);
    tb |= nan & 0x7fc00000;
    memcpy(&t, &tb, sizeof tb);
    return t;
}

/* the gates' loop, mostly tanh_f32's arithmetic, also in an AVX-512 version (twice as wide) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CLONES_512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES_512
#endif

/* pre (rows, 4H) += (xp + b) * half, b NULL: none; xp's rows sr bytes apart (after the GEMM, as
   _lstm_step adds xq to its product: the same roundings). */
CLONES static void lstm_seq_in(const char *xp, Py_ssize_t sr, const float *b, const float *half,
                               float *pre, Py_ssize_t rows, Py_ssize_t w4) {
    for (Py_ssize_t n = 0; n < rows; n++) {
        const float *x = (const float *)(xp + n * sr);
        float *p = pre + n * w4;
        if (b)
            for (Py_ssize_t j = 0; j < w4; j++) p[j] += (x[j] + b[j]) * half[j];
        else
            for (Py_ssize_t j = 0; j < w4; j++) p[j] += x[j] * half[j];
    }
}

/* A step's gates from pre (rows, 4H: i, f, o halved) into o (6, rows, H) = h', c', i, f, g, o,
   from the state c (rows cr bytes apart): _lstm_step's arithmetic with tanh_f32. */
CLONES_512 static void lstm_seq_gates(const float *pre, const char *c, Py_ssize_t cr, float *o,
                                  Py_ssize_t rows, Py_ssize_t h) {
    Py_ssize_t blk = rows * h;
    for (Py_ssize_t n = 0; n < rows; n++) {
        const float *p = pre + n * 4 * h, *cp = (const float *)(c + n * cr);
        float *ho = o + n * h, *co = ho + blk, *io = co + blk, *fo = io + blk, *go = fo + blk;
        float *oo = go + blk;
        _Pragma("GCC ivdep") /* distinct blocks */
        for (Py_ssize_t j = 0; j < h; j++) {
            float ii = tanh_f32(p[j]) * 0.5f + 0.5f, ff = tanh_f32(p[h + j]) * 0.5f + 0.5f;
            float gg = tanh_f32(p[2 * h + j]), og = tanh_f32(p[3 * h + j]) * 0.5f + 0.5f;
            float cc = ff * cp[j] + gg * ii;
            io[j] = ii;
            fo[j] = ff;
            go[j] = gg;
            oo[j] = og;
            co[j] = cc;
            ho[j] = tanh_f32(cc) * og;
        }
    }
}

PyDoc_STRVAR(lstm_seq_fwd_doc,
"lstm_seq_fwd(xp, b, h0, c0, wq, half, out, sgemm, reverse) -> bool\n\n"
"The LSTM over xp (T, rows, 4H; contiguous rows), b (4H,) or None, from h0 (rows, H; C-contiguous)\n"
"and c0 (rows, H; contiguous rows), wq (H, 4H) = W_hh^T with i, f, o's columns halved, half (4H,)\n"
"those factors; every step's [h', c', i, f, g, o] into out (T, 6, rows, H), C-contiguous.\n"
"float32 only; sgemm: cblas_sgemm's address (64-bit integers). False (nothing written) if they do\n"
"not fit.");

static int lstm_fwd_fits(Py_buffer *b, Py_ssize_t *T, Py_ssize_t *rows, Py_ssize_t *h) {
    for (int i = 0; i < 7; i++)
        if (i != 1 && (!b[i].obj || kind_of(&b[i]) != 'f')) return 0;
    if (b[6].ndim != 4 || b[6].shape[1] != 6 || !PyBuffer_IsContiguous(&b[6], 'C')) return 0;
    *T = b[6].shape[0], *rows = b[6].shape[2], *h = b[6].shape[3];
    Py_ssize_t w4 = 4 * *h, fl = sizeof(float);
    int ok = b[0].ndim == 3 && b[0].shape[0] == *T && b[0].shape[1] == *rows
             && b[0].shape[2] == w4 && b[0].strides[2] == fl
             && b[2].ndim == 2 && b[2].shape[0] == *rows && b[2].shape[1] == *h
             && b[2].strides[1] == fl && b[2].strides[0] == *h * fl
             && b[3].ndim == 2 && b[3].shape[0] == *rows && b[3].shape[1] == *h
             && b[3].strides[1] == fl
             && b[4].ndim == 2 && b[4].shape[0] == *h && b[4].shape[1] == w4
             && PyBuffer_IsContiguous(&b[4], 'C')
             && b[5].ndim == 1 && b[5].shape[0] == w4 && b[5].strides[0] == fl;
    if (b[1].obj)
        ok = ok && kind_of(&b[1]) == 'f' && b[1].ndim == 1 && b[1].shape[0] == w4
             && b[1].strides[0] == fl;
    for (int i = 0; ok && i < 6; i++) ok = !span_overlap(&b[6], &b[i]);
    return ok && *T > 0 && *rows > 0 && *h > 0;
}

/* lstm_seq_fwd's and lstm_seq_bwd's argument count and last two arguments (sgemm's address,
   reverse): 0 with a Python error set when they are wrong */
static int lstm_seq_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                         unsigned long long *addr, int *reverse) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "%s takes 9 arguments", name);
        return 0;
    }
    *addr = PyLong_AsUnsignedLongLong(args[7]);
    *reverse = PyObject_IsTrue(args[8]);
    return !(PyErr_Occurred() || *reverse < 0);
}

static PyObject *lstm_seq_fwd(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long addr = 0;
    int reverse = 0;
    if (!lstm_seq_args("lstm_seq_fwd", args, nargs, &addr, &reverse)) return NULL;
    Py_buffer b[7];
    if (!addr || !take_strided(args, 7, 6, b)) Py_RETURN_FALSE;
    Py_ssize_t T = 0, rows = 0, h = 0;
    int fits = lstm_fwd_fits(b, &T, &rows, &h);
    float *pre = fits ? PyMem_Malloc(rows * 4 * h * sizeof(float)) : NULL;
    if (pre) {
        sgemm_fn gemm = (sgemm_fn)(uintptr_t)addr;
        float *out = b[6].buf;
        const float *hp = b[2].buf;
        const char *cp = b[3].buf;
        Py_ssize_t cr = b[3].strides[0], blk = rows * h;
        for (Py_ssize_t s = 0; s < T; s++) {
            Py_ssize_t t = reverse ? T - 1 - s : s;
            float *o = out + t * 6 * blk;
            gemm(101, 111, 111, rows, 4 * h, h, 1.0f, hp, h, b[4].buf, 4 * h, 0.0f, pre, 4 * h);
            lstm_seq_in((const char *)b[0].buf + t * b[0].strides[0], b[0].strides[1], b[1].buf,
                        b[5].buf, pre, rows, 4 * h);
            lstm_seq_gates(pre, cp, cr, o, rows, h);
            hp = o, cp = (const char *)(o + blk), cr = h * sizeof(float);
        }
        PyMem_Free(pre);
    }
    return done_strided(b, 7, pre != NULL);
}

PyDoc_STRVAR(lstm_seq_bwd_doc,
"lstm_seq_bwd(G, ans, c0, w, d, dh, dc, sgemm, reverse) -> bool\n\n"
"lstm_seq_fwd's backward: every step's gate gradient d (T, rows, 4H) for the gradient G\n"
"(T, 6, rows, H; contiguous rows) of its output ans (T, 6, rows, H), from c0 (rows, H; contiguous\n"
"rows) and w = W_hh (4H, H); the gradients of h0 and c0 into dh, dc (rows, H). tanh(c') is\n"
"lstm_seq_fwd's. C-contiguous but G and c0, float32 only. False (nothing written) if they do not\n"
"fit.");

/* tc = tanh(c) over n entries (a step's tanh(c'), as lstm_seq_gates computed it) */
CLONES_512 static void lstm_seq_tanh(const float *c, float *tc, Py_ssize_t n) {
    _Pragma("GCC ivdep")
    for (Py_ssize_t i = 0; i < n; i++) tc[i] = tanh_f32(c[i]);
}

static int lstm_bwd_fits(Py_buffer *b, Py_ssize_t *T, Py_ssize_t *rows, Py_ssize_t *h) {
    for (int i = 0; i < 7; i++)
        if (!b[i].obj || kind_of(&b[i]) != 'f') return 0;
    if (b[1].ndim != 4 || b[1].shape[1] != 6) return 0;
    *T = b[1].shape[0], *rows = b[1].shape[2], *h = b[1].shape[3];
    Py_ssize_t w4 = 4 * *h, fl = sizeof(float);
    int ok = b[0].ndim == 4 && b[0].shape[0] == *T && b[0].shape[1] == 6
             && b[0].shape[2] == *rows && b[0].shape[3] == *h && b[0].strides[3] == fl
             && b[2].ndim == 2 && b[2].shape[0] == *rows && b[2].shape[1] == *h
             && b[2].strides[1] == fl
             && b[3].ndim == 2 && b[3].shape[0] == w4 && b[3].shape[1] == *h
             && b[4].ndim == 3 && b[4].shape[0] == *T && b[4].shape[1] == *rows
             && b[4].shape[2] == w4;
    for (int i = 5; ok && i < 7; i++)
        ok = b[i].ndim == 2 && b[i].shape[0] == *rows && b[i].shape[1] == *h;
    for (int i = 1; ok && i < 7; i++)
        ok = i == 2 || PyBuffer_IsContiguous(&b[i], 'C');
    for (int i = 4; ok && i < 7; i++)
        for (int j = 0; ok && j < i; j++) ok = !span_overlap(&b[i], &b[j]);
    return ok && *T > 0 && *rows > 0 && *h > 0;
}

static PyObject *lstm_seq_bwd(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long addr = 0;
    int reverse = 0;
    if (!lstm_seq_args("lstm_seq_bwd", args, nargs, &addr, &reverse)) return NULL;
    Py_buffer b[7];
    if (!addr || !take_strided(args, 7, 4, b)) Py_RETURN_FALSE;
    Py_ssize_t T = 0, rows = 0, h = 0;
    int fits = lstm_bwd_fits(b, &T, &rows, &h);
    float *scratch = fits ? PyMem_Malloc(3 * rows * h * sizeof(float)) : NULL;
    if (scratch) {
        sgemm_fn gemm = (sgemm_fn)(uintptr_t)addr;
        Py_ssize_t fl = sizeof(float), blk = rows * h, w4 = 4 * h;
        const float *ans = b[1].buf;
        float *d = b[4].buf, *dh = b[5].buf, *dc = scratch, *dcn = scratch + blk;
        float *tcs = scratch + 2 * blk;
        grid none = {NULL, 0, 0}, tc = {(char *)tcs, 0, h * fl};
        for (Py_ssize_t s = 0; s < T; s++) {
            Py_ssize_t t = reverse ? s : T - 1 - s, prev = reverse ? t + 1 : t - 1;
            grid G = {(char *)b[0].buf + t * b[0].strides[0], b[0].strides[1], b[0].strides[2]};
            grid a = {(char *)(ans + t * 6 * blk), blk * fl, h * fl};
            grid c = s == T - 1 ? (grid){b[2].buf, 0, b[2].strides[0]}
                                : (grid){(char *)(ans + prev * 6 * blk + blk), 0, h * fl};
            grid dd = {(char *)(d + t * rows * w4), h * fl, w4 * fl}, out = {(char *)dcn, 0, h * fl};
            grid gh = s ? (grid){(char *)dh, 0, h * fl} : none;
            grid gc = s ? (grid){(char *)dc, 0, h * fl} : none;
            lstm_seq_tanh(ans + t * 6 * blk + blk, tcs, blk);
            lstm_dgates_float(G, gh, gc, a, tc, c, dd, out, rows, h);
            gemm(101, 111, 111, rows, h, w4, 1.0f, d + t * rows * w4, w4, b[3].buf, h, 0.0f, dh, h);
            float *swap = dc;
            dc = dcn, dcn = swap;
        }
        memcpy(b[6].buf, dc, blk * fl);
        PyMem_Free(scratch);
    }
    return done_strided(b, 7, scratch != NULL);
}

/* The GRU cell's elementwise work (rlgrad/nn/cells.py: _gru_step, _gru_dstep), as the LSTM's:
   a step's output o is [h', r, z, W_hn h + b_hn, n] (5, rows, H), its input projection xg
   (3, rows, H). */
#define GRU_GATES_LOOP(T)                                                                          \
    CLONES static void gru_gates_##T(grid o, grid x, Py_ssize_t rows, Py_ssize_t h) {              \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            T *r = ROW(o, 1, n, T), *z = ROW(o, 2, n, T), *hn = ROW(o, 3, n, T);                   \
            T *nn = ROW(o, 4, n, T);                                                               \
            const T *x2 = ROW(x, 2, n, T);                                                         \
            _Pragma("GCC ivdep")                                                                   \
            for (Py_ssize_t j = 0; j < h; j++) {                                                   \
                T rr = r[j] * (T)0.5 + (T)0.5;                                                     \
                r[j] = rr;                                                                         \
                z[j] = z[j] * (T)0.5 + (T)0.5;                                                     \
                nn[j] = rr * hn[j] + x2[j];                                                        \
            }                                                                                      \
        }                                                                                          \
    }

GRU_GATES_LOOP(float)
GRU_GATES_LOOP(double)

#define GRU_STATE_LOOP(T)                                                                          \
    CLONES static void gru_state_##T(grid o, grid hs, Py_ssize_t rows, Py_ssize_t h) {             \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            T *out = ROW(o, 0, n, T);                                                              \
            const T *z = ROW(o, 2, n, T), *nn = ROW(o, 4, n, T), *hp = ROW(hs, 0, n, T);           \
            _Pragma("GCC ivdep")                                                                   \
            for (Py_ssize_t j = 0; j < h; j++) out[j] = (hp[j] - nn[j]) * z[j] + nn[j];            \
        }                                                                                          \
    }

GRU_STATE_LOOP(float)
GRU_STATE_LOOP(double)

PyDoc_STRVAR(gru_gates_doc,
"gru_gates(o, xg) -> bool\n\n"
"o (5, rows, H) holds tanh of the halved r, z pre-activations in o[1], o[2] and W_hn h + b_hn\n"
"in o[3]: r, z become tanh / 2 + 1 / 2 in place and o[4] = r * o[3] + xg[2] (n's\n"
"pre-activation); xg (3, rows, H). One float dtype, contiguous rows. False (nothing written)\n"
"if they do not fit.");

PyDoc_STRVAR(gru_state_doc,
"gru_state(o, h) -> bool\n\n"
"o[0] = (h - n) * z + n for a step's output o (5, rows, H) whose o[4] is n, and the state h\n"
"(rows, H). False (nothing written) if they do not fit.");

/* o's grid, and the second array's (gates: its blocks, 0 for a (rows, H) state). */
static PyObject *gru_forward(PyObject *const *args, Py_ssize_t nargs, int gates, int which) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "gru_gates / gru_state take 2 arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take_strided(args, 2, 0, b)) Py_RETURN_FALSE;
    grid o, x;
    char k = b[0].obj && b[0].ndim == 3 ? kind_of(&b[0]) : 0;
    Py_ssize_t rows = k ? b[0].shape[1] : 0, h = k ? b[0].shape[2] : 0;
    int fits = k && b[1].obj && grid_of(&b[0], k, 5, rows, h, &o)
               && grid_of(&b[1], k, gates, rows, h, &x);
    if (fits && which == 0)
        (k == 'f' ? gru_gates_float : gru_gates_double)(o, x, rows, h);
    else if (fits)
        (k == 'f' ? gru_state_float : gru_state_double)(o, x, rows, h);
    return done_strided(b, 2, fits);
}

static PyObject *gru_gates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return gru_forward(args, nargs, 3, 0);
}

static PyObject *gru_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return gru_forward(args, nargs, 0, 1);
}

/* The gradients of a step's xp (dx) and of W_hh h + b_hh (dhp), each (3, rows, H), and h's own
   part Gh z (dh_out), for the gradient G (5, rows, H) of its output a plus dh (NULL: none) from
   the state h. */
#define GRU_DGATES_ROW(T, GH)                                                                      \
    _Pragma("GCC ivdep")                                                                           \
    for (Py_ssize_t j = 0; j < h; j++) {                                                           \
        T gh = (GH), r = ar[j], z = az[j], nn = an[j];                                             \
        T dn = (((T)1 - z) * gh + g4[j]) * ((T)1 - nn * nn);                                       \
        T e0 = (dn * ahn[j] + g1[j]) * (((T)1 - r) * r);                                           \
        T e1 = ((hp[j] - nn) * gh + g2[j]) * (((T)1 - z) * z);                                     \
        x0[j] = e0;                                                                                \
        x1[j] = e1;                                                                                \
        x2[j] = dn;                                                                                \
        p0[j] = e0;                                                                                \
        p1[j] = e1;                                                                                \
        p2[j] = dn * r + g3[j];                                                                    \
        out[j] = gh * z;                                                                           \
    }

#define GRU_DGATES_LOOP(T)                                                                         \
    CLONES static void gru_dgates_##T(grid G, grid dh, grid a, grid hs, grid dx, grid dp,          \
                                      grid dho, Py_ssize_t rows, Py_ssize_t h) {                   \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            const T *g0 = ROW(G, 0, n, T), *g1 = ROW(G, 1, n, T), *g2 = ROW(G, 2, n, T);           \
            const T *g3 = ROW(G, 3, n, T), *g4 = ROW(G, 4, n, T);                                  \
            const T *ph = dh.p ? ROW(dh, 0, n, T) : NULL, *hp = ROW(hs, 0, n, T);                  \
            const T *ar = ROW(a, 1, n, T), *az = ROW(a, 2, n, T), *ahn = ROW(a, 3, n, T);          \
            const T *an = ROW(a, 4, n, T);                                                         \
            T *x0 = ROW(dx, 0, n, T), *x1 = ROW(dx, 1, n, T), *x2 = ROW(dx, 2, n, T);              \
            T *p0 = ROW(dp, 0, n, T), *p1 = ROW(dp, 1, n, T), *p2 = ROW(dp, 2, n, T);              \
            T *out = ROW(dho, 0, n, T);                                                            \
            if (ph) {                                                                              \
                GRU_DGATES_ROW(T, g0[j] + ph[j])                                                   \
            } else {                                                                               \
                GRU_DGATES_ROW(T, g0[j])                                                           \
            }                                                                                      \
        }                                                                                          \
    }

GRU_DGATES_LOOP(float)
GRU_DGATES_LOOP(double)

PyDoc_STRVAR(gru_dgates_doc,
"gru_dgates(G, dh, a, h, dx, dhp, dh_own) -> bool\n\n"
"A GRU step's backward: dx, dhp (3, rows, H), the gradients of its xp and of W_hh h + b_hh,\n"
"and dh_own (rows, H) = Gh * z, for the gradient G (5, rows, H) of its output a plus dh (rows,\n"
"H, or None) from the state h. One float dtype, contiguous rows. False (nothing written) if\n"
"they do not fit.");

static PyObject *gru_dgates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "gru_dgates takes 7 arguments");
        return NULL;
    }
    Py_buffer b[7];
    if (!take_strided(args, 7, 4, b)) Py_RETURN_FALSE;
    grid G, dh = {NULL, 0, 0}, a, hs, dx, dp, dho;
    char k = b[2].obj && b[2].ndim == 3 ? kind_of(&b[2]) : 0;
    Py_ssize_t rows = k ? b[2].shape[1] : 0, h = k ? b[2].shape[2] : 0;
    int fits = k && grid_of(&b[2], k, 5, rows, h, &a);
    for (int i = 0; fits && i < 7; i++) fits = i == 1 || b[i].obj != NULL;
    fits = fits && grid_of(&b[0], k, 5, rows, h, &G) && grid_of(&b[3], k, 0, rows, h, &hs)
           && grid_of(&b[4], k, 3, rows, h, &dx) && grid_of(&b[5], k, 3, rows, h, &dp)
           && grid_of(&b[6], k, 0, rows, h, &dho)
           && (!b[1].obj || grid_of(&b[1], k, 0, rows, h, &dh));
    if (fits && k == 'f')
        gru_dgates_float(G, dh, a, hs, dx, dp, dho, rows, h);
    else if (fits)
        gru_dgates_double(G, dh, a, hs, dx, dp, dho, rows, h);
    return done_strided(b, 7, fits);
}

/* ---- GRU: the step's pre-activations (rlgrad/nn/cells.py: _gru_step) --------------------------
   Before NumPy's tanh, into the step's GEMM blocks o[1], o[2], o[3] (W_hr h, W_hz h, W_hn h):
   the bias b (3, 1, H) added to all three (b absent: not), the input projection xg[0], xg[1]
   added to r and z, and those two halved (sigmoid(a) = tanh(a / 2) / 2 + 1 / 2) unless
   `halved` says xg and b come halved already. NumPy's three or four passes over strided
   blocks, each ~3 us on a (16, 64) step, in one; the same adds and multiplies in the same
   order, so the same bits. */
#define GRU_PRE_ROW(T, B0, B1, B2, S)                                                              \
    _Pragma("GCC ivdep")                                                                           \
    for (Py_ssize_t j = 0; j < h; j++) {                                                           \
        r[j] = S(T, (r[j] B0) + x0[j]);                                                             \
        z[j] = S(T, (z[j] B1) + x1[j]);                                                             \
        hn[j] = hn[j] B2;                                                                          \
    }
#define GRU_HALF(T, v) ((v) * (T)0.5)
#define GRU_KEEP(T, v) (v)

#define GRU_PRE_LOOP(T)                                                                            \
    CLONES static void gru_pre_##T(grid o, grid x, grid b, int half, Py_ssize_t rows,              \
                                   Py_ssize_t h) {                                                 \
        const T *b0 = b.p ? ROW(b, 0, 0, T) : NULL, *b1 = b.p ? ROW(b, 1, 0, T) : NULL;            \
        const T *b2 = b.p ? ROW(b, 2, 0, T) : NULL;                                                \
        for (Py_ssize_t n = 0; n < rows; n++) {                                                    \
            T *r = ROW(o, 1, n, T), *z = ROW(o, 2, n, T), *hn = ROW(o, 3, n, T);                   \
            const T *x0 = ROW(x, 0, n, T), *x1 = ROW(x, 1, n, T);                                  \
            if (b0 && half) {                                                                      \
                GRU_PRE_ROW(T, + b0[j], + b1[j], + b2[j], GRU_HALF)                                \
            } else if (b0) {                                                                       \
                GRU_PRE_ROW(T, + b0[j], + b1[j], + b2[j], GRU_KEEP)                                \
            } else if (half) {                                                                     \
                GRU_PRE_ROW(T, , , , GRU_HALF)                                                     \
            } else {                                                                               \
                GRU_PRE_ROW(T, , , , GRU_KEEP)                                                     \
            }                                                                                      \
        }                                                                                          \
    }

GRU_PRE_LOOP(float)
GRU_PRE_LOOP(double)

PyDoc_STRVAR(gru_pre_doc,
"gru_pre(o, xg, b, halve) -> bool\n\n"
"o (5, rows, H) holding W_hh h in o[1:4], xg (3, rows, H), b (3, 1, H) or None: o[1:4] += b,\n"
"o[1:3] += xg[:2], and if halve o[1:3] *= 0.5, in one pass. One float dtype, contiguous rows,\n"
"o apart from xg and b. False (nothing written) if they do not fit.");

static PyObject *gru_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gru_pre(o, xg, b, halve) takes 4 arguments");
        return NULL;
    }
    int half = PyObject_IsTrue(args[3]);
    if (half < 0) return NULL;
    Py_buffer buf[3];
    if (!take_strided(args, 3, 0, buf)) Py_RETURN_FALSE;
    grid o, x, b = {NULL, 0, 0};
    char k = buf[0].obj && buf[0].ndim == 3 ? kind_of(&buf[0]) : 0;
    Py_ssize_t rows = k ? buf[0].shape[1] : 0, h = k ? buf[0].shape[2] : 0;
    int fits = k && buf[1].obj && grid_of(&buf[0], k, 5, rows, h, &o)
               && grid_of(&buf[1], k, 3, rows, h, &x) && !span_overlap(&buf[0], &buf[1])
               && (!buf[2].obj || (grid_of(&buf[2], k, 3, 1, h, &b)
                                   && !span_overlap(&buf[0], &buf[2])));
    if (fits && k == 'f')
        gru_pre_float(o, x, b, half, rows, h);
    else if (fits)
        gru_pre_double(o, x, b, half, rows, h);
    return done_strided(buf, 3, fits);
}

/* ---- conv2d's column copies (rlgrad/nn/functional.py: _Blocks, _Folded, _col2im_input_grad) ----
   conv_cols: im2col of a padded channels-last input (N, Hp, Wp, C): row (n, y, x) of the
   columns is the receptive field of output (y, x), kh runs of kw*C contiguous numbers. NumPy
   copies the 6-D strided window with one inner-loop call per kw*C run (8 numbers for a 1-channel
   8x8 kernel) and its iterator's setup per call (~40 us of a 100 us batch-1 conv); here one
   loop. A copy: the same numbers.
   conv_col2im: the adjoint, gx[n, y*sh + i, x*sw + j, :] += cols[(n, y, x), (i, j, :)], per
   sample, kernel offsets (i, j) in increasing order, so each element receives the same adds in
   the same order as NumPy's one strided add per offset over the block (bitwise the same). */
#define CONV_COLS_LOOP(T)                                                                          \
    CLONES static void conv_cols_##T(const T *restrict x, T *restrict cols, Py_ssize_t m,          \
                                     Py_ssize_t hp, Py_ssize_t wp, Py_ssize_t c, Py_ssize_t kh,    \
                                     Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t oh,   \
                                     Py_ssize_t ow) {                                              \
        Py_ssize_t run = kw * c;                                                                   \
        for (Py_ssize_t n = 0; n < m; n++)                                                         \
            for (Py_ssize_t y = 0; y < oh; y++)                                                    \
                for (Py_ssize_t xo = 0; xo < ow; xo++) {                                           \
                    const T *src = x + ((n * hp + y * sh) * wp + xo * sw) * c;                     \
                    for (Py_ssize_t i = 0; i < kh; i++, cols += run) {                             \
                        const T *r = src + i * wp * c;                                             \
                        if (run == 8) /* a 1-channel 8-wide kernel's rows: one vector each */      \
                            for (int a = 0; a < 8; a++) cols[a] = r[a];                            \
                        else                                                                       \
                            memcpy(cols, r, (size_t)run * sizeof(T));                              \
                    }                                                                              \
                }                                                                                  \
    }

CONV_COLS_LOOP(float)
CONV_COLS_LOOP(double)

#define CONV_COL2IM_LOOP(T)                                                                        \
    CLONES static void conv_col2im_##T(const T *restrict cols, T *restrict gx, Py_ssize_t m,       \
                                       Py_ssize_t hp, Py_ssize_t wp, Py_ssize_t c, Py_ssize_t kh,  \
                                       Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t oh, \
                                       Py_ssize_t ow) {                                            \
        Py_ssize_t k = kh * kw * c;                                                                \
        for (Py_ssize_t n = 0; n < m; n++)                                                         \
            for (Py_ssize_t i = 0; i < kh; i++)                                                    \
                for (Py_ssize_t j = 0; j < kw; j++)                                                \
                    for (Py_ssize_t y = 0; y < oh; y++) {                                          \
                        const T *src = cols + (n * oh + y) * ow * k + (i * kw + j) * c;            \
                        T *dst = gx + ((n * hp + y * sh + i) * wp + j) * c;                        \
                        for (Py_ssize_t xo = 0; xo < ow; xo++, src += k) {                         \
                            T *d = dst + xo * sw * c;                                              \
                            for (Py_ssize_t a = 0; a < c; a++) d[a] = d[a] + src[a];               \
                        }                                                                          \
                    }                                                                              \
    }

CONV_COL2IM_LOOP(float)
CONV_COL2IM_LOOP(double)

/* The geometry (kh, kw, sh, sw, oh, ow) of a conv_cols / conv_col2im call from args[2..8),
   checked against the image buffer (m, Hp, Wp, C) and the columns (m*oh*ow, kh*kw*C). */
static int conv_geometry(PyObject *const *args, const Py_buffer *img, const Py_buffer *cols,
                         Py_ssize_t g[6]) {
    for (int i = 0; i < 6; i++) {
        g[i] = PyLong_AsSsize_t(args[2 + i]);
        if (g[i] < 1) {
            PyErr_Clear();
            return 0;
        }
    }
    if (img->ndim != 4 || cols->ndim != 2) return 0;
    Py_ssize_t m = img->shape[0], hp = img->shape[1], wp = img->shape[2], c = img->shape[3];
    return (g[4] - 1) * g[2] + g[0] <= hp && (g[5] - 1) * g[3] + g[1] <= wp
           && cols->shape[0] == m * g[4] * g[5] && cols->shape[1] == g[0] * g[1] * c
           && !overlap(img, cols);
}

PyDoc_STRVAR(conv_cols_doc,
"conv_cols(x, cols, kh, kw, sh, sw, oh, ow) -> bool\n\n"
"cols (m*oh*ow, kh*kw*C) = the receptive fields of x (m, Hp, Wp, C): row (n, y, x) holds\n"
"x[n, y*sh:y*sh+kh, x*sw:x*sw+kw, :]. C-contiguous float32/float64 of one dtype, apart. False\n"
"(nothing written) if they do not fit.");

static PyObject *conv_cols(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "conv_cols(x, cols, kh, kw, sh, sw, oh, ow) takes 8 "
                                         "arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) Py_RETURN_FALSE;
    Py_ssize_t g[6];
    char k = kind_of(&b[0]);
    int fits = k && kind_of(&b[1]) == k && conv_geometry(args, &b[0], &b[1], g);
    const Py_ssize_t *s = b[0].shape;
    if (fits && k == 'f')
        conv_cols_float(b[0].buf, b[1].buf, s[0], s[1], s[2], s[3], g[0], g[1], g[2], g[3], g[4],
                        g[5]);
    else if (fits)
        conv_cols_double(b[0].buf, b[1].buf, s[0], s[1], s[2], s[3], g[0], g[1], g[2], g[3], g[4],
                         g[5]);
    return done(b, 2, fits);
}

PyDoc_STRVAR(conv_col2im_doc,
"conv_col2im(gx, cols, kh, kw, sh, sw, oh, ow) -> bool\n\n"
"gx (m, Hp, Wp, C)[n, y*sh+i, x*sw+j, :] += cols (m*oh*ow, kh*kw*C)[(n, y, x), (i, j, :)], per\n"
"sample for (i, j) in increasing order (conv_cols' adjoint). C-contiguous float32/float64 of\n"
"one dtype, apart. False (nothing written) if they do not fit.");

static PyObject *conv_col2im(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "conv_col2im(gx, cols, kh, kw, sh, sw, oh, ow) takes 8 "
                                         "arguments");
        return NULL;
    }
    PyObject *objs[2] = {args[1], args[0]};  /* cols read, gx written */
    Py_buffer b[2];
    if (!take(objs, 2, 1, b)) Py_RETURN_FALSE;
    Py_ssize_t g[6];
    char k = kind_of(&b[1]);
    int fits = k && kind_of(&b[0]) == k && conv_geometry(args, &b[1], &b[0], g);
    const Py_ssize_t *s = b[1].shape;
    if (fits && k == 'f')
        conv_col2im_float(b[0].buf, b[1].buf, s[0], s[1], s[2], s[3], g[0], g[1], g[2], g[3], g[4],
                          g[5]);
    else if (fits)
        conv_col2im_double(b[0].buf, b[1].buf, s[0], s[1], s[2], s[3], g[0], g[1], g[2], g[3],
                           g[4], g[5]);
    return done(b, 2, fits);
}

/* ---- Winograd convolutions' tile transforms (rlgrad/nn/winograd.py) ----
   The matrices of the Toom-Cook points 0, 1, -1, infinity (winograd.py's _BT, _AT), written out
   as sums and differences over a tile's 16 (or m*m) vectors of channels, 32 bytes of channels at
   a time: B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1] (both tile sizes), A^T = [1 1 1 0;
   0 1 -1 1] (m = 2, F(2x2, 3x3)) or [1 1 1 0; 0 1 -1 0; 0 1 1 1] (m = 3, F(3x3, 2x2)).
   wino_in: V[a*4+b, tile, :] = (B^T d B)[a, b] for every 4x4 tile d of the space-to-depth input
   (tile (n, ti, tj) at rows ti*m.., columns tj*m..; its pixel (u, v) is the stride block
   x[n, (ti*m+u)*sh.., (tj*m+v)*sw.., :]: sh runs of sw*C contiguous numbers, zeros past the
   input's edge). Adjoint: x += B dV B^T of each tile, tile after tile.
   wino_out: y[n, ti*m+i, tj*m+j, :] = (A^T M A)[i, j] (outputs past y's edge dropped); adjoint:
   M = A dY A^T of y's tiles (zeros past its edge).
   An output whose r x r window of input pixels is all zeros is exactly 0 for im2col, but here a
   sum of tile values that cancel only up to rounding (~1e-9): a ReLU after it then lets its
   gradient through where im2col's shuts it (an Atari frame's black border at zero bias: the
   bias gradients 15-60% off PyTorch's). So wino_in notes each tile's all-zero pixels (zeros,
   a bit per pixel) and wino_out writes those outputs 0.
   The reference is the NumPy einsum beside each call: not the same order of adds, so a float32
   tolerance (tests/nn/test_winograd.py). */
#define WINO_B_FWD(s, t, o)                                                                        \
    for (int v = 0; v < 4; v++)                                                                    \
        t[v] = s[v] - s[8 + v], t[4 + v] = s[4 + v] + s[8 + v], t[8 + v] = s[8 + v] - s[4 + v],    \
        t[12 + v] = s[12 + v] - s[4 + v];                                                          \
    for (int a = 0; a < 4; a++)                                                                    \
        o[4 * a] = t[4 * a] - t[4 * a + 2], o[4 * a + 1] = t[4 * a + 1] + t[4 * a + 2],            \
        o[4 * a + 2] = t[4 * a + 2] - t[4 * a + 1], o[4 * a + 3] = t[4 * a + 3] - t[4 * a + 1];
#define WINO_B_ADJ(s, t, o)                                                                        \
    for (int v = 0; v < 4; v++)                                                                    \
        t[v] = s[v], t[4 + v] = s[4 + v] - s[8 + v] - s[12 + v],                                   \
        t[8 + v] = s[4 + v] + s[8 + v] - s[v], t[12 + v] = s[12 + v];                              \
    for (int a = 0; a < 4; a++)                                                                    \
        o[4 * a] = t[4 * a], o[4 * a + 1] = t[4 * a + 1] - t[4 * a + 2] - t[4 * a + 3],            \
        o[4 * a + 2] = t[4 * a + 1] + t[4 * a + 2] - t[4 * a], o[4 * a + 3] = t[4 * a + 3];
#define WINO_A2_FWD(s, t, o)                                                                       \
    for (int b = 0; b < 4; b++)                                                                    \
        t[b] = s[b] + s[4 + b] + s[8 + b], t[4 + b] = s[4 + b] - s[8 + b] + s[12 + b];             \
    for (int i = 0; i < 2; i++)                                                                    \
        o[2 * i] = t[4 * i] + t[4 * i + 1] + t[4 * i + 2],                                         \
        o[2 * i + 1] = t[4 * i + 1] - t[4 * i + 2] + t[4 * i + 3];
#define WINO_A3_FWD(s, t, o)                                                                       \
    for (int b = 0; b < 4; b++)                                                                    \
        t[b] = s[b] + s[4 + b] + s[8 + b], t[4 + b] = s[4 + b] - s[8 + b],                         \
        t[8 + b] = s[4 + b] + s[8 + b] + s[12 + b];                                                \
    for (int i = 0; i < 3; i++)                                                                    \
        o[3 * i] = t[4 * i] + t[4 * i + 1] + t[4 * i + 2], o[3 * i + 1] = t[4 * i + 1] - t[4 * i + 2],\
        o[3 * i + 2] = t[4 * i + 1] + t[4 * i + 2] + t[4 * i + 3];
#define WINO_A2_ADJ(s, t, o)                                                                       \
    for (int j = 0; j < 2; j++)                                                                    \
        t[j] = s[j], t[2 + j] = s[j] + s[2 + j], t[4 + j] = s[j] - s[2 + j], t[6 + j] = s[2 + j];  \
    for (int a = 0; a < 4; a++)                                                                    \
        o[4 * a] = t[2 * a], o[4 * a + 1] = t[2 * a] + t[2 * a + 1],                               \
        o[4 * a + 2] = t[2 * a] - t[2 * a + 1], o[4 * a + 3] = t[2 * a + 1];
#define WINO_A3_ADJ(s, t, o)                                                                       \
    for (int j = 0; j < 3; j++)                                                                    \
        t[j] = s[j], t[3 + j] = s[j] + s[3 + j] + s[6 + j], t[6 + j] = s[j] - s[3 + j] + s[6 + j], \
        t[9 + j] = s[6 + j];                                                                       \
    for (int a = 0; a < 4; a++)                                                                    \
        o[4 * a] = t[3 * a], o[4 * a + 1] = t[3 * a] + t[3 * a + 1] + t[3 * a + 2],                \
        o[4 * a + 2] = t[3 * a] - t[3 * a + 1] + t[3 * a + 2], o[4 * a + 3] = t[3 * a + 2];

/* out[j] (NOUT rows of len numbers) = BODY of in[j] (NIN rows), 32 bytes of each row at a time
   (then one number at a time); the rows anywhere (a tile's pixels, the planes of V or M). */
#define WINO_MAP(NAME, T, VT, NIN, NOUT, BODY)                                                     \
    static inline void NAME(const T *const *in, T *const *out, Py_ssize_t len) {                   \
        Py_ssize_t k = 0;                                                                          \
        for (; k + (Py_ssize_t)(sizeof(VT) / sizeof(T)) <= len; k += sizeof(VT) / sizeof(T)) {    \
            VT s[16], t[16], o[16];                                                                \
            for (int j = 0; j < NIN; j++) s[j] = *(const VT *)(in[j] + k);                         \
            BODY(s, t, o)                                                                          \
            for (int j = 0; j < NOUT; j++) *(VT *)(out[j] + k) = o[j];                             \
        }                                                                                          \
        for (; k < len; k++) {                                                                     \
            T s[16], t[16], o[16];                                                                 \
            for (int j = 0; j < NIN; j++) s[j] = in[j][k];                                         \
            BODY(s, t, o)                                                                          \
            for (int j = 0; j < NOUT; j++) out[j][k] = o[j];                                       \
        }                                                                                          \
    }

/* (unaligned: loaded and stored whole, not through memcpy, whose two 16-byte halves then read
   back as one 32-byte vector stalled every load on store forwarding) */
typedef float wino_vf __attribute__((vector_size(32), aligned(4), may_alias));
typedef double wino_vd __attribute__((vector_size(32), aligned(8), may_alias));

/* wino_in's tile, one row p of the stride blocks (run = sw*C channels of each pixel): pointers to
   the 16 pixels' runs in x, or to a copy padded with zeros (in pad) at the input's edge, or to
   zeros (zero) past it. */
#define WINO_PIXELS(T)                                                                             \
    static inline void wino_pixels_##T(T *x, T **px, T *pad, const T *zero, Py_ssize_t hp,         \
                                       Py_ssize_t wp, Py_ssize_t c, Py_ssize_t sw, Py_ssize_t y0,  \
                                       Py_ssize_t sh, Py_ssize_t x0, Py_ssize_t m, int copy) {     \
        Py_ssize_t run = sw * c;                                                                   \
        for (int u = 0; u < 4; u++)                                                                \
            for (int q = 0; q < 4; q++) {                                                          \
                Py_ssize_t y = y0 + u * sh, xc = x0 + q * sw;                                            \
                Py_ssize_t ok = y >= hp || xc >= wp ? 0 : (xc + sw <= wp ? sw : wp - xc) * c;      \
                T *src = ok ? x + (y * wp + xc) * c : NULL;                                        \
                if (ok == run) px[u * 4 + q] = src;                                                \
                else if (!copy) px[u * 4 + q] = ok ? pad + (u * 4 + q) * run : (T *)zero;          \
                else {                                                                             \
                    T *dst = px[u * 4 + q] = pad + (u * 4 + q) * run;                              \
                    for (Py_ssize_t e = 0; e < run; e++) dst[e] = e < ok ? src[e] : 0;             \
                }                                                                                  \
            }                                                                                      \
    }

#define WINO_LOOPS(T, VT)                                                                          \
    WINO_MAP(wino_b_fwd_##T, T, VT, 16, 16, WINO_B_FWD)                                            \
    WINO_MAP(wino_b_adj_##T, T, VT, 16, 16, WINO_B_ADJ)                                            \
    WINO_MAP(wino_a2_fwd_##T, T, VT, 16, 4, WINO_A2_FWD)                                           \
    WINO_MAP(wino_a3_fwd_##T, T, VT, 16, 9, WINO_A3_FWD)                                           \
    WINO_MAP(wino_a2_adj_##T, T, VT, 4, 16, WINO_A2_ADJ)                                           \
    WINO_MAP(wino_a3_adj_##T, T, VT, 9, 16, WINO_A3_ADJ)                                           \
    WINO_PIXELS(T)                                                                                 \
    CLONES static void wino_in_##T(T *restrict x, T *restrict v, T *restrict buf, Py_ssize_t n,   \
                                   Py_ssize_t hp, Py_ssize_t wp, Py_ssize_t c, Py_ssize_t sh,      \
                                   Py_ssize_t sw, Py_ssize_t m, Py_ssize_t th, Py_ssize_t tw,      \
                                   Py_ssize_t plane, int adjoint, uint16_t *zeros) {               \
        Py_ssize_t cp = sh * sw * c, run = sw * c;                                                 \
        T *pad = buf, *zero = buf + 16 * run, *px[16], *pv[16];                                    \
        memset(zero, 0, (size_t)run * sizeof(T));                                                  \
        for (Py_ssize_t nn = 0, tile = 0; nn < n; nn++)                                            \
            for (Py_ssize_t ti = 0; ti < th; ti++)                                                 \
                for (Py_ssize_t tj = 0; tj < tw; tj++, tile++) {                                   \
                    unsigned z = 0xFFFF; /* bit u*4+v: pixel (u, v) all zeros */                   \
                    for (Py_ssize_t p = 0; p < sh; p++) {                                          \
                        for (int i = 0; i < 16; i++) pv[i] = v + i * plane + tile * cp + p * run;  \
                        wino_pixels_##T(x + nn * hp * wp * c, px, pad, zero, hp, wp, c, sw,        \
                                        ti * m * sh + p, sh, tj * m * sw, m, !adjoint);            \
                        if (!adjoint) {                                                            \
                            for (int i = 0; zeros && i < 16; i++)                                  \
                                for (Py_ssize_t e = 0; (z >> i & 1) && px[i] != zero && e < run; e++)\
                                    if (px[i][e] != 0) z &= ~(1u << i);                            \
                            wino_b_fwd_##T((const T *const *)px, pv, run);                         \
                            continue;                                                              \
                        }                                                                          \
                        T *dd[16];                                                                 \
                        for (int i = 0; i < 16; i++) dd[i] = pad + i * run;                        \
                        wino_b_adj_##T((const T *const *)pv, dd, run);                             \
                        for (int i = 0; i < 16; i++) {                                             \
                            T *dst = px[i], *src = dd[i];                                          \
                            Py_ssize_t y = ti * m * sh + p + (i / 4) * sh;                         \
                            Py_ssize_t xc = tj * m * sw + (i % 4) * sw;                            \
                            Py_ssize_t ok = y >= hp || xc >= wp ? 0                                \
                                            : (xc + sw <= wp ? sw : wp - xc) * c;                  \
                            if (ok < run) dst = ok ? x + ((nn * hp + y) * wp + xc) * c : NULL;     \
                            for (Py_ssize_t e = 0; e < ok; e++) dst[e] = dst[e] + src[e];          \
                        }                                                                          \
                    }                                                                              \
                    if (zeros) zeros[tile] = (uint16_t)z;                                          \
                }                                                                                  \
    }                                                                                              \
    CLONES static void wino_out_##T(T *restrict mm, T *restrict y, T *restrict buf, Py_ssize_t n, \
                                    Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t o, Py_ssize_t m,      \
                                    Py_ssize_t th, Py_ssize_t tw, Py_ssize_t plane, int adjoint,   \
                                    const uint16_t *zeros) {                                       \
        T *scratch = buf, *zero = buf + 16 * o, *pm[16], *py[9];                                   \
        unsigned win[9]; /* the input pixels of output (i, j): its window of r x r */              \
        for (int i = 0; i < m; i++)                                                                \
            for (int j = 0; j < m; j++) {                                                          \
                win[i * m + j] = 0;                                                                \
                for (int u = 0; u < 5 - m; u++)                                                    \
                    for (int q = 0; q < 5 - m; q++) win[i * m + j] |= 1u << ((i + u) * 4 + j + q); \
            }                                                                                      \
        memset(zero, 0, (size_t)o * sizeof(T));                                                    \
        for (Py_ssize_t nn = 0, tile = 0; nn < n; nn++)                                            \
            for (Py_ssize_t ti = 0; ti < th; ti++)                                                 \
                for (Py_ssize_t tj = 0; tj < tw; tj++, tile++) {                                   \
                    for (int i = 0; i < 16; i++) pm[i] = mm + i * plane + tile * o;                \
                    for (Py_ssize_t i = 0; i < m; i++)                                             \
                        for (Py_ssize_t j = 0; j < m; j++) {                                       \
                            Py_ssize_t r = ti * m + i, col = tj * m + j;                           \
                            py[i * m + j] = r < oh && col < ow ? y + ((nn * oh + r) * ow + col) * o\
                                            : adjoint ? zero : scratch + (i * m + j) * o;          \
                        }                                                                          \
                    if (adjoint && m == 2) wino_a2_adj_##T((const T *const *)py, pm, o);           \
                    else if (adjoint) wino_a3_adj_##T((const T *const *)py, pm, o);                \
                    else if (m == 2) wino_a2_fwd_##T((const T *const *)pm, py, o);                 \
                    else wino_a3_fwd_##T((const T *const *)pm, py, o);                             \
                    for (int i = 0; !adjoint && zeros && i < m * m; i++)                           \
                        if ((zeros[tile] & win[i]) == win[i]) memset(py[i], 0, (size_t)o * sizeof(T));\
                }                                                                                  \
    }

WINO_LOOPS(float, wino_vf)
WINO_LOOPS(double, wino_vd)

/* Integer arguments args[first..first+count), each >= 1. */
static int wino_ints(PyObject *const *args, int first, int count, Py_ssize_t *g) {
    for (int i = 0; i < count; i++) {
        g[i] = PyLong_AsSsize_t(args[first + i]);
        if (g[i] < 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

PyDoc_STRVAR(wino_in_doc,
"wino_in(x, v, sh, sw, m, th, tw, adjoint, zeros) -> bool\n\n"
"v[i, :n*th*tw*sh*sw*C] (v (16, L): 16 planes of (n*th*tw, sh*sw*C), L at least that) =\n"
"B^T d B of the 4x4 tiles d (at steps of m, 2 or 3) of the\n"
"space-to-depth (by sh, sw) of x (n, Hp, Wp, C), zeros past its edge; adjoint: x += B dV B^T of\n"
"each tile of v at its place. zeros (forward only; or None): uint16 (n*th*tw,), bit u*4+v of\n"
"a tile's entry set where its pixel (u, v) is all zeros. C-contiguous float32/float64 of one\n"
"dtype, apart. False (nothing written) if they do not fit.");

/* The optional flags of a wino call (None: NULL): a C-contiguous uint16 array of at least
   `count` entries, writable if asked. 0 if it does not fit (nothing held). */
static int wino_flags(PyObject *obj, Py_buffer *b, Py_ssize_t count, int writable) {
    memset(b, 0, sizeof(Py_buffer));
    if (obj == Py_None) return 1;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0) {
        PyErr_Clear();
        memset(b, 0, sizeof(Py_buffer));
        return 0;
    }
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@') f++;
    if (b->itemsize == 2 && *f == 'H' && f[1] == 0 && b->len >= count * 2) return 1;
    PyBuffer_Release(b);
    memset(b, 0, sizeof(Py_buffer));
    return 0;
}

static PyObject *wino_in(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "wino_in(x, v, sh, sw, m, th, tw, adjoint, zeros) takes 9 "
                                         "arguments");
        return NULL;
    }
    int adjoint = PyObject_IsTrue(args[7]);
    if (adjoint < 0) return NULL;
    PyObject *objs[2] = {adjoint ? args[1] : args[0], adjoint ? args[0] : args[1]};
    Py_buffer b[2];
    Py_ssize_t g[5];
    if (!wino_ints(args, 2, 5, g) || !take(objs, 2, 1, b)) Py_RETURN_FALSE;
    Py_buffer *xb = &b[adjoint ? 1 : 0], *vb = &b[adjoint ? 0 : 1];
    char k = kind_of(xb);
    Py_ssize_t sh = g[0], sw = g[1], m = g[2], th = g[3], tw = g[4];
    Py_ssize_t cp = xb->ndim == 4 ? sh * sw * xb->shape[3] : 0;
    int fits = k && kind_of(vb) == k && xb->ndim == 4 && vb->ndim == 2 && m >= 2 && m <= 3
               && vb->shape[0] == 16 && vb->shape[1] >= xb->shape[0] * th * tw * cp && cp > 0
               && !overlap(xb, vb);
    Py_buffer zb = {0}; /* (not taken when fits is already 0) */
    fits = fits && wino_flags(args[8], &zb, xb->shape[0] * th * tw, 1) && !(adjoint && zb.obj);
    void *buf = fits ? malloc(32 * (size_t)cp * (k == 'f' ? 4 : 8)) : NULL;
    fits = fits && buf != NULL;
    const Py_ssize_t *s = xb->shape, pl = vb->shape[1];
    if (fits && k == 'f')
        wino_in_float(xb->buf, vb->buf, buf, s[0], s[1], s[2], s[3], sh, sw, m, th, tw, pl,
                      adjoint, zb.buf);
    else if (fits)
        wino_in_double(xb->buf, vb->buf, buf, s[0], s[1], s[2], s[3], sh, sw, m, th, tw, pl,
                       adjoint, zb.buf);
    free(buf);
    if (zb.obj) PyBuffer_Release(&zb);
    return done(b, 2, fits);
}

PyDoc_STRVAR(wino_out_doc,
"wino_out(mm, y, m, th, tw, adjoint, zeros) -> bool\n\n"
"y (n, OH, OW, O) = A^T M A of the tiles of mm (16, L): 16 planes of (n*th*tw, O) (L at least\n"
"that), m (2 or 3) outputs per tile\n"
"side, those past y's edge dropped; adjoint: mm = A Y A^T of y's tiles (zeros past its edge).\n"
"zeros (forward only; or None): wino_in's flags; an output whose window of input pixels is all\n"
"zeros is written 0. C-contiguous float32/float64 of one dtype, apart. False (nothing written)\n"
"if they do not fit.");

static PyObject *wino_out(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "wino_out(mm, y, m, th, tw, adjoint, zeros) takes 7 "
                                         "arguments");
        return NULL;
    }
    int adjoint = PyObject_IsTrue(args[5]);
    if (adjoint < 0) return NULL;
    PyObject *objs[2] = {adjoint ? args[1] : args[0], adjoint ? args[0] : args[1]};
    Py_buffer b[2];
    Py_ssize_t g[3];
    if (!wino_ints(args, 2, 3, g) || !take(objs, 2, 1, b)) Py_RETURN_FALSE;
    Py_buffer *mb = &b[adjoint ? 1 : 0], *yb = &b[adjoint ? 0 : 1];
    char k = kind_of(mb);
    Py_ssize_t m = g[0], th = g[1], tw = g[2];
    int fits = k && kind_of(yb) == k && mb->ndim == 2 && yb->ndim == 4 && m >= 2 && m <= 3
               && mb->shape[0] == 16 && mb->shape[1] >= yb->shape[0] * th * tw * yb->shape[3]
               && yb->shape[3] > 0 && (th - 1) * m < yb->shape[1] && yb->shape[1] <= th * m
               && (tw - 1) * m < yb->shape[2] && yb->shape[2] <= tw * m && !overlap(mb, yb);
    Py_buffer zb = {0}; /* (not taken when fits is already 0) */
    fits = fits && wino_flags(args[6], &zb, yb->shape[0] * th * tw, 0) && !(adjoint && zb.obj);
    void *buf = fits ? malloc(32 * (size_t)yb->shape[3] * (k == 'f' ? 4 : 8)) : NULL;
    fits = fits && buf != NULL;
    const Py_ssize_t *s = yb->shape, pl = mb->shape[1];
    if (fits && k == 'f')
        wino_out_float(mb->buf, yb->buf, buf, s[0], s[1], s[2], s[3], m, th, tw, pl, adjoint,
                       zb.buf);
    else if (fits)
        wino_out_double(mb->buf, yb->buf, buf, s[0], s[1], s[2], s[3], m, th, tw, pl, adjoint,
                        zb.buf);
    free(buf);
    if (zb.obj) PyBuffer_Release(&zb);
    return done(b, 2, fits);
}

/* Categorical sampling from logits rows (the policies' acting, rlgrad/distributions/
   categorical.py's logits_draw), the passes around NumPy's exp and log that NumPy runs as one
   small ufunc call per column:
   * row_shift(x, z): z = x - max(x) per row of a (rows, K) array: the maximum column after
     column with np.maximum's rule (the first NaN met propagates), one rounded subtraction each;
   * cdf_pick(cdf, u, z, idx, out): per row, cdf's running sum in place (np.add.accumulate's
     adds, in order), idx = how many of the first K-1 sums are <= u * total (u float64: the
     product and the comparisons in double, as NumPy promotes them: inverse_cdf's rule), and
     out = z[row, idx]. */
#define CATEGORICAL_LOOPS(T)                                                                       \
    static void row_shift_##T(const T *x, T *z, Py_ssize_t rows, Py_ssize_t k) {                  \
        for (Py_ssize_t r = 0; r < rows; r++, x += k, z += k) {                                    \
            T m = x[0];                                                                            \
            for (Py_ssize_t j = 1; j < k; j++) m = (m >= x[j] || m != m) ? m : x[j];               \
            for (Py_ssize_t j = 0; j < k; j++) z[j] = x[j] - m;                                    \
        }                                                                                          \
    }                                                                                              \
    static void cdf_pick_##T(T *c, const double *u, const T *z, int64_t *idx, T *out,              \
                             Py_ssize_t rows, Py_ssize_t k) {                                      \
        for (Py_ssize_t r = 0; r < rows; r++, c += k, z += k) {                                    \
            for (Py_ssize_t j = 1; j < k; j++) c[j] = c[j - 1] + c[j];                             \
            double t = u[r] * (double)c[k - 1];                                                    \
            int64_t a = 0;                                                                         \
            for (Py_ssize_t j = 0; j < k - 1; j++) a += (double)c[j] <= t;                         \
            idx[r] = a;                                                                            \
            out[r] = z[a];                                                                         \
        }                                                                                          \
    }

CATEGORICAL_LOOPS(float)
CATEGORICAL_LOOPS(double)

static int is_int64(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    return b->itemsize == 8 && (f[0] == 'l' || f[0] == 'q') && f[1] == '\0';
}

PyDoc_STRVAR(row_shift_doc,
"row_shift(x, z) -> bool\n\n"
"z = x - max(x, axis=-1, keepdims=True) for C-contiguous float32/float64 (rows, K) arrays of\n"
"one dtype and shape, apart. False (nothing written) if they do not fit.");

static PyObject *row_shift(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "row_shift(x, z) takes 2 arguments");
        return NULL;
    }
    Py_buffer b[2];
    if (!take(args, 2, 1, b)) Py_RETURN_FALSE;
    char k = kind_of(&b[0]);
    int fits = k && kind_of(&b[1]) == k && b[0].ndim == 2 && b[1].ndim == 2
               && b[0].shape[0] == b[1].shape[0] && b[0].shape[1] == b[1].shape[1]
               && b[0].shape[1] >= 1 && !overlap(&b[0], &b[1]);
    if (fits && k == 'f')
        row_shift_float(b[0].buf, b[1].buf, b[0].shape[0], b[0].shape[1]);
    else if (fits)
        row_shift_double(b[0].buf, b[1].buf, b[0].shape[0], b[0].shape[1]);
    return done(b, 2, fits);
}

PyDoc_STRVAR(cdf_pick_doc,
"cdf_pick(cdf, u, z, idx, out) -> bool\n\n"
"Per row of cdf (rows, K): its running sum in place, idx[r] = #{j < K-1: cdf[r, j] <= u[r] *\n"
"cdf[r, K-1]}, out[r] = z[r, idx[r]]. cdf, z (rows, K) and out (rows,) C-contiguous of one\n"
"float dtype, u float64 and idx int64 (rows,), apart. False (nothing written) if they do not\n"
"fit.");

static PyObject *cdf_pick(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "cdf_pick(cdf, u, z, idx, out) takes 5 arguments");
        return NULL;
    }
    PyObject *objs[5] = {args[1], args[2], args[0], args[3], args[4]};  /* u, z read */
    Py_buffer b[5];
    if (!take(objs, 5, 2, b)) Py_RETURN_FALSE;
    const Py_buffer *u = &b[0], *z = &b[1], *c = &b[2], *ix = &b[3], *o = &b[4];
    char k = kind_of(c);
    Py_ssize_t rows = c->ndim == 2 ? c->shape[0] : -1;
    int fits = k && kind_of(z) == k && kind_of(o) == k && kind_of(u) == 'd' && is_int64(ix)
               && rows >= 0 && c->shape[1] >= 1 && z->ndim == 2 && z->shape[0] == rows
               && z->shape[1] == c->shape[1] && u->ndim == 1 && u->shape[0] == rows
               && ix->ndim == 1 && ix->shape[0] == rows && o->ndim == 1 && o->shape[0] == rows;
    for (int i = 0; fits && i < 5; i++)
        for (int j = i + 1; fits && j < 5; j++)
            if (i >= 2 || j >= 2) fits = !overlap(&b[i], &b[j]);
    if (fits && k == 'f')
        cdf_pick_float(c->buf, u->buf, z->buf, ix->buf, o->buf, rows, c->shape[1]);
    else if (fits)
        cdf_pick_double(c->buf, u->buf, z->buf, ix->buf, o->buf, rows, c->shape[1]);
    return done(b, 5, fits);
}

static PyMethodDef methods[] = {
    {"sum_rows", (PyCFunction)(void (*)(void))sum_rows, METH_FASTCALL, sum_rows_doc},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL, tanh_grad_doc},
    {"gae", (PyCFunction)(void (*)(void))gae, METH_FASTCALL, gae_doc},
    {"relu", (PyCFunction)(void (*)(void))relu, METH_FASTCALL, relu_doc},
    {"relu_grad", (PyCFunction)(void (*)(void))relu_grad, METH_FASTCALL, relu_grad_doc},
    {"add_rows", (PyCFunction)(void (*)(void))add_rows, METH_FASTCALL, add_rows_doc},
    {"live_columns", (PyCFunction)(void (*)(void))live_columns, METH_FASTCALL, live_columns_doc},
    {"take_columns", (PyCFunction)(void (*)(void))take_columns, METH_FASTCALL, take_columns_doc},
    {"put_rows", (PyCFunction)(void (*)(void))put_rows, METH_FASTCALL, put_rows_doc},
    {"outer", (PyCFunction)(void (*)(void))outer, METH_FASTCALL, outer_doc},
    {"outers", (PyCFunction)(void (*)(void))outers, METH_FASTCALL, outers_doc},
    {"weight_cols", (PyCFunction)(void (*)(void))weight_cols, METH_FASTCALL, weight_cols_doc},
    {"lstm_gates", (PyCFunction)(void (*)(void))lstm_gates, METH_FASTCALL, lstm_gates_doc},
    {"lstm_dgates", (PyCFunction)(void (*)(void))lstm_dgates, METH_FASTCALL, lstm_dgates_doc},
    {"lstm_seq_fwd", (PyCFunction)(void (*)(void))lstm_seq_fwd, METH_FASTCALL, lstm_seq_fwd_doc},
    {"lstm_seq_bwd", (PyCFunction)(void (*)(void))lstm_seq_bwd, METH_FASTCALL, lstm_seq_bwd_doc},
    {"gru_gates", (PyCFunction)(void (*)(void))gru_gates, METH_FASTCALL, gru_gates_doc},
    {"gru_state", (PyCFunction)(void (*)(void))gru_state, METH_FASTCALL, gru_state_doc},
    {"gru_dgates", (PyCFunction)(void (*)(void))gru_dgates, METH_FASTCALL, gru_dgates_doc},
    {"gru_pre", (PyCFunction)(void (*)(void))gru_pre, METH_FASTCALL, gru_pre_doc},
    {"conv_cols", (PyCFunction)(void (*)(void))conv_cols, METH_FASTCALL, conv_cols_doc},
    {"conv_col2im", (PyCFunction)(void (*)(void))conv_col2im, METH_FASTCALL, conv_col2im_doc},
    {"wino_in", (PyCFunction)(void (*)(void))wino_in, METH_FASTCALL, wino_in_doc},
    {"wino_out", (PyCFunction)(void (*)(void))wino_out, METH_FASTCALL, wino_out_doc},
    {"row_shift", (PyCFunction)(void (*)(void))row_shift, METH_FASTCALL, row_shift_doc},
    {"cdf_pick", (PyCFunction)(void (*)(void))cdf_pick, METH_FASTCALL, cdf_pick_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Loops of an MLP's backward pass in one pass each, bitwise NumPy's (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
