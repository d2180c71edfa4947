"""Op table: math ops (the elementwise table, activation gradients, Cast, AddN, Select)."""
import numpy as np
import tensorflow as tf

from . import OpCase, broadcast_pairs, elementwise_shapes, int_edges, special_floats
from . import arr as _arr

R = tf.raw_ops
F = ("float32", "float64")
H = ("float16", "bfloat16")   # stored in 16 bits, computed in float32 as TensorFlow's Eigen does
I = ("int32", "int64")
FI = F + I
FH = F + H
FHI = FH + I
IF = I + F          # ints first: error samples (integer division by zero) use the first dtype
IFH = IF + H
FIB = FI + ("bool",)
FHIB = FHI + ("bool",)
BITS = I + ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
BIG = 100_000       # samples this large run the parallel loops; only a few cases use them


def _small(shapes):
    """Drops the shapes (or shape pairs) big enough to run the parallel loops."""
    def size(s):
        return max(int(np.prod(t)) for t in s) if s and isinstance(s[0], tuple) else int(np.prod(s))
    return [s for s in shapes if size(s) < BIG]


def edges(dt):
    dt = np.dtype(dt)
    if dt.kind == "f" or dt.name == "bfloat16":   # ml_dtypes' bfloat16 has kind "V"
        return special_floats(dt)
    if dt.kind == "b":
        return np.array([True, False])
    if dt.kind == "u":
        m = np.iinfo(dt).max
        return np.array([0, 1, 7, m - 1, m], dt)
    return int_edges(dt)


def arr(rng, shape, dtype, low=-3, high=3):
    """optable.arr as an array also for shape () (a numpy scalar would reach TF as a Python float)."""
    if np.dtype(dtype).kind == "u":
        low = max(low, 0)
    return np.asarray(_arr(rng, shape, dtype, low, high))


def all_pairs(v):
    return np.repeat(v, len(v)), np.tile(v, len(v))


def unary(lo=-3, hi=3, big=False):
    def samples(dt, rng):
        shapes = elementwise_shapes() if big else _small(elementwise_shapes())
        return [(arr(rng, s, dt, lo, hi),) for s in shapes] + [(edges(dt),)]
    return samples


# One operand covering out's trailing (inner) or leading (outer) dims: the kernels' block loops.
_BLOCK_PAIRS = [((3, 1), (3, 4)), ((4,), (2, 3, 4)), ((2, 3, 4), (2, 3, 1)), ((1, 3, 1), (3, 5))]
_BIG_BLOCK_PAIRS = [((400, 400), (400,)), ((400, 1), (400, 400))]


def binary(lo=-3, hi=3, ylo=None, yhi=None, big=False, y_ok=None):
    """Broadcast pairs plus every pair of edge values; y_ok(y) masks divisors that may not occur."""
    ylo, yhi = lo if ylo is None else ylo, hi if yhi is None else yhi

    def samples(dt, rng):
        pairs = broadcast_pairs() + _BLOCK_PAIRS + (_BIG_BLOCK_PAIRS if big else [])
        pairs = pairs if big else _small(pairs)
        out = []
        for a, b in pairs:
            x, y = arr(rng, a, dt, lo, hi), arr(rng, b, dt, ylo, yhi)
            if y_ok is not None and dt.kind in "iu":
                y = np.where(y_ok(y), y, np.ones_like(y))
            out.append((x, y))
        x, y = all_pairs(edges(dt))
        if y_ok is not None and dt.kind in "iu":
            x, y = x[y_ok(y)], y[y_ok(y)]
        return out + [(x, y)]
    return samples


def _bad_shapes(dt):
    rng = np.random.default_rng(0)
    return [(arr(rng, (2, 3), dt), arr(rng, (4,), dt))]


def _div_errors(dt):
    return _bad_shapes(dt) + [(np.array([4, 5], dt), np.array([1, 0], dt)),
                              (np.array([[4], [5]], dt), np.array([0, 1], dt))]


def _bf16_no_scalars(samples, always=False):
    """0-d bfloat16 tensors cannot be read back here (np.asarray of one fails: TensorFlow's
    __array__ returns an ml_dtypes scalar, which numpy 2 refuses), so they become shape (1,).
    always: for ops whose output is bfloat16 whatever the input dtype."""
    def wrapped(dt, rng):
        out = samples(dt, rng)
        if np.dtype(dt).name != "bfloat16" and not always:
            return out
        return [tuple(a.reshape(1) if isinstance(a, np.ndarray) and a.ndim == 0 and (
            always or a.dtype.name == "bfloat16") else a for a in s) for s in out]
    return wrapped


def un(name, fn, dtypes=FH, samples=None, grad=True, op=None, **kw):
    return OpCase(name, op or name, fn, _bf16_no_scalars(samples or unary()), dtypes=dtypes,
                  grad=grad and any(np.dtype(d).kind == "f" for d in dtypes), **kw)


def bi(name, fn, dtypes=FHI, samples=None, grad=True, op=None, errors=_bad_shapes, **kw):
    return OpCase(name, op or name, fn, _bf16_no_scalars(samples or binary()), dtypes=dtypes,
                  errors=errors,
                  grad=grad and any(np.dtype(d).kind == "f" for d in dtypes), **kw)


def _ints_nonzero(y):
    return y != 0


def _ints_nonneg(y):
    return y >= 0


def _grad_pair(ylo=-3, yhi=3, positive_y=False):
    """(gradients, features|y) samples of equal shape for the activation-gradient ops."""
    def samples(dt, rng):
        out = []
        for s in _small(elementwise_shapes()):
            y = arr(rng, s, dt, 0.1, 4) if positive_y else arr(rng, s, dt, ylo, yhi)
            out.append((arr(rng, s, dt), y))
        e = edges(dt)
        out.append(all_pairs(e))
        return out
    return samples


def _grad_errors(dt):
    rng = np.random.default_rng(0)
    return [(arr(rng, (3,), dt), arr(rng, (2,), dt))]


_CMP = dict(dtypes=FHI, grad=False)
_LOGIC = dict(dtypes=("bool",), grad=False)

CASES = [
    # --- binary arithmetic ----------------------------------------------------------------------
    bi("AddV2", lambda x, y: R.AddV2(x=x, y=y), samples=binary(big=True), grad_ops=("AddV2",)),
    bi("Add", lambda x, y: R.Add(x=x, y=y)),
    bi("Sub", lambda x, y: R.Sub(x=x, y=y)),
    bi("Mul", lambda x, y: R.Mul(x=x, y=y), samples=binary(big=True), grad_ops=("Mul",)),
    bi("MulNoNan", lambda x, y: R.MulNoNan(x=x, y=y), dtypes=FH),
    bi("RealDiv", lambda x, y: R.RealDiv(x=x, y=y), dtypes=FH, grad_ops=("RealDiv", "Neg")),
    bi("Div", lambda x, y: R.Div(x=x, y=y), dtypes=IFH, samples=binary(y_ok=_ints_nonzero),
       errors=_div_errors),
    bi("DivNoNan", lambda x, y: R.DivNoNan(x=x, y=y), dtypes=FH, grad_ops=("DivNoNan",)),
    bi("FloorDiv", lambda x, y: R.FloorDiv(x=x, y=y), dtypes=IFH, grad=False,
       samples=binary(-9, 9, y_ok=_ints_nonzero), errors=_div_errors),
    bi("FloorMod", lambda x, y: R.FloorMod(x=x, y=y), dtypes=IFH,
       samples=binary(-9, 9, y_ok=_ints_nonzero), errors=_div_errors),
    bi("TruncateDiv", lambda x, y: R.TruncateDiv(x=x, y=y), dtypes=IFH, grad=False,
       samples=binary(-9, 9, y_ok=_ints_nonzero), errors=_div_errors),
    bi("TruncateMod", lambda x, y: R.TruncateMod(x=x, y=y), dtypes=IF,  # TF: no half kernel
       grad=False,
       samples=binary(-9, 9, y_ok=_ints_nonzero), errors=_div_errors),
    bi("Maximum", lambda x, y: R.Maximum(x=x, y=y), grad_ops=("GreaterEqual", "SelectV2")),
    bi("Minimum", lambda x, y: R.Minimum(x=x, y=y), grad_ops=("LessEqual", "SelectV2")),
    bi("PowFloat", lambda x, y: R.Pow(x=x, y=y), op="Pow", dtypes=FH, samples=binary(0.1, 4, -3, 3),
       grad_ops=("Pow", "Greater")),
    bi("PowInt", lambda x, y: R.Pow(x=x, y=y), op="Pow", dtypes=I,
       samples=binary(-5, 5, 0, 9, y_ok=_ints_nonneg),
       errors=lambda dt: _bad_shapes(dt) + [(np.array([2, 0], dt), np.array([3, -1], dt))]),
    bi("SquaredDifference", lambda x, y: R.SquaredDifference(x=x, y=y)),
    bi("Xdivy", lambda x, y: R.Xdivy(x=x, y=y), dtypes=FH, grad=False),
    bi("Xlogy", lambda x, y: R.Xlogy(x=x, y=y), dtypes=FH, samples=binary(-1, 3, 0.1, 4),
       grad_ops=("Xlogy", "Xdivy")),
    bi("Xlog1py", lambda x, y: R.Xlog1py(x=x, y=y), dtypes=FH, samples=binary(-1, 3, 0.1, 4),
       grad=False),
    bi("Atan2", lambda x, y: R.Atan2(y=x, x=y), dtypes=FH),
    bi("BitwiseAnd", lambda x, y: R.BitwiseAnd(x=x, y=y), dtypes=BITS),
    bi("BitwiseOr", lambda x, y: R.BitwiseOr(x=x, y=y), dtypes=BITS),
    bi("BitwiseXor", lambda x, y: R.BitwiseXor(x=x, y=y), dtypes=BITS),
    # shift amounts below 0 and at or past the width (TensorFlow clamps them to [0, bits - 1])
    bi("LeftShift", lambda x, y: R.LeftShift(x=x, y=y), dtypes=BITS, samples=binary(-9, 9, -3, 70)),
    bi("RightShift", lambda x, y: R.RightShift(x=x, y=y), dtypes=BITS,
       samples=binary(-9, 9, -3, 70)),
    # --- comparisons and logic --------------------------------------------------------------------
    bi("Less", lambda x, y: R.Less(x=x, y=y), **_CMP),
    bi("LessEqual", lambda x, y: R.LessEqual(x=x, y=y), **_CMP),
    bi("Greater", lambda x, y: R.Greater(x=x, y=y), **_CMP),
    bi("GreaterEqual", lambda x, y: R.GreaterEqual(x=x, y=y), **_CMP),
    bi("Equal", lambda x, y: R.Equal(x=x, y=y), dtypes=FHIB, grad=False,
       samples=binary(big=True)),
    bi("NotEqual", lambda x, y: R.NotEqual(x=x, y=y), dtypes=FHIB, grad=False),
    bi("EqualNoShapeError", lambda x, y: R.Equal(x=x, y=y, incompatible_shape_error=False),
       op="Equal", dtypes=FHIB, grad=False, errors=None,
       samples=lambda dt, rng: binary()(dt, rng) + _bad_shapes(dt)),
    bi("NotEqualNoShapeError", lambda x, y: R.NotEqual(x=x, y=y, incompatible_shape_error=False),
       op="NotEqual", dtypes=FHIB, grad=False, errors=None,
       samples=lambda dt, rng: binary()(dt, rng) + _bad_shapes(dt)[:1] + [
           (np.zeros((0,), dt), np.zeros((2,), dt))]),
    bi("LogicalAnd", lambda x, y: R.LogicalAnd(x=x, y=y), **_LOGIC),
    bi("LogicalOr", lambda x, y: R.LogicalOr(x=x, y=y), **_LOGIC),
    un("LogicalNot", lambda x: R.LogicalNot(x=x), **_LOGIC),
    # --- unary --------------------------------------------------------------------------------------
    un("Neg", lambda x: R.Neg(x=x), dtypes=FI),
    un("Abs", lambda x: R.Abs(x=x), dtypes=FHI, grad_ops=("Sign",)),
    un("Sign", lambda x: R.Sign(x=x), dtypes=FI),
    un("Square", lambda x: R.Square(x=x), dtypes=FI),
    un("Reciprocal", lambda x: R.Reciprocal(x=x), grad_ops=("ReciprocalGrad",)),
    un("Inv", lambda x: R.Inv(x=x), grad_ops=("ReciprocalGrad",)),
    un("Exp", lambda x: R.Exp(x=x), samples=unary(-20, 20)),
    un("Expm1", lambda x: R.Expm1(x=x)),
    un("Log", lambda x: R.Log(x=x), samples=unary(0.01, 20), grad_ops=("Reciprocal",)),
    un("Log1p", lambda x: R.Log1p(x=x), samples=unary(-0.99, 5)),
    un("Sqrt", lambda x: R.Sqrt(x=x), samples=unary(0.01, 20), grad_ops=("SqrtGrad",)),
    un("Rsqrt", lambda x: R.Rsqrt(x=x), samples=unary(0.01, 20), grad_ops=("RsqrtGrad",)),
    un("Sin", lambda x: R.Sin(x=x), samples=unary(-10, 10), grad_ops=("Cos",)),
    un("Cos", lambda x: R.Cos(x=x), samples=unary(-10, 10), grad_ops=("Sin",)),
    un("Tan", lambda x: R.Tan(x=x), samples=unary(-1.5, 1.5)),
    un("Asin", lambda x: R.Asin(x=x), samples=unary(-0.99, 0.99)),
    un("Acos", lambda x: R.Acos(x=x), samples=unary(-0.99, 0.99)),
    un("Atan", lambda x: R.Atan(x=x), samples=unary(-10, 10)),
    un("Sinh", lambda x: R.Sinh(x=x)),
    un("Cosh", lambda x: R.Cosh(x=x)),
    un("Tanh", lambda x: R.Tanh(x=x), samples=unary(-10, 10), grad_ops=("TanhGrad",)),
    un("Asinh", lambda x: R.Asinh(x=x), samples=unary(-10, 10)),
    un("Acosh", lambda x: R.Acosh(x=x), samples=unary(1.01, 10)),
    un("Atanh", lambda x: R.Atanh(x=x), samples=unary(-0.99, 0.99)),
    un("Erf", lambda x: R.Erf(x=x)),
    un("Erfc", lambda x: R.Erfc(x=x), samples=unary(-3, 8)),
    un("Floor", lambda x: R.Floor(x=x), samples=unary(-9, 9)),
    un("Ceil", lambda x: R.Ceil(x=x), samples=unary(-9, 9)),
    un("Round", lambda x: R.Round(x=x), samples=lambda dt, rng: unary(-9, 9)(dt, rng) + [
        (np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 4503599627370497.0], dt),)]),
    un("Rint", lambda x: R.Rint(x=x), dtypes=F, samples=unary(-9, 9)),  # TF: no half kernel
    un("IsNan", lambda x: R.IsNan(x=x), grad=False),
    un("IsInf", lambda x: R.IsInf(x=x), grad=False),
    un("IsFinite", lambda x: R.IsFinite(x=x), grad=False),
    un("Invert", lambda x: R.Invert(x=x), dtypes=BITS),
    # --- activations ----------------------------------------------------------------------------------
    un("Relu", lambda x: tf.nn.relu(x), dtypes=FHI, samples=unary(big=True), grad_ops=("ReluGrad",)),
    un("Relu6", lambda x: tf.nn.relu6(x), dtypes=FHI, samples=unary(-3, 9), grad_ops=("Relu6Grad",)),
    un("Elu", lambda x: tf.nn.elu(x), grad_ops=("EluGrad",)),
    un("Selu", lambda x: tf.nn.selu(x), grad_ops=("SeluGrad",)),
    un("LeakyRelu", lambda x: tf.nn.leaky_relu(x), grad_ops=("LeakyReluGrad",)),
    un("LeakyReluAlpha", lambda x: R.LeakyRelu(features=x, alpha=1.7), op="LeakyRelu",
       grad_ops=("LeakyReluGrad",)),
    un("Softplus", lambda x: tf.nn.softplus(x), samples=unary(-40, 40), grad_ops=("Sigmoid",)),
    un("Softsign", lambda x: tf.nn.softsign(x), grad_ops=("SoftsignGrad",)),
    un("Sigmoid", lambda x: tf.sigmoid(x), samples=unary(-40, 40, big=True),
       grad_ops=("SigmoidGrad",)),
    # --- activation gradients ---------------------------------------------------------------------------
    bi("ReluGrad", lambda g, x: R.ReluGrad(gradients=g, features=x), dtypes=FHI,
       samples=_grad_pair(), errors=_grad_errors),
    bi("Relu6Grad", lambda g, x: R.Relu6Grad(gradients=g, features=x), dtypes=FHI,
       samples=_grad_pair(-3, 9), errors=_grad_errors),
    bi("EluGrad", lambda g, y: R.EluGrad(gradients=g, outputs=y), dtypes=FH,
       samples=_grad_pair(-1, 3), errors=_grad_errors),
    bi("SeluGrad", lambda g, y: R.SeluGrad(gradients=g, outputs=y), dtypes=FH,
       samples=_grad_pair(-1.7, 3), errors=_grad_errors),
    bi("LeakyReluGrad", lambda g, x: R.LeakyReluGrad(gradients=g, features=x, alpha=0.3),
       dtypes=FH, samples=_grad_pair(), errors=_grad_errors),
    bi("SoftplusGrad", lambda g, x: R.SoftplusGrad(gradients=g, features=x), dtypes=FH,
       samples=_grad_pair(-20, 20), errors=_grad_errors, grad=False),
    bi("SoftsignGrad", lambda g, x: R.SoftsignGrad(gradients=g, features=x), dtypes=FH,
       samples=_grad_pair(), errors=_grad_errors, grad=False),  # TF has no gradient for it
    bi("SigmoidGrad", lambda y, dy: R.SigmoidGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(0, 1), errors=_grad_errors),
    bi("TanhGrad", lambda y, dy: R.TanhGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(-1, 1), errors=_grad_errors),
    bi("SqrtGrad", lambda y, dy: R.SqrtGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(positive_y=True), errors=_grad_errors),
    bi("RsqrtGrad", lambda y, dy: R.RsqrtGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(positive_y=True), errors=_grad_errors),
    bi("ReciprocalGrad", lambda y, dy: R.ReciprocalGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(), errors=_grad_errors),
    bi("InvGrad", lambda y, dy: R.InvGrad(y=y, dy=dy), dtypes=FH,
       samples=_grad_pair(), errors=_grad_errors, grad=False),
]


# --- Cast --------------------------------------------------------------------------------------------
_CAST_FLOATS = [3e9, -3e9, 1e20, -1e20, 2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0,
                9.2e18, 9.3e18, -9.3e18, 0.99999, -0.99999, 255.5, 65536.7, 1 + 2 ** -30, 1e-40]


def _cast_samples(dt, rng):
    out = [(arr(rng, s, dt, -300, 300),) for s in _small(elementwise_shapes())] + [(edges(dt),)]
    if dt.kind == "f" or dt.name == "bfloat16":
        out.append((np.array(_CAST_FLOATS, np.float64).astype(dt),))
    if dt.kind in "iu":
        out.append((np.array([2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24 + 1), 2 ** 31 - 65],
                             np.int64).astype(dt),))
    if dt == np.int64:
        out.append((np.array([2 ** 53 + 1, 2 ** 60 + 2 ** 36 + 1, -(2 ** 62) - 3], dt),))
    return out


def _cast(dst, truncate=False):
    return lambda x: R.Cast(x=x, DstT=dst, Truncate=truncate)


_CAST_SRC = FHIB


def _double_rounding(dt, rng):
    """Values that round differently straight to a half type and through float32 (TensorFlow
    goes through float32), plus float32 subnormals (kept by float32 -> bfloat16, flushed by
    float64 -> float32)."""
    out = _cast_samples(dt, rng)
    if dt == np.float64:
        out.append((np.array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40),
                              65519.99, 1e-39, -1e-40], dt),))
    if dt == np.float32:
        out.append((np.array([1e-39, -1e-40, 65520.0, 65519.996, 3.3895e38, np.float32(1 + 2 ** -8)], dt),))
    if dt == np.int64:
        out.append((np.array([2 ** 24 + 2 ** 16 + 1, (1 << 40) + (1 << 32) + 1, 2049, 65520], dt),))
    return out


CASES += [
    un("CastToFloat16", _cast(tf.float16), op="Cast", dtypes=_CAST_SRC + ("uint8", "int16"),
       samples=_double_rounding),
    un("CastToBfloat16", _cast(tf.bfloat16), op="Cast", dtypes=_CAST_SRC + ("uint8", "int16"),
       samples=_bf16_no_scalars(_double_rounding, always=True),
       # tests/test_gradients weights a bfloat16 output with numpy values that promote to
       # float32 (ml_dtypes + Python float), so stock TensorFlow itself fails the loss there.
       grad=False),
    un("CastToFloat32", _cast(tf.float32), op="Cast", dtypes=_CAST_SRC, samples=_cast_samples),
    un("CastToFloat64", _cast(tf.float64), op="Cast", dtypes=_CAST_SRC, samples=_cast_samples),
    un("CastToInt32", _cast(tf.int32), op="Cast", dtypes=_CAST_SRC, samples=_cast_samples,
       grad=False),
    un("CastToInt64", _cast(tf.int64), op="Cast", dtypes=_CAST_SRC, samples=_cast_samples,
       grad=False),
    un("CastToBool", _cast(tf.bool), op="Cast", dtypes=_CAST_SRC, samples=_cast_samples,
       grad=False),
    un("CastToUint8", _cast(tf.uint8), op="Cast", dtypes=I + ("bool", "uint8", "int16"),
       samples=_cast_samples, grad=False),
    un("CastFromUint8", _cast(tf.float32), op="Cast", dtypes=("uint8", "int8", "uint16"),
       samples=_cast_samples, grad=False),
    un("CastTruncate", _cast(tf.float32, True), op="Cast", dtypes=("float64",),
       samples=lambda dt, rng: _cast_samples(dt, rng) + [(np.array(
           [1 + 2 ** -23 + 2 ** -24 + 2 ** -30, -(1 + 2 ** -23 + 2 ** -24 + 2 ** -30),
            3.40282357e38, 3.5e38, 1.0000001], dt),)]),
]


# --- AddN, Select, SelectV2 ----------------------------------------------------------------------------
def _add_n_samples(dt, rng):
    out = [tuple(arr(rng, s, dt) for _ in range(n))
           for s, n in [((), 2), ((0, 3), 2), ((7,), 1), ((3, 5), 3), ((2, 3, 4), 5)]]
    e = edges(dt)
    return out + [(e, e[::-1].copy(), e)]


def _select_samples(v2):
    def samples(dt, rng):
        if v2:
            shapes = [((), (), ()), ((3, 4), (3, 4), (3, 4)), ((3, 4), (), (3, 4)),
                      ((), (3, 4), ()), ((2, 1, 4), (3, 1), (4,)), ((0, 4), (4,), ()),
                      ((400, 400), (400, 400), (400, 400)), ((5, 1), (1, 6), (5, 6))]
        else:
            shapes = [((), (), ()), ((), (3, 4), (3, 4)), ((3,), (3, 4), (3, 4)),
                      ((3, 4), (3, 4), (3, 4)), ((2,), (2, 3, 4), (2, 3, 4)), ((0,), (0, 2), (0, 2))]
        return [(arr(rng, c, np.bool_), arr(rng, t, dt), arr(rng, e, dt)) for c, t, e in shapes]
    return samples


def _select_errors(v2):
    def errors(dt):
        rng = np.random.default_rng(0)
        bad = [((3,), (2,), ()), ((2,), (2,), (3,))] if v2 else [
            ((2,), (2,), ()), ((3,), (2, 2), (2, 2)), ((2, 1), (2, 2), (2, 2))]
        return [(arr(rng, c, np.bool_), arr(rng, t, dt), arr(rng, e, dt)) for c, t, e in bad]
    return errors


CASES += [
    OpCase("AddN", "AddN", lambda *xs: R.AddN(inputs=list(xs)), _bf16_no_scalars(_add_n_samples),
           dtypes=FHI, grad=True, errors=lambda dt: [(np.zeros((), dt), np.zeros((2,), dt))]),
    OpCase("SelectV2", "SelectV2", lambda c, t, e: R.SelectV2(condition=c, t=t, e=e),
           _bf16_no_scalars(_select_samples(True)), dtypes=FHIB, grad=True, grad_args=(1, 2),
           grad_ops=("SelectV2",), errors=_select_errors(True)),
    OpCase("Select", "Select", lambda c, t, e: R.Select(condition=c, x=t, y=e),
           _bf16_no_scalars(_select_samples(False)), dtypes=FHIB, grad=True, grad_args=(1, 2),
           errors=_select_errors(False)),
]
