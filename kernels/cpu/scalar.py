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
    z = np.float64(x)
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@_jit
def softplus(x):
    # log(1 + exp(x)) in float64, stable for large |x|.
    z = np.float64(x)
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
def _f64_bits(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


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


_SQRT2 = 1.4142135623730951
_LN2 = 0.6931471805599453


@_jit
def log64(z):
    """log(z) in float64 to ~1e-15 (enough for float32 results); z normal or special."""
    # Straight-line code with selects (no early returns) so that loops vectorise.
    b = _f64_bits(z)
    e = (b >> 52) - 1023
    m = _bits_f64((b & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000)   # z = m * 2**e, m in [1, 2)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1 if big else e
    s = (m - 1.0) / (m + 1.0)       # log(m) = 2 atanh(s), |s| < 0.172
    s2 = s * s
    p = _fma(s2, 1.0 / 17, 1.0 / 15)
    p = _fma(p, s2, 1.0 / 13)
    p = _fma(p, s2, 1.0 / 11)
    p = _fma(p, s2, 1.0 / 9)
    p = _fma(p, s2, 1.0 / 7)
    p = _fma(p, s2, 1.0 / 5)
    p = _fma(p, s2, 1.0 / 3)
    p = _fma(p, s2, 1.0)
    r = _fma(float(e), _LN2, 2.0 * s * p)
    r = r if z > 0 else (-math.inf if z == 0 else math.nan)
    return z if z == math.inf else r


@_jit
def log1p64(z):
    r = log64(1.0 + z)
    return z * (1.0 - z * (0.5 - z * (1.0 / 3))) if abs(z) < 1e-4 else r


def is_f32(x):
    """True (a compile-time constant) when x is float32: selects a branch that LLVM keeps."""
    raise NotImplementedError("numba only")


@overload(is_f32)
def _is_f32(x):
    if isinstance(x, types.Float) and x.bitwidth == 32:
        return lambda x: True
    return lambda x: False


# Each v* helper: the float64-internal SIMD version for float32, libm for float64. They are
# inlined into the loops (numba IR inlining), so the loops vectorise.

@_jit
def vexp(x):
    return exp64(np.float64(x)) if is_f32(x) else math.exp(x)


@_jit
def vlog(x):
    return log64(np.float64(x)) if is_f32(x) else math.log(x)


@_jit
def vlog1p(x):
    return log1p64(np.float64(x)) if is_f32(x) else math.log1p(x)


@_jit
def vsigmoid(x):
    if is_f32(x):
        z = np.float64(x)
        e = exp64(-abs(z))
        s = 1.0 / (1.0 + e)
        return s if z >= 0 else e * s
    return sigmoid(x)


@_jit
def vtanh(x):
    if is_f32(x):
        z = np.float64(x)
        a = abs(z)
        t = exp64(-2.0 * a)
        r = (1.0 - t) / (1.0 + t)
        r = r if z >= 0 else -r
        z2 = z * z   # 1 - t cancels for small |z|: the series there
        return z * (1.0 + z2 * (-1.0 / 3 + z2 * (2.0 / 15 + z2 * (-17.0 / 315)))) if a < 0.01 else r
    return math.tanh(x)


@_jit
def vsoftplus(x):
    if is_f32(x):
        z = np.float64(x)
        return (z if z > 0 else 0.0) + log1p64(exp64(-abs(z)))
    return softplus(x)


# W. J. Cody's rational approximations (Math. Comp. 23, 1969): erf on |x| <= 0.46875, and
# erfc(x) * exp(x*x) on (0.46875, 4]; beyond 4, erf rounds to +-1 in float32.
_EA = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
       3.20937758913846947e03, 1.85777706184603153e-1)
_EB = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
       2.84423683343917062e03)
_EC = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
       2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
       2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ED = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
       1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
       3.43936767414372164e03, 1.23033935480374942e03)


@_jit
def erf32(x):
    """erf for float32 results, in float64 arithmetic, branch-free."""
    z = np.float64(x)
    y = abs(z)
    t = y * y
    num = _fma(_fma(_fma(_fma(_EA[4], t, _EA[0]), t, _EA[1]), t, _EA[2]), t, _EA[3])
    den = _fma(_fma(_fma(t + _EB[0], t, _EB[1]), t, _EB[2]), t, _EB[3])
    small = z * num / den
    num = _EC[8] * y
    den = y
    for i in range(7):
        num = (num + _EC[i]) * y
        den = (den + _ED[i]) * y
    erfc = exp64(-t) * (num + _EC[7]) / (den + _ED[7])
    mid = 1.0 - erfc if y <= 4.0 else 1.0
    mid = mid if z >= 0 else -mid
    return small if y <= 0.46875 else (mid if y == y else z)


@_jit
def verf(x):
    if is_f32(x):
        return erf32(x)
    # TensorFlow's float64 Erf gives NaN once x*x overflows.
    return math.nan if math.isinf(x * x) else math.erf(x)
