"""Op table: array ops (data movement and shape queries; exact comparison).

Index-driven ops (slicing, padding, tiling, gathering) are in `array_index_ops.py`, whose
cases are appended here.
"""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, int_edges, special_floats

R = tf.raw_ops
ALL = ("float32", "float64", "int32", "int64", "bool")
INDEX = ("int32", "int64")


def data(rng, shape, dt):
    """Random values with the dtype's special values (NaN/Inf/edges) mixed in."""
    dt = np.dtype(dt)
    a = np.array(arr(rng, shape, dt))  # 0-d as an array (a tensor), not a numpy scalar
    if a.size and dt.kind in "fi":
        sp = special_floats(dt) if dt.kind == "f" else int_edges(dt)
        flat = a.reshape(-1)
        k = min(flat.size, sp.size)
        flat[rng.choice(flat.size, k, replace=False)] = sp[:k]
    return a


def _shaped(make):
    """samples(dt, rng) from [(shape, *rest)]: the shape becomes data of dtype dt."""
    def samples(dt, rng):
        return [(data(rng, s, dt),) + tuple(rest) for s, *rest in make()]
    return samples


def _errs(make):
    def errors(dt):
        rng = np.random.default_rng(0)
        return [(data(rng, s, dt),) + tuple(rest) for s, *rest in make()]
    return errors


SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4, 5), (1, 1, 3), (300, 400)]


def _concat(*a):
    return R.ConcatV2(values=list(a[:-1]), axis=a[-1])


def _concat_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(2, 3), d(2, 5), 1), (d(2, 3), d(4, 3), d(1, 3), 0), (d(2, 3), d(2, 2), -1),
            (d(0, 3), d(2, 3), 0), (d(2, 0), d(2, 3), d(2, 0), 1), (d(5,), d(0,), d(2,), 0),
            (d(2, 3, 4), d(2, 1, 4), np.array(1, np.int64)),
            (d(300, 200), d(300, 300), 1)]


def _pack(*a):
    return R.Pack(values=list(a[:-1]), axis=a[-1])


def _pack_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    return [(d(2, 3), d(2, 3), d(2, 3), 0), (d(2, 3), d(2, 3), 1), (d(2, 3), d(2, 3), 2),
            (d(2, 3), d(2, 3), -1), (d(), d(), 0), (d(0, 3), d(0, 3), 1), (d(4,), 0),
            (d(200, 300), d(200, 300), 1)]


def _split_samples(dt, rng):
    return [(data(rng, (6, 4), dt), 3, 0), (data(rng, (6, 4), dt), 2, -1),
            (data(rng, (2, 0, 6), dt), 3, 2),
            (data(rng, (300, 400), dt), 4, 1)]


def _split_v_samples(dt, rng):
    return [(data(rng, (6, 4), dt), [1, 2, 3], 0), (data(rng, (6, 4), dt), [1, -1], -1),
            (data(rng, (6, 4), dt), [0, 4, 0], 1),
            (data(rng, (3, 6), dt), np.array([2, -1, 1], np.int64), 1),
            (data(rng, (300, 400), dt), [100, 250, -1], 1)]


def _fill_samples(dt, rng):
    v = [np.array(e) for e in data(rng, (11,), dt)]  # 0-d arrays: tensors, not Python scalars
    return [([2, 3], v[0]), ([], v[1]), ([0, 3], v[2]), (np.array([2, 1, 3], np.int64), v[3]),
            ([300, 400], v[6]), ([3], v[7])]


def _bcast_samples(dt, rng):
    return [(data(rng, (3,), dt), [2, 3]), (data(rng, (), dt), [2, 2]),
            (data(rng, (1, 3), dt), [4, 3]), (data(rng, (2, 1), dt), [2, 0]),
            (data(rng, (3, 1, 1), dt), [2, 3, 4, 5]), (data(rng, (2, 3), dt), [2, 3]),
            (data(rng, (1,), dt), np.array([0], np.int64)), (data(rng, (1, 400), dt), [300, 400])]


def _bitcast_samples(dt, rng):
    """Every target of another size: narrower adds a last dim, wider takes it (its size)."""
    dt = np.dtype(dt)
    out = []
    for t in (tf.uint8, tf.int16, tf.float16, tf.bfloat16, tf.int32, tf.float32, tf.uint32,
              tf.int64, tf.float64):
        size = t.size
        if size <= dt.itemsize:
            shapes = [(), (3,), (2, 3), (0, 4)]
        else:
            k = size // dt.itemsize
            shapes = [(k,), (3, k), (0, k)]
        for shape in shapes:
            scalar = shape == () if size <= dt.itemsize else len(shape) == 1
            if scalar and t == tf.bfloat16:   # TensorFlow cannot hand a 0-d bfloat16 to numpy
                continue
            out.append((data(rng, shape, dt), t))
    return out


CASES = [
    OpCase("Reshape", "Reshape", lambda x, s: tf.reshape(x, s),
           _shaped(lambda: [((2, 3, 4), [6, 4]), ((2, 3, 4), [-1]), ((), []), ((1,), []),
                            ((), [1, 1]), ((0, 3), [0, -1]), ((0, 3), [-1, 3]), ((0, 3), [-1, 0]),
                            ((12,), [3, -1, 2]), ((2, 3), np.array([3, 2], np.int64)),
                            ((300, 400), [400, -1])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Reshape", "Shape"),
           errors=_errs(lambda: [((3, 4), [5, -1]), ((3, 4), [-1, -1]), ((3, 4), [-2, -6]),
                                 ((12,), [0, -1]), ((3, 4), [[12]]), ((3, 4), [5, 2])])),
    # a scalar shape is one dim to TensorFlow's kernel (keras.ops.reshape(x, -1)); graph shape
    # inference refuses it, so there is no graph to compare shapes with
    OpCase("Reshape-scalar_shape", "Reshape", lambda x, s: tf.reshape(x, s),
           _shaped(lambda: [((2, 3), -1), ((2, 3), 6), ((0, 3), 0), ((0, 3), -1), ((), 1)]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Reshape", "Shape"), shape_check=False,
           errors=_errs(lambda: [((3, 4), 5), ((3, 4), -2), ((3, 4), 0)])),
    OpCase("Bitcast", "Bitcast", lambda x, t: tf.bitcast(x, t), _bitcast_samples,
           dtypes=("float32", "float64", "int32", "int64", "int16", "uint8"), kind="exact",
           errors=lambda dt: [(data(np.random.default_rng(0), s, np.int16), t)
                              for s, t in (((2, 3), tf.float32), ((), tf.int32),
                                           ((4, 3), tf.int64))]),
    OpCase("Identity", "Identity", lambda x: R.Identity(input=x),
           _shaped(lambda: [(s,) for s in SHAPES]), dtypes=ALL, kind="exact", grad=True),
    OpCase("StopGradient", "StopGradient", lambda x: tf.stop_gradient(x),
           _shaped(lambda: [(s,) for s in SHAPES]), dtypes=ALL, kind="exact", grad=True),
    OpCase("ZerosLike", "ZerosLike", lambda x: R.ZerosLike(x=x),
           _shaped(lambda: [(s,) for s in SHAPES]), dtypes=ALL, kind="exact"),
    OpCase("OnesLike", "OnesLike", lambda x: R.OnesLike(x=x),
           _shaped(lambda: [(s,) for s in SHAPES]), dtypes=ALL, kind="exact"),
    OpCase("ExpandDims", "ExpandDims", lambda x, a: tf.expand_dims(x, a),
           _shaped(lambda: [((3, 4), 0), ((3, 4), 1), ((3, 4), 2), ((3, 4), -1), ((3, 4), -3),
                            ((), 0), ((), -1), ((0,), 1), ((3, 4), [1]),
                            ((2, 3), np.array(1, np.int64))]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Reshape",),
           errors=_errs(lambda: [((3, 4), 3), ((3, 4), -4), ((3, 4), [0, 1])])),
    OpCase("Squeeze", "Squeeze", lambda x, a: R.Squeeze(input=x, axis=a),
           _shaped(lambda: [((1, 3, 1), []), ((1, 3, 1), [0]), ((1, 3, 1), [-1]), ((1,), []),
                            ((3,), []), ((1, 1), []), ((0, 1), [1]), ((1, 3, 1), [0, 0, 2]),
                            ((300, 1, 400), [1])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Reshape",),
           errors=_errs(lambda: [((3, 4), [0]), ((1, 4), [2]), ((1, 4), [-3])])),
    OpCase("Transpose", "Transpose", lambda x, p: tf.transpose(x, p),
           _shaped(lambda: [((2, 3, 4), [2, 0, 1]), ((3, 5), [1, 0]), ((), []), ((0, 3), [1, 0]),
                            ((2, 3, 4, 5), [0, 2, 3, 1]),
                            ((2, 3, 4), np.array([1, 2, 0], np.int64)), ((300, 400), [1, 0]),
                            # large: collapsed to (batched) 2-D transposes, banded or plain
                            ((4, 32, 32, 16), [0, 3, 1, 2]), ((4, 16, 32, 32), [0, 2, 3, 1]),
                            ((1, 300, 1, 400), [3, 2, 1, 0]), ((8, 64, 4, 32), [0, 2, 1, 3])]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("InvertPermutation", "Transpose"),
           errors=_errs(lambda: [((3, 4), [0, 0]), ((3, 4), [0]), ((3, 4), [0, 2]),
                                 ((3, 4), [-3, 0]), ((3, 4), [-1, 1])])),
    # Negative perm entries and single-output splits: forward only (stock's own transpose
    # gradient rejects a negative perm in InvertPermutation; a one-way split's gradient has no
    # ConcatV2 to check).
    OpCase("Transpose_negperm", "Transpose", lambda x, p: tf.transpose(x, p),
           _shaped(lambda: [((3, 5), [-1, 0]), ((2, 3, 4), [-1, 0, -2])]),
           dtypes=ALL, kind="exact"),
    OpCase("Split_one", "Split", lambda x, n, a: tf.split(x, n, axis=a),
           _shaped(lambda: [((5,), 1, 0), ((3, 4), 1, -1)]), dtypes=ALL, kind="exact"),
    OpCase("SplitV_one", "SplitV",
           lambda x, s, a: R.SplitV(value=x, size_splits=s, axis=a, num_split=len(s)),
           _shaped(lambda: [((5,), [5], 0), ((3, 4), [4], -1)]), dtypes=ALL, kind="exact",
           errors=_errs(lambda: [((3, 4), [-1], 1)])),
    OpCase("Unpack_none", "Unpack", lambda x, n, a: R.Unpack(value=x, num=n, axis=a),
           _shaped(lambda: [((0, 3), 0, 0), ((2, 0), 0, 1)]), dtypes=ALL, kind="exact"),
    OpCase("InvertPermutation", "InvertPermutation", lambda x: R.InvertPermutation(x=x),
           lambda dt, rng: [(np.array(p, dt),) for p in ([2, 0, 1], [], [0], list(rng.permutation(50)))],
           dtypes=INDEX, kind="exact",
           errors=lambda dt: [(np.array(p, dt),) for p in ([0, 0, 1], [0, 3], [-1, 0], [[0]])]),
    OpCase("ConcatV2", "ConcatV2", _concat, _concat_samples, dtypes=ALL, kind="exact",
           grad=True, grad_ops=("SplitV",),
           errors=lambda dt: [(np.zeros((3, 4), dt), np.zeros((3, 5), dt), 0),
                              (np.zeros((3, 4), dt), np.zeros((3,), dt), 0),
                              (np.zeros((3, 4), dt), np.zeros((3, 4), dt), 2),
                              (np.zeros((3, 4), dt), np.zeros((3, 4), dt), -3),
                              (np.zeros((3, 4), dt), 0),  # N=1 is below the OpDef minimum
                              (np.zeros((), dt), np.zeros((), dt), 0)]),
    OpCase("ConcatOffset", "ConcatOffset",
           lambda d, *s: R.ConcatOffset(concat_dim=d, shape=list(s)),
           lambda dt, rng: [(1, np.array([2, 3], dt), np.array([2, 4], dt), np.array([2, 0], dt)),
                            (0, np.array([5], dt), np.array([2], dt)),
                            (-1, np.array([2, 3, 4], dt), np.array([2, 3, 1], dt))],
           dtypes=INDEX, kind="exact",
           errors=lambda dt: [(0, np.array([2, 3], dt), np.array([2, 4], dt)),
                              (0, np.array([2, 3], dt), np.array([2, 3, 4], dt)),
                              (5, np.array([2, 3], dt), np.array([2, 3], dt)),
                              ([0], np.array([2, 3], dt), np.array([2, 3], dt))]),
    OpCase("Pack", "Pack", _pack, _pack_samples, dtypes=ALL, kind="exact",
           grad=True, grad_ops=("Unpack",),
           errors=lambda dt: [(np.zeros((3, 4), dt), np.zeros((3, 5), dt), 0),
                              (np.zeros((3, 4), dt), np.zeros((3, 4), dt), 3),
                              (np.zeros((3, 4), dt), np.zeros((3, 4), dt), -4)]),
    OpCase("Unpack", "Unpack", lambda x, n, a: R.Unpack(value=x, num=n, axis=a),
           _shaped(lambda: [((3, 4), 3, 0), ((3, 4), 4, -1), ((2, 3, 4), 3, 1),
                            ((3,), 3, 0), ((2, 0), 2, 0), ((3, 100, 400), 3, 0)]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("Pack",),
           errors=_errs(lambda: [((3, 4), 2, 0), ((3, 4), 3, 2), ((), 1, 0)])),
    OpCase("Split", "Split", lambda x, n, a: tf.split(x, n, axis=a), _split_samples,
           dtypes=ALL, kind="exact", grad=True, grad_ops=("ConcatV2",),
           errors=_errs(lambda: [((3, 4), 3, 1), ((3, 4), 2, 2), ((), 1, 0)])),
    OpCase("SplitV", "SplitV",
           lambda x, s, a: R.SplitV(value=x, size_splits=s, axis=a, num_split=len(s)),
           _split_v_samples, dtypes=ALL, kind="exact", grad=True, grad_ops=("ConcatV2",),
           errors=_errs(lambda: [((3, 4), [1, 2], 1), ((3, 4), [-1, -1], 1),
                                 ((3, 4), [5, -1], 1), ((3, 4), [-2, 6], 1), ((3, 4), [3], 1),
                                 ((3, 4), [2, 2], 2)])),
    OpCase("Fill", "Fill", lambda d, v: tf.fill(d, v), _fill_samples, dtypes=ALL, kind="exact",
           grad=True, grad_args=(1,),
           errors=lambda dt: [([-1], np.zeros((), dt)), ([2], np.zeros((2,), dt)),
                              ([[2]], np.zeros((), dt)), ([2], np.zeros((1, 1), dt))]),
    OpCase("Shape", "Shape", lambda x, t: R.Shape(input=x, out_type=t),
           _shaped(lambda: [(s, t) for s in SHAPES[:-1] for t in (tf.int32, tf.int64)]),
           dtypes=ALL, kind="exact"),
    OpCase("ShapeN", "ShapeN", lambda *a: R.ShapeN(input=list(a[:-1]), out_type=a[-1]),
           lambda dt, rng: [(data(rng, (2, 3), dt), data(rng, (), dt), data(rng, (0, 4, 1), dt), t)
                            for t in (tf.int32, tf.int64)],
           dtypes=ALL, kind="exact"),
    OpCase("Size", "Size", lambda x, t: R.Size(input=x, out_type=t),
           _shaped(lambda: [(s, t) for s in SHAPES[:-1] for t in (tf.int32, tf.int64)]),
           dtypes=ALL, kind="exact"),
    OpCase("Rank", "Rank", lambda x: R.Rank(input=x), _shaped(lambda: [(s,) for s in SHAPES]),
           dtypes=ALL, kind="exact"),
    OpCase("BroadcastTo", "BroadcastTo", lambda x, s: tf.broadcast_to(x, s), _bcast_samples,
           dtypes=ALL, kind="exact", grad=True, grad_ops=("BroadcastGradientArgs", "Reshape"),
           errors=_errs(lambda: [((3, 4), [3, 5]), ((3, 4), [4]), ((3,), [-1, 3]), ((0,), [1]),
                                 ((3,), [1]), ((3,), [[3]])])),
    OpCase("BroadcastGradientArgs", "BroadcastGradientArgs",
           lambda a, b: R.BroadcastGradientArgs(s0=a, s1=b),
           lambda dt, rng: [(np.array(a, dt), np.array(b, dt)) for a, b in (
               ([2, 3], [3]), ([2, 1, 3], [1, 1]), ([], [1, 1]), ([0, 1], [1]), ([], []),
               ([4, 1], [1, 5]), ([2, 3, 4], [2, 3, 4]))],
           dtypes=INDEX, kind="exact",
           errors=lambda dt: [(np.array([2, 3], dt), np.array([4], dt)),
                              (np.array([[2, 3]], dt), np.array([3], dt))]),
]


# SpaceToBatchND / BatchToSpaceND: 1-D and 2-D blocks, paddings/crops, trailing dims, int
# block shapes of both widths; malformed inputs go back to TensorFlow, which raises
S2B = [((2, 4, 4, 3), [2, 2], [[0, 0], [0, 0]]), ((1, 5, 6, 2), [2, 3], [[1, 0], [0, 0]]),
       ((3, 7, 1), [2], [[1, 0]]), ((2, 4, 6), [2, 2], [[0, 0], [1, 1]]),
       ((1, 3, 3, 2, 4), [3], [[0, 0]]), ((0, 4, 4, 1), [2, 2], [[0, 0], [0, 0]])]
B2S = [((8, 2, 2, 3), [2, 2], [[0, 0], [0, 0]]), ((6, 3, 2, 2), [2, 3], [[1, 0], [0, 2]]),
       ((6, 4, 1), [2], [[1, 0]]), ((4, 2, 3), [2, 2], [[0, 1], [1, 0]]),
       ((3, 3, 3, 2, 4), [3], [[0, 0]])]


def _blk(make, wide=False):
    def samples(dt, rng):
        return [(data(rng, s, dt), np.array(b, np.int64 if wide else np.int32),
                 np.array(p, np.int32)) for s, b, p in make]
    return samples


CASES += [
    OpCase("SpaceToBatchND", "SpaceToBatchND", lambda x, b, p: tf.space_to_batch_nd(x, b, p),
           _blk(S2B), dtypes=ALL[:4], kind="exact", grad=True, grad_ops=("BatchToSpaceND",),
           errors=lambda dt: [(np.zeros((2, 5, 4, 1), dt), np.array([2, 2], np.int32),
                               np.zeros((2, 2), np.int32)),          # 5 not divisible by 2
                              (np.zeros((2, 4, 4, 1), dt), np.array([0, 2], np.int32),
                               np.zeros((2, 2), np.int32)),          # zero block
                              (np.zeros((2, 4, 4, 1), dt), np.array([2, 2], np.int32),
                               np.array([[-1, 1], [0, 0]], np.int32))]),   # negative padding
    OpCase("SpaceToBatchND-int64_block", "SpaceToBatchND",
           lambda x, b, p: tf.space_to_batch_nd(x, b, p), _blk(S2B[:2], wide=True),
           dtypes=("float32",), kind="exact"),
    OpCase("BatchToSpaceND", "BatchToSpaceND", lambda x, b, c: tf.batch_to_space(x, b, c),
           _blk(B2S), dtypes=ALL[:4], kind="exact", grad=True, grad_ops=("SpaceToBatchND",),
           errors=lambda dt: [(np.zeros((6, 2, 2, 1), dt), np.array([2, 2], np.int32),
                               np.zeros((2, 2), np.int32)),          # 6 not divisible by 4
                              (np.zeros((8, 2, 2, 1), dt), np.array([2, 2], np.int32),
                               np.array([[3, 2], [0, 0]], np.int32))]),   # crops too large
]

# DepthToSpace / SpaceToDepth (NHWC); bad depths/sizes and NCHW go back to TensorFlow
CASES += [
    OpCase("DepthToSpace", "DepthToSpace", lambda x, b: tf.nn.depth_to_space(x, b),
           _shaped(lambda: [((1, 2, 3, 8), 2), ((2, 3, 2, 9), 3), ((1, 1, 1, 4), 2),
                            ((0, 2, 2, 4), 2), ((2, 4, 4, 12), 2)]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("SpaceToDepth",),
           errors=_errs(lambda: [((1, 2, 2, 6), 2), ((1, 2, 2, 4), 1), ((2, 2, 4), 2)])),
    OpCase("SpaceToDepth", "SpaceToDepth", lambda x, b: tf.nn.space_to_depth(x, b),
           _shaped(lambda: [((1, 4, 6, 2), 2), ((2, 6, 3, 1), 3), ((1, 2, 2, 4), 2),
                            ((0, 2, 2, 1), 2), ((2, 8, 8, 3), 2)]),
           dtypes=ALL, kind="exact", grad=True, grad_ops=("DepthToSpace",),
           errors=_errs(lambda: [((1, 3, 4, 2), 2), ((1, 4, 4, 1), 1), ((4, 4, 1), 2)])),
]
