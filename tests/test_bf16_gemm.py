"""bfloat16 products and convolutions on the CPU's own bfloat16 dot products
(kernels/cpu/bf16_gemm.py), against stock TensorFlow, which runs the same instruction through
oneDNN on such a CPU: convolutions bit for bit, products within one bfloat16 rounding (oneDNN
blocks long reductions in another order)."""
import numpy as np
import pytest

from kernels.cpu import bf16_gemm
from shape_fns.conv_ops import conv_geometry
from shape_fns.host import cpu_flags

pytestmark = pytest.mark.skipif(
    "avx512_bf16" not in cpu_flags(),
    reason="this CPU has no AVX512_BF16: bfloat16 products are widened to float32 here")



def _bf():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


def test_available_on_a_cpu_with_the_instruction():
    assert bf16_gemm.available()


@pytest.mark.parametrize("xs,fs,stride,pad,dil", [
    ((2, 7, 9, 3), (3, 3, 3, 5), 1, "SAME", 1),        # odd channels, one partial panel
    ((3, 12, 11, 16), (3, 3, 16, 64), 1, "SAME", 1),
    ((2, 15, 13, 8), (3, 2, 8, 70), 2, "VALID", 1),    # two panels, the second partial
    ((2, 15, 13, 8), (5, 5, 8, 16), 2, "SAME", 1),
    ((2, 16, 16, 6), (3, 3, 6, 20), 1, "SAME", 2),     # dilated
])
def test_convolution_is_stocks_bit_for_bit(tf, xs, fs, stride, pad, dil):
    bf = _bf()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(bf)
    f = rng.standard_normal(fs).astype(bf)
    x.reshape(-1)[:5] = [np.inf, np.nan, 1e-40, -0.0, 3e38]   # specials and a subnormal
    attrs = {"strides": [1, stride, stride, 1], "padding": pad, "data_format": "NHWC",
             "dilations": [1, dil, dil, 1], "explicit_paddings": []}
    g, _, groups = conv_geometry(xs, fs, attrs, "Conv2D", bf)
    assert bf16_gemm.conv_eligible(xs, fs, g, groups) == (fs[3] >= 16)   # else the widening kernel
    ref = tf.nn.conv2d(tf.constant(x), tf.constant(f), stride, pad, dilations=dil).numpy()
    out = np.empty(ref.shape, bf)
    assert bf16_gemm.conv2d_into(out, x, f, g)
    nan = np.isnan(ref.astype(np.float32))
    assert (np.isnan(out.astype(np.float32)) == nan).all()
    assert (out.view(np.uint16)[~nan] == ref.view(np.uint16)[~nan]).all()


def test_nonfinite_filter_with_padding_is_left_to_another_kernel():
    bf = _bf()
    x = np.ones((1, 4, 4, 2), bf)
    f = np.ones((3, 3, 2, 16), bf)
    f[0, 0, 0, 0] = np.inf
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NHWC",
             "dilations": [1, 1, 1, 1], "explicit_paddings": []}
    g, _, _ = conv_geometry(x.shape, f.shape, attrs, "Conv2D", bf)
    assert not bf16_gemm.conv2d_into(np.empty((1, 4, 4, 16), bf), x, f, g)


@pytest.mark.parametrize("m,k,n", [(5, 7, 70), (1, 2, 1), (64, 784, 512), (13, 300, 64)])
def test_product_within_one_rounding_of_stocks(tf, m, k, n):
    bf = _bf()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(bf)
    b = rng.standard_normal((k, n)).astype(bf)
    ref = tf.matmul(tf.constant(a), tf.constant(b)).numpy()
    out = np.full((m, n), np.nan, bf)
    bf16_gemm.product_into(out, a, b)
    diff = np.abs(out.view(np.uint16).astype(np.int32) - ref.view(np.uint16).astype(np.int32))
    assert diff.max() <= 1, diff.max()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out.astype(np.float64) - exact).max() <= 2 ** -7 * np.abs(exact).max()


def _bias_relu_fn(tf, conv):
    if conv:
        return tf.function(lambda x, w, b: tf.nn.relu(tf.nn.bias_add(
            tf.nn.conv2d(x, w, 1, "SAME"), b)))
    return tf.function(lambda x, w, b: tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b)))


@pytest.mark.parametrize("conv", [True, False], ids=["conv", "matmul"])
def test_bias_and_relu_fused_into_the_product_as_stocks_function(tf, conv, monkeypatch):
    """passes/epilogue.py gives a bfloat16 Conv2D/MatMul + bias + Relu to one kernel, which adds
    and clips in float32 before its one rounding: stock's tf.function (its remapper fuses them
    into one oneDNN call) rounds once too. Without the instruction the three kernels run in
    turn (each rounding), within bfloat16's tolerance of stock."""
    import tf_backend
    from tf_backend import numerics
    bf = _bf()
    rng = np.random.default_rng(2)
    if conv:
        x = rng.standard_normal((4, 12, 12, 16)).astype(bf)
        w = rng.standard_normal((3, 3, 16, 64)).astype(bf)
    else:
        x = rng.standard_normal((48, 96)).astype(bf)
        w = rng.standard_normal((96, 64)).astype(bf)
    b = rng.standard_normal(64).astype(bf)
    args = [tf.constant(v) for v in (x, w, b)]
    ref = _bias_relu_fn(tf, conv)(*args).numpy()
    with tf_backend.enabled():
        got = _bias_relu_fn(tf, conv)(*args).numpy()
    assert (got.view(np.uint16) == ref.view(np.uint16)).mean() > 0.999
    monkeypatch.setitem(bf16_gemm._state, "ok", False)
    with tf_backend.enabled():
        got = _bias_relu_fn(tf, conv)(*args).numpy()
    assert numerics.compare(got, ref, "reduction", 144) is None


@pytest.mark.parametrize("xs,fs,pad,dil", [
    ((2, 9, 10, 16), (3, 3, 16, 24), "SAME", 1),
    ((2, 11, 13, 16), (3, 2, 16, 70), "VALID", 1),
    ((2, 11, 13, 16), (3, 3, 16, 24), "SAME", 2),
])
def test_backprop_input_is_stocks_bit_for_bit(tf, xs, fs, pad, dil):
    bf = _bf()
    rng = np.random.default_rng(3)
    f = rng.standard_normal(fs).astype(bf)
    attrs = {"strides": [1, 1, 1, 1], "padding": pad, "data_format": "NHWC",
             "dilations": [1, dil, dil, 1], "explicit_paddings": []}
    g, _, _ = conv_geometry(xs, fs, attrs, "Conv2DBackpropInput", bf)
    dy = rng.standard_normal((xs[0], g.oh, g.ow, fs[3])).astype(bf)
    ref = tf.raw_ops.Conv2DBackpropInput(
        input_sizes=list(xs), filter=tf.constant(f), out_backprop=tf.constant(dy),
        strides=[1, 1, 1, 1], padding=pad, dilations=[1, dil, dil, 1]).numpy()
    dx = np.empty(xs, bf)
    assert bf16_gemm.backprop_input_into(dx, f, dy, g)
    assert (dx.view(np.uint16) == ref.view(np.uint16)).all()


@pytest.mark.parametrize("xs,fs,pad,dil", [
    ((2, 9, 10, 8), (3, 3, 8, 64), "SAME", 1),
    ((2, 11, 13, 16), (3, 2, 16, 70), "VALID", 1),     # 70 columns: two panels
    ((2, 11, 12, 16), (3, 3, 16, 64), "SAME", 2),
])
def test_backprop_filter_within_one_rounding_of_stocks(tf, xs, fs, pad, dil):
    """Reduced over every pixel in float32 and rounded once, as stock; oneDNN sums the pixels
    in another order, so an element may differ by one bfloat16 step."""
    bf = _bf()
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(bf)
    attrs = {"strides": [1, 1, 1, 1], "padding": pad, "data_format": "NHWC",
             "dilations": [1, dil, dil, 1], "explicit_paddings": []}
    g, _, _ = conv_geometry(xs, fs, attrs, "Conv2DBackpropFilter", bf)
    dy = rng.standard_normal((xs[0], g.oh, g.ow, fs[3])).astype(bf)
    ref = tf.raw_ops.Conv2DBackpropFilter(
        input=tf.constant(x), filter_sizes=list(fs), out_backprop=tf.constant(dy),
        strides=[1, 1, 1, 1], padding=pad, dilations=[1, dil, dil, 1]).numpy()
    df = np.empty(fs, bf)
    assert bf16_gemm.backprop_filter_into(df, x, dy, g)
    d = np.abs(df.view(np.uint16).astype(np.int32) - ref.view(np.uint16).astype(np.int32))
    assert d.max() <= 1 and (d == 0).mean() > 0.99, (d.max(), (d == 0).mean())


def test_not_used_where_stock_widens_bfloat16_in_software(monkeypatch):
    """With oneDNN off stock's bfloat16 kernels keep subnormal inputs, which the instruction
    drops: the widening kernels run then."""
    assert bf16_gemm.runs()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert not bf16_gemm.runs()


def test_fused_bias_relu_declines_while_its_kernel_compiles(tf, monkeypatch):
    """A compile in the background (kernels/cpu/deferred.py) makes the fused kernel decline:
    the node runs its three kernels in turn (each declining to TensorFlow alone), no error."""
    import tf_backend
    from kernels.cpu import fused_kernels
    from kernels.cpu.deferred import Deferred
    from tf_backend import numerics

    def compiling(*a, **k):
        raise Deferred("compiling")

    monkeypatch.setattr(fused_kernels, "bias_relu_product", compiling)
    bf = _bf()
    rng = np.random.default_rng(5)
    args = [tf.constant(rng.standard_normal(s).astype(bf))
            for s in ((2, 8, 8, 16), (3, 3, 16, 32), (32,))]
    ref = _bias_relu_fn(tf, True)(*args).numpy()
    with tf_backend.enabled():
        got = _bias_relu_fn(tf, True)(*args).numpy()
    assert numerics.compare(got, ref, "reduction", 144) is None


@pytest.mark.parametrize("shape", [(64, 4096), (3, 70), (40, 33)])
def test_product_of_a_transposed_operand(tf, shape):
    """A weight gradient's x^T (a transposed view) is copied to rows by blocks: the product
    equals the one of its contiguous copy, bit for bit."""
    bf = _bf()
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(bf)
    dy = rng.standard_normal((shape[0], 40)).astype(bf)
    got = np.empty((shape[1], 40), bf)
    bf16_gemm.product_into(got, x.T, dy)
    want = np.empty_like(got)
    bf16_gemm.product_into(want, np.ascontiguousarray(x.T), dy)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    ref = tf.matmul(tf.constant(x), tf.constant(dy), transpose_a=True).numpy()
    diff = np.abs(got.view(np.uint16).astype(np.int32) - ref.view(np.uint16).astype(np.int32))
    assert diff.max() <= 1


@pytest.mark.parametrize("xs,fs,pad", [
    ((4, 32, 32, 3), (3, 3, 3, 32), "SAME"),      # a first layer: dy read in place as panels
    ((2, 20, 24, 3), (3, 3, 3, 40), "VALID"),     # 40 columns: dy packed (32 + 8)
    ((3, 18, 16, 1), (5, 5, 1, 16), "SAME"),
])
def test_first_layer_filter_gradient_reads_dy_as_bfloat16(tf, xs, fs, pad):
    """A first layer's bfloat16 filter gradient on the float32 tiles with dy's panels widened
    as they are loaded: the bits of widening dy to float32 first (the same sums), within one
    rounding of stock's; a non-finite dy with padding is left to the widening kernel."""
    from kernels.cpu.half_bits import narrow_into, widen
    bf = _bf()
    rng = np.random.default_rng(9)
    x = rng.standard_normal(xs).astype(bf)
    attrs = {"strides": [1, 1, 1, 1], "padding": pad, "data_format": "NHWC",
             "dilations": [1, 1, 1, 1], "explicit_paddings": []}
    g, _, _ = conv_geometry(xs, fs, attrs, "Conv2DBackpropFilter", bf)
    dy = rng.standard_normal((xs[0], g.oh, g.ow, fs[3])).astype(bf)
    df = np.empty(fs, bf)
    assert bf16_gemm.backprop_filter_few_into(df, x, dy, g)
    wide = np.empty(fs, np.float32)
    assert bf16_gemm.backprop_filter_few_into(wide, widen(x), widen(dy), g)
    ref_bits = np.empty(fs, bf)
    narrow_into(ref_bits, wide)
    np.testing.assert_array_equal(df.view(np.uint16), ref_bits.view(np.uint16))
    ref = tf.raw_ops.Conv2DBackpropFilter(
        input=tf.constant(x), filter_sizes=list(fs), out_backprop=tf.constant(dy),
        strides=[1, 1, 1, 1], padding=pad).numpy()
    d = np.abs(df.view(np.uint16).astype(np.int32) - ref.view(np.uint16).astype(np.int32))
    assert d.max() <= 1 and (d == 0).mean() > 0.95, (d.max(), (d == 0).mean())
    if pad == "SAME":
        dy.reshape(-1)[5] = np.inf
        assert not bf16_gemm.backprop_filter_few_into(df, x, dy, g)
