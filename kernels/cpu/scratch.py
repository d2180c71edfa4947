"""Per-thread reused work buffers (im2col columns, Winograd tiles): a fresh multi-MB allocation
costs a page fault per 4 KiB on first write, which was a third of a ResNet-sized convolution."""
import threading

import numpy as np

_tls = threading.local()


def scratch(shape, dtype, slot):
    """An uninitialised `shape` array of `dtype` in this thread's buffer `slot`, valid until the
    thread asks for the same slot again (one buffer per slot and thread, grown as needed)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    buf = bufs.get(slot)
    if buf is None or buf.size < n:
        buf = bufs[slot] = np.empty(max(n, 1 << 20), np.uint8)
    return buf[:n].view(dtype).reshape(shape)
