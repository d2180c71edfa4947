"""Op table: nn ops (BiasAdd, BiasAddGrad, Softmax, LogSoftmax); conv and pooling cases live in
conv_ops.py and pooling_ops.py."""

import numpy as np
import tensorflow as tf

from . import OpCase, arr, special_floats


def bias_samples(dt, rng):
    sp = special_floats(dt)
    return [(arr(rng, (2, 3), dt), arr(rng, (3,), dt)),
            (arr(rng, (0, 3), dt), arr(rng, (3,), dt)),
            (arr(rng, (4, 0), dt), arr(rng, (0,), dt)),
            (arr(rng, (2, 3, 4, 5), dt), arr(rng, (5,), dt)),
            (arr(rng, (2, 2, 2, 2, 3), dt), arr(rng, (3,), dt)),
            (np.resize(sp, (11, 2)), np.array([np.inf, np.nan], dt)),
            (np.resize(sp, (3, 11)), sp),
            (arr(rng, (4, 28, 28, 64), dt), arr(rng, (64,), dt))]


def bias_nchw_samples(dt, rng):
    return [(arr(rng, (2, 3, 4), dt), arr(rng, (3,), dt)),
            (arr(rng, (2, 3, 4, 5), dt), arr(rng, (3,), dt)),
            (arr(rng, (0, 3, 4, 5), dt), arr(rng, (3,), dt)),
            (arr(rng, (2, 3, 2, 2, 2), dt), arr(rng, (3,), dt)),
            (arr(rng, (4, 64, 28, 28), dt), arr(rng, (64,), dt))]


def bias_errors(dt):
    rng = np.random.default_rng(0)
    return [(arr(rng, (3,), dt), arr(rng, (3,), dt)),
            (arr(rng, (2, 3), dt), arr(rng, (4,), dt)),
            (arr(rng, (2, 3), dt), arr(rng, (1, 3), dt))]


def bias_grad_samples(dt, rng):
    return [(x,) for x, _ in bias_samples(dt, rng)]


def bias_grad_nchw_samples(dt, rng):
    return [(x,) for x, _ in bias_nchw_samples(dt, rng)]


def bias_nchw_2d_samples(dt, rng):
    return [(arr(rng, (2, 3), dt), arr(rng, (3,), dt)), (arr(rng, (0, 5), dt), arr(rng, (5,), dt))]


def _rows(args):
    x = args[0]
    return max(1, x.size // max(1, x.shape[-1]))


def _rows_nchw(args):
    x = args[0]
    return max(1, x.size // max(1, x.shape[1]))


def softmax_samples(dt, rng):
    sp = special_floats(dt)
    if np.dtype(dt) in (np.float32, np.dtype("bfloat16")):
        # stock float32 Softmax (oneDNN) gives lane-dependent results for rows holding NaN or
        # +Inf; our kernel hands those rows back to TensorFlow, so they are no sample here
        sp = sp[~(np.isnan(sp) | (sp == np.inf))]
    return [(arr(rng, (5,), dt),), (arr(rng, (3, 7), dt),), (arr(rng, (2, 3, 4), dt),),
            (arr(rng, (0, 3), dt),), (arr(rng, (3, 0), dt),), (arr(rng, (1,), dt),),
            (np.resize(sp, (len(sp), len(sp) + 1)),),
            (np.array([[-np.inf, -np.inf], [-np.inf, 1.0], [3e38, -3e38]], dt),),
            (arr(rng, (64, 1000), dt, -20, 20),)]


def log_softmax_samples(dt, rng):
    sp = special_floats(dt)
    return softmax_samples(dt, rng)[:6] + [
        (np.resize(sp, (len(sp), len(sp) + 1)),),
        (np.array([[-np.inf, -np.inf], [-np.inf, 1.0], [np.inf, 1.0], [np.nan, 1.0]], dt),),
        (arr(rng, (64, 1000), dt, -20, 20),)]


def softmax_errors(dt):
    # the float32 scalar goes back to TensorFlow (oneDNN raises AbortedError); float64 is ours
    return [(np.array(1.0, np.float32),), (np.array(1.0, np.float64),)]


def _row_len(args):
    return args[0].shape[-1] if args[0].ndim else 1


_OWN = [
    OpCase("BiasAdd", "BiasAdd", lambda x, b: tf.nn.bias_add(x, b), bias_samples,
           dtypes=("float32", "float64", "float16", "bfloat16"), errors=bias_errors, grad=True,
           grad_ops=("BiasAddGrad",)),
    OpCase("BiasAdd_NCHW", "BiasAdd", lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"),
           bias_nchw_samples, dtypes=("float32", "float64", "float16", "bfloat16"), grad=True,
           grad_ops=("BiasAddGrad",)),
    # eager BiasAdd takes a rank-2 NCHW input (channels last); graph shape inference rejects it
    OpCase("BiasAdd_NCHW_2d", "BiasAdd", lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"),
           bias_nchw_2d_samples, dtypes=("float32", "float64"), grad=True,
           grad_ops=("BiasAddGrad",), shape_check=False),
    OpCase("BiasAddGrad", "BiasAddGrad", lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy),
           bias_grad_samples, dtypes=("float32", "float64", "float16", "bfloat16"), kind="reduction",
           reduction_len=_rows, errors=lambda dt: [(arr(np.random.default_rng(0), (3,), dt),)]),
    OpCase("BiasAddGrad_NCHW", "BiasAddGrad",
           lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy, data_format="NCHW"),
           bias_grad_nchw_samples, dtypes=("float32", "float64", "float16", "bfloat16"),
           kind="reduction",
           reduction_len=_rows_nchw),
    # a (log-)softmax sums exp over the row: tolerance as a reduction over the row length
    OpCase("Softmax", "Softmax", lambda x: tf.nn.softmax(x), softmax_samples,
           dtypes=("float32", "float64", "float16", "bfloat16"), kind="reduction", reduction_len=_row_len,
           errors=softmax_errors, grad=True),
    OpCase("LogSoftmax", "LogSoftmax", lambda x: tf.nn.log_softmax(x), log_softmax_samples,
           dtypes=("float32", "float64", "float16", "bfloat16"), kind="reduction", reduction_len=_row_len,
           errors=softmax_errors, grad=True),
]

CASES = _OWN
