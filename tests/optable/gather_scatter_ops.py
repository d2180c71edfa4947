"""Op table: GatherNd, ScatterNd, TensorScatterAdd/Update, OneHot, Where (exact, except the
scatters' float sums)."""
import numpy as np
import tensorflow as tf

from . import OpCase
from .array_ops import ALL, data

R = tf.raw_ops
I32, I64 = np.int32, np.int64
HALF = ("float16", "bfloat16")


def _gnd(p, i, policy=""):
    return R.GatherNd(params=p, indices=i, bad_indices_policy=policy)


def _gnd_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [
        (d(3, 4), np.array([[1, 2], [0, 0], [2, 3]], I32)),
        (d(2, 3, 4), np.array([[[1, 2], [0, 0]], [[1, 0], [0, 2]]], I64)),
        (d(3, 4), np.zeros((0, 2), I32)),
        (d(2, 3, 4, 5), np.array([[1, 2, 3, 4], [0, 0, 0, 0]], I32)),
        (d(100, 100, 8), rng.integers(0, 100, (3000, 2)).astype(I64)),
    ]


def _gnd_odd_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(3, 4), np.array([1, 2], I32)),         # one tuple -> a scalar
            (d(3, 4), np.zeros((2, 0), I32)),         # empty tuples: copies of params
            (d(2, 3), np.array([1], I64))]


def _gnd_rows_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(3, 4), np.array([[1], [0], [1]], I64)), (d(0, 3), np.zeros((0, 1), I32)),
            (d(1000, 64), rng.integers(0, 1000, (4000, 1)).astype(I32))]


def _gnd_errors(dt):
    z = lambda *s: np.zeros(s, dt)  # noqa: E731
    return [(z(3, 4), np.array([[3, 0]], I32)), (z(3, 4), np.array([[0, -1]], I64)),
            (z(3, 4), np.array([[0, 0, 0]], I32)), (z(3, 4), np.array(1, I32)),
            (z(), np.zeros((2, 0), I32)), (z(0, 3), np.zeros((2, 1), I32)),
            (z(3, 0), np.array([[1]], I32)), (z(3, 4), np.array([[5, 0]], I32), "ERROR")]


def _gnd_batch_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(2, 3, 4), np.array([[[1]], [[2]]], I32)),
            (d(3, 4), np.array([[1], [0], [3]], I64))]


def _gnd_ignore_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(5, 3), np.array([[4, 9], [1, 1], [-1, 0]], I32), "IGNORE"),
            (d(5, 3), np.array([[7], [1]], I64), "IGNORE")]


def _snd(i, u, s, policy=""):
    return R.ScatterNd(indices=i, updates=u, shape=s, bad_indices_policy=policy)


def _snd_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [
        (np.array([[1], [3], [1], [0]], I32), d(4), np.array([5], I32)),       # duplicates add
        (np.array([[1], [0], [1]], I64), d(3, 4), np.array([3, 4], I64)),       # row slices
        (np.array([[0, 1], [2, 2], [0, 1]], I32), d(3), np.array([3, 4], I32)),
        (np.array([[[1, 0]], [[0, 2]]], I32), d(2, 1, 5), np.array([2, 3, 5], I32)),
        (np.zeros((0, 1), I32), d(0, 3), np.array([3, 3], I32)),
        (np.zeros((0, 2), I32), d(0), np.array([0, 3], I32)),
        (rng.integers(0, 100, (5000, 1)).astype(I32), d(5000, 16), np.array([100, 16], I32)),
        (rng.integers(0, 50, (20000, 2)).astype(I64), d(20000), np.array([50, 50], I64)),
    ]


def _snd_ignore_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(np.array([[7], [1], [-2], [1]], I32), d(4, 2), np.array([3, 2], I32), "IGNORE")]


def _snd_len(args):
    return max(1, int(np.asarray(args[0]).size))


def _snd_errors(dt):
    z = lambda *s: np.zeros(s, dt)  # noqa: E731
    return [(np.array([[5]], I32), z(1), np.array([5], I32)),
            (np.array([[-1]], I64), z(1), np.array([5], I64)),
            (np.array([[1]], I32), z(2), np.array([5], I32)),
            (np.array(1, I32), z(), np.array([3], I32)),
            (np.array([[1, 2, 3]], I32), z(1), np.array([5, 5], I32)),
            (np.array([[1]], I32), z(1, 2), np.array([5, 5], I32)),
            (np.array([[0]], I32), z(1, 3), np.array([0, 3], I32)),
            (np.zeros((2, 0), I32), z(2, 3), np.array([3], I32)),
            (np.zeros((0, 0), I32), z(0, 3), np.array([3], I32)),
            (np.array([[0]], I32), z(1, 3), np.array([-1, 3], I32)),
            (np.array([[1]], I32), z(1), np.array([[5]], I32)),
            (np.array([1], I32), z(5), np.array([5, 5], I32)),
            (np.zeros((0,), I32), z(0, 3), np.array([4, 3], I32)),
            (np.array([[4]], I32), z(1), np.array([3], I32), "ERROR")]


def _oh(i, d, on, off, axis=-1):
    return R.OneHot(indices=i, depth=d, on_value=on, off_value=off, axis=axis)


def _oh_samples(dt, rng):
    on, off = (np.array(v) for v in data(rng, (2,), dt))
    if dt == np.bool_:
        on, off = np.array(True), np.array(False)
    i = np.array([[0, 2, -1], [5, 1, 3]])
    return [
        (i.astype(I32), 3, on, off), (i.astype(I64), 4, on, off, 0), (i.astype(I32), 3, on, off, 1),
        (i.astype(np.int8), 6, on, off, 2), (np.array([0, 255, 2], np.uint8), 3, on, off),
        (np.array(1, I64), 3, on, off), (np.array(1, I64), 3, on, off, 0),
        (np.zeros((0, 2), I32), 3, on, off, 1), (i.astype(I32), 0, on, off),
        (rng.integers(-1, 1000, (64, 50)).astype(I32), 1000, on, off),
    ]


def _oh_errors(dt):
    i, on, off = np.array([0, 1], I32), np.ones((), dt), np.zeros((), dt)
    return [(i, -1, on, off), (i, 3, on, off, -2), (i, 3, on, off, 2), (i, [3], on, off),
            (i, 3, np.ones((1,), dt), off)]


def _where_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    z = np.zeros((3, 4), dt)
    z[1, 2] = 1
    return [(d(7),), (d(3, 5),), (d(2, 3, 4),), (d(0, 3),), (np.zeros((4, 4), dt),), (z,),
            (d(1, 1, 2, 1, 3, 1, 2, 2),), (d(300, 400),)]


def _tsc(op):
    def fn(t, i, u, policy=""):
        return getattr(R, op)(tensor=t, indices=i, updates=u, bad_indices_policy=policy)
    return fn


def _tsc_samples(dt, rng, dup=True):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    out = [
        (d(4, 3), np.array([[1], [3]], I32), d(2, 3)),                        # row slices
        (d(4, 3), np.array([[1, 2], [0, 0], [3, 1]], I64), d(3)),              # elements
        (d(2, 3, 4), np.array([[[1], [0]], [[1], [1]]], I32), d(2, 2, 3, 4)),  # batch of indices
        (d(2, 3, 4), np.array([[1, 2]], I32), d(1, 4)),
        (d(4, 3), np.zeros((0, 1), I32), d(0, 3)),                              # nothing scattered
        (d(5), np.array([[4], [0]], I64), d(2)),
        (d(300, 64), rng.integers(0, 300, (400, 1)).astype(I32), d(400, 64)),
    ]
    if dup:   # duplicates: Add sums them in order; Update keeps the last (stock does too here)
        out.append((d(4, 3), np.array([[1], [1], [2], [1]], I32), d(4, 3)))
    return out


def _tsc_ignore_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(3, 2), np.array([[7], [1], [-2], [0]], I32), d(4, 2), "IGNORE")]


def _tsc_errors(dt):
    z = lambda *s: np.zeros(s, dt)  # noqa: E731
    return [(z(4, 3), np.array([[5]], I32), z(1, 3)),            # out of range
            (z(4, 3), np.array([[-1]], I64), z(1, 3)),
            (z(4, 3), np.array([[1]], I32), z(2, 3)),            # outer dims differ
            (z(4, 3), np.array([[1, 2, 0]], I32), z(1)),         # index deeper than the rank
            (z(4, 3), np.array([1], I32), z(3)),                 # 1-D indices: updates [1]
            (z(4, 3), np.zeros((2, 0), I32), z(2, 4, 3)),         # empty index depth
            (z(), np.zeros((0, 1), I32), z(0))]                  # scalar tensor


def _tsc_len(args):
    return max(1, int(np.asarray(args[1]).size))


NUM = ("float32", "float64", "int32", "int64")   # stock has no bool TensorScatterAdd/Sub

CASES = [
    OpCase("TensorScatterUpdate", "TensorScatterUpdate", _tsc("TensorScatterUpdate"),
           _tsc_samples, dtypes=ALL, kind="exact", errors=_tsc_errors, grad=True,
           grad_args=(0, 2), grad_ops=("GatherNd", "TensorScatterUpdate")),
    OpCase("TensorScatterUpdate_half", "TensorScatterUpdate", _tsc("TensorScatterUpdate"),
           _tsc_samples, dtypes=("float16", "bfloat16"), kind="exact"),
    OpCase("TensorScatterUpdate_ignore", "TensorScatterUpdate", _tsc("TensorScatterUpdate"),
           _tsc_ignore_samples, dtypes=ALL, kind="exact"),
    OpCase("TensorScatterAdd", "TensorScatterAdd", _tsc("TensorScatterAdd"), _tsc_samples,
           dtypes=NUM + HALF, kind="reduction", reduction_len=_tsc_len, errors=_tsc_errors, grad=True,
           grad_args=(0, 2), grad_ops=("GatherNd",)),
    OpCase("TensorScatterAdd_ignore", "TensorScatterAdd", _tsc("TensorScatterAdd"),
           _tsc_ignore_samples, dtypes=NUM, kind="reduction", reduction_len=_tsc_len),
    OpCase("TensorScatterSub", "TensorScatterSub", _tsc("TensorScatterSub"), _tsc_samples,
           dtypes=NUM + HALF, kind="reduction", reduction_len=_tsc_len, errors=_tsc_errors,
           grad=True, grad_args=(0, 2), grad_ops=("GatherNd", "Neg")),
    OpCase("GatherNd", "GatherNd", _gnd, _gnd_samples, dtypes=ALL + HALF, kind="exact", grad=True,
           grad_args=(0,), grad_ops=("ScatterNd",), errors=_gnd_errors),
    # Forward only: stock's gradient (ScatterNd) rejects these index shapes.
    OpCase("GatherNd_odd", "GatherNd", _gnd, _gnd_odd_samples, dtypes=ALL, kind="exact"),
    # [n, 1] indices pick whole rows: the gradient is IndexedSlices, summed by segment.
    OpCase("GatherNd_rows", "GatherNd", _gnd, _gnd_rows_samples, dtypes=ALL, kind="exact",
           grad=True, grad_args=(0,), grad_ops=("UnsortedSegmentSum",)),
    OpCase("GatherNd_batch_dims", "GatherNd", lambda p, i: tf.gather_nd(p, i, batch_dims=1),
           _gnd_batch_samples, dtypes=ALL, kind="exact", grad=True, grad_args=(0,),
           grad_ops=("ScatterNd",)),
    # Bad indices ignored: forward only (stock's gradients use the default policy and raise).
    OpCase("GatherNd_ignore", "GatherNd", _gnd, _gnd_ignore_samples, dtypes=ALL, kind="exact"),
    OpCase("ScatterNd_ignore", "ScatterNd", _snd, _snd_ignore_samples, dtypes=ALL,
           kind="reduction", reduction_len=_snd_len),
    OpCase("ScatterNd", "ScatterNd", _snd, _snd_samples, dtypes=ALL + HALF, kind="reduction",
           reduction_len=_snd_len, grad=True, grad_args=(1,), grad_ops=("GatherNd",),
           errors=_snd_errors),
    OpCase("OneHot", "OneHot", _oh, _oh_samples, dtypes=ALL, kind="exact", errors=_oh_errors),
    OpCase("Where", "Where", lambda x: R.Where(condition=x), _where_samples, dtypes=ALL,
           kind="exact", errors=lambda dt: [(np.ones((), dt),),
                                            (np.ones((1,) * 9, dt),)]),
]
