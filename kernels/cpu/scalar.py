"""Scalar helpers callable from elementwise-table expressions (numba, CPU).

Integer helpers take care of the cases where hardware division traps (x // 0, INT_MIN // -1):
the callers check for zero divisors first, and INT_MIN // -1 wraps as in TensorFlow.
"""
import math

import numpy as np
from numba import njit, types
from numba.extending import overload

_jit = njit(cache=True, nogil=True, inline="always", error_model="numpy")


def ftz(x):
    """x with subnormals flushed to (signed) zero, as TensorFlow's CPU threads compute."""
    raise NotImplementedError("numba only")


@overload(ftz)
def _ftz(x):
    if isinstance(x, types.Float):
        dt = np.dtype(x.name)
        tiny, zero = dt.type(np.finfo(dt).tiny), dt.type(0)

        def flush(x):
            if abs(x) < tiny:
                return x * zero
            return x
        return flush
    return lambda x: x


def cst(x, c):
    """The constant c in x's float type, so arithmetic stays in that type (as TensorFlow's)."""
    raise NotImplementedError("numba only")


@overload(cst, inline="always")
def _cst(x, c):
    if isinstance(x, types.Float):
        to = getattr(np, x.name)
        return lambda x, c: to(c)


def erf(x):
    """TensorFlow's Erf: its float64 kernel gives NaN once x*x overflows."""
    raise NotImplementedError("numba only")


@overload(erf, inline="always")
def _erf(x):
    if isinstance(x, types.Float) and x.bitwidth == 64:
        return lambda x: math.nan if math.isinf(x * x) else math.erf(x)
    if isinstance(x, types.Float):
        return lambda x: math.erf(x)


@_jit
def mul_no_nan(a, b):
    # TensorFlow's gradient functors: a zero upstream gradient gives 0, whatever a is.
    return a * b if b != 0 else b - b


@_jit
def relu(x):
    # NaN propagates like TensorFlow's Relu (max(x, 0) keeps NaN).
    return x if (x > 0 or x != x) else 0


@_jit
def relu6(x):
    if x != x:
        return x
    return 0 if x < 0 else (6 if x > 6 else x)


@_jit
def sign_f(x):
    # Sign(NaN) is NaN and Sign(-0.0) is +0.0 in TensorFlow.
    if x != x:
        return x
    return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)


@_jit
def fmax_nan(x, y):
    # NaN in either input propagates; on ties the first input wins (signed zeros).
    if x != x:
        return x
    if y != y:
        return y
    return y if x < y else x


@_jit
def fmin_nan(x, y):
    if x != x:
        return x
    if y != y:
        return y
    return y if y < x else x


@_jit
def floordiv(x, y):
    if y == -1:
        return -x
    return x // y   # numba's integer // is Python's floor division


@_jit
def floormod(x, y):
    if y == -1:
        return x - x
    return x % y    # Python's %: the sign of the divisor, like TensorFlow's FloorMod


@_jit
def truncdiv(x, y):
    if y == -1:
        return -x
    q = x // y
    if q < 0 and q * y != x:
        q += 1
    return q


@_jit
def truncmod(x, y):
    return x - truncdiv(x, y) * y


@_jit
def floormod_f(x, y):
    # TensorFlow's google_floor_fmod: fmod moved to the divisor's sign when non-zero.
    r = np.fmod(x, y)
    if r != 0 and ((y < 0) != (r < 0)):
        return r + y
    return r


@_jit
def ipow(x, y):
    # Exponentiation by squaring; products wrap like TensorFlow's integer Pow. y >= 0 here.
    r = x - x + 1
    b = x
    while y > 0:
        if y & 1:
            r *= b
        y >>= 1
        if y:
            b *= b
    return r


@_jit
def sigmoid(x):
    # Computed in float64 (so float32 results are correctly rounded), without overflow.
    z = float(x)
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@_jit
def softplus(x):
    # log(1 + exp(x)) in float64, stable for large |x|.
    z = float(x)
    m = z if z > 0 else 0.0
    return m + math.log1p(math.exp(-abs(z)))
