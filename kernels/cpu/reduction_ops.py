"""CPU kernels: reduction ops (Sum, Mean, Max, Min, Prod, All, Any, ArgMax, ArgMin).

numpy ufunc reductions with dtype=/out= do most of the work (they keep TensorFlow's dtypes and
its NaN propagation); full float sums over large tensors use a parallel blocked numba sum;
ArgMax/ArgMin are numba loops because TensorFlow's tie and NaN rules differ from numpy's.
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from shape_fns.errors import InvalidArgumentError

NUM = ("float32", "float64", "int32", "int64")
PARALLEL_MIN = 1 << 18    # elements; below this one thread sums faster than two
_BLOCK = 4096             # elements per partial sum: keeps the float error near pairwise


def _axes(x, axis):
    """Sorted reduced axes of x (the shape fn has range-checked them); duplicates rejected."""
    rank = x.ndim
    if axis.ndim == 0:
        a = int(axis)
        return (a + rank if a < 0 else a,)
    axes = [a + rank if a < 0 else a for a in axis.reshape(-1).tolist()]
    if len(set(axes)) != len(axes):
        dup = next(a for a in axes if axes.count(a) > 1)
        raise InvalidArgumentError(
            f"Invalid reduction arguments: Axes contains duplicate dimension: {dup}")
    return tuple(sorted(axes))


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


@njit(cache=True, nogil=True, parallel=True, fastmath={"reassoc"})
def _psum(x, nblocks, block):
    # reassoc lets LLVM vectorise each block's loop; NaN/Inf still propagate (no nnan/ninf).
    part = np.zeros(nblocks, x.dtype)
    n = x.size
    for b in prange(nblocks):
        s = x.dtype.type(0)
        for i in range(b * block, min(n, (b + 1) * block)):
            s += x[i]
        part[b] = s
    t = x.dtype.type(0)
    for b in range(nblocks):
        t += part[b]
    return t


def _sum_into(x, axes, out, keep):
    """out = sum of x over axes in out.dtype (integers wrap like TensorFlow's)."""
    if x.dtype.kind == "f" and x.size >= PARALLEL_MIN and len(axes) == x.ndim:
        out[...] = _psum(x.reshape(-1), -(-x.size // _BLOCK), _BLOCK)
    else:
        np.add.reduce(x, axis=axes, dtype=out.dtype, out=out, keepdims=keep)


@kernel("Sum", dtypes=NUM)
def sum_(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(x, inputs[1])
    if out.size:
        with np.errstate(all="ignore"):
            _sum_into(x, axes, out, attrs["keep_dims"])


@kernel("Mean", dtypes=NUM)
def mean(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = _axes(x, inputs[1])
    if not out.size:
        return
    keep = attrs["keep_dims"]
    n = _count(x, axes)
    if x.dtype.kind == "f":
        with np.errstate(all="ignore"):  # an empty reduction is 0/0 = NaN, as in TensorFlow
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
        with np.errstate(all="ignore"):
            np.multiply.reduce(x, axis=axes, dtype=out.dtype, out=out, keepdims=attrs["keep_dims"])


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
# only NaN / -inf (+inf for ArgMin) answers 0.

@njit(cache=True, nogil=True)
def _argmax(x, out, start):
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
def _argmin(x, out, start):
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


def _arg(loop, start):
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
        outer = 1
        for s in x.shape[:d]:
            outer *= s
        x3 = x.reshape(outer, x.shape[d], -1)
        loop(x3, out.reshape(outer, x3.shape[2]), start(x.dtype))
    run.__qualname__ = loop.__name__
    return run


def _finite_lowest(dt):
    return np.finfo(dt).min if dt.kind == "f" else np.iinfo(dt).min


def _finite_highest(dt):
    return np.finfo(dt).max if dt.kind == "f" else np.iinfo(dt).max


kernel("ArgMax", dtypes=NUM)(_arg(_argmax, lambda dt: dt.type(_finite_lowest(dt))))
kernel("ArgMin", dtypes=NUM)(_arg(_argmin, lambda dt: dt.type(_finite_highest(dt))))
