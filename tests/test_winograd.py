"""Winograd F(2x2,3x3) (kernels/cpu/winograd.py) against the direct im2col + GEMM convolution and a
float64 result, without TensorFlow (the op table checks it against stock)."""
import numpy as np
import pytest

from kernels.cpu import conv_ops, filter_cache, winograd
from shape_fns.conv_ops import conv_geometry


def _geom(xs, fs, padding="SAME", pads=()):
    attrs = {"strides": [1, 1, 1, 1], "padding": padding, "dilations": [1, 1, 1, 1],
             "data_format": "NHWC", "explicit_paddings": list(pads)}
    return conv_geometry(xs, fs, attrs, "Conv2D", np.float32)[0]


def _direct(x, f, g, monkeypatch):
    out = np.empty((x.shape[0], g.oh, g.ow, f.shape[3]), x.dtype)
    with monkeypatch.context() as m:
        m.setattr(winograd, "TILES_MIN", 1 << 62)
        conv_ops.conv_nhwc(x, f, out, g)
    return out


SHAPES = [((1, 56, 56, 64), (3, 3, 64, 64), "SAME", ()),
          ((2, 17, 23, 16), (3, 3, 16, 24), "VALID", ()),
          ((3, 15, 11, 17), (3, 3, 17, 16), "SAME", ()),
          ((1, 25, 30, 20), (3, 3, 20, 16), "EXPLICIT", (0, 0, 2, 0, 1, 3, 0, 0))]


@pytest.mark.parametrize("xs,fs,padding,pads", SHAPES)
def test_matches_direct_and_float64(xs, fs, padding, pads, monkeypatch):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, xs).astype(np.float32)
    f = rng.uniform(-1, 1, fs).astype(np.float32)
    g = _geom(xs, fs, padding, pads)
    assert winograd.applies(x, f, g)
    x0, f0 = x.copy(), f.copy()
    out = np.empty((xs[0], g.oh, g.ow, fs[3]), np.float32)
    conv_ops.conv_nhwc(x, f, out, g)
    assert np.array_equal(x, x0) and np.array_equal(f, f0), "inputs were written"
    exact = np.empty(out.shape, np.float64)
    conv_ops.conv_nhwc(x.astype(np.float64), f.astype(np.float64), exact, g)
    direct = _direct(x, f, g, monkeypatch)
    err_w, err_d = np.abs(out - exact).max(), np.abs(direct - exact).max()
    # the direct sum's own error sets the scale: Winograd's transforms add a small factor
    assert err_w <= 2.5 * err_d + 1e-6, (err_w, err_d)


def test_chunks_give_the_same_result(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (4, 20, 20, 16)).astype(np.float32)
    f = rng.uniform(-1, 1, (3, 3, 16, 32)).astype(np.float32)
    g = _geom(x.shape, f.shape)
    whole = np.empty((4, 20, 20, 32), np.float32)
    assert winograd.conv3x3(x, f, whole, g)
    monkeypatch.setattr(winograd, "CHUNK_BYTES", 1)        # one tile row per chunk
    monkeypatch.setattr(winograd, "PARALLEL_MIN", 1)       # and the parallel transforms
    rows = np.empty_like(whole)
    assert winograd.conv3x3(x, f, rows, g)
    # bit-equal where OpenBLAS runs one kernel for every chunk's products (AVX-512 machines);
    # its AVX2 build takes a small-matrix kernel for the short chunks, which rounds otherwise
    np.testing.assert_allclose(whole, rows, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 3e38])
def test_nonfinite_goes_the_direct_way(bad, monkeypatch):
    """An Inf/NaN (or an input that overflows in the transforms) would leak into the whole 4x4
    patch; the result must be the direct convolution's, bit for bit."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 24, 24, 16)).astype(np.float32)
    f = rng.uniform(-1, 1, (3, 3, 16, 16)).astype(np.float32)
    x[0, 9, 9, 3] = bad
    if bad == 3e38:
        x[0, 11, 9, 3] = -3e38        # d1 - d3 overflows in the input transform
    g = _geom(x.shape, f.shape)
    assert winograd.applies(x, f, g)
    probe = np.empty((1, 24, 24, 16), np.float32)
    out = np.empty_like(probe)
    with np.errstate(all="ignore"):      # as the Conv2D kernel calls it
        assert not winograd.conv3x3(x, f, probe, g)
        conv_ops.conv_nhwc(x, f, out, g)
        direct = _direct(x, f, g, monkeypatch)
    assert np.array_equal(out, direct, equal_nan=True)


def test_not_used_where_it_does_not_pay():
    rng = np.random.default_rng(0)

    def case(xs, fs, **kw):
        attrs = {"strides": kw.get("strides", [1, 1, 1, 1]), "padding": "SAME",
                 "dilations": kw.get("dil", [1, 1, 1, 1]), "data_format": "NHWC",
                 "explicit_paddings": []}
        g = conv_geometry(xs, fs, attrs, "Conv2D", np.float32)[0]
        dt = kw.get("dt", np.float32)
        return winograd.applies(np.zeros(xs, dt), np.zeros(fs, dt), g)

    assert case((1, 56, 56, 64), (3, 3, 64, 64))
    assert not case((1, 56, 56, 64), (3, 3, 64, 64), dt=np.float64)
    assert not case((1, 56, 56, 64), (3, 3, 64, 64), strides=[1, 2, 2, 1])
    assert not case((1, 56, 56, 64), (3, 3, 64, 64), dil=[1, 2, 2, 1])
    assert not case((1, 56, 56, 64), (5, 5, 64, 64))
    assert not case((1, 56, 56, 3), (3, 3, 3, 64))          # narrow K
    assert case((1, 14, 14, 256), (3, 3, 256, 256))         # 49 tiles
    assert not case((1, 7, 7, 512), (3, 3, 512, 512))       # 16 tiles: weight-bound
    del rng


def _foreign(a):
    """A read-only array over memory numpy does not own, as a view of a TensorFlow tensor is."""
    v = np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)
    assert not v.flags.writeable and isinstance(v.base.base, bytes)
    return v


def test_transformed_filters_cached_only_for_foreign_read_only_memory(monkeypatch):
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (1, 20, 20, 16)).astype(np.float32)
    f = rng.uniform(-1, 1, (3, 3, 16, 16)).astype(np.float32)
    g = _geom(x.shape, f.shape)
    filter_cache.clear()
    calls = []
    real = winograd._filter
    monkeypatch.setattr(winograd, "_filter", lambda a, u: (calls.append(1), real(a, u)))
    out = np.empty((1, 20, 20, 16), np.float32)
    ref = np.empty_like(out)
    assert winograd.conv3x3(x, f, ref, g)
    for arr in (f, f.view()):                    # ours: transformed every call
        n = len(calls)
        assert winograd.conv3x3(x, arr, out, g, cache=True) and len(calls) == n + 1
    ro = f.view()
    ro.flags.writeable = False                   # a read-only view of ours: still every call
    n = len(calls)
    assert winograd.conv3x3(x, ro, out, g, cache=True) and len(calls) == n + 1
    tf_like = _foreign(f)
    n = len(calls)
    for _ in range(2):                           # not asked to cache: every call
        assert winograd.conv3x3(x, tf_like, out, g)
    assert len(calls) == n + 2 and not filter_cache.entries()
    n = len(calls)
    for _ in range(3):
        assert winograd.conv3x3(x, tf_like, out, g, cache=True)
        assert np.array_equal(out, ref)
    assert len(calls) == n + 1                   # cached after the first
    other = _foreign(f * 2)                      # another buffer: its own transform
    assert winograd.conv3x3(x, other, out, g, cache=True) and len(calls) == n + 2
    assert np.allclose(out, 2 * ref, rtol=1e-5, atol=1e-5)
    size = 16 * f.shape[2] * f.shape[3] * 4
    monkeypatch.setattr(filter_cache, "CACHE_BYTES", 4 * size)   # room for four entries
    for k in (4, 8, 16):                                         # a fifth evicts the oldest
        assert winograd.conv3x3(x, _foreign(f * k), out, g, cache=True)
    assert filter_cache.entries() == 4
    assert filter_cache.stats()["events"]["winograd:evicted"] == 1
    monkeypatch.setattr(filter_cache, "CACHE_BYTES", 4 * size - 1)   # too large to keep at all
    assert winograd.conv3x3(x, _foreign(f * 32), out, g, cache=True)
    assert np.allclose(out, 32 * ref, rtol=1e-5, atol=1e-5)   # powers of two: exact scaling
    assert filter_cache.entries() == 4 and filter_cache.stats()["events"]["winograd:oversized"]
    filter_cache.clear()
