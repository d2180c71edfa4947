"""float32 numerics beyond the op table's tolerances: Exp, Tanh, Sigmoid and Erf bit-identical to
TensorFlow's (Eigen's algorithms in float32, denormals flushed as TensorFlow flushes them), eager
and fused in programs; column reductions at least as accurate as TensorFlow's."""
import numpy as np
import pytest
import tensorflow as tf

from tests.harness import run_ours, run_stock

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 3e38, -3e38, 88.72,
           88.73, -87.3, -87.4, -103.9, -104.0, -104.1, 16.6, 16.7, 7.9, 7.95, -8.1, 4.0, -3.9]


def _inputs(scale):
    rng = np.random.default_rng(7)
    a = np.concatenate([(rng.standard_normal(1 << 16) * scale), SPECIAL]).astype(np.float32)
    return a[: len(a) // 16 * 16]   # whole SIMD packets: TensorFlow's tail uses libm for Sigmoid


@pytest.mark.parametrize("fn,scale", [(tf.exp, 30), (tf.tanh, 4), (tf.sigmoid, 20),
                                      (tf.math.erf, 2)], ids=["Exp", "Tanh", "Sigmoid", "Erf"])
def test_bit_identical_to_stock(fn, scale):
    a = _inputs(scale)
    ref = run_stock(fn, [a])[0]
    ours, stats = run_ours(fn, [a])
    assert stats["totals"]["backend"] >= 1
    same = (ours[0] == ref) | (np.isnan(ours[0]) & np.isnan(ref))
    assert same.all(), (a[~same][:5], ours[0][~same][:5], ref[~same][:5])
    assert (np.signbit(ours[0]) == np.signbit(ref))[~np.isnan(ref)].all()


def test_fused_gelu_bit_identical():
    """Our fused GELU chain (rounding after every op) matches stock eager op by op exactly.

    Stock tf.function differs from stock eager in ~2% of elements here (Grappler's arithmetic
    rewrites; 1 + tanh cancels near -1 and magnifies one ulp), so eager is the oracle."""
    a = _inputs(3)

    def gelu(x):
        return 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    ref = run_stock(gelu, [a])[0]
    ours, stats = run_ours(tf.function(gelu), [a])
    assert stats["totals"]["backend"] >= 1
    same = (ours[0] == ref) | (np.isnan(ours[0]) & np.isnan(ref))
    assert same.all(), (a[~same][:5], ours[0][~same][:5], ref[~same][:5])


def test_fused_subnormals_flush_like_tensorflow_and_fp_env_is_restored():
    """Fused loops run with the hardware's flush-to-zero (x86-64) or flush in code: subnormal
    inputs read as zero and subnormal results become zero, as in TensorFlow; the thread's
    floating-point environment is restored afterwards."""
    a = np.array([1e-38, -1e-38, 1e-45, 2e-38, 3.0, -0.0, 1.5e-38, 1e-20] * 4, np.float32)
    b = np.array([0.5, 0.5, 1.0, -1.9e-38, 2.0, 1e-45, 1.0, 1e-20] * 4, np.float32)

    def f(x, y):
        return x * y * 0.5, (x + y) * 0.75, x * 1e20 * 2.0, tf.tanh(x * 1e5) * 1e-36

    ref = run_stock(f, [a, b])
    with np.errstate(all="ignore"):   # IEEE gradual underflow gives non-zero results here
        ieee = [a * b * np.float32(0.5), (a + b) * np.float32(0.75), a * np.float32(1e20) * 2]
    assert all(((r == 0) & (i != 0)).any() for r, i in zip(ref, ieee))
    ours, stats = run_ours(tf.function(f), [a, b])
    assert stats["totals"]["backend"] >= 1
    for o, r in zip(ours, ref):
        assert (o == r).all() and (np.signbit(o) == np.signbit(r)).all(), (o, r)
    assert np.float32(1e-38) * np.float32(0.5) != 0   # gradual underflow again in this thread


def test_batch_norm_style_mean_is_at_least_as_accurate_as_stock():
    """Mean over (N, H, W) of an NHWC tensor: each column sums 6272 rows; partial sums of 64 rows
    keep the error below TensorFlow's (4096-row partials were 2.5x worse, and that rounding,
    amplified through an untrained DenseNet's backward pass, was most of a fit's difference)."""
    ours_err, stock_err = [], []
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((2, 56, 56, 64)).astype(np.float32) * 3 + 1
        ref = x.astype(np.float64).mean(axis=(0, 1, 2))
        fn = lambda t: tf.reduce_mean(t, axis=(0, 1, 2))   # noqa: E731
        stock_err.append(np.abs(run_stock(fn, [x])[0] - ref).max())
        ours_err.append(np.abs(run_ours(fn, [x])[0][0] - ref).max())
    assert np.mean(ours_err) <= np.mean(stock_err), (ours_err, stock_err)


def test_erfc_float32_is_eigens_algorithm_and_keras_gelu_matches_stock():
    """float32 Erfc (Keras' exact GELU: 0.5 * x * erfc(-x / sqrt 2)) by Eigen's float32 algorithm
    in float32 lanes (kernels/cpu/scalar.py erfc32_eigen): stock's own bits on most inputs, a few
    ulps off elsewhere (stock's error against the true value reaches ~64 ulps in the tail; the
    float64 path this replaced was correctly rounded there, so further from stock, and half as
    fast). Special values exact; GELU within the elementwise contract of stock's."""
    rng = np.random.default_rng(7)
    a = np.concatenate([_inputs(4), np.linspace(-12, 12, 4096, dtype=np.float32),
                        rng.uniform(-12, 12, 1 << 16).astype(np.float32),
                        np.array([0, -0.0, 1, -1, 11, -11, 30, -30, np.inf, -np.inf, np.nan,
                                  1e-40, -1e-40], np.float32)])
    ours, stats = run_ours(tf.math.erfc, [a])
    assert stats["totals"]["backend"] >= 1
    want = run_stock(tf.math.erfc, [a])[0]
    got = ours[0]
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    ulp = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulp[~nan].max() <= 8, (a[~nan][ulp[~nan] > 8][:5])
    assert (ulp[~nan] == 0).mean() > 0.9
    special = np.isin(a, np.array([0, 11, -11, 30, -30, np.inf, -np.inf], np.float32))
    np.testing.assert_array_equal(got[special], want[special])
    ref = run_stock(tf.nn.gelu, [a])[0]
    got, stats = run_ours(tf.function(tf.nn.gelu), [a])
    assert stats["totals"]["backend"] >= 1
    np.testing.assert_allclose(got[0], ref, rtol=4 * 1.19e-7, atol=4 * 1.19e-7)


def test_expm1_float32_is_the_correctly_rounded_value():
    """float32 Expm1 in float64 straight-line code (scalar.expm1_64: a Taylor polynomial near 0,
    exp64 - 1 elsewhere): libm's expm1 rounded to float32 (subnormals flushed), -0.0 kept."""
    import math
    a = np.concatenate([_inputs(3), np.linspace(-0.4, 0.4, 4096, dtype=np.float32),
                        np.array([-0.0, 0.0, 88.7, 88.8, -104.0], np.float32)])
    ours, stats = run_ours(tf.math.expm1, [a])
    assert stats["totals"]["backend"] >= 1
    with np.errstate(over="ignore"):
        want = np.array([math.expm1(float(v)) if v < 89 else math.inf for v in a]).astype(np.float32)
    want[np.isnan(a)] = np.nan
    want[np.abs(want) < np.finfo(np.float32).tiny] *= 0   # subnormal results flush, as in TF
    same = (ours[0] == want) | (np.isnan(ours[0]) & np.isnan(want))
    assert same.all(), (a[~same][:5], ours[0][~same][:5], want[~same][:5])
    assert (np.signbit(ours[0]) == np.signbit(want))[~np.isnan(want)].all()
