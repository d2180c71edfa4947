"""Op table: index-driven array ops (Slice, StridedSlice(+Grad), Pad/PadV2, Tile, GatherV2,
UnsortedSegmentSum); exact comparison except for sums."""
import numpy as np
import tensorflow as tf

from . import OpCase
from .array_ops import ALL, _errs, _shaped, data
from shape_fns.strided_slice import plan

R = tf.raw_ops
NUM = ("float32", "float64", "int32", "int64")


def _idx(v, dt=tf.int32):
    # An explicit index tensor: an empty Python list would otherwise become float32.
    return v if isinstance(v, (np.ndarray, tf.Tensor)) else tf.constant(v, dt)


def _ss(x, b, e, s, bm=0, em=0, elm=0, nam=0, sam=0, dt=tf.int32):
    return R.StridedSlice(input=x, begin=_idx(b, dt), end=_idx(e, dt), strides=_idx(s, dt),
                          begin_mask=bm, end_mask=em, ellipsis_mask=elm, new_axis_mask=nam,
                          shrink_axis_mask=sam)


# (input shape, begin, end, strides, begin_mask, end_mask, ellipsis_mask, new_axis, shrink)
SS = [
    ((3, 4), [1, 0], [3, 4], [1, 1], 0, 0, 0, 0, 0),
    ((3, 4), [-1, 10], [-10, -10], [-1, -1], 0, 0, 0, 0, 0),       # reverse, clamped
    ((2, 3, 4), [0, 1], [0, 3], [1, 1], 0, 0, 1, 0, 0),             # x[..., 1:3]
    ((3, 4), [0, 0, 0], [0, 2, 0], [1, 1, 1], 0, 0, 0, 5, 0),       # x[None, 0:2, None]
    ((3, 4), [1], [2], [1], 0, 0, 0, 0, 1),                         # x[1]
    ((3, 4), [-1], [0], [1], 0, 0, 0, 0, 1),                        # x[-1]
    ((5, 6), [2, 3], [0, 0], [2, -1], 0, 1, 0, 0, 0),               # x[2::2, 3::-1]
    ((), [0], [0], [1], 0, 0, 0, 1, 0),                             # scalar[None]
    ((), [], [], [], 0, 0, 0, 0, 0),                                # empty spec
    ((0, 3), [0, 0], [0, 3], [1, 1], 0, 0, 0, 0, 0),
    ((4,), [-100], [100], [3], 0, 0, 0, 0, 0),
    ((4,), [0], [4], [5], 0, 0, 0, 0, 0),
    ((4,), [0], [0], [-1], 1, 1, 0, 0, 0),                          # x[::-1]
    ((4,), [3], [1], [1], 0, 0, 0, 0, 0),                           # empty interval
    ((2, 3, 4), [0, 0, 0, 0], [1, 0, 0, 2], [1, 1, 1, 1], 0, 0, 2, 4, 0),  # x[0:1, ..., None, 0:2]
    ((2, 3, 4), [0, 1], [0, 2], [1, 1], 0, 0, 1, 0, 2),             # x[..., 1]
    ((6,), [0], [1], [-2], 1, 0, 0, 0, 0),                          # x[:1:-2]
    ((3, 4), [0], [0], [1], 0, 0, 1, 1, 0),                         # ellipsis wins over new axis
    ((3, 4), [0], [0], [1], 0, 0, 0, 1, 1),                         # new axis wins over shrink
    ((2, 3, 4, 5), [1, 0, 0, 2], [0, 0, 0, 3], [1, -1, 1, 1], 0, 3, 4, 0, 8),
    ((300, 400), [0, 1], [300, 400], [2, 3], 0, 0, 0, 0, 0),
]


def _ss_samples(dt, rng):
    out = [(data(rng, s, dt),) + tuple(rest) for s, *rest in SS]
    x = data(rng, (3, 5), dt)
    out.append((x, np.array([1, -1], np.int64), np.array([3, 0], np.int64),
                np.array([1, -2], np.int64)))
    return out


def _ssg_samples(dt, rng):
    out = []
    for s, b, e, st, *m in SS:
        final = plan(s, tuple(b), tuple(e), tuple(st), *m)[2]
        out.append((list(s), b, e, st, data(rng, final, dt), *m))
    return out


def _ssg(shape, b, e, s, dy, bm=0, em=0, elm=0, nam=0, sam=0):
    return R.StridedSliceGrad(shape=_idx(shape), begin=_idx(b), end=_idx(e), strides=_idx(s),
                              dy=dy, begin_mask=bm, end_mask=em, ellipsis_mask=elm,
                              new_axis_mask=nam, shrink_axis_mask=sam)


def _gather_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    i32, i64 = np.int32, np.int64
    return [
        (d(5, 3), np.array([0, 4, 2, 2], i32), 0, 0),
        (d(5, 3), np.array([[1, 0], [2, 2]], i64), 1, 0),
        (d(5,), np.array(3, i32), 0, 0),
        (d(2, 3, 4), np.array([[2, 0], [1, 1]], i32), 1, 1),
        (d(2, 3, 4), np.array([[3, 0, 1], [2, 2, 2]], i64), -1, -1),
        (d(2, 3, 4), np.array([3, 0], i32), -1, 0),
        (d(5, 3), np.zeros((0,), i32), 0, 0),
        (d(0, 3), np.zeros((0, 2), i64), 0, 0),
        (d(3, 4), np.array([0, 3, 1], i32), 1, 1),
        (d(2, 3, 4, 5), np.array([[1], [0]], i32), 2, 1),
        (d(1000, 64), rng.integers(0, 1000, 5000).astype(i32), 0, 0),
        (d(1000, 64), rng.integers(0, 1000, 3000).astype(i64), 0, 0),
    ]


def _useg_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    i32, i64 = np.int32, np.int64
    return [
        (d(6), np.array([0, 1, 0, 2, -1, 1], i32), 3),
        (d(5, 3), np.array([4, 0, 4, 1, 1], i64), 6),
        (d(2, 3, 2), np.array([[0, 1, 0], [3, 3, 3]], i32), 4),
        (d(), np.array(1, i32), 2),
        (d(0, 3), np.zeros((0,), i32), 2),
        (d(4, 0), np.array([0, 1, 1, 0], i32), 2),
        (d(5000, 32), rng.integers(-1, 100, 5000).astype(i32), np.int64(100)),
    ]


def _useg_len(args):
    return max(1, int(np.asarray(args[1]).size))


CASES = [
    # All ids dropped into zero segments: forward only (stock's gradient gathers from an empty
    # tensor and fails).
    OpCase("UnsortedSegmentSum_none", "UnsortedSegmentSum",
           lambda d, i, n: tf.math.unsorted_segment_sum(d, i, n),
           lambda dt, rng: [(data(rng, (3,), dt), np.array([-1, -1, -2], np.int64), 0),
                            (data(rng, (3, 2), dt), np.array([-1, 0, -2], np.int32), 1)],
           dtypes=NUM, kind="exact"),
    OpCase("Slice", "Slice", lambda x, b, s: tf.slice(x, b, s),
           _shaped(lambda: [((3, 4), [1, 0], [2, 4]), ((3, 4), [0, 1], [-1, -1]),
                            ((3, 4), [3, 4], [-1, -1]), ((), np.zeros(0, np.int32), np.zeros(0, np.int32)), ((0, 2), [0, 0], [-1, 1]),
                            ((2, 3, 4), np.array([1, 1, 1], np.int64), np.array([1, 2, -1], np.int64)),
                            ((300, 400), [10, 20], [200, 300])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Pad",),
           errors=_errs(lambda: [((3, 4), [0, 0], [4, 1]), ((3, 4), [-1, 0], [1, 1]),
                                 ((3, 4), [0], [1]), ((3, 4), [0, 0], [-2, 1]),
                                 ((3, 4), [4, 0], [0, 1]), ((0, 2), [1, 0], [0, 1])])),
    OpCase("StridedSlice", "StridedSlice", _ss, _ss_samples, dtypes=ALL, kind="exact",
           grad=True, grad_args=(0,), grad_ops=("StridedSliceGrad",),
           errors=_errs(lambda: [((3, 4), [5], [6], [1], 0, 0, 0, 0, 1),
                                 ((3, 4), [0], [1], [0]),
                                 ((3, 4), [0, 0], [1, 1], [1, 1], 0, 0, 3),
                                 ((3, 4), [1], [0], [-1], 0, 0, 0, 0, 1),
                                 ((3, 4), [0, 0], [1], [1, 1]),
                                 ((3, 4), [0, 0, 0], [1, 1, 1], [1, 1, 1]),
                                 ((3, 4), [[0]], [[0]], [[1]])])),
    OpCase("StridedSlice_pyindex", "StridedSlice", lambda x: x[1:, ::-1, None, ..., 0],
           _shaped(lambda: [((3, 4, 5, 6),), ((2, 3, 1),), ((1, 0, 2),)]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("StridedSliceGrad",)),
    OpCase("StridedSliceGrad", "StridedSliceGrad", _ssg, _ssg_samples, dtypes=ALL, kind="exact",
           grad=True, grad_args=(4,), grad_ops=("StridedSlice",),
           errors=lambda dt: [([3, 4], [0], [2], [1], np.zeros((3, 4), dt)),
                              ([[3, 4]], [0], [2], [1], np.zeros((2, 4), dt))]),
    OpCase("Pad", "Pad", lambda x, p: R.Pad(input=x, paddings=p),
           _shaped(lambda: [((3, 4), [[1, 2], [0, 3]]), ((), np.zeros((0, 2), np.int32)),
                            ((0, 3), [[1, 1], [0, 0]]), ((2, 3, 4), [[0, 0], [1, 0], [2, 2]]),
                            ((2, 3), np.array([[0, 1], [1, 0]], np.int64)),
                            ((300, 400), [[1, 1], [2, 2]])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Slice",),
           errors=_errs(lambda: [((3, 4), [[-1, 0], [0, 0]]), ((3, 4), [[1, 0]]),
                                 ((3,), [1, 1]), ((3, 4), [[1, 0, 0], [0, 0, 0]])])),
    OpCase("PadV2", "PadV2",
           lambda x, p, c: R.PadV2(input=x, paddings=p, constant_values=c),
           lambda dt, rng: [(data(rng, s, dt), p, np.array(data(rng, (3,), dt)[i % 3]))
                            for i, (s, p) in enumerate([
                                ((3, 4), [[1, 2], [0, 3]]), ((0, 3), [[1, 1], [0, 0]]),
                                ((), np.zeros((0, 2), np.int32)), ((2, 3, 4), [[0, 0], [1, 0], [2, 2]]),
                                ((300, 400), [[1, 1], [2, 2]])])],
           dtypes=ALL, kind="exact", grad=True, grad_args=(0,), grad_ops=("Slice",),
           errors=lambda dt: [(np.zeros((3, 4), dt), [[1, 0], [0, 0]], np.zeros((2,), dt)),
                              (np.zeros((3, 4), dt), [[1, 0], [0, 0]], np.zeros((1,), dt)),
                              (np.zeros((3, 4), dt), [[-1, 0], [0, 0]], np.zeros((), dt))]),
    OpCase("Tile", "Tile", lambda x, m: tf.tile(x, m),
           _shaped(lambda: [((3, 4), [2, 1]), ((), np.zeros((0,), np.int32)), ((0, 3), [2, 2]),
                            ((2, 3), [0, 2]), ((2, 1, 3), [1, 3, 2]),
                            ((2, 3), np.array([2, 2], np.int64)), ((100, 100), [3, 4])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Reshape",),
           errors=_errs(lambda: [((3, 4), [2]), ((3, 4), [-1, 1]), ((3, 4), [[1, 1]])])),
    OpCase("GatherV2", "GatherV2",
           lambda p, i, a, b: R.GatherV2(params=p, indices=i, axis=a, batch_dims=b),
           _gather_samples, dtypes=ALL, kind="exact", grad=True, grad_args=(0,),
           grad_ops=("UnsortedSegmentSum",),
           errors=lambda dt: [(np.zeros((3, 4), dt), np.array(i, t), a, b) for i, t, a, b in [
               ([5], np.int32, 0, 0), ([-1], np.int32, 0, 0), ([0, 7], np.int64, 1, 0),
               ([-2], np.int64, 0, 0), ([0], np.int32, 2, 0), ([[0]], np.int32, 1, 2),
               ([[0], [1]], np.int32, 1, 1), ([0], np.int32, -3, 0), ([[0, 4]] * 3, np.int32, 1, 1)]]
           + [(np.zeros((), dt), np.array([0], np.int32), 0, 0)]),
    OpCase("UnsortedSegmentSum", "UnsortedSegmentSum",
           lambda d, i, n: tf.math.unsorted_segment_sum(d, i, n), _useg_samples, dtypes=NUM,
           kind="reduction", reduction_len=_useg_len, grad=True, grad_args=(0,),
           grad_ops=("GatherV2",),
           errors=lambda dt: [(np.zeros((3,), dt), np.array([0, 5, 1], np.int32), 3),
                              (np.zeros((3, 4), dt), np.array([0, 1], np.int32), 3),
                              (np.zeros((3,), dt), np.array([0, 0, 1], np.int32), -1),
                              (np.zeros((3,), dt), np.array([0, 0, 1], np.int32), [2])]),
]
