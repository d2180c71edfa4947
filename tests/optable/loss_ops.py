"""Op table: SparseSoftmaxCrossEntropyWithLogits and SoftmaxCrossEntropyWithLogits."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, special_floats


def _sparse(logits, labels):
    return tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=labels)


def _dense(logits, labels):
    return tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=labels)


def _special_logits(dt):
    sp = special_floats(dt)
    big = np.finfo(dt).max
    rows = [[np.nan, 1, 2, 3], [np.inf, 1, 2, 3], [-np.inf, 1, 2, 3], [np.inf, np.inf, 0, 0],
            [-np.inf] * 4, [big, big, -big, 0], [sp[5], 0, -0.0, 1], [1, np.nan, -np.inf, 2]]
    return np.array(rows, dt)


def _labels(rng, n, c, dt=np.int32):
    return rng.integers(0, c, size=n).astype(dt)


def sparse_samples(dt, rng):
    sp = _special_logits(dt)
    return [
        (arr(rng, (3, 4), dt), _labels(rng, 3, 4)),
        (arr(rng, (5, 7), dt), _labels(rng, 5, 7, np.int64)),
        (arr(rng, (0, 4), dt), np.zeros(0, np.int32)),
        (arr(rng, (4, 1), dt), np.zeros(4, np.int64)),                  # one class
        (arr(rng, (6, 5), dt, -80, 80), _labels(rng, 6, 5)),            # exp would overflow
        (sp, np.zeros(len(sp), np.int32)),
        (sp, np.array([1, 1, 0, 2, 3, 1, 0, 2], np.int64)),
        (arr(rng, (128, 1000), dt), _labels(rng, 128, 1000, np.int64)),  # ImageNet-sized head
    ]


def sparse_errors(dt):
    rng = np.random.default_rng(0)
    x = arr(rng, (3, 4), dt)
    return [
        (x, np.array([0, 4, 1], np.int32)),            # label too large
        (x, np.array([0, -1, 1], np.int64)),           # negative label
        (x[:, :0], np.zeros(3, np.int32)),             # no classes
        (x[:0, :0], np.zeros(0, np.int32)),
        (x, np.zeros(2, np.int32)),                    # batch mismatch
        (x, np.zeros((1, 3), np.int32)),               # labels rank
        (x[0], np.array(1, np.int32)),                 # logits rank
        (x[None], np.zeros((1, 3), np.int32)),
    ]


def _probs(rng, shape, dt):
    p = arr(rng, shape, dt, 0, 1)
    with np.errstate(all="ignore"):
        return (p / p.sum(axis=-1, keepdims=True)).astype(dt) if p.size else p


def dense_samples(dt, rng):
    sp = _special_logits(dt)
    lab_sp = np.array([[np.nan, 0, 1, 0], [np.inf, 0, 1, 0], [-1, 2, 0, 0], [0, 0, 0, 0]], dt)
    return [
        (arr(rng, (3, 4), dt), _probs(rng, (3, 4), dt)),
        (arr(rng, (3, 4), dt), _probs(rng, (1, 4), dt)),            # labels broadcast
        (arr(rng, (1, 4), dt), _probs(rng, (3, 4), dt)),            # logits broadcast
        (arr(rng, (3, 4), dt), arr(rng, (3, 1), dt, 0, 1)),        # labels broadcast per row
        (arr(rng, (0, 4), dt), _probs(rng, (0, 4), dt)),
        (arr(rng, (3, 0), dt), _probs(rng, (3, 0), dt)),            # no classes: loss 0
        (arr(rng, (6, 5), dt, -80, 80), _probs(rng, (6, 5), dt)),
        (sp, np.tile(np.array([[0, 1, 0.5, 0.5]], dt), (len(sp), 1))),
        (np.zeros((4, 4), dt), lab_sp),
        (arr(rng, (128, 1000), dt), _probs(rng, (128, 1000), dt)),
    ]


def dense_1d_samples(dt, rng):
    return [(arr(rng, (4,), dt), _probs(rng, (3, 4), dt)),
            (arr(rng, (4,), dt), _probs(rng, (1, 4), dt))]


def dense_errors(dt):
    rng = np.random.default_rng(0)
    x, y = arr(rng, (3, 4), dt), _probs(rng, (3, 4), dt)
    return [
        (x[0], y[0]),                  # 1-D both
        (x[None], y[None]),            # 3-D
        (x, y[:2]),                    # batch mismatch
        (x, y[:, :3]),                 # class mismatch
    ]


def _classes(args):
    return max(1, args[0].shape[-1])


CASES = [
    OpCase("SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", _sparse,
           sparse_samples, dtypes=("float32", "float64"), kind="reduction",
           reduction_len=_classes, errors=sparse_errors, grad=True, grad_args=(0,)),
    OpCase("SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", _dense,
           dense_samples, dtypes=("float32", "float64"), kind="reduction",
           reduction_len=_classes, errors=dense_errors, grad=True, grad_ops=("LogSoftmax",)),
    # no gradient: stock's gradient function fails on 1-D logits (ExpandDims out of range)
    OpCase("SoftmaxCrossEntropyWithLogits_1d_logits", "SoftmaxCrossEntropyWithLogits", _dense,
           dense_1d_samples, dtypes=("float32", "float64"), kind="reduction",
           reduction_len=_classes),
]
