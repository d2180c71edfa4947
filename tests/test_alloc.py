"""The output buffer pool: a big buffer is reused only when nothing references its memory."""
import numpy as np

from tf_backend import alloc


def _base(a):
    return id(a.base)


def test_pool_reuses_only_unreferenced_buffers():
    a = alloc.empty((700, 700), np.float32)
    assert a.ctypes.data % alloc.ALIGN == 0 and a.flags.writeable
    pid = _base(a)
    b = alloc.empty((700, 700), np.float32)
    assert not np.shares_memory(a, b)
    del a
    c = alloc.empty((700, 700), np.float32)           # a's buffer is free again
    assert _base(c) == pid
    view = c[3:5]
    del c
    d = alloc.empty((700, 700), np.float32)           # a slice still uses it
    assert _base(d) != pid and not np.shares_memory(d, view)
    del view
    e = alloc.empty((690, 705), np.float32)           # same size class, other shape
    assert _base(e) == pid and e.shape == (690, 705)


def test_pool_keeps_buffers_behind_tensorflow_tensors(tf):
    from tf_backend import tf_adapter as tfa
    tfa.ctx().ensure_initialized()
    a = alloc.empty((512, 512), np.float32)
    a[...] = 1.0
    pid = _base(a)
    t = tfa.make_tensor(a)                             # zero-copy: TensorFlow holds `a`
    del a
    alias = tf.reshape(t, [-1])                        # a TensorFlow alias of the same memory
    del t
    b = alloc.empty((512, 512), np.float32)
    b[...] = 2.0
    assert _base(b) != pid
    assert float(tf.reduce_sum(alias)) == 512 * 512


def test_pool_is_bounded_and_trims(monkeypatch):
    monkeypatch.setattr(alloc, "POOL_MAX", 0)
    alloc.trim()
    keep = [alloc.empty((600, 600), np.float32) for _ in range(3)]
    assert alloc.pool_stats() == (0, 0) and len(keep) == 3
