"""Subnormals as stock handles them (issue 14, measured on TensorFlow 2.21's x86-64 wheel).

Stock runs every CPU op under FTZ/DAZ, eagerly and inside tf.function alike, at any size (no
inline-vs-pool difference was found). What differs is each Eigen functor's code path: packets of
8 float32 and a scalar loop over the last n % 8 elements. For Log (and Xlogy's log) the scalar
loop's glibc logf gives log(2**-150) for a positive subnormal and NaN for a negative one, where
the packet path gives -inf. Tests on both sides of the packet boundary, eager and in programs.
"""
import numpy as np
import pytest

import tf_backend
from kernels.cpu import elementwise

SUB = np.float32(1e-40)


def _inputs(n):
    x = np.full(n, SUB, np.float32)
    x[::3] = -SUB
    x[1::5] = 0.5
    return x


def _both(tf, fn, *args):
    ts = [tf.constant(a) for a in args]
    stock = np.asarray(fn(*ts))
    with tf_backend.enabled():
        ours = np.asarray(fn(*ts))
    return ours, stock


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 16, 17, 100003])
def test_log_subnormal_tail_matches_stock(tf, n):
    ours, stock = _both(tf, tf.math.log, _inputs(n))
    np.testing.assert_array_equal(ours, stock)
    if n % 8:   # the boundary is where stock says it is: the tail differs from the packets
        assert np.isfinite(stock[-1]) or np.isnan(stock[-1])


def test_issue_example_and_constant(tf):
    ours, stock = _both(tf, tf.math.log, np.array([-1.0, 0.0, 1e-45], np.float32))
    np.testing.assert_array_equal(ours, stock)
    assert stock[2] == elementwise._LOG_DAZ


@pytest.mark.parametrize("shape_x, shape_y", [((11,), (11,)), ((), (11,)), ((1, 9), (9, 9)),
                                              ((5, 1), (5, 3))])
def test_xlogy_subnormal_tail_matches_stock(tf, shape_x, shape_y):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 2, shape_x).astype(np.float32)
    y = np.full(shape_y, SUB, np.float32)
    ours, stock = _both(tf, tf.math.xlogy, x, y)
    np.testing.assert_array_equal(ours, stock)


@pytest.mark.parametrize("n", [3, 8, 13])
def test_log_in_a_fused_program_matches_stock(tf, n):
    """Log stays out of fused loops, so a program's Log has stock's tail too; Abs and Neg
    (bit operations) pass subnormals on, fused or not. (No x * 1.0 here: stock's grappler
    removes it, and under DAZ it flushes.)"""
    @tf.function
    def f(x):
        return tf.math.log(-tf.abs(-x)) * 2.0 - 1.0

    x = _inputs(n)
    ours, stock = _both(tf, f, x)
    np.testing.assert_array_equal(ours, stock)


@pytest.mark.parametrize("n", [1, 9, 100003])
def test_abs_and_neg_keep_subnormals(tf, n):
    x = _inputs(n)
    for fn in (tf.abs, tf.negative, tf.function(lambda x: tf.abs(-x) * 2.0)):
        ours, stock = _both(tf, fn, x)
        np.testing.assert_array_equal(ours, stock)


@pytest.mark.parametrize("op", ["Mul", "Sqrt", "Exp", "Tanh"])
def test_flushing_ops_flush_at_every_size(tf, op):
    fns = {"Mul": lambda x: x * tf.constant(3.0, x.dtype), "Sqrt": tf.sqrt,
           "Exp": lambda x: tf.exp(x - 100.0), "Tanh": tf.tanh}
    for n in (1, 9, 100003):
        ours, stock = _both(tf, tf.function(fns[op]), np.full(n, SUB, np.float32))
        np.testing.assert_array_equal(ours, stock)
        ours, stock = _both(tf, fns[op], np.full(n, SUB, np.float32))
        np.testing.assert_array_equal(ours, stock)
