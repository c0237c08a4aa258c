/* Adam's arithmetic per element, spelled once in C: rlgrad/optim/_fused.c (the eager optimizers'
   update) and the native backend's lowering of the compiled DQN's `fused_adam`
   (rlgrad/native/lowerings.py: the generated C includes this file) both call these functions.
   Their reference is optim.algorithms._adam_math, operation for operation in the array's own
   precision: m + (g - m) c1, v b2 + (g g) c2, p - m / (sqrt(v) + eps) step. Each operation is
   correctly rounded IEEE arithmetic and both builds turn off FMA contraction
   (-ffp-contract=off) and reassociation, so the results are bitwise the NumPy path's.

   Plain C (math.h only): no Python, no NumPy. `static inline`: each loop that calls them is
   compiled (and vectorised) with the arithmetic in place. */
#ifndef RLGRAD_ADAM_H
#define RLGRAD_ADAM_H

#include <math.h>

/* adam_moments_T: the first and second moments of one element from its gradient g (already
   clipped and signed), each set to 0 when its magnitude is below floor_ (_adam_math's periodic
   flush of tiny moments; floor_ = 0 never flushes, and a constant 0 compiles to no test).
   adam_param_T: the parameter x moved by the moments (step and eps carry the bias corrections).
   adam_step_T: both, for one element; returns the new parameter. */
#define RLGRAD_ADAM_ELEMENT(T, SQRT, FABS)                                                         \
    static inline void adam_moments_##T(T g, T *m, T *v, T c1, T b2, T c2, T floor_) {             \
        T vv = *v * b2 + (g * g) * c2;                                                             \
        T mm = *m + (g - *m) * c1;                                                                 \
        *m = FABS(mm) < floor_ ? (T)0 : mm;                                                        \
        *v = FABS(vv) < floor_ ? (T)0 : vv;                                                        \
    }                                                                                              \
    static inline T adam_param_##T(T x, T m, T v, T eps, T step) {                                 \
        return x - m / (SQRT(v) + eps) * step;                                                     \
    }                                                                                              \
    static inline T adam_step_##T(T x, T g, T *m, T *v, T c1, T b2, T c2, T eps, T step,          \
                                  T floor_) {                                                      \
        adam_moments_##T(g, m, v, c1, b2, c2, floor_);                                             \
        return adam_param_##T(x, *m, *v, eps, step);                                               \
    }

RLGRAD_ADAM_ELEMENT(float, sqrtf, fabsf)
RLGRAD_ADAM_ELEMENT(double, sqrt, fabs)

#endif
