"""Scalar helpers callable from elementwise-table expressions (numba, CPU)."""
import math  # noqa: F401  (expressions may use math.*)

from numba import njit

_jit = njit(cache=True, nogil=True, inline="always")


@_jit
def relu(x):
    # NaN propagates like TensorFlow's Relu (max(x, 0) keeps NaN).
    return x if (x > 0 or x != x) else 0
