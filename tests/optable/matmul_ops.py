"""Op table: matmul ops (MatMul, BatchMatMul, BatchMatMulV2, BatchMatMulV3)."""
import numpy as np
import tensorflow as tf

from . import OpCase, arr, int_edges, special_floats

NUM = ("float32", "float64", "int32", "int64")


def _mm(a, b, ta=False, tb=False):
    return tf.raw_ops.MatMul(a=a, b=b, transpose_a=ta, transpose_b=tb)


def _k(args):
    """Reduction length: the inner dimension."""
    a, flag = args[0], (args[2] if len(args) > 2 else False)
    return max(1, a.shape[-2] if flag else a.shape[-1])


def _specials(dt):
    """Rows mixing NaN/Inf/zeros/signed zeros/tiny with order-independent results."""
    s = special_floats(dt)
    a = np.array([[np.inf, 1, 2], [-np.inf, 0, 1], [np.nan, 0, 0], [-0.0, -0.0, 0.0],
                  [s[5], -s[5], 1.5], [np.inf, -np.inf, 1]], dtype=dt)
    b = np.array([[1, 0], [2, 1], [0, 3]], dtype=dt)
    return a, b


def _edges(dt):
    e = int_edges(dt)
    return e.reshape(1, -1), np.stack([np.ones_like(e), e, e[::-1]], axis=1)


def _mm_samples(dt, rng):
    out = [(arr(rng, a, dt), arr(rng, b, dt), ta, tb) for a, b, ta, tb in [
        ((1, 1), (1, 1), False, False), ((3, 4), (4, 5), False, False),
        ((4, 3), (4, 5), True, False), ((3, 4), (5, 4), False, True),
        ((4, 3), (5, 4), True, True), ((1, 7), (7, 1), False, False),
        ((0, 3), (3, 4), False, False), ((2, 0), (0, 3), False, False),
        ((3, 4), (4, 0), False, False), ((0, 2), (3, 0), True, True),
        ((16, 16), (16, 16), False, False)]]
    # Long inner products in [-1, 1]: the tolerance's absolute term assumes products of O(1)
    # (terms up to 9 let two correct BLAS results differ by more under cancellation).
    out += [(arr(rng, a, dt, -1, 1), arr(rng, b, dt, -1, 1), ta, tb) for a, b, ta, tb in [
        ((130, 140), (140, 120), False, False), ((140, 130), (120, 140), True, True),
        ((256, 256), (256, 256), False, True)]]   # integers: the parallel loop
    out += [(*(_specials(dt) if dt.kind == "f" else _edges(dt)), False, False)]
    return out


def _mm_errors(dt):
    def o(*s):
        return np.ones(s, dt)
    return [(o(2, 3), o(2, 3)), (o(2, 3), o(3, 2), True, False), (o(3), o(3, 1)),
            (o(1, 2, 3), o(3, 1)), (o(2, 3), o(2, 3, 1))]


def _bmm(op):
    def fn(x, y, ax=False, ay=False):
        return getattr(tf.raw_ops, op)(x=x, y=y, adj_x=ax, adj_y=ay)
    return fn


_BMM_SHAPES = [
    ((3, 4), (4, 5), False, False), ((2, 3, 4), (2, 4, 5), False, False),
    ((2, 4, 3), (2, 5, 4), True, True), ((2, 4, 3), (2, 4, 5), True, False),
    ((2, 2, 3, 4), (2, 2, 5, 4), False, True), ((0, 3, 4), (0, 4, 2), False, False),
    ((2, 3, 0), (2, 0, 4), False, False), ((6, 20, 30), (6, 30, 25), False, False),
]
_BCAST_SHAPES = [
    ((2, 1, 3, 4), (5, 4, 2), False, False), ((3, 4), (2, 4, 5), False, False),
    ((2, 3, 4), (4, 5), False, False), ((1, 3, 4), (3, 5, 4), False, True),
    ((0, 3, 4), (4, 2), False, False), ((1, 3, 4), (0, 4, 2), False, False),
    ((4, 1, 40, 30), (1, 3, 40, 50), True, False),
]


def _bmm_samples(shapes):
    def samples(dt, rng):
        lo, hi = (-1, 1) if dt.kind == "f" else (-3, 3)   # O(1) products, as in _mm_samples
        out = [(arr(rng, a, dt, lo, hi), arr(rng, b, dt, lo, hi), ax, ay)
               for a, b, ax, ay in shapes]
        if dt.kind == "f":
            a, b = _specials(dt)
        else:
            a, b = _edges(dt)
        out.append((np.stack([a, a]), np.stack([b, -b]), False, False))
        return out
    return samples


HALF = ("float16", "bfloat16")


def _half_mm_samples(dt, rng):
    return [(arr(rng, (3, 4), dt, -1, 1), arr(rng, (4, 5), dt, -1, 1)),
            (arr(rng, (4, 3), dt, -1, 1), arr(rng, (5, 4), dt, -1, 1), True, True),
            (arr(rng, (0, 3), dt), arr(rng, (3, 2), dt)),
            (arr(rng, (2, 0), dt), arr(rng, (0, 3), dt)),
            (arr(rng, (64, 300), dt, -1, 1), arr(rng, (300, 48), dt, -1, 1))]


def _half_bmm_samples(dt, rng):
    return [(arr(rng, (2, 3, 4), dt, -1, 1), arr(rng, (2, 4, 5), dt, -1, 1), False, False),
            (arr(rng, (2, 4, 3), dt, -1, 1), arr(rng, (2, 5, 4), dt, -1, 1), True, True),
            (arr(rng, (4, 3, 4), dt, -1, 1), arr(rng, (1, 4, 2), dt, -1, 1), False, False),
            (arr(rng, (2, 0, 4), dt), arr(rng, (2, 4, 3), dt), False, False)]


def _bmm_errors(dt):
    def o(*s):
        return np.ones(s, dt)
    return [(o(2, 3, 4), o(3, 4, 2)), (o(2, 3, 4), o(2, 3, 2)), (o(3), o(3, 2)),
            (o(2, 3, 4), o(2, 4, 2), True, False)]


CASES = [
    OpCase("MatMul", "MatMul", _mm, _mm_samples, dtypes=NUM, kind="reduction",
           reduction_len=_k, errors=_mm_errors, grad=True, grad_ops=("MatMul",)),
    OpCase("matmul-public", "MatMul", lambda a, b: tf.matmul(a, b, transpose_b=True),
           lambda dt, rng: [(arr(rng, (5, 6), dt), arr(rng, (7, 6), dt))], dtypes=NUM,
           kind="reduction", reduction_len=lambda a: a[0].shape[-1], grad=True,
           grad_ops=("MatMul",)),
    OpCase("BatchMatMulV2", "BatchMatMulV2", _bmm("BatchMatMulV2"),
           _bmm_samples(_BMM_SHAPES + _BCAST_SHAPES), dtypes=NUM, kind="reduction",
           reduction_len=_k, errors=_bmm_errors, grad=True,
           # Broadcast batch dims are summed out of the gradient with Sum.
           grad_ops=("BatchMatMulV2", "Sum")),
    OpCase("BatchMatMul", "BatchMatMul", _bmm("BatchMatMul"), _bmm_samples(_BMM_SHAPES),
           dtypes=NUM, kind="reduction", reduction_len=_k, grad=True,
           errors=lambda dt: _bmm_errors(dt) + [(np.ones((2, 3, 4), dt), np.ones((4, 2), dt)),
                                                (np.ones((2, 3, 4), dt), np.ones((1, 4, 2), dt))]),
    OpCase("BatchMatMulV3", "BatchMatMulV3",
           lambda x, y, ax=False, ay=False: tf.raw_ops.BatchMatMulV3(
               x=x, y=y, Tout=x.dtype, adj_x=ax, adj_y=ay),
           _bmm_samples(_BMM_SHAPES[1:4] + _BCAST_SHAPES[:2]), dtypes=NUM, kind="reduction",
           reduction_len=_k, errors=_bmm_errors, grad=True, grad_ops=("BatchMatMulV2",)),
    OpCase("matmul-batched-public", "BatchMatMulV2",
           lambda a, b: tf.matmul(a, b, adjoint_a=True),
           lambda dt, rng: [(arr(rng, (3, 6, 5), dt), arr(rng, (6, 4), dt))], dtypes=NUM,
           kind="reduction", reduction_len=lambda a: a[0].shape[-2], grad=True,
           grad_ops=("BatchMatMulV2", "Sum")),
    # float16/bfloat16: stored in 16 bits, multiplied and accumulated in float32
    OpCase("MatMul-half", "MatMul", _mm, _half_mm_samples, dtypes=HALF, kind="reduction",
           reduction_len=_k, grad=True, grad_ops=("MatMul",)),
    OpCase("BatchMatMulV2-half", "BatchMatMulV2", _bmm("BatchMatMulV2"),
           _half_bmm_samples, dtypes=HALF, kind="reduction", reduction_len=_k, grad=True,
           grad_ops=("BatchMatMulV2",)),
]
