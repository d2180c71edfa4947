"""float16/bfloat16 programs: chains of half ops stay unfused and round after every op, as stock.

TensorFlow evaluates each half op in float32 and stores the result in 16 bits, so a chain of
ops rounds once per op. A fused loop that kept float32 intermediates would round once per
chain: `x * x - 1` at x = 1 + 3 * 2**-m (m mantissa bits) is 6 * 2**-m rounded per op but
6 * 2**-m + 2**(-m-5) rounded once, so the samples below catch a fusion that skipped roundings.
"""
import numpy as np
import pytest

import tf_backend
from kernels.cpu import fusion
from tf_backend import functions
from tf_backend.program import lower, passes

DTYPES = ("float16", "bfloat16")
MANT = {"float16": 10, "bfloat16": 7}


def _chain(tf):
    def f(x, y):
        z = x * x - 1.0
        return tf.nn.relu(z * y + y) + tf.sigmoid(z) * tf.tanh(y)
    return f


def _inputs(tf, dt):
    rng = np.random.default_rng(0)
    m = MANT[dt]
    x = np.concatenate([[1 + 3 * 2 ** -m, 1 - 3 * 2 ** -m, 1.5],
                        rng.standard_normal(253) * 2]).astype(dt).reshape(16, 16)
    y = rng.standard_normal((16, 16)).astype(dt)
    return tf.constant(x), tf.constant(y)


@pytest.mark.parametrize("dt", DTYPES)
def test_half_chain_is_not_fused(tf, dt):
    x, y = _inputs(tf, dt)
    assert not fusion.fusable("Mul", dt) and fusion.fusable("Mul", "float32")
    cf = tf.function(_chain(tf)).get_concrete_function(x, y)
    prog = lower.lower(cf.graph, "test")
    passes.optimize(prog)
    assert prog.fusions == 0 and not any(n.kind == "fused" for n in prog.nodes)


@pytest.mark.parametrize("dt", DTYPES)
def test_half_chain_matches_stock_bit_for_bit(tf, dt):
    x, y = _inputs(tf, dt)
    f = _chain(tf)
    tf_backend.disable()
    ref = np.asarray(tf.function(f)(x, y))
    eager_ref = np.asarray(f(x, y))
    functions.clear_cache()
    try:
        with tf_backend.enabled():
            tf_backend.reset_stats()
            ours = np.asarray(tf.function(f)(x, y))
            eager = np.asarray(f(x, y))
            stats = tf_backend.stats()
    finally:
        functions.clear_cache()
    for op in ("Mul", "Sub", "AddV2", "Relu", "Sigmoid", "Tanh"):
        assert stats["ops"][op]["backend"] > 0, op
    bits = np.uint16
    np.testing.assert_array_equal(ours.view(bits), ref.view(bits))
    np.testing.assert_array_equal(eager.view(bits), eager_ref.view(bits))
    # the double-rounding sample: rounded per op, x * x - 1 is exactly 6 * 2**-m
    m = MANT[dt]
    x0 = x[0, 0]
    assert float(np.asarray(tf.cast(x0 * x0 - 1.0, tf.float32))) == 6 * 2 ** -m
    once = float(np.asarray(tf.cast(tf.cast(x0, tf.float32) ** 2 - 1.0, dt), np.float32))
    assert once != 6 * 2 ** -m


@pytest.mark.parametrize("n", [1000, 3 << 18])   # one thread; blocks on numba's team
def test_half_conversions_bit_exact_on_every_path(n):
    """widen/narrow_into (the half kernels' boundary) against ml_dtypes' and numpy's own
    conversions: the same bits for every non-NaN float32 (nearest even, overflow to inf,
    subnormals kept), NaN stays NaN, widening exact; serial and blocked paths alike."""
    import ml_dtypes
    from kernels.cpu import half_bits
    rng = np.random.default_rng(1)
    u = rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32)
    u[:15] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 1, 0x807FFFFF,
              0x7FC00000, 0x7F800001, 0xFFC00001, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F807FFF]
    x = u.view(np.float32).reshape(-1, 8)
    nan = np.isnan(x)
    for dt in (ml_dtypes.bfloat16, np.float16):
        out = np.empty(x.shape, dt)
        half_bits.narrow_into(out, x)
        with np.errstate(all="ignore"):
            ref = x.astype(dt)
        np.testing.assert_array_equal(out.view(np.uint16)[~nan], ref.view(np.uint16)[~nan])
        assert np.isnan(out[nan].astype(np.float32)).all()
        wide = half_bits.widen(out)
        assert wide.shape == x.shape and wide.dtype == np.float32
        ok = ~np.isnan(wide)
        np.testing.assert_array_equal(wide[ok], out.astype(np.float32)[ok])


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_half_bias_gradient_widens_as_it_reads(tf, dt):
    """BiasAddGrad of float16/bfloat16 (rows, C) sums each value widened as it is read: the
    same float64 sums, so the same bits, as widening the whole array first (the op table holds
    the tolerance against stock, whose bfloat16 sums differ); Inf and NaN channels as stock's."""
    from kernels.cpu import nn_ops
    from kernels.cpu.half_bits import narrow_into, widen
    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((8, 5, 7, 16)).astype(np.float32) * 3, tf.dtypes.as_dtype(dt))
    dy = x.numpy()
    dy[0, 0, 0, 3] = np.inf
    dy[1, 2, 3, 5] = np.nan
    dy[2, 0, 1, 6], dy[3, 0, 1, 6] = np.inf, -np.inf
    out = np.empty(16, dy.dtype)
    nn_ops.bias_add_grad([dy], [out], {"data_format": "NHWC"})
    acc = np.empty(16, np.float32)
    nn_ops._bias_grad_rows(widen(dy).reshape(-1, 16), acc)
    ref = np.empty(16, dy.dtype)
    narrow_into(ref, acc)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))
    stock = tf.raw_ops.BiasAddGrad(out_backprop=tf.constant(dy)).numpy().astype(np.float32)
    got = out.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(stock))
    fin = np.isfinite(stock)
    assert np.array_equal(got[~fin & ~np.isnan(stock)], stock[~fin & ~np.isnan(stock)])
