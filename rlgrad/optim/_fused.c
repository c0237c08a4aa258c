/* rlgrad.optim._fused: the flat optimizer updates of algorithms.py (Adam, RMSprop) in one pass.

   NumPy runs Adam's update as ~13 passes over the parameters (one ufunc per operation); here each
   element is read and written once. The arithmetic is _adam_math's / _rmsprop_math's, operation
   for operation, in the array's own precision: every operation is correctly rounded IEEE
   arithmetic (+ - * / sqrt), nothing is contracted into an FMA (-ffp-contract=off) or
   reassociated (no -ffast-math), so the results are bitwise those of the NumPy path. That path
   is itself an optimization of the plain updates in rlgrad/optim/reference.py (PyTorch's
   formulas; it differs from them by rounding, and by Adam's flush of tiny moments, a documented
   deviation). tests/test_reference_paths.py checks this module against the NumPy path's bits and
   against the references, with every option.

   The module is optional: setup.py builds it when a C compiler is there, and algorithms.py falls
   back to NumPy without it (or with RLGRAD_FUSED=0). Each function returns False, having
   changed nothing, when an array is not a C-contiguous float32/float64 buffer of the expected
   size, so the caller can take the NumPy path for that step. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_buffers.h"
#include "../_adam.h"
#include <math.h>

/* One flat group's buffers: the parameters' (written), the gradients' (read) and the state's. */
typedef struct {
    Py_ssize_t n_params;
    int n_state;
    char kind;        /* 'f' (float32) or 'd' (float64) */
    Py_buffer *params, *grads, *state;
} Group;

static void release(Group *gr, Py_ssize_t n_params, int n_state) {
    for (Py_ssize_t i = 0; i < n_params; i++) {
        PyBuffer_Release(&gr->params[i]);
        PyBuffer_Release(&gr->grads[i]);
    }
    for (int i = 0; i < n_state; i++) PyBuffer_Release(&gr->state[i]);
    PyMem_Free(gr->params);
    gr->params = NULL;
}

/* Take the buffers; 1 if they all fit (same kind, sizes adding up), 0 if not (nothing held),
   -1 with an exception set on a real error. */
static int acquire(Group *gr, PyObject *params, PyObject *grads, PyObject **state, int n_state) {
    PyObject *ps = PySequence_Fast(params, "params must be a sequence of arrays");
    if (!ps) return -1;
    PyObject *gs = PySequence_Fast(grads, "grads must be a sequence of arrays");
    if (!gs) { Py_DECREF(ps); return -1; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ps), i = 0, total = 0;
    int s = 0, ok = n == PySequence_Fast_GET_SIZE(gs);
    gr->params = PyMem_Malloc(sizeof(Py_buffer) * (size_t)(2 * n + n_state + 1));
    if (!gr->params) { Py_DECREF(ps); Py_DECREF(gs); PyErr_NoMemory(); return -1; }
    gr->grads = gr->params + n;
    gr->state = gr->grads + n;
    gr->kind = 0;
    for (; ok && i < n; i++) {
        Py_buffer *pb = &gr->params[i], *gb = &gr->grads[i];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(ps, i), pb,
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear(); ok = 0; break;
        }
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(gs, i), gb,
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear(); PyBuffer_Release(pb); ok = 0; break;
        }
        char k = kind_of(pb);
        if (i == 0) gr->kind = k;
        const char *pa = pb->buf, *ga = gb->buf;
        int overlap = pa < ga + gb->len && ga < pa + pb->len; /* the loops assume no aliasing */
        if (!k || kind_of(gb) != k || k != gr->kind || gb->len != pb->len || overlap) {
            PyBuffer_Release(pb); PyBuffer_Release(gb); ok = 0; break;
        }
        total += pb->len;
    }
    for (; ok && s < n_state; s++) {
        Py_buffer *b = &gr->state[s];
        if (PyObject_GetBuffer(state[s], b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear(); ok = 0; break;
        }
        if (kind_of(b) != gr->kind || b->len != total) { PyBuffer_Release(b); ok = 0; break; }
    }
    Py_DECREF(ps); Py_DECREF(gs);
    if (!ok) { release(gr, i, s); return 0; }
    gr->n_params = n;
    gr->n_state = n_state;
    return 1;
}

/* ---- Adam ------------------------------------------------------------------------------------
   _adam_math: m = m + (g - m) c1; v = v b2 + (g g) c2; every `flush` steps
   |m|, |v| < floor become 0; amsgrad: vmax = max(vmax, v), NaN-propagating like np.maximum;
   p = p shrink (AdamW) - m / (sqrt(v) + eps) * step_size. The per-element arithmetic is
   rlgrad/_adam.h's (adam_moments_T, adam_param_T, adam_step_T), which the native backend's
   generated C calls too; the loops here add the blocks, the sign, the clip's scale, amsgrad and
   the decay around it. */

/* Idle blocks. A ReLU unit dead on every input (in the DQN CartPole preset's 256-256 network
   ~70% of the second layer's units, for thousands of steps) has exact-zero gradients, and once
   the periodic flush has zeroed its first moment its update moves its weights by +0: with
   g = +-0 and m = +-0, mm = m + (g - m) c1 is +0 (each sign case), +0 / (sqrt(vv) + eps) * step
   is +0 (the denominator is positive or inf when vv is not NaN; step >= 0) and p - (+0) is p,
   bit for bit. A block of ADAM_BLOCK elements that is all such (checked without branches, so it
   vectorises) writes m and v as the full loop would and leaves p alone. Any other block takes
   the full loop. Only the fast loop (no flush, decay, negation or amsgrad) does this. */
#define ADAM_BLOCK 64

#define ADAM_LOOPS(T)                                                                              \
    CLONES static void adam_fast_##T(T *restrict p, const T *restrict g, T *restrict m,            \
                                     T *restrict v, Py_ssize_t n, T c1, T b2, T c2, T eps,         \
                                     T step, T scale) {                                            \
        for (Py_ssize_t s = 0; s < n; s += ADAM_BLOCK) {                                           \
            Py_ssize_t e = n - s < ADAM_BLOCK ? n : s + ADAM_BLOCK;                                \
            int busy = 0;                                                                          \
            for (Py_ssize_t i = s; i < e; i++)                                                     \
                busy |= (g[i] != 0) | (m[i] != 0) | (v[i] != v[i]);                                \
            if (!busy) { /* idle (see ADAM_BLOCK): p - (+0) / (sqrt(v) + eps) * step is p */      \
                for (Py_ssize_t i = s; i < e; i++)                                                 \
                    adam_moments_##T(g[i] * scale, &m[i], &v[i], c1, b2, c2, (T)0);               \
                continue;                                                                          \
            }                                                                                      \
            for (Py_ssize_t i = s; i < e; i++) /* g x scale: the clipped gradient (x 1: exact) */  \
                p[i] = adam_step_##T(p[i], g[i] * scale, &m[i], &v[i], c1, b2, c2, eps, step,      \
                                     (T)0);                                                        \
        }                                                                                          \
    }                                                                                              \
    static void adam_general_##T(T *restrict p, const T *restrict g, T *restrict m, T *restrict v, \
                                 T *restrict vmax, Py_ssize_t n, T c1, T b2, T c2, T eps, T step, \
                                 T shrink, int decay, T floor_, int negate, T scale,               \
                                 int scaled) {                                                     \
        for (Py_ssize_t i = 0; i < n; i++) {                                                       \
            T gi = negate ? -g[i] : g[i];                                                          \
            if (scaled) gi = gi * scale; /* the clipped gradient, as NumPy's g * scale */          \
            adam_moments_##T(gi, &m[i], &v[i], c1, b2, c2, floor_);                                \
            T vv = v[i];                                                                           \
            if (vmax) {                                                                            \
                T a = vmax[i];                                                                     \
                vv = (a != a || a >= vv) ? a : vv;                                                 \
                vmax[i] = vv;                                                                      \
            }                                                                                      \
            p[i] = adam_param_##T(decay ? p[i] * shrink : p[i], m[i], vv, eps, step);              \
        }                                                                                          \
    }                                                                                              \
    /* every parameter in turn, its slice of the flat state; each scalar is rounded to T once,  \
       as NumPy rounds a Python float operand */                                                   \
    static void adam_group_##T(const Group *gr, double c1, double b2, double c2, double eps,       \
                               double step, double shrink, double floor_, int negate,              \
                               double scale) {                                                     \
        int general = gr->n_state == 3 || shrink != 1.0 || floor_ > 0 || negate;                  \
        T *m = gr->state[0].buf, *v = gr->state[1].buf;                                            \
        T *vmax = gr->n_state == 3 ? gr->state[2].buf : NULL;                                      \
        for (Py_ssize_t i = 0; i < gr->n_params; i++) {                                            \
            Py_ssize_t n = gr->params[i].len / (Py_ssize_t)sizeof(T);                              \
            if (general)                                                                           \
                adam_general_##T(gr->params[i].buf, gr->grads[i].buf, m, v, vmax, n, (T)c1,       \
                                 (T)b2, (T)c2, (T)eps, (T)step, (T)shrink, shrink != 1.0,          \
                                 (T)floor_, negate, (T)scale, scale != 1.0);                       \
            else                                                                                   \
                adam_fast_##T(gr->params[i].buf, gr->grads[i].buf, m, v, n, (T)c1, (T)b2, (T)c2,  \
                              (T)eps, (T)step, (T)scale);                                          \
            m += n;                                                                                \
            v += n;                                                                                \
            if (vmax) vmax += n;                                                                   \
        }                                                                                          \
    }

ADAM_LOOPS(float)
ADAM_LOOPS(double)

PyDoc_STRVAR(adam_doc,
"adam(params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq, c1, b2, c2, eps, step_size, shrink,\n"
"     floor, negate, scale=1.0) -> bool\n\n"
"One Adam step of every parameter in place; the state arrays are flat (the parameters'\n"
"sizes in order). shrink != 1: decoupled weight decay first; floor > 0: moments below it\n"
"become 0; negate: maximize; scale != 1: the gradients times scale (rounded to the arrays'\n"
"dtype once, as NumPy's g * scale). False (nothing changed) if an array does not fit.");

static PyObject *adam(PyObject *self, PyObject *args) {
    PyObject *params, *grads, *st[3];
    double c1, b2, c2, eps, step, shrink, floor_, scale = 1.0;
    int negate;
    if (!PyArg_ParseTuple(args, "OOOOOdddddddp|d:adam", &params, &grads, &st[0], &st[1], &st[2],
                          &c1, &b2, &c2, &eps, &step, &shrink, &floor_, &negate, &scale))
        return NULL;
    Group gr;
    int n_state = st[2] == Py_None ? 2 : 3;
    int got = acquire(&gr, params, grads, st, n_state);
    if (got <= 0) return got < 0 ? NULL : Py_NewRef(Py_False);
    Py_BEGIN_ALLOW_THREADS
    if (gr.kind == 'f')
        adam_group_float(&gr, c1, b2, c2, eps, step, shrink, floor_, negate, scale);
    else
        adam_group_double(&gr, c1, b2, c2, eps, step, shrink, floor_, negate, scale);
    Py_END_ALLOW_THREADS
    release(&gr, gr.n_params, gr.n_state);
    Py_RETURN_TRUE;
}

/* ---- RMSprop ---------------------------------------------------------------------------------
   _rmsprop_math without centering or momentum: sq = sq alpha + (g g) c; d = sqrt(sq + eps)
   (tf_style) or sqrt(sq) + eps; p = p - g / d * lr. */

#define RMSPROP_LOOP(T, SQRT)                                                                      \
    CLONES static void rmsprop_##T(T *restrict p, const T *restrict g, T *restrict sq,             \
                                   Py_ssize_t n, T alpha, T c, T eps, T lr, int tf, int negate,    \
                                   T scale) {                                                      \
        for (Py_ssize_t i = 0; i < n; i++) {                                                       \
            T gi = (negate ? -g[i] : g[i]) * scale; /* x 1 is exact */                             \
            T s = sq[i] * alpha + (gi * gi) * c;                                                   \
            sq[i] = s;                                                                             \
            T d = tf ? SQRT(s + eps) : SQRT(s) + eps;                                              \
            p[i] = p[i] - gi / d * lr;                                                             \
        }                                                                                          \
    }                                                                                              \
    static void rmsprop_group_##T(const Group *gr, double alpha, double c, double eps, double lr,  \
                                  int tf, int negate, double scale) {                              \
        T *sq = gr->state[0].buf;                                                                  \
        for (Py_ssize_t i = 0; i < gr->n_params; i++) {                                            \
            Py_ssize_t n = gr->params[i].len / (Py_ssize_t)sizeof(T);                              \
            rmsprop_##T(gr->params[i].buf, gr->grads[i].buf, sq, n, (T)alpha, (T)c, (T)eps,        \
                        (T)lr, tf, negate, (T)scale);                                              \
            sq += n;                                                                               \
        }                                                                                          \
    }

RMSPROP_LOOP(float, sqrtf)
RMSPROP_LOOP(double, sqrt)

PyDoc_STRVAR(rmsprop_doc,
"rmsprop(params, grads, square_avg, alpha, c, eps, lr, tf_style, negate, scale=1.0) -> bool\n\n"
"One RMSprop step (no centering, no momentum) of every parameter in place; square_avg is\n"
"flat. False (nothing changed) if an array does not fit.");

static PyObject *rmsprop(PyObject *self, PyObject *args) {
    PyObject *params, *grads, *st[1];
    double alpha, c, eps, lr, scale = 1.0;
    int tf, negate;
    if (!PyArg_ParseTuple(args, "OOOddddpp|d:rmsprop", &params, &grads, &st[0], &alpha, &c, &eps,
                          &lr, &tf, &negate, &scale))
        return NULL;
    Group gr;
    int got = acquire(&gr, params, grads, st, 1);
    if (got <= 0) return got < 0 ? NULL : Py_NewRef(Py_False);
    Py_BEGIN_ALLOW_THREADS
    if (gr.kind == 'f')
        rmsprop_group_float(&gr, alpha, c, eps, lr, tf, negate, scale);
    else
        rmsprop_group_double(&gr, alpha, c, eps, lr, tf, negate, scale);
    Py_END_ALLOW_THREADS
    release(&gr, gr.n_params, gr.n_state);
    Py_RETURN_TRUE;
}

/* ---- Polyak averaging -------------------------------------------------------------------------
   target.py's polyak_update: d = d (1 - tau) + tau s, the two products rounded as NumPy's
   `d *= 1 - tau` and `tau * s` round them (the Python floats rounded to T once). */

#define POLYAK_LOOP(T)                                                                             \
    CLONES static void polyak_##T(T *restrict d, const T *restrict s, Py_ssize_t n, T keep,       \
                                  T tau) {                                                         \
        for (Py_ssize_t i = 0; i < n; i++) d[i] = d[i] * keep + tau * s[i];                        \
    }                                                                                              \
    static void polyak_group_##T(const Group *gr, double keep, double tau) {                       \
        for (Py_ssize_t i = 0; i < gr->n_params; i++)                                              \
            polyak_##T(gr->params[i].buf, gr->grads[i].buf,                                        \
                       gr->params[i].len / (Py_ssize_t)sizeof(T), (T)keep, (T)tau);                \
    }

POLYAK_LOOP(float)
POLYAK_LOOP(double)

PyDoc_STRVAR(polyak_doc,
"polyak(targets, sources, keep, tau) -> bool\n\n"
"target = target * keep + tau * source in place, for every pair of arrays (keep = 1 - tau).\n"
"False (nothing changed) if an array does not fit.");

static PyObject *polyak(PyObject *self, PyObject *args) {
    PyObject *targets, *sources;
    double keep, tau;
    if (!PyArg_ParseTuple(args, "OOdd:polyak", &targets, &sources, &keep, &tau)) return NULL;
    Group gr;
    int got = acquire(&gr, targets, sources, NULL, 0);
    if (got <= 0) return got < 0 ? NULL : Py_NewRef(Py_False);
    Py_BEGIN_ALLOW_THREADS
    if (gr.kind == 'f')
        polyak_group_float(&gr, keep, tau);
    else
        polyak_group_double(&gr, keep, tau);
    Py_END_ALLOW_THREADS
    release(&gr, gr.n_params, 0);
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"polyak", polyak, METH_VARARGS, polyak_doc},
    {"adam", adam, METH_VARARGS, adam_doc},
    {"rmsprop", rmsprop, METH_VARARGS, rmsprop_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fused",
    "The flat optimizer updates of rlgrad.optim in one pass over the parameters (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }
