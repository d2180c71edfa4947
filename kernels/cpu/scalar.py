"""Scalar helpers callable from elementwise-table expressions (numba, CPU).

Integer helpers take care of the cases where hardware division traps (x // 0, INT_MIN // -1):
the callers check for zero divisors first, and INT_MIN // -1 wraps as in TensorFlow.
"""
import math
import platform

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


# x86-64: TensorFlow's CPU threads run with MXCSR's FTZ and DAZ bits set. A loop can do the same
# for its own duration (fp_env_get / fp_env_set around it) instead of flushing every operand and
# result in software (a compare and a select each). Elsewhere HW_FLUSH is False: flush in code.
HW_FLUSH = platform.machine().lower() in ("x86_64", "amd64")
FTZ_DAZ = 0x8040


def _csr_call(builder, name, ptr):
    i8p = ir.IntType(8).as_pointer()
    fn = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(ir.VoidType(), [i8p]))
    builder.call(fn, [builder.bitcast(ptr, i8p)])


@intrinsic
def fp_env_get(typingctx):
    """The thread's MXCSR (x86-64 only)."""
    def codegen(context, builder, sig, args):
        p = builder.alloca(ir.IntType(32))
        _csr_call(builder, "llvm.x86.sse.stmxcsr", p)
        return builder.load(p)
    return types.int32(), codegen


@intrinsic
def fp_env_set(typingctx, v):
    """Loads MXCSR (x86-64 only); restore the value fp_env_get returned when done."""
    def codegen(context, builder, sig, args):
        p = builder.alloca(ir.IntType(32))
        builder.store(args[0], p)
        _csr_call(builder, "llvm.x86.sse.ldmxcsr", p)
        return context.get_dummy_value()
    return types.void(types.int32), codegen


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
_EXP_HI, _EXP_LO = 709.782712893384, -708.3964185322641
_C = [1.0 / math.factorial(n) for n in range(14)]
_C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13 = _C[2:]


@_jit
def exp64(z):
    """exp(z) in float64 (within 1-2 ulp); results below the normal range are 0. Straight-line
    code with selects (no early returns), so that loops vectorise."""
    zc = _EXP_HI if z > _EXP_HI else (_EXP_LO if z < _EXP_LO else z)   # NaN stays NaN
    k = np.rint(zc * _LOG2E)
    r = (zc - k * _LN2_HI) - k * _LN2_LO
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
    y = p * _bits_f64((h + 1023) << 52) * _bits_f64((ki - h + 1023) << 52)
    y = math.inf if z > _EXP_HI else y
    return 0.0 if z < _EXP_LO else y


_EM1 = tuple(1.0 / math.factorial(n) for n in range(14, 1, -1))   # expm1: x**14/14! .. x**2/2!


@_jit
def _horner(c, x):
    """c[0] x**n + ... + c[n] (float64 coefficients, highest degree first), fused steps."""
    p = c[0]
    for k in c[1:]:
        p = _fma(p, x, k)
    return p


@_jit
def expm1_64(z):
    """expm1(z) in float64, straight-line: a Taylor polynomial to x**14/14! where |z| < 0.35
    (relative error below 1e-16 there), exp64(z) - 1 elsewhere (no cancellation left to
    matter for a float32 result)."""
    x = 0.0 if abs(z) >= 0.35 else z
    small = _fma(_horner(_EM1, x) * x, x, x)
    big = exp64(z) - 1.0
    r = small if abs(z) < 0.35 else big
    return z if z == 0.0 else r   # -0.0 stays -0.0


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


@_jit
def vexpm1(x):
    return np.float32(expm1_64(np.float64(x))) if is_f32(x) else math.expm1(x)


@_jit
def verfc(x):
    return erfc32_eigen(x) if is_f32(x) else math.erfc(x)


def is_f32(x):
    """True (a compile-time constant) when x is float32: selects a branch that LLVM keeps."""
    raise NotImplementedError("numba only")


@overload(is_f32)
def _is_f32(x):
    if isinstance(x, types.Float) and x.bitwidth == 32:
        return lambda x: True
    return lambda x: False


@intrinsic
def _bits_f32(typingctx, i):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


# TensorFlow's float32 Tanh and Exp are Eigen's packet functions (ptanh_float, pexp_float in
# Eigen/src/Core/arch/Default/GenericPacketMathFunctions.h, as shipped in the tensorflow wheel),
# compiled without FMA (the wheel's start-up message lists FMA among the instructions it does
# not use) and run with denormals flushed to zero. Evaluating the same float32 operations in
# the same order reproduces them bit for bit (checked over 2**20 random inputs each), in
# float32 lanes: twice as many per vector as the float64 versions above.
_f32 = np.float32
_TH_CLAMP = _f32(7.90738964080810547)          # without FMA; 8.01773357391357422 with
_TH_A0, _TH_A1, _TH_A2, _TH_A3 = (_f32(1.394553628e-8), _f32(2.102733560e-5),
                                  _f32(3.520756727e-3), _f32(1.340216100e-1))
_TH_B0, _TH_B1, _TH_B2, _TH_B3 = (_f32(8.015776984e-7), _f32(3.326951409e-4),
                                  _f32(2.597254514e-2), _f32(4.673548340e-1))
_F1, _FHALF = _f32(1.0), _f32(0.5)


@_jit
def tanh32(a):
    """Eigen's ptanh_float: a [9/8] rational approximation on a clamped argument."""
    x = _TH_CLAMP if a > _TH_CLAMP else (-_TH_CLAMP if a < -_TH_CLAMP else a)   # NaN stays
    x = ftz(x)
    x2 = x * x
    x3 = x2 * x
    p = ((_TH_A0 * x2 + _TH_A1) * x2 + _TH_A2) * x2 + _TH_A3
    q = (((_TH_B0 * x2 + _TH_B1) * x2 + _TH_B2) * x2 + _TH_B3) * x2 + _F1
    return (x3 * p + x) / q


_EX_HI, _EX_LO, _EX_LOG2E = _f32(88.723), _f32(-104.0), _f32(1.44269504088896341)
_EX_C1, _EX_C2 = _f32(-0.693359375), _f32(2.12194440e-4)
_EX_P2, _EX_P3, _EX_P4 = (_f32(0.49999988079071044921875), _f32(0.16666518151760101318359375),
                          _f32(4.166965186595916748046875e-2))
_EX_P5, _EX_P6 = _f32(8.36894474923610687255859375e-3), _f32(1.37449637986719608306884765625e-3)


@_jit
def _ln2_reduce(x):
    """x = m ln 2 + r with m = floor(x log2 e + 1/2), ln 2 subtracted in Cephes' two parts."""
    m = np.floor(x * _EX_LOG2E + _FHALF)
    r = m * _EX_C1 + x
    return m, m * _EX_C2 + r


@_jit
def exp32(a):
    """Eigen's pexp_float (m = floor(x log2 e + 1/2), Cody-Waite reduction, degree-6 polynomial),
    scaled by 2**m in two exact steps; subnormal results flush to zero as in TensorFlow."""
    m, r = _ln2_reduce(_EX_HI if a > _EX_HI else a)
    r2 = r * r
    pe = r2 * _EX_P6 + _EX_P4
    po = r2 * _EX_P5 + _EX_P3
    pe = r2 * pe + _EX_P2
    y = r * po + pe
    y = r2 * y + (r + _F1)
    mi = np.int32(m) if m == m else np.int32(0)
    mi = max(min(mi, np.int32(254)), np.int32(-254))
    h = mi >> 1
    y = y * _bits_f32((h + 127) << 23) * _bits_f32((mi - h + 127) << 23)
    y = ftz(y)
    y = y if y >= a else a                      # exp(inf) = inf; NaN passes through
    return y if not a < _EX_LO else _f32(0.0)


_SG_HI, _SG_P2, _SG_P3 = _f32(16.6355324), _f32(0.49999141693115234375), _f32(0.16666877269744873046875)
_SG_P4, _SG_P5 = _f32(4.1898667812347412109375e-2), _f32(8.33471305668354034423828125e-3)


@_jit
def sigmoid32(a):
    """Eigen's scalar_logistic_op<float> packet path: exp(x/2) by a degree-5 polynomial, squared."""
    x = _SG_HI if a > _SG_HI else a
    m, r = _ln2_reduce(x * _FHALF)
    r2 = r * r
    pe = r2 * _SG_P4 + _SG_P2
    po = r2 * _SG_P5 + _SG_P3
    p = r * po + pe
    p = r2 * p + (r + _F1)
    mi = np.int32(m) if m == m else np.int32(0)
    mi = max(min(mi, np.int32(128)), np.int32(-127))
    e = p * _bits_f32((mi + 127) << 23)
    e = e * e
    e = ftz(e)
    return _f32(0.0) if a < _EX_LO else e / (_F1 + e)


_ER_A = (_f32(2.123732201653183437883853912353515625e-06), _f32(2.861979592125862836837768554687500000e-04),
         _f32(3.658048342913389205932617187500000000e-03), _f32(5.243302136659622192382812500000000000e-02),
         _f32(1.874160766601562500000000000000000000e-01), _f32(1.128379106521606445312500000000000000e+00))
_ER_B = (_f32(3.89185734093189239501953125000e-05), _f32(1.14329601638019084930419921875e-03),
         _f32(1.47520881146192550659179687500e-02), _f32(1.12945675849914550781250000000e-01),
         _f32(4.99425798654556274414062500000e-01))
_F16 = _f32(16.0)


@_jit
def erf32_eigen(a):
    """Eigen's generic_fast_erf<float>: an [11/10] rational approximation, clamped to [-1, 1]."""
    x = ftz(a)
    x2 = x * x
    x2 = _F16 if x2 > _F16 else x2
    p = ((((_ER_A[0] * x2 + _ER_A[1]) * x2 + _ER_A[2]) * x2 + _ER_A[3]) * x2 + _ER_A[4]) * x2 + _ER_A[5]
    p = x * p
    q = ((((_ER_B[0] * x2 + _ER_B[1]) * x2 + _ER_B[2]) * x2 + _ER_B[3]) * x2 + _ER_B[4]) * x2 + _F1
    r = p / q
    r = _F1 if r > _F1 else r
    return -_F1 if r < -_F1 else r


_EC_ALPHA = (_f32(5.61802298761904239654541015625e-04), _f32(-4.91381669417023658752441406250e-03),
             _f32(2.67075151205062866210937500000e-02), _f32(-1.12800106406211853027343750000e-01),
             _f32(3.76122951507568359375000000000e-01), _f32(-1.12837910652160644531250000000e+00))
_EC_GAMMA = (_f32(1.0208116471767425537109375e-01), _f32(4.2920666933059692382812500e-01),
             _f32(3.2379078865051269531250000e-01), _f32(5.3971976041793823242187500e-02))
_EC_DELTA = (_f32(1.7251677811145782470703125e-02), _f32(3.9137163758277893066406250e-01),
             _f32(1.0000000000000000000000000e+00), _f32(6.2173241376876831054687500e-01),
             _f32(9.5662862062454223632812500e-02))
_EC_CLAMP, _F2, _F0 = _f32(11.0), _f32(2.0), _f32(0.0)


@_jit
def erfc32_eigen(a):
    """Eigen's generic_fast_erfc<float> (unsupported/.../SpecialFunctionsImpl.h, as shipped in
    the tensorflow wheel; pmadd a multiply then an add, as compiled there): 1 + x S(x^2) for
    |x| <= 1; exp(-x^2) (the square's exact low part folded in) / x P(1/x^2) / Q(1/x^2) above."""
    x = _EC_CLAMP if a > _EC_CLAMP else (-_EC_CLAMP if a < -_EC_CLAMP else a)   # NaN stays
    x = ftz(x)
    x2 = x * x
    p = _EC_ALPHA[0]
    p = p * x2 + _EC_ALPHA[1]
    p = p * x2 + _EC_ALPHA[2]
    p = p * x2 + _EC_ALPHA[3]
    p = p * x2 + _EC_ALPHA[4]
    p = p * x2 + _EC_ALPHA[5]
    small = x * p + _F1
    # x*x's rounding error, exactly (a float32 square is exact in float64)
    lo = _f32(np.float64(x) * np.float64(x) - np.float64(x2))
    e = exp32(-x2)
    z = e - ftz(e * lo)   # flushed as under TensorFlow's FTZ (whether or not this loop runs so)
    q2 = _F1 / x2
    num = ((_EC_GAMMA[0] * q2 + _EC_GAMMA[1]) * q2 + _EC_GAMMA[2]) * q2 + _EC_GAMMA[3]
    den = (((_EC_DELTA[0] * q2 + _EC_DELTA[1]) * q2 + _EC_DELTA[2]) * q2 + _EC_DELTA[3]) * q2 \
        + _EC_DELTA[4]
    r = num / (x * den)
    large = ftz(z * r) + (_F2 if x < _F0 else _F0)
    return large if _F1 < x2 else small


# Each v* helper: for float32 the SIMD version above (Eigen's algorithm in float32 for exp, tanh,
# sigmoid and erf; float64-internal for log, log1p and softplus), libm for float64. They are
# inlined into the loops (numba IR inlining), so the loops vectorise.

@_jit
def vexp(x):
    return exp32(x) if is_f32(x) else math.exp(x)


@_jit
def vlog(x):
    return log64(np.float64(x)) if is_f32(x) else math.log(x)


@_jit
def vlog1p(x):
    return log1p64(np.float64(x)) if is_f32(x) else math.log1p(x)


@_jit
def vsigmoid(x):
    return sigmoid32(x) if is_f32(x) else sigmoid(x)


@_jit
def vtanh(x):
    return tanh32(x) if is_f32(x) else math.tanh(x)


@_jit
def vsoftplus(x):
    if is_f32(x):
        z = np.float64(x)
        return (z if z > 0 else 0.0) + log1p64(exp64(-abs(z)))
    return softplus(x)


@_jit
def verf(x):
    if is_f32(x):
        return erf32_eigen(x)
    # TensorFlow's float64 Erf gives NaN once x*x overflows.
    return math.nan if math.isinf(x * x) else math.erf(x)
