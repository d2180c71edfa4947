"""float32 convolutions on the segment tiles (kernels/cpu/bf16_gemm.py's FMA form, AVX-512F),
through the Conv2D/Conv2DBackpropInput/Conv2DBackpropFilter kernels (conv_ops.py), against
stock TensorFlow: values within float32 summation-order differences, the same NaN/Inf
positions, non-finite operands that meet zero padding left to another kernel, and the bits
independent of the thread count."""
import numba
import numpy as np
import pytest

from kernels.cpu import bf16_gemm, conv_ops
from shape_fns import Unsupported
from shape_fns.host import cpu_flags

pytestmark = pytest.mark.skipif(
    "avx512f" not in cpu_flags(),
    reason="this CPU has no AVX-512F: float32 convolutions run as im2col + BLAS here")


def _attrs(stride, pad, dil=1):
    return {"strides": [1, stride, stride, 1], "padding": pad, "data_format": "NHWC",
            "dilations": [1, dil, dil, 1], "explicit_paddings": []}


def _close(out, ref, k):
    """Within float32 rounding of a k-term sum (the order differs from oneDNN's)."""
    nan = np.isnan(ref)
    assert (np.isnan(out) == nan).all()
    fin = np.isfinite(ref)
    assert (out[~fin & ~nan] == ref[~fin & ~nan]).all()
    scale = np.abs(ref[fin]).max() if fin.any() else 1.0
    assert np.abs(out[fin] - ref[fin]).max() <= 4e-7 * k * scale


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls into bf16_gemm that ran (returned True)."""
    ran = []
    for name in ("conv2d_into", "backprop_input_into", "backprop_input_valid_into",
                 "backprop_filter_into", "backprop_filter_few_into"):
        real = getattr(bf16_gemm, name)

        def wrap(*a, _real=real, _name=name, **k):
            ok = _real(*a, **k)
            if ok:
                ran.append(_name)
            return ok
        monkeypatch.setattr(bf16_gemm, name, wrap)
    return ran


def test_the_tiles_run_here():
    assert bf16_gemm.runs_f32()


@pytest.mark.parametrize("xs,fs,stride,pad,dil", [
    ((128, 13, 13, 32), (3, 3, 32, 64), 1, "VALID", 1),   # the MNIST CNN's second layer
    ((128, 28, 28, 1), (3, 3, 1, 32), 1, "VALID", 1),     # its first
    ((16, 30, 30, 24), (3, 3, 24, 70), 1, "SAME", 1),     # a partial second panel
    ((4, 33, 31, 8), (5, 5, 8, 16), 2, "SAME", 1),        # strided, 32-column panels
    ((4, 24, 24, 6), (3, 3, 6, 20), 1, "SAME", 2),        # dilated
    ((32, 13, 13, 16), (3, 3, 16, 32), 1, "VALID", 1),    # small: the tiles, not Winograd
    ((2, 56, 56, 64), (3, 3, 64, 64), 1, "SAME", 1),      # over 1 MiB: the tiles
])
def test_convolution(tf, spy, xs, fs, stride, pad, dil):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    f = rng.standard_normal(fs).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, np.nan, 1e-40, -0.0]
    ref = tf.nn.conv2d(x, f, stride, pad, dilations=dil).numpy()
    out = np.full(ref.shape, np.nan, np.float32)
    conv_ops.conv2d([x, f], [out], _attrs(stride, pad, dil))
    assert spy == ["conv2d_into"]
    _close(out, ref, fs[0] * fs[1] * fs[2])


def test_nonfinite_filter_with_padding_goes_to_another_kernel(tf, spy):
    x = np.ones((4, 16, 16, 8), np.float32)
    f = np.ones((3, 3, 8, 16), np.float32)
    f[0, 0, 0, 0] = np.inf
    ref = tf.nn.conv2d(x, f, 1, "SAME").numpy()
    out = np.empty(ref.shape, np.float32)
    try:
        conv_ops.conv2d([x, f], [out], _attrs(1, "SAME"))
    except Unsupported:
        return      # handed back to TensorFlow, which skips the padding
    assert spy == []
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("xs,fs,pad,dil,which", [
    ((128, 13, 13, 32), (3, 3, 32, 64), "VALID", 1, "backprop_input_valid_into"),   # scattered
    ((6, 17, 15, 64), (3, 2, 64, 24), "VALID", 2, "backprop_input_valid_into"),     # 64-wide
    ((32, 13, 13, 16), (3, 3, 16, 32), "VALID", 1, "backprop_input_valid_into"),   # 16-wide
    ((4, 12, 10, 48), (3, 3, 48, 8), "VALID", 1, "backprop_input_valid_into"),  # three of 16
    ((5, 11, 9, 24), (3, 3, 24, 16), "VALID", 1, "backprop_input_into"),   # 24: not whole panels
    ((8, 20, 18, 16), (3, 3, 16, 40), "SAME", 1, "backprop_input_into"),
    ((4, 20, 20, 24), (3, 3, 24, 16), "SAME", 2, "backprop_input_into"),
])
def test_backprop_input(tf, spy, xs, fs, pad, dil, which):
    rng = np.random.default_rng(1)
    f = rng.standard_normal(fs).astype(np.float32)
    y = tf.nn.conv2d(np.zeros(xs, np.float32), f, 1, pad, dilations=dil)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dy.reshape(-1)[:2] = [np.inf, np.nan]
    ref = tf.raw_ops.Conv2DBackpropInput(input_sizes=xs, filter=f, out_backprop=dy,
                                         strides=[1, 1, 1, 1], padding=pad,
                                         dilations=[1, dil, dil, 1]).numpy()
    dx = np.full(xs, np.nan, np.float32)
    conv_ops.conv2d_backprop_input([np.array(xs, np.int32), f, dy], [dx], _attrs(1, pad, dil))
    assert spy == [which]
    _close(dx, ref, fs[0] * fs[1] * fs[3])


@pytest.mark.parametrize("xs,fs,pad,which", [
    ((128, 13, 13, 32), (3, 3, 32, 64), "VALID", "backprop_filter_into"),
    ((6, 15, 17, 20), (3, 3, 20, 70), "SAME", "backprop_filter_into"),    # odd output width
    ((32, 13, 13, 16), (3, 3, 16, 32), "VALID", "backprop_filter_into"),  # 32-wide, unpacked
    ((8, 20, 20, 8), (3, 3, 8, 48), "SAME", "backprop_filter_into"),      # three 16-wide
    ((128, 28, 28, 1), (3, 3, 1, 32), "VALID", "backprop_filter_few_into"),
    ((32, 28, 28, 1), (3, 3, 1, 16), "VALID", "backprop_filter_few_into"),   # 16-wide panel
    ((8, 24, 24, 2), (3, 3, 2, 48), "SAME", "backprop_filter_few_into"),     # three of 16
    ((16, 32, 32, 3), (3, 3, 3, 64), "SAME", "backprop_filter_few_into"),
    ((8, 30, 30, 3), (5, 5, 3, 24), "VALID", "backprop_filter_few_into"),  # 15 rows: 3 tiles
])
def test_backprop_filter(tf, monkeypatch, spy, xs, fs, pad, which):
    # the channels-first kernel alone (its NHWC rival, measured per shape, has its own test)
    monkeypatch.setattr(conv_ops, "VARIANTS", False)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs).astype(np.float32)
    y = tf.nn.conv2d(x, np.zeros(fs, np.float32), 1, pad)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    ref = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=fs, out_backprop=dy,
                                          strides=[1, 1, 1, 1], padding=pad).numpy()
    attrs = _attrs(1, pad)
    df = np.full(fs, np.nan, np.float32)
    conv_ops.conv2d_backprop_filter([x, np.array(fs, np.int32), dy], [df], attrs)
    assert spy == [which]
    _close(df, ref, xs[0] * y.shape[1] * y.shape[2])
    # the order of the sums is fixed by the shapes: one thread gives the same bits
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        df1 = np.empty(fs, np.float32)
        conv_ops.conv2d_backprop_filter([x, np.array(fs, np.int32), dy], [df1], attrs)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(df1, df)


@pytest.mark.parametrize("xs,fs", [((128, 28, 28, 1), (3, 3, 1, 32)),
                                   ((6, 15, 17, 20), (3, 3, 20, 70))])
def test_backprop_filter_nonfinite_dy_with_padding_goes_to_another_kernel(tf, xs, fs):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    dy = rng.standard_normal(xs[:3] + fs[3:]).astype(np.float32)
    dy[0, 0, 0, 0] = np.inf
    ref = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=fs, out_backprop=dy,
                                          strides=[1, 1, 1, 1], padding="SAME").numpy()
    df = np.empty(fs, np.float32)
    try:
        conv_ops.conv2d_backprop_filter([x, np.array(fs, np.int32), dy], [df], _attrs(1, "SAME"))
    except Unsupported:
        return
    nan = np.isnan(ref)
    assert (np.isnan(df) == nan).all()


@pytest.mark.parametrize("keras_style", [False, True])
def test_conv_bias_relu_in_the_tiles_registers(tf, monkeypatch, keras_style):
    """A float32 Conv2D + bias + Relu in a tf.function runs as one pass on the tiles (epilogue
    pass: the device's fused_kernels): the unfused program's bits, stock's values; a
    non-finite filter with padding takes the ops in turn (ledgered handback of the Conv2D)."""
    import tf_backend
    from tf_backend import functions
    rng = np.random.default_rng(4)
    x = tf.constant(rng.standard_normal((16, 20, 20, 8)).astype(np.float32))
    b = tf.constant(rng.standard_normal(24).astype(np.float32))

    def f(x, w):
        y = tf.nn.conv2d(x, w, 1, "SAME")
        y = y + tf.reshape(b, (1, 1, 1, 24)) if keras_style else tf.nn.bias_add(y, b)
        return tf.nn.relu(y)

    calls = []
    real = conv_ops.conv_bias_relu
    monkeypatch.setattr(conv_ops, "conv_bias_relu",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    w = rng.standard_normal((3, 3, 8, 24)).astype(np.float32)
    bad = w.copy()
    bad[0, 0, 0, 0] = np.inf
    fn = tf.function(f)
    ref = [np.asarray(fn(x, tf.constant(v))) for v in (w, bad)]
    functions.clear_cache()
    try:
        with tf_backend.enabled():
            ours = [np.asarray(fn(x, tf.constant(v))) for v in (w, bad)]
        monkeypatch.setenv("TF_BACKEND_DISABLE_PASSES", "epilogue")
        functions.clear_cache()
        with tf_backend.enabled():
            plain = np.asarray(fn(x, tf.constant(w)))
    finally:
        functions.clear_cache()
    assert len(calls) == 2     # tried both calls; the second declined
    np.testing.assert_array_equal(ours[0], plain)
    _close(ours[0], ref[0], 72)
    np.testing.assert_array_equal(ours[1], ref[1])


def test_tile_calls_have_a_name_per_variant():
    """numba names compiled functions by qualified name and a per-process counter, with
    linkonce_odr linkage: generated closures of one name, cached by drivers compiled in
    different processes, could meet under one symbol and run one another's tiles. Each variant
    has its own name (bf16_gemm._named)."""
    names = set()
    for key, sets in (("f32", bf16_gemm._tile_set(True)[:2]),
                      ("strided_f32", bf16_gemm._strided_set())):
        impl = bf16_gemm._dispatcher(key, *sets)
        names.add(impl.__qualname__)
        names.update(bf16_gemm._by_rows(s, f"_tiles_{key}_{i}").py_func.__qualname__
                     for i, s in enumerate(sets))
    assert len(names) == 2 + 2 + 3 and not any("<locals>" in n for n in names)


@pytest.mark.parametrize("M,K,N", [(1, 1, 16), (5, 7, 32), (6, 64, 48), (13, 300, 64),
                                   (64, 784, 256), (70, 33, 80), (200, 129, 144)])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("ta", [False, True])
def test_products_reading_b_in_place(M, K, N, strided, ta):
    """bf16_gemm.matmul_f32_into: out = a @ b (+ bias, Relu) with B read in place, rows of a, b
    and out any number of elements apart, a possibly transposed (x^T @ dy of a Dense layer's
    weight gradient); each output one FMA chain over K (the same bits at one and two threads);
    a product it cannot read (N not a multiple of 16, a transposed b) is declined."""
    rng = np.random.default_rng(M * K + N)
    pad = 3 if strided else 0
    a = (rng.standard_normal((K, M + pad)).astype(np.float32)[:, :M].T if ta else
         rng.standard_normal((M, K + pad)).astype(np.float32)[:, :K])
    b = rng.standard_normal((K, N + 16 * pad)).astype(np.float32)[:, :N]
    bias = rng.standard_normal(N).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for relu in (False, True):
        outs = []
        for threads in (1, 2):
            out = np.full((M, N + pad), np.nan, np.float32)[:, :N]
            old = numba.get_num_threads()
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            try:
                assert bf16_gemm.matmul_f32_into(out, a, b, bias, relu)
            finally:
                numba.set_num_threads(old)
            outs.append(out.copy())
        np.testing.assert_array_equal(outs[0], outs[1])
        want = exact + bias
        if relu:
            want = np.maximum(want, 0)
        np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    assert not bf16_gemm.matmul_f32_into(np.empty((M, N + 1), np.float32), a,
                                         rng.standard_normal((K, N + 1)).astype(np.float32))
    assert K == 1 or not bf16_gemm.matmul_f32_into(np.empty((M, N), np.float32), a,
                                                   np.ascontiguousarray(b.T).T)


@pytest.mark.parametrize("x_shape,f_shape,strides,padding,dilations", [
    ((1, 35, 35, 40), (3, 3, 40, 64), 2, "VALID", 1),
    ((2, 17, 17, 24), (1, 7, 24, 32), 1, "SAME", 1),
    ((3, 12, 12, 16), (3, 3, 16, 64), 1, "SAME", 2),
    ((1, 9, 9, 8), (5, 5, 8, 16), 1, "SAME", 1)])
def test_convolutions_read_the_filter_in_place(monkeypatch, x_shape, f_shape, strides, padding,
                                               dilations):
    """A float32 convolution of 16, 32 or 64 output channels reads the filter's rows in place
    (bf16_gemm._conv_ldb: they are the one panel packing would copy out) instead of packing
    it per call: the same bits as the packed panels, with and without bias + Relu."""
    ran = []
    real = bf16_gemm._CONV_LDB
    monkeypatch.setattr(bf16_gemm, "_CONV_LDB", tuple(
        (lambda fn: lambda *a: (ran.append(1), fn(*a))[1])(fn) for fn in real))
    rng = np.random.default_rng(sum(x_shape) + sum(f_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    f = rng.standard_normal(f_shape).astype(np.float32)
    b = rng.standard_normal(f_shape[3]).astype(np.float32)
    attrs = {"strides": [1, strides, strides, 1], "padding": padding,
             "dilations": [1, dilations, dilations, 1], "data_format": "NHWC",
             "explicit_paddings": []}
    _, _, g = conv_ops._geometry(x.shape, f.shape, attrs, "Conv2D", x.dtype)
    outs = {}
    for in_place in (True, False):
        monkeypatch.setattr(bf16_gemm, "CONV_IN_PLACE", in_place)
        for relu in (False, True):
            out = np.full((x_shape[0], g.oh, g.ow, f_shape[3]), np.nan, np.float32)
            bf16_gemm.conv2d(x, f, g, out, bias=b if relu else None, relu=relu)
            outs[in_place, relu] = out
    assert len(ran) == 2   # the two in-place calls
    for relu in (False, True):
        np.testing.assert_array_equal(outs[True, relu], outs[False, relu])
    ref = tf_conv(x, f, strides, padding, dilations)
    np.testing.assert_allclose(outs[True, False], ref, rtol=1e-4, atol=1e-4 * np.sqrt(f[..., 0].size))


def tf_conv(x, f, strides, padding, dilations):
    import tensorflow as tf
    return tf.nn.conv2d(x, f, strides, padding, dilations=dilations).numpy()


@pytest.mark.parametrize("x_shape,O,padding,dilation", [
    ((6, 13, 13, 32), 64, "VALID", 1), ((4, 12, 12, 24), 32, "SAME", 1),
    ((3, 15, 15, 16), 48, "SAME", 2)])
@pytest.mark.parametrize("variant", ["channels_first", "nhwc"])
def test_filter_gradient_variants_agree_with_stock(monkeypatch, x_shape, O, padding, dilation,
                                                   variant):
    """A float32 filter gradient on the tiles runs the channels-first kernel or the NHWC one
    (the input read in place), whichever conv_ops measured faster for the shape: both give
    stock's values, and a non-finite dy with padding goes to the channels-first kernel (the
    NHWC one would multiply the padding's zeros by it)."""
    import tensorflow as tf
    from kernels.cpu import variants
    monkeypatch.setattr(variants, "choose", lambda family, key, cands: variant)
    rng = np.random.default_rng(sum(x_shape) + O)
    x = rng.standard_normal(x_shape).astype(np.float32)
    attrs = {"strides": [1, 1, 1, 1], "padding": padding, "dilations": [1, dilation, dilation, 1],
             "data_format": "NHWC", "explicit_paddings": []}
    f_shape = (3, 3, x_shape[3], O)
    _, _, g = conv_ops._geometry(x.shape, f_shape, attrs, "Conv2D", x.dtype)
    dy = rng.standard_normal((x_shape[0], g.oh, g.ow, O)).astype(np.float32)
    df = np.full(f_shape, np.nan, np.float32)
    conv_ops.backprop_filter_nhwc(x, dy, df, g)
    ref = tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=list(f_shape), out_backprop=dy, strides=[1, 1, 1, 1],
        padding=padding, dilations=[1, dilation, dilation, 1]).numpy()
    n = x_shape[0] * g.oh * g.ow
    np.testing.assert_allclose(df, ref, rtol=1e-4, atol=1e-4 * np.sqrt(n))
    if padding == "SAME":
        dy[0, 0, 0, 0] = np.inf
        ran = []
        real = bf16_gemm.backprop_filter_few_into
        monkeypatch.setattr(bf16_gemm, "backprop_filter_few_into",
                            lambda *a, **k: ran.append(1) or real(*a, **k))
        conv_ops.backprop_filter_nhwc(x, dy, df, g)
        assert not ran


def test_variant_choice_is_measured_once_recorded_and_reused(monkeypatch, tmp_path):
    """kernels/cpu/variants.py: a key's first call times every candidate and keeps the fastest
    for the process and on disk per CPU; a later process loads it without measuring;
    TF_BACKEND_AUTOTUNE=measure measures again."""
    import json
    import time
    from kernels.cpu import variants
    monkeypatch.setenv("TF_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TF_BACKEND_GEMM_RECORD", "1")
    monkeypatch.delenv("TF_BACKEND_AUTOTUNE", raising=False)
    monkeypatch.setattr(variants, "_choices", {})
    monkeypatch.setattr(variants, "_table", {"value": None})
    calls = []

    def cands():
        return {"slow": lambda: calls.append("slow") or time.sleep(0.002),
                "fast": lambda: calls.append("fast")}
    assert variants.choose("fam", (1, 2), cands()) == "fast"
    assert calls.count("slow") == variants.RUNS + 1
    calls.clear()
    assert variants.choose("fam", (1, 2), cands()) == "fast" and not calls
    table = json.loads((tmp_path / variants.TABLE).read_text())
    (host,) = table
    assert table[host] == {"fam|1|2": "fast"}
    table[host]["fam|1|2"] = "slow"          # a later process: the record, not a measurement
    (tmp_path / variants.TABLE).write_text(json.dumps(table))
    monkeypatch.setattr(variants, "_choices", {})
    monkeypatch.setattr(variants, "_table", {"value": None})
    assert variants.choose("fam", (1, 2), cands()) == "slow" and not calls
    monkeypatch.setenv("TF_BACKEND_AUTOTUNE", "measure")
    monkeypatch.setattr(variants, "_choices", {})
    monkeypatch.setattr(variants, "_table", {"value": None})
    assert variants.choose("fam", (1, 2), cands()) == "fast" and calls


def test_kept_filters_are_packed_once_and_give_the_same_bits(monkeypatch):
    """An inference program's filter (keep=True) wider than one panel is packed on its first
    call and read from filter_cache after, with the same bits as packing per call; our own
    arrays are packed every call; a kept non-finite filter with padding is checked once and
    still goes to another kernel."""
    from kernels.cpu import filter_cache
    from tests.test_winograd import _foreign
    filter_cache.clear()
    packs = []
    real = bf16_gemm.pack_filter
    monkeypatch.setattr(bf16_gemm, "pack_filter", lambda f: (packs.append(1), real(f))[1])
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 12, 12, 24)).astype(np.float32)
    f = rng.standard_normal((3, 3, 24, 96)).astype(np.float32)
    _, _, g = conv_ops._geometry(x.shape, f.shape, _attrs(1, "SAME"), "Conv2D", x.dtype)
    ref = np.empty((1, 12, 12, 96), np.float32)
    assert bf16_gemm.conv2d_into(ref, x, f, g)
    kept = _foreign(f)
    n = len(packs)
    for _ in range(3):
        out = np.full_like(ref, np.nan)
        assert bf16_gemm.conv2d_into(out, x, kept, g, keep=True)
        np.testing.assert_array_equal(out, ref)
    assert len(packs) == n + 1
    assert filter_cache.stats()["events"]["packed:hits"] == 2
    n = len(packs)
    for _ in range(2):                       # ours, or not asked to keep: packed every call
        assert bf16_gemm.conv2d_into(out, x, f, g, keep=True)
        assert bf16_gemm.conv2d_into(out, x, kept, g)
    assert len(packs) == n + 4
    bad = f.copy()
    bad[1, 1, 3, 7] = np.inf
    bad = _foreign(bad)
    hits = filter_cache.stats()["events"]["nonfinite:hits"]   # the kept filter's checks
    for _ in range(2):
        assert not bf16_gemm.conv2d_into(out, x, bad, g, keep=True)
    assert filter_cache.stats()["events"]["nonfinite:hits"] == hits + 1
    filter_cache.clear()
