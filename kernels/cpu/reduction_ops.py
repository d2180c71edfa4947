"""CPU kernels: reduction ops (Sum, Mean, Max, Min, Prod, All, Any, ArgMax, ArgMin).

numpy ufunc reductions with dtype=/out= do most of the work (they keep TensorFlow's dtypes and
its NaN propagation); sums over one run of consecutive axes use blocked, vectorised numba loops
(2-4x numpy's, and more accurate than its sequential column sums). ArgMax/ArgMin are numba
because TensorFlow's tie and NaN rules differ from numpy's.
Everything is single-threaded: on a loaded 2-core host a parallel region that waits for a
descheduled thread costs milliseconds.
"""
import numpy as np
from numba import njit

from kernels import kernel
from shape_fns.errors import InvalidArgumentError

try:  # np.errstate costs 1-2 us a call; setting numpy's error context variable directly, ~0.2
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _IGNORE = _make_extobj(all="ignore")
except Exception:  # pragma: no cover - another numpy layout
    _extobj_contextvar = None


def quiet(fn, *args, **kw):
    """fn(*args, **kw) with numpy's floating-point warnings off (TensorFlow returns inf/NaN)."""
    if _extobj_contextvar is None:
        with np.errstate(all="ignore"):
            return fn(*args, **kw)
    tok = _extobj_contextvar.set(_IGNORE)
    try:
        return fn(*args, **kw)
    finally:
        _extobj_contextvar.reset(tok)


NUM = ("float32", "float64", "int32", "int64")
_BLOCK = 4096     # elements per partial float sum: keeps the rounding error near pairwise
_SCAN = 256       # elements per equality probe in the ArgMax/ArgMin search
_FM = {"reassoc", "nsz"}   # lets LLVM vectorise a sum; no nnan/ninf, so NaN and Inf propagate
_axes_cache = {}


def _axes(x, axis):
    """Sorted reduced axes of x (the shape fn has range-checked them); duplicates rejected."""
    key = (x.ndim, int(axis) if axis.ndim == 0 else tuple(axis.reshape(-1).tolist()))
    try:
        return _axes_cache[key]
    except KeyError:
        pass
    rank = x.ndim
    axes = [a + rank if a < 0 else a for a in (key[1] if axis.ndim else (key[1],))]
    if len(set(axes)) != len(axes):
        dup = next(a for a in axes if axes.count(a) > 1)
        raise InvalidArgumentError(
            f"Invalid reduction arguments: Axes contains duplicate dimension: {dup}")
    if len(_axes_cache) > 4096:
        _axes_cache.clear()
    res = _axes_cache[key] = tuple(sorted(axes))
    return res


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


@njit(cache=True, nogil=True, fastmath=_FM)
def _block_sum(x, zero):
    s = zero
    for i in range(x.size):
        s += x[i]
    return s


@njit(cache=True, nogil=True, fastmath=_FM)
def _row_sums(x2, out, zero):
    # x2 (rows, n) -> out (rows,): sums of _BLOCK elements (vectorised) added in order.
    n = x2.shape[1]
    for r in range(x2.shape[0]):
        row = x2[r]
        t = zero
        for b in range(0, n, _BLOCK):
            t += _block_sum(row[b:b + _BLOCK], zero)
        out[r] = t


@njit(cache=True, nogil=True)
def _add_row(acc, row):
    for j in range(acc.size):
        acc[j] += row[j]


_ROWS = 64       # rows per partial column sum; _ROWS partials per block of _ROWS**2 rows


@njit(cache=True, nogil=True)
def _col_sums(x3, out2, zero):
    # x3 (outer, n, inner) -> out2 (outer, inner): rows added in order in three levels (64 rows
    # per partial, 64 partials per block, blocks in order), so the rounding error grows like
    # 64 + 64 + n/4096 additions rather than n (a BatchNorm mean over 2x56x56 rows was 2.5x
    # further from float64 than TensorFlow's with 4096-row partials).
    n = x3.shape[1]
    part = np.empty(x3.shape[2], x3.dtype)
    mid = np.empty(x3.shape[2], x3.dtype)
    for o in range(x3.shape[0]):
        acc = out2[o]
        acc[:] = zero
        for b in range(0, n, _ROWS * _ROWS):
            mid[:] = zero
            for c in range(b, min(b + _ROWS * _ROWS, n), _ROWS):
                part[:] = zero
                for i in range(c, min(c + _ROWS, n)):
                    _add_row(part, x3[o, i])
                _add_row(mid, part)
            _add_row(acc, mid)


_ZERO = {np.dtype(t): np.dtype(t).type(0) for t in NUM}


def _sum_into(x, axes, out, keep):
    """out = sum of x over axes in out.dtype (integers wrap like TensorFlow's)."""
    k = len(axes)
    if x.size and k and axes[-1] - axes[0] == k - 1:
        # One run of consecutive axes: x is (outer, n, inner) with no copy.
        inner = 1
        for d in x.shape[axes[-1] + 1:]:
            inner *= d
        outer = out.size // inner
        if inner == 1:
            _row_sums(x.reshape(outer, -1), out.reshape(-1), _ZERO[x.dtype])
        else:
            _col_sums(x.reshape(outer, -1, inner), out.reshape(outer, inner), _ZERO[x.dtype])
    elif x.dtype.kind == "f":
        quiet(np.add.reduce, x, axis=axes, out=out, keepdims=keep)
    else:
        np.add.reduce(x, axis=axes, dtype=out.dtype, out=out, keepdims=keep)


HALF = ("float16", "bfloat16")   # summed in float32 (TensorFlow's bfloat16 reducers do too)


@kernel("Sum", dtypes=NUM + HALF)
def sum_(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(x, inputs[1])
    if out.size:
        if x.dtype.itemsize == 2:
            tmp = np.empty(out.shape, np.float32)
            _sum_into(x.astype(np.float32), axes, tmp, attrs["keep_dims"])
            quiet(np.copyto, out, tmp, casting="unsafe")
        else:
            _sum_into(x, axes, out, attrs["keep_dims"])


@kernel("Mean", dtypes=NUM + HALF)
def mean(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(x, inputs[1])
    if not out.size:
        return
    if x.dtype.itemsize == 2:
        # bfloat16: the float32 mean rounded once (TensorFlow reduces bfloat16 in float32);
        # float16: TensorFlow's sum is a float16 (Inf past 65504) divided by the count
        tmp = np.empty(out.shape, np.float32)
        n = _count(x, axes)
        if n == 0:
            out.fill(np.nan)
            return
        _sum_into(x.astype(np.float32), axes, tmp, attrs["keep_dims"])
        if x.dtype == np.float16:
            tmp = quiet(np.asarray, tmp, np.float16).astype(np.float32)
        quiet(np.divide, tmp, np.float32(n), out=tmp)
        quiet(np.copyto, out, tmp, casting="unsafe")
        return
    keep = attrs["keep_dims"]
    n = _count(x, axes)
    if x.dtype.kind == "f":
        if n == 0:
            out.fill(np.nan)  # TensorFlow's 0/0
        else:
            _sum_into(x, axes, out, keep)
            np.divide(out, out.dtype.type(n), out=out)
        return
    if n == 0:
        out.fill(0)
        return
    # TensorFlow sums int32 in int64 and int64 in int64 (wrapping), then divides truncating.
    s = np.add.reduce(x, axis=axes, dtype=np.int64, keepdims=keep)
    q = s // n
    q += (q * n != s) & (s < 0)
    np.copyto(out, q, casting="unsafe")


def _minmax(ufunc, identity):
    def run(inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(x, inputs[1])
        if not out.size:
            return
        if not x.size:
            out.fill(identity(x.dtype))
            return
        ufunc.reduce(x, axis=axes, out=out, keepdims=attrs["keep_dims"])
    run.__qualname__ = ufunc.__name__
    return run


def _lowest(dt):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _highest(dt):
    return np.inf if dt.kind == "f" else np.iinfo(dt).max


# np.maximum/np.minimum propagate NaN, as TensorFlow's Max/Min do.
kernel("Max", dtypes=NUM)(_minmax(np.maximum, _lowest))
kernel("Min", dtypes=NUM)(_minmax(np.minimum, _highest))


@kernel("Prod", dtypes=NUM)
def prod(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(x, inputs[1])
    if out.size:
        quiet(np.multiply.reduce, x, axis=axes, dtype=out.dtype, out=out,
              keepdims=attrs["keep_dims"])


def _logical(ufunc):
    def run(inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        axes = _axes(x, inputs[1])
        if out.size:
            ufunc.reduce(x, axis=axes, out=out, keepdims=attrs["keep_dims"])
    run.__qualname__ = ufunc.__name__
    return run


kernel("All", dtypes=("bool",))(_logical(np.logical_and))
kernel("Any", dtypes=("bool",))(_logical(np.logical_or))


# ArgMax/ArgMin follow Eigen's scan: start at (index 0, lowest finite value) and move only on a
# strictly greater (smaller) value. So ties keep the first index, NaN never wins, and a slice of
# only NaN / -inf (+inf for ArgMin) answers 0. Equivalently: the first index of the NaN-ignoring
# extreme M, or 0 when M does not beat the start value; for integers that is numpy's argmax.

@njit(cache=True, nogil=True)
def _argmax_strided(x, out, start):
    # x (outer, n, inner) with inner > 1: a vectorisable running best per inner column.
    outer, n, inner = x.shape
    best = np.empty(inner, x.dtype)
    for o in range(outer):
        best[:] = start
        out[o, :] = 0
        for i in range(n):
            for j in range(inner):
                v = x[o, i, j]
                if v > best[j]:
                    best[j] = v
                    out[o, j] = i


@njit(cache=True, nogil=True)
def _argmin_strided(x, out, start):
    outer, n, inner = x.shape
    best = np.empty(inner, x.dtype)
    for o in range(outer):
        best[:] = start
        out[o, :] = 0
        for i in range(n):
            for j in range(inner):
                v = x[o, i, j]
                if v < best[j]:
                    best[j] = v
                    out[o, j] = i


@njit(cache=True, nogil=True)
def _count_eq(x, v):
    c = 0
    for i in range(x.size):
        c += x[i] == v
    return c


@njit(cache=True, nogil=True)
def _first_eq_rows(x2, m, out, start, sign):
    # Per row: first index equal to m[r] (the NaN-ignoring extreme), probing in vectorised blocks;
    # 0 when m[r] is NaN (all NaN) or does not strictly beat `start`.
    n = x2.shape[1]
    for r in range(x2.shape[0]):
        v = m[r]
        out[r] = 0
        if not (sign * v > sign * start):
            continue
        row = x2[r]
        for b in range(0, n, _SCAN):
            if _count_eq(row[b:b + _SCAN], v):
                i = b
                while row[i] != v:
                    i += 1
                out[r] = i
                break


def _arg(strided, extreme, np_arg, sign):
    name = strided.__name__.split("_")[1]

    def run(inputs, outputs, attrs):
        x, out = inputs[0], outputs[0]
        rank = x.ndim
        d = int(inputs[1])
        d = d + rank if d < 0 else d
        if x.shape[d] == 0:
            if out.size:
                raise InvalidArgumentError(
                    f"Reduction axis {d} is empty in shape [{','.join(map(str, x.shape))}]")
            return
        if not out.size:
            return
        n = x.shape[d]
        inner = 1
        for s in x.shape[d + 1:]:
            inner *= s
        outer = out.size // inner
        start = x.dtype.type(_finite_lowest(x.dtype) if sign > 0 else _finite_highest(x.dtype))
        if inner > 1:
            strided(x.reshape(outer, n, inner), out.reshape(outer, inner), start)
            return
        x2 = x.reshape(outer, n)
        if x.dtype.kind == "f":
            m = extreme.reduce(x2, axis=1)
            _first_eq_rows(x2, m, out.reshape(-1), start, x.dtype.type(sign))
        elif out.dtype == np.intp:
            np_arg(x2, axis=1, out=out.reshape(-1))
        else:
            out.reshape(-1)[:] = np_arg(x2, axis=1)
    run.__qualname__ = name
    return run


def _finite_lowest(dt):
    return np.finfo(dt).min if dt.kind == "f" else np.iinfo(dt).min


def _finite_highest(dt):
    return np.finfo(dt).max if dt.kind == "f" else np.iinfo(dt).max


# np.fmax/np.fmin skip NaN (NaN only when a whole row is NaN).
kernel("ArgMax", dtypes=NUM)(_arg(_argmax_strided, np.fmax, np.argmax, 1))
kernel("ArgMin", dtypes=NUM)(_arg(_argmin_strided, np.fmin, np.argmin, -1))
