"""Scalar helpers callable from elementwise-table expressions (numba, CPU).

Integer helpers take care of the cases where hardware division traps (x // 0, INT_MIN // -1):
the callers check for zero divisors first, and INT_MIN // -1 wraps as in TensorFlow.
"""
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

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


# --- vectorisable float32 transcendentals ---------------------------------------------------------
# libm calls keep numba's loops scalar (~15 ns/element); these inline to SIMD code. They compute in
# float64 (results rounded to float32 are correctly rounded); float64 inputs keep libm.

@intrinsic
def _bits_f64(typingctx, i):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    def codegen(context, builder, sig, args):
        d = ir.DoubleType()
        f = builder.module.declare_intrinsic("llvm.fma", [d], ir.FunctionType(d, [d, d, d]))
        return builder.call(f, args)
    return types.float64(types.float64, types.float64, types.float64), codegen


_LOG2E, _LN2_HI, _LN2_LO = 1.4426950408889634, 6.93147180369123816490e-01, 1.90821492927058770002e-10
_C = [1.0 / math.factorial(n) for n in range(14)]
_C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13 = _C[2:]


@_jit
def exp64(z):
    """exp(z) in float64 (within 1-2 ulp); results below the normal range are 0."""
    if z > 709.782712893384:
        return math.inf
    if z < -708.3964185322641:
        return 0.0
    k = np.rint(z * _LOG2E)
    r = (z - k * _LN2_HI) - k * _LN2_LO
    p = _fma(_C13, r, _C12)
    p = _fma(p, r, _C11)
    p = _fma(p, r, _C10)
    p = _fma(p, r, _C9)
    p = _fma(p, r, _C8)
    p = _fma(p, r, _C7)
    p = _fma(p, r, _C6)
    p = _fma(p, r, _C5)
    p = _fma(p, r, _C4)
    p = _fma(p, r, _C3)
    p = _fma(p, r, _C2)
    p = _fma(p, r, 1.0)
    p = _fma(p, r, 1.0)
    ki = np.int64(k) if k == k else 0   # NaN: p is NaN already; keep the scale defined
    h = ki >> 1
    return p * _bits_f64((h + 1023) << 52) * _bits_f64((ki - h + 1023) << 52)


def _by_width(f32_impl, f64_impl):
    """An overload body choosing the float32 (SIMD) or float64 (libm) implementation."""
    def choose(x):
        if isinstance(x, types.Float):
            return f32_impl if x.bitwidth == 32 else f64_impl
    return choose


def vexp(x):
    raise NotImplementedError("numba only")


def vsigmoid(x):
    raise NotImplementedError("numba only")


def vtanh(x):
    raise NotImplementedError("numba only")


def _sigmoid32(x):
    z = float(x)
    e = exp64(-abs(z))
    s = 1.0 / (1.0 + e)
    return s if z >= 0 else e * s


def _tanh32(x):
    z = float(x)
    a = abs(z)
    if a < 0.01:   # 1 - t cancels for small |z|: use the series
        z2 = z * z
        return z * (1.0 + z2 * (-1.0 / 3 + z2 * (2.0 / 15 + z2 * (-17.0 / 315))))
    t = exp64(-2.0 * a)
    r = (1.0 - t) / (1.0 + t)
    return r if z >= 0 else -r


overload(vexp)(_by_width(lambda x: exp64(float(x)), lambda x: math.exp(x)))
overload(vsigmoid)(_by_width(_sigmoid32, lambda x: sigmoid(x)))
overload(vtanh)(_by_width(_tanh32, lambda x: math.tanh(x)))
