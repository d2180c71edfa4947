"""The pool_relu_grad pass: MaxPoolGrad + the ReluGrad reading it (a Conv-Relu-MaxPool block's
gradient) as one node and one pass (kernels/cpu/pooling_ops.max_pool_grad_relu): the two
kernels' bits, stock's values, and the two kernels in turn where the fused one declines."""
import numpy as np
import pytest

from tests.test_passes import _run


def _grad_fn(tf, pool, stride, pad):
    """The gradients of a bias + Relu + MaxPool block (BiasAddGrad reads the ReluGrad)."""
    def f(x):
        b = tf.zeros(x.shape[-1:], x.dtype) + tf.constant(0.25, x.dtype)
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf.nn.relu(tf.nn.bias_add(x, b))
            z = tf.nn.max_pool2d(y, pool, stride, pad)
            loss = tf.reduce_sum(z * z * 0.5 + z)
        return tape.gradient(loss, [x, b])
    return f


def _ours(tf, f, x, disable=""):
    return _run(tf, f, x, disable=disable)


@pytest.mark.parametrize("shape,pool,stride,pad,dtype", [
    ((4, 26, 26, 32), 2, 2, "VALID", np.float32),
    ((3, 9, 7, 5), 2, 2, "VALID", np.float64),      # odd sides: pixels beyond the last window
    ((2, 8, 8, 3), 3, 2, "SAME", np.float32),       # overlapping windows: two kernels in turn
])
def test_fused_gradient_is_the_two_kernels_bits(tf, monkeypatch, shape, pool, stride, pad,
                                                dtype):
    from kernels.cpu import fused_kernels, pooling_ops
    calls = []
    real = pooling_ops.max_pool_grad_relu
    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    rng = np.random.default_rng(0)
    xv = rng.integers(-3, 4, shape).astype(dtype)          # ties and zeros in windows
    # (no NaN: a window holding one gives its gradient to the NaN in our MaxPoolGrad, fused or
    # not, and to the largest number in stock's graph-mode oneDNN pool: an older difference)
    xv.reshape(-1)[:2] = [np.inf, -np.inf]
    x = tf.constant(xv)
    f = _grad_fn(tf, pool, stride, pad)
    ours, db = _ours(tf, f, x)
    assert calls == [pool == 2]
    plain, db_plain = _ours(tf, f, x, disable="pool_relu_grad")
    np.testing.assert_array_equal(ours, plain)
    # the bias gradient: float64 sums as BiasAddGrad's kernel, in another order (per window row)
    np.testing.assert_allclose(db, db_plain, rtol=1e-12 if dtype == np.float64 else 1e-6)
    ref, db_ref = [np.asarray(t) for t in tf.function(f)(x)]
    np.testing.assert_array_equal(ours, ref)
    assert np.array_equal(np.signbit(ours), np.signbit(ref))
    np.testing.assert_allclose(db, db_ref, rtol=1e-5)


def test_declining_while_compiling_runs_the_two_kernels(tf, monkeypatch):
    from kernels.cpu import fused_kernels
    from kernels.cpu.deferred import Deferred

    def compiling(*a, **k):
        raise Deferred("compiling")

    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu", compiling)
    x = tf.constant(np.random.default_rng(1).standard_normal((2, 6, 6, 4)).astype(np.float32))
    f = _grad_fn(tf, 2, 2, "VALID")
    for o, r in zip(_ours(tf, f, x), tf.function(f)(x)):
        np.testing.assert_allclose(o, np.asarray(r), rtol=1e-6)


def test_unknown_batch_inside_the_function(tf, monkeypatch):
    """A Keras fit step's batch comes from IteratorGetNext inside the function, so none of its
    shapes is fully defined (in the generic program, which runs past the specialisations'
    limit): the fused node still runs, its outputs sized per call."""
    from tf_backend import functions
    monkeypatch.setattr(functions, "MAX_SPECIALIZED", 0)
    from kernels.cpu import fused_kernels, pooling_ops
    calls = []
    real = pooling_ops.max_pool_grad_relu
    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    xv = np.random.default_rng(3).integers(-3, 4, (8, 12, 12, 16)).astype(np.float32)
    f = _grad_fn(tf, 2, 2, "VALID")

    def step(it):
        return f(next(it))

    def data():
        return iter(tf.data.Dataset.from_tensor_slices(xv).batch(5).repeat())
    ours, db = _ours(tf, step, data())
    assert calls == [True] and ours.shape == (5, 12, 12, 16)
    plain, db_plain = _ours(tf, step, data(), disable="pool_relu_grad")
    ref, db_ref = [np.asarray(t) for t in tf.function(step)(data())]
    np.testing.assert_array_equal(ours, plain)
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_allclose(db, db_ref, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_fused_gradient_is_the_kernels_bits(tf, monkeypatch, dtype):
    """float16/bfloat16 on bit patterns: the fused node gives the unfused kernels' bits
    (ReluGrad's FTZ product included) and stock's; the bias gradient the same bits too."""
    from kernels.cpu import fused_kernels, pooling_ops
    calls = []
    real = pooling_ops.max_pool_grad_relu
    monkeypatch.setattr(fused_kernels, "max_pool_grad_relu",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    rng = np.random.default_rng(4)
    xv = (rng.integers(-3, 4, (3, 13, 10, 16)) * 0.37).astype(np.float32)   # ties, odd sides
    xv.reshape(-1)[:2] = [np.inf, -np.inf]
    x = tf.cast(tf.constant(xv), dtype)
    f = _grad_fn(tf, 2, 2, "VALID")
    ours, db = _ours(tf, f, x)
    assert calls == [True]
    plain, db_plain = _ours(tf, f, x, disable="pool_relu_grad")
    assert ours.dtype.name == dtype
    np.testing.assert_array_equal(ours.view(np.uint16), plain.view(np.uint16))
    np.testing.assert_array_equal(db.view(np.uint16), db_plain.view(np.uint16))
    ref, db_ref = [np.asarray(t) for t in tf.function(f)(x)]
    np.testing.assert_array_equal(ours.view(np.uint16), ref.view(np.uint16))
    # our BiasAddGrad sums in float64 (fused or not); stock's half kernel rounds on the way
    np.testing.assert_allclose(db.astype(np.float32), db_ref.astype(np.float32), rtol=5e-2)


def _same_values(a, b):
    """Equal values and signs of zeros; NaN where stock's is NaN (whose sign the contract
    leaves open: Eigen's bfloat16 rounding makes every NaN positive, ours keeps the sign)."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(a, b)
    ok = ~np.isnan(b)
    np.testing.assert_array_equal(np.signbit(a[ok]), np.signbit(b[ok]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_kernel_edge_values(tf, dtype):
    """The fused half kernel against stock's three ops on crafted windows: a subnormal maximum
    (ReluGrad reads it as 0 under DAZ), -0 and +0 ties, negative, Inf and NaN gradients, a
    subnormal gradient (flushed by ReluGrad's product)."""
    import ml_dtypes
    from kernels.cpu import pooling_ops
    np_dt = np.dtype(getattr(ml_dtypes, dtype)) if dtype == "bfloat16" else np.dtype(dtype)
    tiny = np.float32(1e-40) if dtype == "bfloat16" else np.float32(1e-7)   # subnormal there
    rng = np.random.default_rng(5)
    xv = np.abs(rng.standard_normal((2, 6, 8, 8))).astype(np.float32)
    xv[0, :2, :2, 0] = [[tiny, 0.0], [-0.0, 0.0]]          # a subnormal maximum
    xv[0, :2, 2:4, 1] = [[0.0, -0.0], [0.0, 0.0]]          # all zeros: the first one wins
    xv[1, 2:4, :2, 2] = [[1.0, 1.0], [0.5, 1.0]]           # tie: the first one wins
    dyv = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    dyv[0, 0, 0, :4] = [-1.5, np.inf, np.nan, tiny]
    dyv[0, 0, 1, :3] = [-2.0, -np.inf, tiny]
    dyv[1, 0, 0, :2] = [-0.0, -tiny]     # stock's MaxPoolGrad adds into zeros: +0, +0 (DAZ)
    x, dy = xv.astype(np_dt), dyv.astype(np_dt)
    out = np.empty(x.shape, np_dt)
    bias = np.empty((8,), np_dt)
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID",
             "data_format": "NHWC", "T": dtype}
    y = tf.nn.max_pool2d(tf.constant(x), 2, 2, "VALID")
    assert pooling_ops.max_pool_grad_relu([x, np.asarray(y), dy], out, attrs, bias)
    g = tf.raw_ops.MaxPoolGrad(orig_input=tf.constant(x), orig_output=y, grad=tf.constant(dy),
                               ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    r = tf.raw_ops.ReluGrad(gradients=g, features=tf.constant(x))
    _same_values(out, np.asarray(r))
    assert np.isnan(out[0, 0, 2, 1].astype(np.float32))   # -Inf times 0
    b = np.asarray(tf.raw_ops.BiasAddGrad(out_backprop=r))
    finite = np.isfinite(b.astype(np.float32))
    np.testing.assert_allclose(bias[finite].astype(np.float32), b[finite].astype(np.float32),
                               rtol=5e-2)
    plain = np.empty(x.shape, np_dt)   # the unfused half MaxPoolGrad: dy's own bits but zeros
    assert pooling_ops.max_pool_grad_half([x, np.asarray(y), dy], plain, attrs)
    np.testing.assert_array_equal(plain.view(np.uint16), np.asarray(g).view(np.uint16))
    attrs3 = dict(attrs, ksize=[1, 3, 3, 1], strides=[1, 3, 3, 1])   # the general kernel
    y3 = tf.nn.max_pool2d(tf.constant(x), 3, 3, "VALID")
    dy3 = dy[:, :2, :2]
    assert pooling_ops.max_pool_grad_half([x, np.asarray(y3), dy3], plain, attrs3)
    g3 = tf.raw_ops.MaxPoolGrad(orig_input=tf.constant(x), orig_output=y3, grad=tf.constant(dy3),
                                ksize=[1, 3, 3, 1], strides=[1, 3, 3, 1], padding="VALID")
    np.testing.assert_array_equal(plain.view(np.uint16), np.asarray(g3).view(np.uint16))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("k", [2, 3])
def test_max_pool_grad_zeros_and_subnormals_as_stock(tf, dtype, k):
    """Stock's MaxPoolGrad adds each gradient into a zeroed buffer under DAZ: -0 and (float32
    and float64, or bfloat16 widened) subnormal gradients come out as +0."""
    import tf_backend
    x = tf.cast(tf.constant(np.arange(36, dtype=np.float32).reshape(1, 6, 6, 1)), dtype)
    y = tf.nn.max_pool2d(x, k, k, "VALID")
    tiny = {"float32": 1e-40, "float64": 1e-310, "bfloat16": 1e-40, "float16": 1e-7}[dtype]
    for v in (-0.0, -tiny, tiny, -2.5):
        dy = tf.fill(y.shape, tf.constant(v, dtype))

        def f():
            return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=dy,
                                          ksize=[1, k, k, 1], strides=[1, k, k, 1],
                                          padding="VALID")
        ref = np.asarray(tf.function(f)()).astype(np.float64)
        with tf_backend.enabled():
            ours = np.asarray(tf.function(f)()).astype(np.float64)
        np.testing.assert_array_equal(ours, ref)
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))
