"""CPU kernels: index-driven array ops (Slice, Pad/PadV2, Tile, GatherV2, UnsortedSegmentSum)."""
import numba
import numpy as np

from kernels import kernel
from shape_fns.array_index_ops import gather_axes
from shape_fns.errors import InvalidArgumentError, Unsupported

_copyto = np.copyto
_BIG = 1 << 16   # elements; above this, avoid numpy's buffered/redundant paths
_UNSIGNED = {4: np.uint32, 8: np.uint64}


@kernel("Slice")
def slice_(inputs, outputs, attrs):
    out = outputs[0]
    idx = tuple(slice(b, b + n) for b, n in zip(inputs[1].tolist(), out.shape))
    _copyto(out, inputs[0][idx])


@kernel("Pad", "PadV2")
def pad(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    c = inputs[2][()] if len(inputs) == 3 else 0
    pads = inputs[1].tolist()
    inner = tuple(slice(lo, lo + d) for (lo, _), d in zip(pads, x.shape))
    if out.size <= _BIG:
        out.fill(c)
    else:  # fill only the borders
        for i, (lo, hi) in enumerate(pads):
            pre = (slice(None),) * i
            out[pre + (slice(0, lo),)] = c
            out[pre + (slice(lo + x.shape[i], None),)] = c
    out[inner] = x


@kernel("Tile")
def tile(inputs, outputs, attrs):
    x = inputs[0]
    if x.dtype == np.uint16:  # stock TensorFlow has no CPU Tile for uint16: let it raise
        raise Unsupported("dtype:uint16")
    split, src = [], []
    for k, d in zip(inputs[1].tolist(), x.shape):
        split += (k, d)
        src += (1, d)
    _copyto(outputs[0].reshape(split), x.reshape(src))


def _bad_index(idx, n, what="indices"):
    flat = idx.reshape(-1)
    i = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
    pos = ",".join(str(int(p)) for p in np.unravel_index(i, idx.shape))
    return InvalidArgumentError(f"{what}[{pos}] = {flat[i]} is not in [0, {n})")


@kernel("GatherV2")
def gather_v2(inputs, outputs, attrs):
    p, idx, out = inputs[0], inputs[1], outputs[0]
    axis, bd = gather_axes(p.ndim, idx.ndim, int(inputs[2]), attrs.get("batch_dims", 0))
    n = p.shape[axis]
    if bd == 0 and idx.dtype == np.int32 and out.size <= _BIG:
        # Negative int32 indices read as uint32 are out of range, so one call checks both ends.
        try:
            p.take(idx.view(np.uint32), axis, out, "raise")
        except IndexError:
            raise _bad_index(idx, n) from None
        return
    # Read as unsigned, negative indices are huge: one max() checks both ends.
    if idx.size and idx.view(_UNSIGNED[idx.dtype.itemsize]).max() >= n:
        raise _bad_index(idx, n)
    if out.size == 0:
        return
    if bd == 0:
        p.take(idx, axis, out, "clip")
        return
    ps = p.shape
    b = int(np.prod(ps[:bd]))
    a = int(np.prod(ps[bd:axis]))
    c = int(np.prod(ps[axis + 1:]))
    ir = idx.reshape(b, -1)
    pr = p.reshape(b, a, n, c)
    _copyto(out.reshape(b, a, ir.shape[1], c),
            pr[np.arange(b)[:, None, None], np.arange(a)[None, :, None], ir[:, None, :]])


@numba.njit(cache=True, nogil=True)
def _segment_sum(data, ids, out):
    """out[ids[i]] += data[i] in input order (as TensorFlow's CPU kernel); negative ids are
    dropped. Returns the position of the first id >= num_segments, or -1."""
    m = out.shape[0]
    for i in range(ids.shape[0]):
        j = ids[i]
        if j < 0:
            continue
        if j >= m:
            return i
        for k in range(data.shape[1]):
            out[j, k] += data[i, k]
    return -1


@kernel("UnsortedSegmentSum", dtypes=("float32", "float64", "int32", "int64", "int8", "int16",
                                      "uint8", "uint16", "uint32", "uint64"))
def unsorted_segment_sum(inputs, outputs, attrs):
    data, ids, out = inputs[0], inputs[1], outputs[0]
    m = out.shape[0]
    out.fill(0)
    flat = ids.reshape(-1)
    if flat.size == 0:
        return
    inner = out.size // m if m else int(np.prod(data.shape[ids.ndim:]))
    bad = _segment_sum(data.reshape(flat.size, inner), flat, out.reshape(m, inner))
    if bad >= 0:
        raise InvalidArgumentError(
            f"segment_ids[{bad}] = {flat[bad]} is out of range [0, {m})")
