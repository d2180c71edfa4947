"""CPU kernels: Range, Cumsum/Cumprod, TopKV2, ReverseV2 (numpy; numba for small-k TopK).

TF semantics kept here: Range's values are start + i * delta in the input dtype (integers
wrap); scans accumulate sequentially in the input dtype, float ones flushing subnormals; TopK orders equal values (+0 and -0
included) by lower index first. TopK on NaN or subnormal inputs (TF compares
subnormals as zero) and unsorted TopK with 1 < k < n go to
TensorFlow: its order there comes from a comparator/heap we do not reproduce.
"""
import numpy as np
from numba import njit

from kernels import kernel
from shape_fns.errors import UnimplementedError, Unsupported
from shape_fns.scan_ops import reverse_axes, scan_axis

from .scalar import ftz

NUM = ("float32", "float64", "int32", "int64")
ALL = NUM + ("bool",)
_SMALL_K = 16   # up to here, insertion into a sorted k-buffer; above, a stable argsort


@kernel("Range", dtypes=NUM, type_attr="Tidx")
def range_(inputs, outputs, attrs):
    out = outputs[0]
    if out.size == 0:
        return
    start, delta = inputs[0].reshape(-1)[0], inputs[2].reshape(-1)[0]
    out[...] = np.arange(out.size)  # i rounded (or wrapped) to the dtype, as static_cast<T>(i)
    with np.errstate(all="ignore"):
        np.multiply(out, delta, out=out)
        np.add(out, start, out=out)


@njit(cache=True, nogil=True, error_model="numpy")
def _float_scan(x, out, exclusive, reverse, prod, flush):
    """Sequential scan of x [outer, n, inner] along n. With `flush`, subnormals go to zero at
    every step as on TensorFlow's CPU threads (a flushed partial product stays zero)."""
    m, n, k = x.shape
    acc = np.empty(k, x.dtype)
    for o in range(m):
        acc[:] = 1 if prod else 0
        for t in range(n):
            i = n - 1 - t if reverse else t
            xr, orow = x[o, i], out[o, i]
            for j in range(k):
                v = ftz(xr[j]) if flush else xr[j]
                if exclusive:
                    orow[j] = acc[j]
                if flush:
                    acc[j] = ftz(acc[j] * v) if prod else ftz(acc[j] + v)
                else:
                    acc[j] = acc[j] * v if prod else acc[j] + v
                if not exclusive:
                    orow[j] = acc[j]


def _small(x):
    """Whether x holds values small enough for a sum of them to be subnormal."""
    a = np.abs(x)
    return bool(((a < 1e-10) & (a != 0)).any())


def _scan(inputs, outputs, attrs, ufunc, identity):
    x, out = inputs[0], outputs[0]
    axis = scan_axis(int(inputs[1]), x.ndim)
    if out.size == 0:
        return
    exclusive, reverse = attrs.get("exclusive", False), attrs.get("reverse", False)
    if x.dtype.kind == "f":
        s = x.shape
        shape3 = (int(np.prod(s[:axis])), s[axis], int(np.prod(s[axis + 1:])))
        prod = identity == 1  # products of normal numbers underflow: always flush those
        _float_scan(x.reshape(shape3), out.reshape(shape3), exclusive, reverse, prod,
                    prod or _small(x))
        return
    if reverse:
        flip = (slice(None),) * axis + (slice(None, None, -1),)
        x, out = x[flip], out[flip]
    pre = (slice(None),) * axis
    if exclusive:
        out[pre + (0,)] = identity
        if x.shape[axis] > 1:
            ufunc.accumulate(x[pre + (slice(0, -1),)], axis=axis, dtype=x.dtype,
                             out=out[pre + (slice(1, None),)])
    else:
        ufunc.accumulate(x, axis=axis, dtype=x.dtype, out=out)


@kernel("Cumsum", dtypes=NUM)
def cumsum(inputs, outputs, attrs):
    _scan(inputs, outputs, attrs, np.add, 0)


@kernel("Cumprod", dtypes=NUM)
def cumprod(inputs, outputs, attrs):
    _scan(inputs, outputs, attrs, np.multiply, 1)


@njit(cache=True, nogil=True)
def _top_k_small(x, vals, idx):
    """Per row, the k largest values in descending order, ties by lower index (insertion into
    a sorted buffer: a later element enters only if strictly greater than the buffer's last)."""
    m, n = x.shape
    k = vals.shape[1]
    for r in range(m):
        row, bv, bi = x[r], vals[r], idx[r]
        cnt = 0
        for c in range(n):
            v = row[c]
            if cnt == k:
                if not v > bv[k - 1]:
                    continue
                j = k - 1
            else:
                j = cnt
                cnt += 1
            while j > 0 and bv[j - 1] < v:
                bv[j] = bv[j - 1]
                bi[j] = bi[j - 1]
                j -= 1
            bv[j] = v
            bi[j] = c


def _top_k_large(x2, k):
    """Indices of each row's k largest values, descending, ties by lower index: partition,
    fix the boundary ties (the lowest indices equal to the k-th value win), sort the k."""
    m, n = x2.shape
    part = np.argpartition(x2, n - k, axis=1)[:, n - k:]
    kth = np.take_along_axis(x2, part, 1).min(axis=1)[:, None]
    above = x2 > kth
    tie = x2 == kth
    need = k - above.sum(axis=1, keepdims=True)
    sel = above | (tie & (np.cumsum(tie, axis=1) <= need))
    cand = np.nonzero(sel)[1].reshape(m, k)          # increasing index within each row
    vals = np.take_along_axis(x2, cand, 1)
    # Stable ascending sort of the reversed candidates, read backwards: descending values,
    # ties by lower index.
    order = np.argsort(vals[:, ::-1], axis=1, kind="stable")[:, ::-1]
    return np.take_along_axis(cand[:, ::-1], order, 1)


@kernel("TopKV2", dtypes=NUM)
def top_k(inputs, outputs, attrs):
    x, vals, idx = inputs[0], outputs[0], outputs[1]
    k, n = vals.shape[-1], x.shape[-1]
    if x.dtype.kind == "f" and x.size:
        a = np.abs(x)
        if ((a < np.finfo(x.dtype).tiny) & (a != 0)).any() or np.isnan(a.max()):
            raise Unsupported("value:nan_or_subnormal")
    if not attrs.get("sorted", True) and 1 < k < n:
        raise Unsupported("attr:sorted=False")
    if vals.size == 0:
        return
    x2, v2 = x.reshape(-1, n), vals.reshape(-1, k)
    if k <= _SMALL_K:
        i2 = np.empty(v2.shape, np.int64)
        _top_k_small(x2, v2, i2)
    else:
        i2 = _top_k_large(x2, k)
        v2[...] = np.take_along_axis(x2, i2, 1)
    idx.reshape(-1, k)[...] = i2


@kernel("ReverseV2", dtypes=ALL)
def reverse(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    axes = reverse_axes(inputs[1].tolist(), x.ndim)
    if x.ndim > 8:
        raise UnimplementedError("reverse is not implemented for tensors of rank > 8.")
    sl = [slice(None)] * x.ndim
    for a in axes:
        sl[a] = slice(None, None, -1)
    np.copyto(out, x[tuple(sl)])
