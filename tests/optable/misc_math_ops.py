"""Op table: ClipByValue (exact) and L2Loss (a sum of squares)."""
import numpy as np
import tensorflow as tf

from . import OpCase
from .array_ops import data

R = tf.raw_ops
NUM = ("float32", "float64", "int32", "int64")


def _clip(x, lo, hi):
    return R.ClipByValue(t=x, clip_value_min=lo, clip_value_max=hi)


def _clip_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    c = lambda v: np.array(v, dt)  # noqa: E731
    x = d(3, 4)
    out = [(x, c(-1), c(2)), (x, d(3, 4), d(3, 4)), (x, c(0), d(3, 4)), (x, d(3, 4), c(1)),
           (x, c(2), c(-1)), (d(), c(0), c(1)), (d(0, 3), c(0), c(1)), (d(300, 400), c(-1), c(1))]
    if np.dtype(dt).kind == "f":
        out += [(x, c(np.nan), c(1)), (x, c(-1), c(np.nan)),
                (np.array([-0.0, 0.0, 0.0, -0.0], dt), c(0.0), c(-0.0))]
    return out


def _clip_errors(dt):
    z = lambda *s: np.zeros(s, dt)  # noqa: E731
    return [(z(2, 3), z(3), z()), (z(2, 3), z(), z(2, 1)), (z(), z(2), z())]


def _l2_samples(dt, rng):
    d = lambda *s: data(rng, s, dt)  # noqa: E731
    a = lambda *s: np.asarray(rng.standard_normal(s), dt)  # noqa: E731
    return [(a(),), (a(0, 3),), (a(7),), (a(3, 5),), (a(2, 3, 4, 5),), (a(300, 500),),
            (np.array([1e20, 1.0], dt),), (d(3, 5),)]


CASES = [
    OpCase("ClipByValue", "ClipByValue", _clip, _clip_samples, dtypes=NUM, kind="exact",
           grad=True, errors=_clip_errors),
    OpCase("L2Loss", "L2Loss", lambda x: R.L2Loss(t=x), _l2_samples,
           dtypes=("float32", "float64"), kind="reduction",
           reduction_len=lambda a: max(1, np.asarray(a[0]).size), grad=True, grad_ops=("Mul",)),
]


def _band_samples(dt, rng):
    out = []
    for shape, lo, hi in (((3, 4), 1, -1), ((2, 3, 4), 0, 0), ((4, 4), -1, 1), ((5, 3), 2, 0),
                          ((2, 2, 3, 3), -1, -1), ((0, 3), 0, 1), ((3, 4), 3, 4)):
        out.append((data(rng, shape, dt), np.int64(lo), np.int64(hi)))
    out.append((data(rng, (3, 3), dt), np.int32(1), np.int32(0)))
    return out


CASES += [
    OpCase("MatrixBandPart", "MatrixBandPart", lambda x, lo, hi: tf.linalg.band_part(x, lo, hi),
           _band_samples, dtypes=("float32", "float64", "int32", "int64", "bool"), kind="exact",
           grad=True,
           errors=lambda dt: [(np.zeros((4,), dt), np.int64(1), np.int64(1)),
                              (np.zeros((3, 4), dt), np.int64(5), np.int64(1)),
                              (np.zeros((3, 4), dt), np.int64(1), np.int64(9)),
                              (np.zeros((3, 4), dt), np.array([1], np.int64), np.int64(1))]),
]


def _topk_samples(dt, rng):
    p = np.array([[0.1, 0.3, 0.3, 0.2], [np.nan, 1, 2, 3], [1, 2, np.inf, 0], [5, 5, 5, 5]], dt)
    out = []
    for t in ([1, 0, 2, 3], [2, 1, 3, 0], [4, -1, 0, 1]):
        for k in (-1, 0, 1, 2, 4):
            out.append((p, np.array(t, np.int32), np.int32(k)))
    big = rng.standard_normal((64, 100)).astype(dt)
    out.append((big, rng.integers(0, 100, 64).astype(np.int64), np.int64(5)))
    out.append((np.zeros((0, 3), dt), np.zeros((0,), np.int32), np.int32(1)))
    return out


CASES += [
    OpCase("InTopKV2", "InTopKV2", lambda p, t, k: tf.math.in_top_k(t, p, k), _topk_samples,
           dtypes=("float32",), kind="exact",
           errors=lambda dt: [(np.zeros((3, 4), dt), np.zeros((2,), np.int32), np.int32(1)),
                              (np.zeros((4,), dt), np.zeros((4,), np.int32), np.int32(1))]),
]
