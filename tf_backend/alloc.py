"""Output allocation: 64-byte aligned so TensorFlow can take the buffer without a copy."""
import numpy as np

ALIGN = 64
SMALL_BYTES = 2048   # below this TensorFlow's copy is cheaper than aligning


def empty(shape, dtype):
    dtype = np.dtype(dtype)
    n = dtype.itemsize
    for d in shape:
        n *= d
    if n < SMALL_BYTES:
        return np.empty(shape, dtype)
    buf = np.empty(n + ALIGN, np.uint8)
    off = -buf.ctypes.data % ALIGN
    return buf[off:off + n].view(dtype).reshape(shape)


def plan(specs):
    """Precomputed (shape, dtype, aligned?) per output spec, for repeated allocation."""
    out = []
    for sp in specs:
        n = sp.dtype.itemsize
        for d in sp.shape:
            n *= d
        out.append((sp.shape, sp.dtype, n >= SMALL_BYTES))
    return tuple(out)


def empty_planned(p):
    return [empty(shape, dt) if big else np.empty(shape, dt) for shape, dt, big in p]
