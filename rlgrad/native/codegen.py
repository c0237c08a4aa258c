"""The C a lowered program is written in: values with static shapes, and the three kinds of loop
every lowering is made of (elementwise, reduction, matrix product).

A traced program has fixed shapes and dtypes, so its C has them too: every loop bound and every
stride is a constant, every intermediate value a static buffer of its exact size, and a view
(transpose, reshape, broadcast, basic slicing) costs nothing: it is a new offset and new strides
over the same memory (``Val``). The generated function checks its arguments (shape, dtype,
contiguity) and returns None when one differs, and the caller then runs the NumPy replay.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.int64): "int64_t", np.dtype(np.int32): "int32_t",
          np.dtype(np.uint64): "uint64_t", np.dtype(np.uint32): "uint32_t",
          np.dtype(np.bool_): "npy_bool"}
TYPENUMS = {np.dtype(np.float32): "NPY_FLOAT32", np.dtype(np.float64): "NPY_FLOAT64",
            np.dtype(np.int64): "NPY_INT64", np.dtype(np.int32): "NPY_INT32",
            np.dtype(np.uint64): "NPY_UINT64", np.dtype(np.uint32): "NPY_UINT32",
            np.dtype(np.bool_): "NPY_BOOL"}


class Unsupported(Exception):
    """This program (an op, a dtype, an argument) has no native lowering: the NumPy replay runs."""


def ctype(dtype: np.dtype) -> str:
    c = CTYPES.get(np.dtype(dtype))
    if c is None:
        raise Unsupported(f"dtype {np.dtype(dtype)}")
    return c


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def literal(value: Any) -> str:
    """A C literal with exactly ``value`` (floats in hexadecimal: no decimal rounding)."""
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, int | np.integer):
        v = int(value)
        if v > 2**63 - 1:  # (a uint64 above int64's range: an unsigned literal)
            return f"UINT64_C({v})"
        return f"INT64_C({v})" if v > -2**63 else "INT64_MIN"
    v = float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"({v.hex()})"


class Val:
    """A value of the program in C: ``ptr[off + sum(i_k * strides[k])]``, or a compile-time
    scalar ``lit`` (shape ()). Strides count elements; 0 where a dimension is broadcast."""

    __slots__ = ("dtype", "shape", "ptr", "off", "strides", "lit")

    def __init__(self, dtype: Any, shape: Sequence[int], ptr: str | None, off: int | str = 0,
                 strides: Sequence[int] | None = None, lit: str | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(n) for n in shape)
        self.ptr, self.off, self.lit = ptr, off, lit
        self.strides = tuple(strides) if strides is not None else c_strides(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def contiguous(self) -> bool:
        """C-contiguous (dimensions of length 1 may have any stride)."""
        return self.lit is None and all(
            n == 1 or s == c for n, s, c in zip(self.shape, self.strides, c_strides(self.shape)))

    def at(self, idx: Sequence[str]) -> str:
        """The element at the loop indices ``idx`` (one per dimension, right-aligned)."""
        if self.lit is not None:
            return self.lit
        terms = [str(self.off)] if self.off else []
        lead = len(idx) - len(self.shape)
        for k, (n, s) in enumerate(zip(self.shape, self.strides)):
            if n != 1 and s:
                terms.append(f"{idx[lead + k]}*{s}" if s != 1 else idx[lead + k])
        return f"{self.ptr}[{' + '.join(terms) or '0'}]"

    def view(self, shape: Sequence[int], strides: Sequence[int], off: int | str = 0) -> Val:
        """Another view of the same memory; ``off`` (elements) may be a C expression (a loop's
        step: ``"t*64"``)."""
        if isinstance(off, str) or isinstance(self.off, str):
            total: int | str = f"({self.off} + {off})" if off else self.off
        else:
            total = self.off + off
        return Val(self.dtype, shape, self.ptr, total, strides, self.lit)

    def broadcast(self, shape: Sequence[int]) -> Val:
        """This value seen with ``shape`` (NumPy's broadcasting: stride 0 where stretched)."""
        lead = len(shape) - len(self.shape)
        strides = [0] * lead + [0 if n == 1 and m != 1 else s for n, m, s in
                                zip(self.shape, shape[lead:], self.strides)]
        return self.view(shape, strides)


class Program:
    """The C of one step under construction: static buffers, the body's lines, the arguments."""

    def __init__(self) -> None:
        self.statics: list[str] = []
        self.lines: list[str] = []
        self.n_loops = 0

    def buffer(self, dtype: Any, shape: Sequence[int]) -> Val:
        name = f"b{len(self.statics)}"
        n = max(math.prod(shape), 1)
        self.statics.append(f"static {ctype(dtype)} {name}[{n}] __attribute__((aligned(64)));")
        return Val(dtype, shape, name)

    def _loop_vars(self, ndim: int) -> list[str]:
        self.n_loops += 1
        return [f"i{self.n_loops}_{k}" for k in range(ndim)]

    def elementwise(self, out: Val, expr: Callable[[list[str]], str], ins: Sequence[Val],
                    compute: Any = None) -> None:
        """``out[idx] = expr(ins[idx]...)`` over ``out``'s shape, each input read through a cast
        to ``compute`` (default: out's dtype), as NumPy's ufunc loops cast their operands."""
        t = ctype(compute if compute is not None else out.dtype)
        ins = [v.broadcast(out.shape) for v in ins]
        if not out.shape:
            value = expr([f"({t}){v.at([])}" for v in ins])
            self.lines.append(f"{out.at([])} = ({ctype(out.dtype)})({value});")
            return
        flat = out.contiguous() and all(v.lit is not None or v.contiguous() or not any(v.strides)
                                        for v in ins)
        if flat:  # one loop over the elements (constant stride 1: vectorised)
            i = self._loop_vars(1)[0]
            read = [f"({t}){_flat_at(v, i)}" for v in ins]
            self.lines += ["#pragma omp simd", f"for (npy_intp {i} = 0; {i} < {out.size}; {i}++) "
                           f"{out.ptr}[{out.off} + {i}] = ({ctype(out.dtype)})({expr(read)});"]
            return
        idx = self._loop_vars(len(out.shape))
        body = f"{out.at(idx)} = ({ctype(out.dtype)})({expr([f'({t}){v.at(idx)}' for v in ins])});"
        self.lines += _nest(out.shape, idx, body)

    def reduce(self, kind: str, out: Val, x: Val, axes: Sequence[int]) -> None:
        """``out`` (x's shape without ``axes``, contiguous) = the ``kind`` ("sum", "prod", "max",
        "min", "any", "all") of x over ``axes``. Sums of float32 run in double (closer to NumPy's
        pairwise sum than a float loop), NaN propagates through max and min as in NumPy (and is
        true for any and all, as a nonzero)."""
        keep = [k for k in range(len(x.shape)) if k not in axes]
        if kind in ("max", "min"):
            acc_t = ctype(x.dtype)
        elif kind in ("any", "all"):
            acc_t = "npy_bool"
        else:
            acc_t = "double" if x.dtype.kind == "f" else "int64_t"
        oi = self._loop_vars(len(keep))
        ri = self._loop_vars(len(axes))
        idx = [""] * len(x.shape)
        for k, v in zip(keep, oi):
            idx[k] = v
        for k, v in zip(axes, ri):
            idx[k] = v
        xv = x.at(idx)
        first = f"({acc_t}){x.at([('0' if k in axes else idx[k]) for k in range(len(x.shape))])}"
        init = {"sum": "0", "prod": "1", "any": "0", "all": "1"}.get(kind, first)
        step = {"sum": f"acc += ({acc_t}){xv};", "prod": f"acc *= ({acc_t}){xv};",
                "any": f"acc = acc || ({xv} != 0);", "all": f"acc = acc && ({xv} != 0);",
                "max": f"{{ {acc_t} v = ({acc_t}){xv}; if (v > acc || v != v) acc = v; }}",
                "min": f"{{ {acc_t} v = ({acc_t}){xv}; if (v < acc || v != v) acc = v; }}"}[kind]
        inner = _nest([x.shape[k] for k in axes], ri, step, simd=False)  # (once NaN, stays NaN)
        body = [f"{acc_t} acc = {init};", *inner,
                f"{out.at([v for v in oi])} = ({ctype(out.dtype)})acc;"]
        self.lines += _nest([x.shape[k] for k in keep], oi, "{ " + " ".join(body) + " }", simd=False)

    def arg_reduce(self, kind: str, out: Val, x: Val, axes: Sequence[int]) -> None:
        """``out`` (int64, x's shape without ``axes``) = the C-order position over ``axes`` of
        the first largest ("argmax") or smallest element, or of the first NaN, as NumPy's."""
        keep = [k for k in range(len(x.shape)) if k not in axes]
        oi, ri = self._loop_vars(len(keep)), self._loop_vars(len(axes))
        idx = [""] * len(x.shape)
        for k, v in zip(keep, oi):
            idx[k] = v
        for k, v in zip(axes, ri):
            idx[k] = v
        t, op = ctype(x.dtype), ">" if kind == "argmax" else "<"
        first = x.at([("0" if k in axes else idx[k]) for k in range(len(x.shape))])
        step = (f"{{ {t} v = {x.at(idx)}; if (v {op} acc || (v != v && acc == acc)) "
                "{ acc = v; best = n; } n++; }")
        body = [f"{t} acc = {first}; npy_intp best = 0, n = 0;",
                *_nest([x.shape[k] for k in axes], ri, step, simd=False), f"{out.at(oi)} = best;"]
        self.lines += _nest([x.shape[k] for k in keep], oi, "{ " + " ".join(body) + " }", simd=False)

    def cumulative(self, out: Val, x: Val, axis: int) -> None:
        """``out`` = the running sum of ``x`` along ``axis`` (in out's type, as NumPy's)."""
        keep = [k for k in range(len(x.shape)) if k != axis]
        oi, (ai,) = self._loop_vars(len(keep)), self._loop_vars(1)
        idx = [""] * len(x.shape)
        for k, v in zip(keep, oi):
            idx[k] = v
        idx[axis] = ai
        t = ctype(out.dtype)
        inner = _nest([x.shape[axis]], [ai], f"{{ acc += ({t}){x.at(idx)}; {out.at(idx)} = acc; }}",
                      simd=False)
        self.lines += _nest([x.shape[k] for k in keep], oi, "{ " + f"{t} acc = 0; " + " ".join(inner)
                            + " }", simd=False)

    def gemm(self, out: Val, a: Val, b: Val) -> None:
        """``out = a @ b`` for 2-D views (out contiguous): one BLAS call where both operands are
        row- or column-major views, a copy first where one is not."""
        m, k = a.shape
        n = b.shape[1]
        if out.dtype.kind != "f" or a.dtype != out.dtype or b.dtype != out.dtype:
            raise Unsupported("a matrix product outside float32/float64 of one dtype")
        if k == 0:
            self.elementwise(out, lambda v: "0", [])
            return
        ta, lda, a = self._blas_operand(a)
        tb, ldb, b = self._blas_operand(b)
        fn = "gemm_s" if out.dtype == np.float32 else "gemm_d"
        self.lines.append(f"{fn}({ta}, {tb}, {m}, {n}, {k}, {a.ptr} + {a.off}, {lda}, "
                          f"{b.ptr} + {b.off}, {ldb}, {out.ptr} + {out.off});")

    def _blas_operand(self, v: Val) -> tuple[int, int, Val]:
        """(transposed?, leading dimension, the view BLAS reads) of a 2-D operand."""
        r, c = v.shape
        sr, sc = v.strides
        if (sc == 1 or c == 1) and (r == 1 or sr >= max(c, 1)):
            return 0, max(sr if r > 1 else c, c, 1), v
        if (sr == 1 or r == 1) and (c == 1 or sc >= max(r, 1)):
            return 1, max(sc if c > 1 else r, r, 1), v
        copy = self.buffer(v.dtype, v.shape)
        self.elementwise(copy, lambda x: x[0], [v])
        return 0, max(c, 1), copy


def _flat_at(v: Val, i: str) -> str:
    """``v``'s element ``i`` in a flat loop: a literal, one element (broadcast), or ``ptr[off+i]``."""
    if v.lit is not None:
        return v.lit
    return f"{v.ptr}[{v.off}]" if not any(v.strides) else f"{v.ptr}[{v.off} + {i}]"


def _nest(shape: Sequence[int], idx: Sequence[str], body: str, simd: bool = True) -> list[str]:
    """Nested loops over ``shape`` with the index variables ``idx`` around ``body``; the
    innermost one marked for vectorisation (``simd``: its iterations are independent)."""
    if not shape:
        return [body]
    lines = []
    for d, (n, i) in enumerate(zip(shape, idx)):
        if simd and d == len(shape) - 1:
            lines.append("#pragma omp simd")
        lines.append(f"for (npy_intp {i} = 0; {i} < {n}; {i}++)")
    return lines + [body]


_BUFFER = re.compile(r"\bb\d+\b")
_STATIC = re.compile(r"static (.+) (b\d+)\[(\d+)\]")


def _loops(lines: Sequence[str]) -> list[tuple[int, int]]:
    """(first, last) line of every loop whose body repeats over several lines (a lax loop's
    ``for (...) {`` ... ``}``, at one indentation)."""
    found, open_ = [], []
    for i, ln in enumerate(lines):
        text = ln.lstrip()
        indent = len(ln) - len(text)
        if text.startswith("for (") and text.endswith("{"):
            open_.append((indent, i))
        elif text == "}" and open_ and open_[-1][0] == indent:
            found.append((open_.pop()[1], i))
    return found


def _live_ranges(lines: Sequence[str]) -> dict[str, list[int]]:
    """Buffer -> [first line, last line] where its value may be live: the lines that name it,
    widened to a whole loop when it enters or leaves the loop (read at every iteration, or
    written in the last one and read after)."""
    ranges: dict[str, list[int]] = {}
    for i, ln in enumerate(lines):
        for name in _BUFFER.findall(ln):
            r = ranges.setdefault(name, [i, i])
            r[1] = i
    loops = _loops(lines)
    changed = True
    while changed:
        changed = False
        for r in ranges.values():
            for s, e in loops:
                if r[0] < s <= r[1] < e:  # from outside into the loop: live through it
                    r[1], changed = e, True
                if s < r[0] <= e < r[1]:  # out of the loop: live from its start
                    r[0], changed = s, True
    return ranges


def share_buffers(statics: list[str], lines: list[str]) -> list[str]:
    """The buffers' declarations with every buffer whose value is dead before another's is
    made (same C type and size) declared as that one (``#define``): the program's memory, and
    so the cache it fills, shrinks to what is live at once. A buffer's lines are found by name
    in the C (``b12``), views included; strictly ordered ranges, so no op reads and writes one
    array through two names."""
    ranges = _live_ranges(lines)
    decls = []
    for st in statics:
        m = _STATIC.match(st)
        if m is None or m.group(2) not in ranges:
            decls.append((None, st, None))
        else:
            decls.append((m.group(2), st, (m.group(1), m.group(3))))
    free: dict[tuple[str, str], list[tuple[int, str]]] = {}  # (type, size) -> (busy until, name)
    out, order = [], sorted((ranges[n][0], n, st, key) for n, st, key in decls if n is not None)
    out += [st for n, st, _ in decls if n is None]
    for first, name, st, key in order:
        pool = free.setdefault(key, [])
        k = next((j for j, (until, _) in enumerate(pool) if until < first), None)
        if k is None:
            out.append(st)
            pool.append((ranges[name][1], name))
        else:
            host = pool[k][1]
            out.append(f"#define {name} {host}")
            pool[k] = (ranges[name][1], host)
    return out
