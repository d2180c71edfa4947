"""The one table of elementwise ops; each device turns it into kernels.

An entry's `expr` is a scalar expression in a small Python subset over the inputs `x` (and `y`)
and the op's attrs named in `params`. Names it may call are the helpers in
`kernels/cpu/scalar.py` (each device provides the same names; `cst(x, c)` is c in x's type)
plus `math.*`, `np.floor/ceil/rint/trunc/fmod` and `np.float32` (a float attr as TensorFlow
stores it). `expr` may be a dict keyed by dtype kind:
"f" float, "i" signed int, "u" unsigned int, "b" bool; float16 ("h") and bfloat16 ("bf") run
the "f" expression on float32 values rounded once on store, unless the dict gives their own.
A "half" (or "h"/"bf") expression is for functors that TensorFlow evaluates as several half
operations: it runs on float32 values and `rnd(v)` rounds v to the half type where TensorFlow's
intermediate result is stored in half (constants too: static_cast<T>(c)).
`out` is "same" (the input dtype) or "bool".
`check`, per kind: (condition on `y`, error class name in shape_fns.errors, message); the op
raises when any element of the second input meets it (integer division by zero).
`keep_subnormal`: the functor is a bit operation (sign mask, sign flip): under TensorFlow's
FTZ/DAZ it still returns a subnormal input's bits, so our float kernels do not flush it.
`incompatible`: for ops with attr incompatible_shape_error (Equal, NotEqual), the scalar result
when the shapes do not broadcast and the attr is false.
The expressions follow TensorFlow's CPU functors (Eigen), including their NaN and signed-zero
behaviour and their formulas where those are less accurate than the textbook one.
"""

F = ("float32", "float64")
H = ("float16", "bfloat16")     # stored in 16 bits, computed in float32 (kernels/cpu/half_bits.py)
I = ("int32", "int64")
FI = F + I
FIB = FI + ("bool",)
FH = F + H
FHI = FH + I
FHIB = FHI + ("bool",)
B = ("bool",)
BITS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class Ew:
    __slots__ = ("name", "arity", "expr", "dtypes", "out", "params", "check", "incompatible",
                 "keep_subnormal")

    def __init__(self, name, arity, expr, dtypes, out="same", params=(), check=None,
                 incompatible=None, keep_subnormal=False):
        self.name, self.arity, self.expr = name, arity, expr
        self.dtypes, self.out, self.params = tuple(dtypes), out, tuple(params)
        self.check, self.incompatible = check or {}, incompatible
        self.keep_subnormal = keep_subnormal

    def expr_for(self, kind):
        if isinstance(self.expr, str):
            return self.expr
        return self.expr.get(kind) or self.expr.get("*")

    def half_expr(self, kind):
        """The float32 expression for kind "h"/"bf" with TensorFlow's intermediate roundings."""
        if isinstance(self.expr, str):
            return None
        return self.expr.get(kind) or self.expr.get("half")


TABLE = {}


def ew(name, arity, expr, dtypes, out="same", params=(), check=None, incompatible=None,
       keep_subnormal=False):
    TABLE[name] = Ew(name, arity, expr, dtypes, out, params, check, incompatible, keep_subnormal)


_DIV0 = {"i": ("y == 0", "InvalidArgumentError", "Integer division by zero")}
# TensorFlow's truncating integer ops report division by zero as an internal error.
_TDIV0 = {"i": ("y == 0", "InternalError",
                "Unexpected error in binary operator (only integer div and mod should have errors)")}

# --- binary arithmetic -------------------------------------------------------------------
ew("AddV2", 2, "x + y", FHI)
ew("Add", 2, "x + y", FHI)
ew("Sub", 2, "x - y", FHI)
ew("Mul", 2, "x * y", FHI)
ew("MulNoNan", 2, "x * y if y != 0 else 0.0", FH)
ew("RealDiv", 2, "x / y", FH)
ew("Div", 2, {"f": "x / y", "i": "truncdiv(x, y)"}, FHI, check=_DIV0)
ew("DivNoNan", 2, "x / y if y != 0 else 0.0", FH)
# TensorFlow flushes subnormals to zero; floor() would turn a subnormal quotient into -1.
ew("FloorDiv", 2, {"f": "np.floor(ftz(x / y))", "i": "floordiv(x, y)",
                    "half": "np.floor(rnd(x / y))"}, FHI, check=_DIV0)
ew("FloorMod", 2, {"f": "floormod_f(x, y)", "i": "floormod(x, y)"}, FHI, check=_DIV0)
ew("TruncateDiv", 2, {"f": "np.trunc(x / y)", "i": "truncdiv(x, y)",
                       "half": "np.trunc(rnd(x / y))"}, FHI, check=_TDIV0)
ew("TruncateMod", 2, {"f": "np.fmod(x, y)", "i": "truncmod(x, y)"}, FI, check=_TDIV0)
ew("Maximum", 2, {"f": "fmax_nan(x, y)", "i": "y if x < y else x"}, FHI)
ew("Minimum", 2, {"f": "fmin_nan(x, y)", "i": "y if y < x else x"}, FHI)
ew("Pow", 2, {"f": "math.pow(x, y)", "i": "ipow(x, y)"}, FHI,
   check={"i": ("y < 0", "InvalidArgumentError",
                "Integers to negative integer powers are not allowed")})
ew("SquaredDifference", 2, {"*": "(x - y) * (x - y)", "half": "rnd(x - y) * rnd(x - y)"}, FHI)
ew("Xdivy", 2, {"*": "0.0 if x == 0 else x / y", "half": "x if x == 0 else x / y"}, FH)
ew("Xlogy", 2, {"*": "0.0 if x == 0 else x * math.log(y)",
                 "half": "x if x == 0 else x * rnd(vlog(y))"}, FH)
ew("Xlog1py", 2, {"*": "0.0 if x == 0 else x * math.log1p(y)",
                   "half": "x if x == 0 else x * rnd(vlog1p(y))"}, FH)
ew("Atan2", 2, "math.atan2(x, y)", FH)
ew("BitwiseAnd", 2, "x & y", BITS)
ew("BitwiseOr", 2, "x | y", BITS)
ew("BitwiseXor", 2, "x ^ y", BITS)
ew("LeftShift", 2, "lshift(x, y)", BITS)     # kernels/cpu/scalar_bits.py: TF's clamped shifts
ew("RightShift", 2, "rshift(x, y)", BITS)

# --- comparisons and logic -----------------------------------------------------------------
ew("Less", 2, "x < y", FHI, out="bool")
ew("LessEqual", 2, "x <= y", FHI, out="bool")
ew("Greater", 2, "x > y", FHI, out="bool")
ew("GreaterEqual", 2, "x >= y", FHI, out="bool")
ew("Equal", 2, "x == y", FHIB, out="bool", incompatible=False)
ew("NotEqual", 2, "x != y", FHIB, out="bool", incompatible=True)
ew("LogicalAnd", 2, "x and y", B)
ew("LogicalOr", 2, "x or y", B)
ew("LogicalNot", 1, "not x", B)

# --- unary ---------------------------------------------------------------------------------
ew("Neg", 1, "-x", FHI, keep_subnormal=True)
ew("Abs", 1, "abs(x)", FHI, keep_subnormal=True)
ew("Sign", 1, {"f": "sign_f(x)", "i": "(x > 0) - (x < 0)"}, FHI)
ew("Square", 1, "x * x", FHI)
ew("Reciprocal", 1, "cst(x, 1) / x", FH)
ew("Inv", 1, "cst(x, 1) / x", FH)
ew("Exp", 1, "vexp(x)", FH)
ew("Expm1", 1, "vexpm1(x)", FH)
ew("Log", 1, "vlog(x)", FH)
ew("Log1p", 1, "vlog1p(x)", FH)
ew("Sqrt", 1, "math.sqrt(x)", FH)
ew("Rsqrt", 1, "1.0 / math.sqrt(np.float64(x))", FH)
ew("Sin", 1, "math.sin(x)", FH)
ew("Cos", 1, "math.cos(x)", FH)
ew("Tan", 1, "math.tan(x)", FH)
ew("Asin", 1, "math.asin(x)", FH)
ew("Acos", 1, "math.acos(x)", FH)
ew("Atan", 1, "math.atan(x)", FH)
ew("Sinh", 1, "math.sinh(x)", FH)
ew("Cosh", 1, "math.cosh(x)", FH)
ew("Tanh", 1, "vtanh(x)", FH)
ew("Asinh", 1, "math.asinh(x)", FH)
ew("Acosh", 1, "math.acosh(x)", FH)
ew("Atanh", 1, "math.atanh(x)", FH)
ew("Erf", 1, "verf(x)", FH)
ew("Erfc", 1, "verfc(x)", FH)
ew("Floor", 1, "np.floor(x)", FH)
ew("Ceil", 1, "np.ceil(x)", FH)
# TensorFlow's integer Round returns 0 (an Eigen quirk); those dtypes stay with TensorFlow.
ew("Round", 1, "np.rint(x)", FH)
ew("Rint", 1, "np.rint(x)", F)
ew("IsNan", 1, "x != x", FH, out="bool")
ew("IsInf", 1, "math.isinf(x)", FH, out="bool")
ew("IsFinite", 1, "math.isfinite(x)", FH, out="bool")
ew("Invert", 1, "~x", BITS)

# --- activations -----------------------------------------------------------------------------
ew("Relu", 1, "relu(x)", FHI)
ew("Relu6", 1, "relu6(x)", FHI)
ew("Elu", 1, {"*": "x if not x < 0 else cst(x, vexp(x)) - cst(x, 1)",
              "half": "x if not x < 0 else rnd(vexp(x)) - cst(x, 1)"}, FH)
ew("Selu", 1, {"*": "x * cst(x, 1.0507009873554805) if not x < 0 else "
                    "(cst(x, vexp(x)) - cst(x, 1)) * cst(x, 1.7580993408473766)",
               "half": "x * rnd(cst(x, 1.0507009873554805)) if not x < 0 else "
                       "rnd(rnd(vexp(x)) - cst(x, 1)) * rnd(cst(x, 1.7580993408473766))"}, FH)
ew("LeakyRelu", 1, {"*": "x if x > 0 else x * np.float32(alpha)",
                    "half": "x if x > 0 else x * rnd(alpha)"}, FH, params=("alpha",))
# Softplus thresholds: -(log(epsilon) + 2) in the half type; Eigen's float16 epsilon is 2^-13
# (not 2^-10), bfloat16's 2^-7.
ew("Softplus", 1, {"*": "vsoftplus(x)",
                   "h": "x if x > 7.0078125 else (rnd(vexp(x)) if x < -7.0078125 else "
                        "vlog1p(rnd(vexp(x))))",
                   "bf": "x if x > 2.84375 else (rnd(vexp(x)) if x < -2.84375 else "
                         "vlog1p(rnd(vexp(x))))"}, FH)
ew("Softsign", 1, {"*": "x / (abs(x) + cst(x, 1))", "half": "x / rnd(abs(x) + cst(x, 1))"}, FH)
ew("Sigmoid", 1, {"*": "vsigmoid(x)",
                  "half": "cst(x, 1) if rnd(vexp(x)) == math.inf else "
                          "rnd(vexp(x)) / rnd(cst(x, 1) + rnd(vexp(x)))"}, FH)

# --- gradients (first input as TensorFlow names it: gradients or y) -------------------------
# The (y, dy) ones follow TensorFlow's vectorised (packet) functors, which handle most elements.
ew("ReluGrad", 2, "x * (y > 0)", FHI)
ew("Relu6Grad", 2, "x * ((y > 0) & (y < 6))", FHI)
ew("EluGrad", 2, {"*": "(y + cst(y, 1)) * x if y < 0 else x",
                  "half": "rnd(y + cst(y, 1)) * x if y < 0 else x"}, FH)
ew("SeluGrad", 2, {"*": "x * (y + cst(y, 1.7580993408473766)) if y < 0 else "
                        "x * cst(y, 1.0507009873554805)",
                   "half": "x * rnd(y + rnd(cst(y, 1.7580993408473766))) if y < 0 else "
                           "x * rnd(cst(y, 1.0507009873554805))"}, FH)
ew("LeakyReluGrad", 2, {"*": "x if y > 0 else x * np.float32(alpha)",
                        "half": "x if y > 0 else x * rnd(alpha)"}, FH, params=("alpha",))
ew("SoftplusGrad", 2, {"*": "x / (math.exp(-y) + cst(y, 1))",
                       "half": "x / rnd(rnd(vexp(-y)) + cst(y, 1))"}, FH)
ew("SoftsignGrad", 2, {"*": "x / ((abs(y) + cst(y, 1)) * (abs(y) + cst(y, 1)))",
                       "half": "x / rnd(rnd(abs(y) + cst(y, 1)) * rnd(abs(y) + cst(y, 1)))"}, FH)
ew("SigmoidGrad", 2, {"*": "y * (x * (cst(x, 1) - x))", "half": "y * rnd(x * rnd(cst(x, 1) - x))"}, FH)
ew("TanhGrad", 2, {"*": "y * (cst(x, 1) - x * x)", "half": "y * rnd(cst(x, 1) - rnd(x * x))"}, FH)
ew("SqrtGrad", 2, {"*": "mul_no_nan(ftz(cst(x, 0.5) / x), y)",
                   "half": "mul_no_nan(rnd(cst(x, 0.5) / x), y)"}, FH)
ew("RsqrtGrad", 2, {"*": "mul_no_nan(cst(x, -0.5) * (x * x), mul_no_nan(x, y))",
                    "half": "mul_no_nan(rnd(cst(x, -0.5) * rnd(x * x)), rnd(mul_no_nan(x, y)))"}, FH)
ew("ReciprocalGrad", 2, {"*": "mul_no_nan(-(x * x), y)", "half": "mul_no_nan(-rnd(x * x), y)"}, FH)
ew("InvGrad", 2, {"*": "mul_no_nan(-(x * x), y)", "half": "mul_no_nan(-rnd(x * x), y)"}, FH)
