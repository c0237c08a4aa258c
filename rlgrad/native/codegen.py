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
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.native.prelude import MVEC

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
    """The C of one step under construction: static buffers, the body's lines, the arguments.

    With ``fuse`` (the default; ``RLGRAD_NATIVE_FUSE=0`` turns it off), elementwise ops are held
    back in loops by shape (``_Fused``), written in the order the loops were opened when anything
    else reads ``lines``: an op joins the newest loop of its shape that admits it and that no
    loop opened after it depends on (it reads nothing they write, writes nothing they read or
    write: moved ahead of them, it computes what it did). Without it each op is its own loop,
    the plain reference that the fused program equals bit for bit."""

    MAX_PENDING = 8  # loops held back at once (how far back an op may move)

    def __init__(self, fuse: bool | None = None) -> None:
        self.statics: list[str] = []
        self._lines: list[str] = []
        self.n_loops = 0
        self.fuse = os.environ.get("RLGRAD_NATIVE_FUSE", "1") != "0" if fuse is None else fuse
        self._pending: list[_Fused] = []
        self.n_fused = 0

    @property
    def lines(self) -> list[str]:
        """The body's lines, the held-back elementwise loops written first."""
        self.flush()
        return self._lines

    @lines.setter
    def lines(self, value: list[str]) -> None:
        self.flush()
        self._lines = value

    def flush(self) -> None:
        """Write the held-back elementwise loops into the body, in the order they were opened."""
        groups, self._pending = self._pending, []
        for group in groups:
            self._lines += group.render(self._loop_vars)

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
        to ``compute`` (default: out's dtype), as NumPy's ufunc loops cast their operands; joined
        to the held-back loop when it has out's shape and no element order is at stake."""
        t = ctype(compute if compute is not None else out.dtype)
        ins = [v.broadcast(out.shape) for v in ins]
        math_call = bool(_VECTOR_MATH.search(expr([f"x{k}" for k in range(len(ins))])))
        group = None
        for g in reversed(self._pending):
            if g.admits(out, ins, math_call):
                group = g
                break
            if not g.independent(out, ins):
                break
        if group is None:
            if len(self._pending) >= self.MAX_PENDING:
                self._lines += self._pending.pop(0).render(self._loop_vars)
            group = _Fused(out.shape, f"e{self.n_fused}")
            self._pending.append(group)
            self.n_fused += 1
        group.add(out, expr, ins, t, math_call)
        if not self.fuse:
            self.flush()

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
        if kind in ("sum", "prod") and axes and keep and keep[-1] == len(x.shape) - 1 \
                and x.shape[-1] > 1:
            self._reduce_columns(kind, acc_t, out, x, keep, axes)
            return
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
        # (max/min: once NaN, stays NaN; a sum over the last axis vectorised, in another order)
        inner = _nest([x.shape[k] for k in axes], ri, step, simd=False)
        if kind == "sum" and axes and axes[-1] == len(x.shape) - 1:
            inner.insert(-2, "_Pragma(\"omp simd reduction(+:acc)\")")
        body = [f"{acc_t} acc = {init};", *inner,
                f"{out.at([v for v in oi])} = ({ctype(out.dtype)})acc;"]
        self.lines += _nest([x.shape[k] for k in keep], oi, "{ " + " ".join(body) + " }", simd=False)

    def _reduce_columns(self, kind: str, acc_t: str, out: Val, x: Val, keep: list[int],
                        axes: Sequence[int]) -> None:
        """A sum or product over ``axes`` that keep x's last axis: the reduced axes outside, a
        row of accumulators over the last axis inside (contiguous, vectorised), each output
        summed in the order the one-accumulator loop sums it."""
        n = x.shape[-1]
        acc = self.buffer(np.float64 if acc_t == "double" else np.int64, (n,))
        oi, ri, (j,) = self._loop_vars(len(keep) - 1), self._loop_vars(len(axes)), self._loop_vars(1)
        idx = [""] * len(x.shape)
        for k, v in zip(keep[:-1], oi):
            idx[k] = v
        for k, v in zip(axes, ri):
            idx[k] = v
        idx[-1] = j
        op, init = ("+=", "0") if kind == "sum" else ("*=", "1")
        row = f"for (npy_intp {j} = 0; {j} < {n}; {j}++) "
        block = [row + f"{acc.ptr}[{j}] = {init};",
                 *_nest([x.shape[k] for k in axes] + [n], [*ri, j],
                        f"{acc.ptr}[{j}] {op} ({acc_t}){x.at(idx)};"),
                 row + f"{out.at([*oi, j])} = ({ctype(out.dtype)}){acc.ptr}[{j}];"]
        if not oi:
            self.lines += block
            return
        loops = [f"for (npy_intp {v} = 0; {v} < {x.shape[k]}; {v}++)" for k, v in zip(keep[:-1], oi)]
        self.lines += [*loops[:-1], loops[-1] + " {", *["    " + ln for ln in block], "}"]

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


_BASE = re.compile(r"\b(?:b|o|in)\d+\b")
# glibc's math functions with vector versions (libmvec) and the helpers that call them: a loop
# of another form (flat or nested) may vectorise them otherwise, and their vector and scalar
# versions may round differently. The rest (arithmetic, casts, sqrt, fabs, floor) is exact in any
# loop form
_VECTOR_MATH = re.compile(r"\b(?:" + "|".join(MVEC + ("atan2", "pow", "hypot")) + r")f?\(|\blogaddexp_")


def _key(v: Val) -> tuple[str | None, str, tuple[int, ...]]:
    """What identifies a view's elements (two views with one key read the same element at
    each index of the loop)."""
    return v.ptr, str(v.off), v.strides


def _flat_ok(v: Val) -> bool:
    return v.lit is not None or v.contiguous() or not any(v.strides)


class _Fused:
    """Elementwise ops over one shape, in order, written as one loop: op k's value is the scalar
    ``{name}_k``, stored to its buffer and read from the scalar by the later ops of the loop.
    An op joins only when no element order is at stake: it reads a buffer an earlier op wrote
    only through that op's own view, and writes a buffer only through the one view the earlier
    ops read or wrote it through. Stores nobody else reads are dropped later (``drop_dead_stores``)."""

    def __init__(self, shape: tuple[int, ...], name: str) -> None:
        self.shape, self.name = shape, name
        self.ops: list[tuple[Val, Callable[[list[str]], str], list[Val | str], str]] = []
        self.written: dict[str, tuple] = {}  # buffer -> the key of the view written
        self.read: dict[str, set[tuple]] = {}  # buffer -> the keys of the views read
        self.scalar: dict[tuple, str] = {}  # key of a view written -> the scalar with its value
        self.flat = True
        self.math = False  # an op calls glibc's vector math: the loop's form is fixed

    def admits(self, out: Val, ins: Sequence[Val], math_call: bool) -> bool:
        """Whether the op (``math_call``: it calls glibc's vector math) may join."""
        if out.shape != self.shape:
            return False
        flat = out.contiguous() and all(_flat_ok(v) for v in ins)
        form = flat and self.flat  # the loop's form with it
        # (an op with vector math keeps its own loop's form, so its values are the unfused ones)
        return not (math_call and form != flat) and not (self.math and form != self.flat) \
            and self._ordered(out, ins)

    def _ordered(self, out: Val, ins: Sequence[Val]) -> bool:
        """No element order at stake: see the class's doc."""
        for v in ins:
            kv = _key(v)
            if v.lit is None and any(self.written.get(b, kv) != kv for b in _BASE.findall(v.ptr or "")):
                return False
        ko = _key(out)
        return all(self.written.get(b, ko) == ko and self.read.get(b, {ko}) <= {ko}
                   for b in _BASE.findall(out.ptr or ""))

    def independent(self, out: Val, ins: Sequence[Val]) -> bool:
        """The op may run before this loop's ops: it reads no buffer they write and writes none
        they read or write."""
        reads = {b for v in ins if v.lit is None for b in _BASE.findall(v.ptr or "")}
        writes = set(_BASE.findall(out.ptr or ""))
        return not (reads & self.written.keys()) and not (writes & (self.written.keys() | self.read.keys()))

    def add(self, out: Val, expr: Callable[[list[str]], str], ins: Sequence[Val], t: str,
            math_call: bool) -> None:
        self.math = self.math or math_call
        reads: list[Val | str] = []
        for v in ins:
            if v.lit is None:
                for b in _BASE.findall(v.ptr or ""):
                    self.read.setdefault(b, set()).add(_key(v))
            reads.append(self.scalar.get(_key(v), v) if v.lit is None else v)
        name = f"{self.name}_{len(self.ops)}"
        for b in _BASE.findall(out.ptr or ""):
            self.written[b] = _key(out)
        self.scalar[_key(out)] = name
        self.flat = self.flat and out.contiguous() and all(_flat_ok(v) for v in ins)
        self.ops.append((out, expr, reads, t))

    def render(self, loop_vars: Callable[[int], list[str]]) -> list[str]:
        """The loop: flat (one index over the elements, vectorised) where every view allows it,
        else nested over the shape; one op is written as the unfused program writes it.

        Every operand an op reads from memory is loaded into a local before its expression, so
        no expression (``where``'s ``c ? x : y``, maximum's, clip's) holds a load that runs
        under a condition: each element is read whatever the select picks, and the vectoriser
        sees a blend of loaded values, never a masked load. (GCC 12 with AVX-512 vectorised
        ``c ? x[i] : 0`` under ``omp simd``, with a broadcast ``c``, as a masked load from the
        wrong address: QR-DQN's gather backward trained off the replay.) The loaded values are
        the ones the expression would read, so results do not change."""
        if not self.shape:
            idx: list[str] = []
            at, store = (lambda v: v.at(idx)), (lambda v: v.at(idx))
        elif self.flat:
            (i,) = idx = loop_vars(1)
            at, store = (lambda v: _flat_at(v, i)), (lambda v: f"{v.ptr}[{v.off} + {i}]")
        else:
            idx = loop_vars(len(self.shape))
            at = store = lambda v: v.at(idx)
        stmts = []
        for k, (out, expr, reads, t) in enumerate(self.ops):
            c = ctype(out.dtype)
            operands = []
            for j, r in enumerate(reads):  # every operand from memory loaded first (see above)
                if isinstance(r, Val) and r.lit is None:
                    stmts.append(f"{t} {self.name}_{k}r{j} = ({t}){at(r)};")
                    operands.append(f"{self.name}_{k}r{j}")
                else:
                    operands.append(f"({t}){r if isinstance(r, str) else at(r)}")
            value = f"({c})({expr(operands)})"
            stmts.append(f"{store(out)} = {value};" if len(self.ops) == 1 else
                         f"{c} {self.name}_{k} = {value}; {store(out)} = {self.name}_{k};")
        body = " ".join(stmts) if len(stmts) == 1 else "{ " + " ".join(stmts) + " }"
        if not self.shape:
            return [body]
        if self.flat:
            return ["#pragma omp simd", f"for (npy_intp {i} = 0; {i} < {math.prod(self.shape)}; "
                    f"{i}++) {body}"]
        return _nest(self.shape, idx, body)


_STORE = re.compile(r" (b\d+)\[[^\]]*\] = e\d+_\d+;")


def drop_dead_stores(lines: list[str]) -> list[str]:
    """The lines without the fused loops' stores to buffers no other line or op reads: such a
    value lives in its scalar only (nothing of it is written to memory)."""
    count: dict[str, int] = {}
    for ln in lines:
        for name in _BUFFER.findall(ln):
            count[name] = count.get(name, 0) + 1

    def keep(m: re.Match) -> str:
        return "" if count[m.group(1)] == 1 else m.group(0)

    return [_STORE.sub(keep, ln) if " = e" in ln else ln for ln in lines]


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
        if m is not None and m.group(2) not in ranges:
            continue  # (a fused loop's value that lives in a scalar only)
        if m is None:
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
