/* What the optional C modules (rlgrad/_kernels.c, rlgrad/optim/_fused.c) share: the loops'
   AVX2 and baseline versions, and reading a NumPy buffer's element kind. */
#ifndef RLGRAD_BUFFERS_H
#define RLGRAD_BUFFERS_H

#include <Python.h>

/* AVX2 and baseline versions of the loops, picked at load time (GCC on x86-64 Linux). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* The buffer's element kind ('f' float32, 'd' float64), or 0 if it is neither. */
static inline char kind_of(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[0] == '\0' || f[1] != '\0') return 0;
    if (*f == 'f' && b->itemsize == 4) return 'f';
    if (*f == 'd' && b->itemsize == 8) return 'd';
    return 0;
}

#endif
