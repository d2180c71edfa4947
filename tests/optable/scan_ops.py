"""Op table: Range, Cumsum/Cumprod, TopKV2, ReverseV2."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, int_edges
from .array_ops import ALL, data

R = tf.raw_ops
NUM = ("float32", "float64", "int32", "int64")
I32, I64 = np.int32, np.int64


def _range_samples(dt, rng):
    c = lambda *v: tuple(np.array(e, dt) for e in v)  # noqa: E731
    out = [c(0, 10, 1), c(10, 0, -3), c(0, 0, 1), c(-5, 5, 3), c(7, 7, -2), c(3, 1000, 7)]
    if np.dtype(dt).kind == "f":
        out += [c(0.1, 100, 0.3), c(1, 0, -0.3), c(0, 1, np.inf), c(-1.5, 2.25, 0.5),
                c(1e30, 1e30, 1), c(0, 1e6, 0.7)]
    else:
        e = int_edges(dt)
        out += [c(e[0], e[-1], e[-1]), c(e[-1], e[0], e[0]), c(e[-1] - 1, e[-1], 5)]
    return out


def _range_errors(dt):
    c = lambda *v: tuple(np.array(e, dt) for e in v)  # noqa: E731
    out = [c(0, 5, 0), c(5, 0, 1), c(0, 5, -1), (np.zeros(2, dt), np.array(5, dt), np.array(1, dt)),
           (np.array(0, dt), np.array(5, dt), np.ones((1, 1), dt))]
    if np.dtype(dt).kind == "f":
        out += [c(np.nan, 1, 1), c(0, 1, np.nan), c(0, 1e10, 1e-10), c(0, np.inf, 1)]
    return out


def _scan(op):
    return lambda x, a, e=False, r=False: op(x, a, exclusive=e, reverse=r)


def _scan_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    x = d(3, 5)
    return [(x, 0), (x, 1), (x, -1, True), (x, 1, False, True), (x, 0, True, True),
            (d(7,), 0, True), (d(0, 3), 0, True), (d(3, 0), -1, False, True),
            (d(2, 3, 4), np.array(1, I64), True, True), (d(2, 3, 4), -3),
            (d(1, 5), 0, True), (d(300, 400), 0), (d(300, 400), 1, True, True),
            # no values near the subnormal range: the loop that need not flush
            (np.asarray(arr(rng, (4, 6), dt)), 1), (np.asarray(arr(rng, (5, 3), dt)), 0, True, True)]


def _scan_len(args):
    x, a = np.asarray(args[0]), int(args[1])
    return max(1, x.shape[a])


def _scan_errors(dt):
    return [(np.ones((), dt), 0), (np.ones((3,), dt), 1), (np.ones((3, 2), dt), -3),
            (np.ones((3,), dt), [0])]


def _no_nan(rng, shape, dt):
    """data() with NaN replaced (TopK's order of NaN is not reproduced) and ties added."""
    x = data(rng, shape, dt)
    if np.dtype(dt).kind == "f":
        x[np.isnan(x)] = np.inf
        x[..., ::3] = np.round(x[..., ::3])  # ties, and -0.0 next to +0.0
    return x


def _topk(x, k, s=True, it=tf.int32):
    return R.TopKV2(input=x, k=k, sorted=s, index_type=it)


def _topk_samples(dt, rng):
    d = lambda *s: _no_nan(rng, s, dt)  # noqa: E731
    z = np.array([0.0, -0.0, 1.0, -0.0, 0.0, 1.0]).astype(dt)
    return [(d(5,), 3), (d(3, 8), 1), (d(3, 8), 8), (d(3, 8), 0), (d(2, 3, 10), 4),
            (d(3, 9), 1, False), (d(3, 9), 9, False), (d(0, 5), 2),
            (z, 4), (z, 1), (d(4, 12), np.array(5, I64)), (d(4, 12), np.array(3, np.int16)),
            (d(64, 1000), 5), (d(16, 500), 100), (d(8, 40), 20)]


def _topk_errors(dt):
    x = np.zeros((2, 3), dt)
    return [(x, -1), (x, 4), (np.zeros((), dt), 0), (x, [1]), (x, np.array(4, I64))]


def _rev_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(3, 4), [1]), (d(3, 4), [0, 1]), (d(3, 4), [-1]), (d(3, 4), np.zeros(0, I32)),
            (d(), np.zeros(0, I32)), (d(0, 3), [0]), (d(2, 3, 4, 5), np.array([1, -1], I64)),
            (d(300, 400), [0]), (d(*(1,) * 8), [7])]


def _rev_errors(dt):
    x = np.zeros((2, 3), dt)
    return [(x, [1, -1]), (x, [2]), (x, [-3]), (x, 0), (x, [[0]]),
            (np.zeros((1,) * 9, dt), np.zeros(0, I32))]


CASES = [
    OpCase("Range", "Range", lambda s, lim, d: R.Range(start=s, limit=lim, delta=d),
           _range_samples, dtypes=NUM, kind="exact", errors=_range_errors),
    # The kernel takes length-1 vectors for scalars; TF's graph shape fn does not (no check).
    OpCase("Range_vector_args", "Range", lambda s, lim, d: R.Range(start=s, limit=lim, delta=d),
           lambda dt, rng: [(np.array([2], dt), np.array(9, dt), np.array([3], dt))],
           dtypes=NUM, kind="exact", shape_check=False),
    OpCase("Cumsum", "Cumsum", _scan(tf.math.cumsum), _scan_samples, dtypes=NUM,
           kind="reduction", reduction_len=_scan_len, grad=True, grad_args=(0,),
           grad_ops=("Cumsum",), errors=_scan_errors),
    OpCase("Cumprod", "Cumprod", _scan(tf.math.cumprod), _scan_samples, dtypes=NUM,
           kind="reduction", reduction_len=_scan_len, grad=True, grad_args=(0,),
           grad_ops=("Cumprod", "Cumsum"), errors=_scan_errors),
    OpCase("TopKV2", "TopKV2", _topk, _topk_samples, dtypes=NUM, kind="exact", grad=True,
           grad_args=(0,), grad_ops=("ScatterNd", "Range"), errors=_topk_errors),
    # No columns: forward only (stock's gradient calls Range with delta 0 and raises).
    # Also forward only: int16/int64 indices (stock's gradient adds them to int32).
    OpCase("TopKV2_nograd", "TopKV2", _topk,
           lambda dt, rng: [(np.zeros((4, 0), dt), 0), (_no_nan(rng, (3, 7), dt), 4, True, tf.int64),
                            (_no_nan(rng, (3, 7), dt), 2, True, tf.int16)],
           dtypes=NUM, kind="exact"),
    OpCase("ReverseV2", "ReverseV2", lambda x, a: R.ReverseV2(tensor=x, axis=a), _rev_samples,
           dtypes=ALL, kind="exact", grad=True, grad_args=(0,), grad_ops=("ReverseV2",),
           errors=_rev_errors),
]
