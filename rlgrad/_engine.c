/* rlgrad._engine: the backward pass's hot loop (core._propagate) in C, for first-order passes.

   The reference it implements is core.reference_backward (toposort, pop each tensor's gradient,
   call its VJP rules, accumulate); core._propagate is that loop optimized in Python, and this is
   _propagate in C, step for step and in the same order: take the newest tensor holding a
   gradient from a heap (the reference's topological order, restricted to the tensors that got a
   gradient), check that nothing it saved was written in place, call its VJP rules with plain
   arrays, sum each result down to its argument's shape, and add it to what that argument already
   got. The rules, the unbroadcasting (ops._sum_to) and every error message stay in Python.

   What it adds over the reference is speed only: no toposort pass (the heap, C integers instead
   of tuples), autograd.grad's pruning (the `visit` set run_backward computes), one- and
   two-argument nodes taken apart here (direct loads of the Tensor's slots at their offsets, rule
   calls without an argument tuple, pass_through rules not called), the bias-over-a-batch case of
   the unbroadcasting without a Python frame, and no interpreter dispatch for the loop itself.
   Nodes it does not take apart (variadic primitives, three or more arguments) go through
   core._general_node, i.e. the reference's own node_vjps.

   The module is optional: setup.py builds it when a C compiler is there; core.py falls back to
   its Python loop without it, or with RLGRAD_ENGINE=0. tests/test_reference_paths.py holds it
   to the reference's bits on random programs, and the backward_loop fixture (tests/conftest.py)
   runs the gradient test files under the reference, the Python loop and this one. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* What core.py hands over once (setup): the types, the Python helpers, the slots' offsets. */
static PyTypeObject *tensor_type, *primitive_type;
static PyObject *pass_through, *sum_to, *refuse_modified, *freed_error, *add_to_grad;
static PyObject *general_node, *match_dtype, *str_shape, *str_dtype, *str_copy;
static PyObject *str_reshape, *str_sum, *zero_obj, *axis_kwnames;
static Py_ssize_t off_value, off_rg, off_op, off_args, off_kw, off_retain, off_seq, off_written;
static Py_ssize_t off_grad, off_cut;
static Py_ssize_t off_vjps;
static PyObject *next_seq;
static int ready = 0, tensor_ready = 0;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* The offset of a __slots__ member of ``type`` (a member descriptor), or -1 with an error set. */
static Py_ssize_t slot_offset(PyTypeObject *type, const char *name) {
    PyObject *d = PyDict_GetItemString(type->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "_engine.setup: %s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "_engine.setup: %s.%s is not an object slot",
                     type->tp_name, name);
        return -1;
    }
    return m->offset;
}

/* A slot of a Tensor (borrowed), or NULL with AttributeError if it was never set. */
static PyObject *get(PyObject *t, Py_ssize_t off, const char *name) {
    PyObject *v = SLOT(t, off);
    if (!v) PyErr_Format(PyExc_AttributeError, "Tensor has no attribute '%s'", name);
    return v;
}

static int get_ll(PyObject *t, Py_ssize_t off, const char *name, long long *out) {
    PyObject *v = get(t, off, name);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *engine_setup(PyObject *self, PyObject *args) {
    PyObject *tt, *pt;
    if (!PyArg_ParseTuple(args, "O!O!OOOOOOO", &PyType_Type, &tt, &PyType_Type, &pt, &pass_through,
                          &sum_to, &refuse_modified, &freed_error, &add_to_grad, &general_node,
                          &match_dtype))
        return NULL;
    primitive_type = (PyTypeObject *)pt;
    PyObject *keep[] = {tt, pt, pass_through, sum_to, refuse_modified, freed_error, add_to_grad,
                        general_node, match_dtype};
    for (int i = 0; i < 9; i++) Py_INCREF(keep[i]);  /* held for the interpreter's life */
    if (!tensor_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_engine.setup: call init_tensor first");
        return NULL;
    }
    if ((PyTypeObject *)tt != tensor_type) {
        PyErr_SetString(PyExc_TypeError, "_engine.setup: not the Tensor given to init_tensor");
        return NULL;
    }
    if ((off_vjps = slot_offset(primitive_type, "vjps")) < 0) return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

/* The Tensor type's slots, and the creation counter nodes are numbered with (tracer.py). */
static PyObject *engine_init_tensor(PyObject *self, PyObject *args) {
    PyObject *tt;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &tt, &next_seq)) return NULL;
    tensor_type = (PyTypeObject *)tt;
    Py_INCREF(tt);
    Py_INCREF(next_seq);
    if ((off_value = slot_offset(tensor_type, "_value")) < 0 ||
        (off_rg = slot_offset(tensor_type, "requires_grad")) < 0 ||
        (off_op = slot_offset(tensor_type, "_op")) < 0 ||
        (off_args = slot_offset(tensor_type, "_args")) < 0 ||
        (off_kw = slot_offset(tensor_type, "_kw")) < 0 ||
        (off_retain = slot_offset(tensor_type, "_retain")) < 0 ||
        (off_seq = slot_offset(tensor_type, "_seq")) < 0 ||
        (off_written = slot_offset(tensor_type, "_written")) < 0 ||
        (off_grad = slot_offset(tensor_type, "grad")) < 0 ||
        (off_cut = slot_offset(tensor_type, "_cut")) < 0)
        return NULL;
    tensor_ready = 1;
    Py_RETURN_NONE;
}

/* tracer._record's graph node: node(p, out, args, kwargs) is the Tensor primitive ``p`` computed
   as ``out`` from ``args``, numbered in creation order (no _cut: nothing reads it on a node). */
static PyObject *engine_node(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 4 || !tensor_ready) {
        PyErr_SetString(PyExc_TypeError, "node(p, out, args, kwargs) after init_tensor");
        return NULL;
    }
    PyObject *seq = PyObject_CallNoArgs(next_seq);
    if (!seq) return NULL;
    PyObject *zero = PyLong_FromLong(0);
    PyObject *t = zero ? tensor_type->tp_alloc(tensor_type, 0) : NULL;
    if (!t) {
        Py_DECREF(seq);
        Py_XDECREF(zero);
        return NULL;
    }
    PyObject *vals[] = {argv[1], Py_True, Py_None, argv[0], argv[2], argv[3], Py_False};
    Py_ssize_t offs[] = {off_value, off_rg, off_grad, off_op, off_args, off_kw, off_retain};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(vals[i]);
        SLOT(t, offs[i]) = vals[i];
    }
    SLOT(t, off_seq) = seq;
    SLOT(t, off_written) = zero;
    return t;
}

/* ---- the heap: newest (largest creation number) first -------------------------------------- */
typedef struct { long long seq; PyObject *t; } Entry;
typedef struct { Entry *e; Py_ssize_t n, cap; } Heap;

static int heap_push(Heap *h, long long seq, PyObject *t) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 32;
        Entry *e = PyMem_Realloc(h->e, sizeof(Entry) * (size_t)cap);
        if (!e) { PyErr_NoMemory(); return -1; }
        h->e = e;
        h->cap = cap;
    }
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (h->e[up].seq >= seq) break;
        h->e[i] = h->e[up];
        i = up;
    }
    h->e[i].seq = seq;
    h->e[i].t = t;
    Py_INCREF(t);
    return 0;
}

static PyObject *heap_pop(Heap *h) {  /* a new reference */
    PyObject *top = h->e[0].t;
    Entry last = h->e[--h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->e[c + 1].seq > h->e[c].seq) c++;
        if (h->e[c].seq <= last.seq) break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n) h->e[i] = last;
    return top;
}

static void heap_clear(Heap *h) {
    for (Py_ssize_t i = 0; i < h->n; i++) Py_DECREF(h->e[i].t);
    PyMem_Free(h->e);
}

/* ---- one argument's gradient ---------------------------------------------------------------- */
typedef struct {
    PyObject *grads, *leaves, *wanted, *visit;
    Heap heap;
} Pass;

/* Add ``ga`` (a reference this steals) to what tensor ``a`` already got. */
static int accumulate(Pass *p, PyObject *a, PyObject *ga) {
    PyObject *key = PyLong_FromVoidPtr(a);
    if (!key) { Py_DECREF(ga); return -1; }
    PyObject *prev = PyDict_GetItemWithError(p->grads, key);
    int rc = -1;
    if (prev) {
        PyObject *sum = PyNumber_Add(prev, ga);
        if (sum) {
            rc = PyDict_SetItem(p->grads, key, sum);
            Py_DECREF(sum);
        }
    } else if (!PyErr_Occurred() && PyDict_SetItem(p->grads, key, ga) == 0) {
        PyObject *op = get(a, off_op, "_op");
        long long seq;
        if (op == Py_None)
            rc = PyList_Append(p->leaves, a);
        else if (op && get_ll(a, off_seq, "_seq", &seq) == 0)
            rc = heap_push(&p->heap, seq, a);
    }
    Py_DECREF(key);
    Py_DECREF(ga);
    return rc;
}

/* autograd.grad: 1 if argument ``a`` gets no gradient (core._skipped), 0 if it does, -1 error. */
static int skipped(Pass *p, PyObject *a) {
    PyObject *key = PyLong_FromVoidPtr(a);
    if (!key) return -1;
    int in;
    if (p->visit != Py_None) {
        in = PySet_Contains(p->visit, key);
        Py_DECREF(key);
        return in < 0 ? -1 : !in;
    }
    PyObject *op = get(a, off_op, "_op");
    if (!op || op != Py_None) {
        Py_DECREF(key);
        return op ? 0 : -1;
    }
    in = PySet_Contains(p->wanted, key);
    Py_DECREF(key);
    return in < 0 ? -1 : !in;
}

/* 1 if ``gshape`` is ``(k,) + shape`` (a bias's gradient over a batch), 0 if not, -1 error. */
static int batch_of(PyObject *gshape, PyObject *shape) {
    if (!PyTuple_Check(gshape) || !PyTuple_Check(shape)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    if (PyTuple_GET_SIZE(gshape) != n + 1) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(gshape, i + 1), PyTuple_GET_ITEM(shape, i),
                                          Py_EQ);
        if (eq <= 0) return eq;
    }
    return 1;
}

/* ``ga`` (stolen) summed down to ``a``'s shape: broadcasting undone, as the Python loop does
   (ops._sum_to; its first case, a bias over a batch, without its frame: the same calls). */
static PyObject *unbroadcast(PyObject *a, PyObject *ga) {
    PyObject *val = get(a, off_value, "_value"), *out = NULL;
    PyObject *shape = val ? PyObject_GetAttr(val, str_shape) : NULL;
    PyObject *gshape = shape ? PyObject_GetAttr(ga, str_shape) : NULL;
    int same = gshape ? PyObject_RichCompareBool(gshape, shape, Py_EQ) : -1;
    if (same == 1) {
        Py_DECREF(gshape);
        Py_DECREF(shape);
        return ga;
    }
    int bias = same == 0 ? batch_of(gshape, shape) : -1;
    if (bias == 1) {
        PyObject *lead = PyTuple_GET_ITEM(gshape, 0);
        if (PyLong_Check(lead) && PyLong_AsSsize_t(lead) == 1) {  /* g.reshape(shape) */
            PyObject *argv[2] = {ga, shape};
            out = PyObject_VectorcallMethod(str_reshape, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
        } else if (!PyErr_Occurred()) {  /* g.sum(axis=0) */
            PyObject *argv[2] = {ga, zero_obj};
            out = PyObject_VectorcallMethod(str_sum, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            axis_kwnames);
        }
    } else if (bias == 0) {
        PyObject *argv[2] = {ga, shape};
        out = PyObject_Vectorcall(sum_to, argv, 2, NULL);
    }
    Py_XDECREF(gshape);
    Py_XDECREF(shape);
    Py_DECREF(ga);
    return out;
}

/* Call the Python helper that raises one of core's errors (it returns the exception or raises). */
static int raise_from(PyObject *fn, PyObject *x, PyObject *y) {
    PyObject *argv[2] = {x, y};
    PyObject *r = PyObject_Vectorcall(fn, argv, y ? 2 : 1, NULL);
    if (!r) return -1;
    if (PyExceptionInstance_Check(r)) {
        PyErr_SetObject((PyObject *)Py_TYPE(r), r);
        Py_DECREF(r);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* core._refuse_modified(t, a): the version of argument ``a`` that ``t`` used (borrowed: the
   graph keeps it alive through a's ``_prev`` chain), or NULL with its error set. */
static PyObject *resolve(PyObject *t, PyObject *a) {
    PyObject *argv[2] = {t, a};
    PyObject *r = PyObject_Vectorcall(refuse_modified, argv, 2, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    return r;
}

/* A variadic node, or one of three or more arguments: core._general_node gives its
   (argument, gradient) pairs, broadcasting undone; they are accumulated here. */
static int general(Pass *p, PyObject *t, PyObject *g) {
    PyObject *argv[4] = {t, g, p->wanted, p->visit};
    PyObject *pairs = PyObject_Vectorcall(general_node, argv, 4, NULL);
    if (!pairs) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pairs); i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        PyObject *ga = PyTuple_GET_ITEM(pair, 1);
        Py_INCREF(ga);
        if (accumulate(p, PyTuple_GET_ITEM(pair, 0), ga) < 0) {
            Py_DECREF(pairs);
            return -1;
        }
    }
    Py_DECREF(pairs);
    return 0;
}

/* The rules of a node of one or two arguments, called with plain arrays. */
static int simple(Pass *p, PyObject *t, PyObject *g, PyObject *args, PyObject *rules,
                  long long tseq, int plain) {
    Py_ssize_t n = PyTuple_GET_SIZE(args), nr = PyTuple_GET_SIZE(rules);
    PyObject *call[4];  /* g, ans, d0[, d1] */
    call[0] = g;
    if (!(call[1] = get(t, off_value, "_value"))) return -1;
    PyObject *objs[2];  /* the arguments, each the version t used (an in-place op may have
                           rebased it since: core._refuse_modified finds the older node) */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (PyObject_TypeCheck(a, tensor_type)) {
            long long w;
            if (get_ll(a, off_written, "_written", &w) < 0) return -1;
            if (w > tseq && !(a = resolve(t, a))) return -1;
            objs[i] = a;
            if (!(a = get(a, off_value, "_value"))) return -1;
        } else {
            objs[i] = a;
        }
        call[2 + i] = a;
    }
    PyObject *kw = get(t, off_kw, "_kw");
    if (!kw) return -1;
    if (kw == Py_None || (PyDict_Check(kw) && PyDict_GET_SIZE(kw) == 0)) kw = NULL;
    for (Py_ssize_t i = 0; i < n && i < nr; i++) {
        PyObject *rule = PyTuple_GET_ITEM(rules, i), *a = objs[i], *ga;
        if (rule == Py_None || !PyObject_TypeCheck(a, tensor_type)) continue;
        PyObject *rg = get(a, off_rg, "requires_grad");
        int on = rg ? PyObject_IsTrue(rg) : -1;
        if (on <= 0) {
            if (on < 0) return -1;
            continue;
        }
        if (!plain) {
            int skip = skipped(p, a);
            if (skip) {
                if (skip < 0) return -1;
                continue;
            }
        }
        if (rule == pass_through) {
            ga = g;
            Py_INCREF(ga);
        } else if (!(ga = PyObject_VectorcallDict(rule, call, (size_t)(2 + n), kw))) {
            return -1;
        }
        if (ga == Py_None) {
            Py_DECREF(ga);
            continue;
        }
        if (!(ga = unbroadcast(a, ga)) || accumulate(p, a, ga) < 0) return -1;
    }
    return 0;
}

/* One node: its gradient ``g`` (borrowed) handed to its arguments. */
static int node(Pass *p, PyObject *t, PyObject *g, int plain) {
    PyObject *args = get(t, off_args, "_args"), *op = get(t, off_op, "_op");
    if (!args || !op) return -1;
    if (args == Py_None) {
        if (raise_from(freed_error, t, NULL) == 0)
            PyErr_SetString(PyExc_RuntimeError, "backward through a freed graph");
        return -1;
    }
    long long tseq, written;
    if (get_ll(t, off_seq, "_seq", &tseq) < 0 || get_ll(t, off_written, "_written", &written) < 0)
        return -1;
    if (written > tseq && raise_from(refuse_modified, t, t) < 0) return -1;
    PyObject *rules = Py_IS_TYPE(op, primitive_type) ? SLOT(op, off_vjps) : NULL;
    int rc;
    if (rules && PyTuple_Check(rules) && PyTuple_Check(args) && PyTuple_GET_SIZE(args) <= 2
            && PyTuple_GET_SIZE(args) >= 1 && PyTuple_GET_SIZE(rules) >= 1)
        rc = simple(p, t, g, args, rules, tseq, plain);
    else
        rc = general(p, t, g);
    if (rc < 0) return -1;
    return 0;
}

/* The gradient of the popped tensor ``t`` (a new reference), taken out of ``grads`` unless it is
   an input of autograd.grad; a tensor that called retain_grad() gets it in .grad too. */
static PyObject *take_grad(Pass *p, PyObject *t) {
    PyObject *key = PyLong_FromVoidPtr(t);
    if (!key) return NULL;
    PyObject *g = PyDict_GetItemWithError(p->grads, key);
    if (!g) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        Py_DECREF(key);
        return NULL;
    }
    Py_INCREF(g);
    int keep = p->wanted != Py_None ? PySet_Contains(p->wanted, key) : 0;
    if (keep < 0 || (!keep && PyDict_DelItem(p->grads, key) < 0)) goto fail;
    if (p->wanted == Py_None) {
        PyObject *retain = get(t, off_retain, "_retain");
        int on = retain ? PyObject_IsTrue(retain) : -1;
        if (on < 0 || (on && raise_from(add_to_grad, t, g) < 0)) goto fail;
    }
    Py_DECREF(key);
    return g;
fail:
    Py_DECREF(key);
    Py_DECREF(g);
    return NULL;
}

static PyObject *engine_propagate(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "propagate(heap, grads, leaves, wanted, visit, retain_graph)");
        return NULL;
    }
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_engine.setup was not called");
        return NULL;
    }
    Pass p = {argv[1], argv[2], argv[3], argv[4], {NULL, 0, 0}};
    int retain = PyObject_IsTrue(argv[5]);
    if (retain < 0 || !PyList_Check(argv[0]) || !PyDict_Check(p.grads) || !PyList_Check(p.leaves)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "propagate: bad arguments");
        return NULL;
    }
    int plain = p.wanted == Py_None && p.visit == Py_None;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++) {  /* core._seed's (-seq, t) */
        PyObject *e = PyList_GET_ITEM(argv[0], i);
        long long seq = -PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0));
        if (PyErr_Occurred() || heap_push(&p.heap, seq, PyTuple_GET_ITEM(e, 1)) < 0) goto error;
    }
    while (p.heap.n) {
        PyObject *t = heap_pop(&p.heap);
        PyObject *g = take_grad(&p, t);
        int rc = g ? node(&p, t, g, plain) : -1;
        Py_XDECREF(g);
        if (rc == 0 && !retain) {  /* free what the rules needed; a second pass raises */
            PyObject *old = SLOT(t, off_args);
            Py_INCREF(Py_None);
            SLOT(t, off_args) = Py_None;
            Py_XDECREF(old);
        }
        Py_DECREF(t);
        if (rc < 0) goto error;
    }
    heap_clear(&p.heap);
    Py_RETURN_NONE;
error:
    heap_clear(&p.heap);
    return NULL;
}

/* tensor.constant(value): a Tensor outside the graph holding ``value`` (stolen), slot for slot. */
static PyObject *new_constant(PyObject *value) {
    PyObject *t = tensor_type->tp_alloc(tensor_type, 0);
    if (!t) {
        Py_DECREF(value);
        return NULL;
    }
    PyObject *zero = PyLong_FromLong(0);
    if (!zero) {
        Py_DECREF(value);
        Py_DECREF(t);
        return NULL;
    }
    SLOT(t, off_value) = value;
    Py_ssize_t nones[] = {off_grad, off_op, off_args, off_kw, off_cut};
    for (int i = 0; i < 5; i++) {
        Py_INCREF(Py_None);
        SLOT(t, nones[i]) = Py_None;
    }
    Py_INCREF(Py_False);
    SLOT(t, off_rg) = Py_False;
    Py_INCREF(Py_False);
    SLOT(t, off_retain) = Py_False;
    SLOT(t, off_written) = zero;
    return t;
}

/* Set slot ``off`` of ``t`` to ``v`` (stolen). */
static void set_slot(PyObject *t, Py_ssize_t off, PyObject *v) {
    PyObject *old = SLOT(t, off);
    SLOT(t, off) = v;
    Py_XDECREF(old);
}

/* The new .grad of a leaf that had none: ``g`` (a reference this steals) itself, cast to the
   leaf's dtype, or a copy if another leaf already took the same array (core._write_leaf_grads). */
static int fresh_grad(PyObject *leaf, PyObject *g, PyObject *given) {
    PyObject *val = get(leaf, off_value, "_value"), *ld = NULL, *gd = NULL;
    int same = -1;
    if (val && (ld = PyObject_GetAttr(val, str_dtype)) && (gd = PyObject_GetAttr(g, str_dtype)))
        same = ld == gd ? 1 : PyObject_RichCompareBool(gd, ld, Py_EQ);
    Py_XDECREF(ld);
    Py_XDECREF(gd);
    PyObject *fixed = NULL;
    if (same == 0) {
        PyObject *argv[2] = {g, leaf};
        fixed = PyObject_Vectorcall(match_dtype, argv, 2, NULL);
    } else if (same == 1) {
        PyObject *gid = PyLong_FromVoidPtr(g);
        int seen = gid ? PySet_Contains(given, gid) : -1;
        if (seen == 0 && PySet_Add(given, gid) == 0) {
            fixed = g;
            Py_INCREF(g);
        } else if (seen == 1) {  /* rules may hand one array to several leaves (add's g, g) */
            fixed = PyObject_CallMethodNoArgs(g, str_copy);
        }
        Py_XDECREF(gid);
    }
    Py_DECREF(g);
    PyObject *t = fixed ? new_constant(fixed) : NULL;
    if (!t) return -1;
    set_slot(leaf, off_grad, t);
    return 0;
}

/* core._write_leaf_grads for a first-order pass: each leaf's gradient into its .grad. */
static PyObject *engine_write_leaf_grads(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(argv[0]) || !PyDict_Check(argv[1]) || !ready) {
        PyErr_SetString(PyExc_TypeError, "write_leaf_grads(leaves, grads) after setup");
        return NULL;
    }
    PyObject *leaves = argv[0], *grads = argv[1], *given = PySet_New(NULL);
    if (!given) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(leaves); i++) {
        PyObject *leaf = PyList_GET_ITEM(leaves, i), *key = PyLong_FromVoidPtr(leaf);
        PyObject *g = key ? PyDict_GetItemWithError(grads, key) : NULL, *old;
        if (!g && key && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        Py_XDECREF(key);
        if (!g || !(old = get(leaf, off_grad, "grad"))) goto error;
        Py_INCREF(g);
        if (old == Py_None && !PyObject_TypeCheck(g, tensor_type)) {
            if (fresh_grad(leaf, g, given) < 0) goto error;
        } else {
            int rc = raise_from(add_to_grad, leaf, g);
            Py_DECREF(g);
            if (rc < 0) goto error;
        }
    }
    Py_DECREF(given);
    Py_RETURN_NONE;
error:
    Py_DECREF(given);
    return NULL;
}

static PyMethodDef methods[] = {
    {"init_tensor", engine_init_tensor, METH_VARARGS,
     "init_tensor(Tensor, next_seq): the Tensor type and its creation counter (tracer.py)"},
    {"node", (PyCFunction)(void (*)(void))engine_node, METH_FASTCALL,
     "node(p, out, args, kwargs): tracer._record's graph node, slot for slot"},
    {"write_leaf_grads", (PyCFunction)(void (*)(void))engine_write_leaf_grads, METH_FASTCALL,
     "write_leaf_grads(leaves, grads): core._write_leaf_grads for a first-order pass"},
    {"setup", engine_setup, METH_VARARGS,
     "setup(Tensor, Primitive, pass_through, sum_to, refuse_modified, freed_error, add_to_grad, "
     "general_node, match_dtype): the types and Python helpers the loop uses (core.py calls it once)"},
    {"propagate", (PyCFunction)(void (*)(void))engine_propagate, METH_FASTCALL,
     "propagate(heap, grads, leaves, wanted, visit, retain_graph): core._propagate's loop for a "
     "first-order pass (create_graph=False)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_engine", NULL, -1, methods};

PyMODINIT_FUNC PyInit__engine(void) {
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_copy = PyUnicode_InternFromString("copy");
    str_reshape = PyUnicode_InternFromString("reshape");
    str_sum = PyUnicode_InternFromString("sum");
    zero_obj = PyLong_FromLong(0);
    axis_kwnames = Py_BuildValue("(s)", "axis");
    if (!str_shape || !str_dtype || !str_copy || !str_reshape || !str_sum || !zero_obj
            || !axis_kwnames)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    /* bumped whenever setup's or a function's signature changes: core.py refuses a stale build */
    if (m && PyModule_AddIntConstant(m, "API", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
