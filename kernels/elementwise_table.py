"""The one table of elementwise ops; each device turns it into kernels.

An entry's `expr` is a scalar expression in a small Python subset over the inputs `x` (and `y`)
and the op's attrs named in `params`. Names it may call are the helpers in
`kernels/cpu/scalar.py` (each device provides the same names; `cst(x, c)` is c in x's type)
plus `math.*`, `np.floor/ceil/rint/trunc/fmod` and `np.float32` (a float attr as TensorFlow
stores it). `expr` may be a dict keyed by dtype kind:
"f" float, "i" signed int, "u" unsigned int, "b" bool.
`out` is "same" (the input dtype) or "bool".
`check`, per kind: (condition on `y`, error class name in shape_fns.errors, message); the op
raises when any element of the second input meets it (integer division by zero).
`incompatible`: for ops with attr incompatible_shape_error (Equal, NotEqual), the scalar result
when the shapes do not broadcast and the attr is false.
The expressions follow TensorFlow's CPU functors (Eigen), including their NaN and signed-zero
behaviour and their formulas where those are less accurate than the textbook one.
"""

F = ("float32", "float64")
I = ("int32", "int64")
FI = F + I
FIB = FI + ("bool",)
B = ("bool",)


class Ew:
    __slots__ = ("name", "arity", "expr", "dtypes", "out", "params", "check", "incompatible")

    def __init__(self, name, arity, expr, dtypes, out="same", params=(), check=None,
                 incompatible=None):
        self.name, self.arity, self.expr = name, arity, expr
        self.dtypes, self.out, self.params = tuple(dtypes), out, tuple(params)
        self.check, self.incompatible = check or {}, incompatible

    def expr_for(self, kind):
        if isinstance(self.expr, str):
            return self.expr
        return self.expr.get(kind) or self.expr.get("*")


TABLE = {}


def ew(name, arity, expr, dtypes, out="same", params=(), check=None, incompatible=None):
    TABLE[name] = Ew(name, arity, expr, dtypes, out, params, check, incompatible)


_DIV0 = {"i": ("y == 0", "InvalidArgumentError", "Integer division by zero")}
# TensorFlow's truncating integer ops report division by zero as an internal error.
_TDIV0 = {"i": ("y == 0", "InternalError",
                "Unexpected error in binary operator (only integer div and mod should have errors)")}

# --- binary arithmetic -------------------------------------------------------------------
ew("AddV2", 2, "x + y", FI)
ew("Add", 2, "x + y", FI)
ew("Sub", 2, "x - y", FI)
ew("Mul", 2, "x * y", FI)
ew("MulNoNan", 2, "x * y if y != 0 else 0.0", F)
ew("RealDiv", 2, "x / y", F)
ew("Div", 2, {"f": "x / y", "i": "truncdiv(x, y)"}, FI, check=_DIV0)
ew("DivNoNan", 2, "x / y if y != 0 else 0.0", F)
# TensorFlow flushes subnormals to zero; floor() would turn a subnormal quotient into -1.
ew("FloorDiv", 2, {"f": "np.floor(ftz(x / y))", "i": "floordiv(x, y)"}, FI, check=_DIV0)
ew("FloorMod", 2, {"f": "floormod_f(x, y)", "i": "floormod(x, y)"}, FI, check=_DIV0)
ew("TruncateDiv", 2, {"f": "np.trunc(x / y)", "i": "truncdiv(x, y)"}, FI, check=_TDIV0)
ew("TruncateMod", 2, {"f": "np.fmod(x, y)", "i": "truncmod(x, y)"}, FI, check=_TDIV0)
ew("Maximum", 2, {"f": "fmax_nan(x, y)", "i": "y if x < y else x"}, FI)
ew("Minimum", 2, {"f": "fmin_nan(x, y)", "i": "y if y < x else x"}, FI)
ew("Pow", 2, {"f": "math.pow(x, y)", "i": "ipow(x, y)"}, FI,
   check={"i": ("y < 0", "InvalidArgumentError",
                "Integers to negative integer powers are not allowed")})
ew("SquaredDifference", 2, "(x - y) * (x - y)", FI)
ew("Xdivy", 2, "0.0 if x == 0 else x / y", F)
ew("Xlogy", 2, "0.0 if x == 0 else x * math.log(y)", F)
ew("Xlog1py", 2, "0.0 if x == 0 else x * math.log1p(y)", F)
ew("Atan2", 2, "math.atan2(x, y)", F)
ew("BitwiseAnd", 2, "x & y", I)
ew("BitwiseOr", 2, "x | y", I)
ew("BitwiseXor", 2, "x ^ y", I)

# --- comparisons and logic -----------------------------------------------------------------
ew("Less", 2, "x < y", FI, out="bool")
ew("LessEqual", 2, "x <= y", FI, out="bool")
ew("Greater", 2, "x > y", FI, out="bool")
ew("GreaterEqual", 2, "x >= y", FI, out="bool")
ew("Equal", 2, "x == y", FIB, out="bool", incompatible=False)
ew("NotEqual", 2, "x != y", FIB, out="bool", incompatible=True)
ew("LogicalAnd", 2, "x and y", B)
ew("LogicalOr", 2, "x or y", B)
ew("LogicalNot", 1, "not x", B)

# --- unary ---------------------------------------------------------------------------------
ew("Neg", 1, "-x", FI)
ew("Abs", 1, "abs(x)", FI)
ew("Sign", 1, {"f": "sign_f(x)", "i": "(x > 0) - (x < 0)"}, FI)
ew("Square", 1, "x * x", FI)
ew("Reciprocal", 1, "cst(x, 1) / x", F)
ew("Inv", 1, "cst(x, 1) / x", F)
ew("Exp", 1, "vexp(x)", F)
ew("Expm1", 1, "math.expm1(x)", F)
ew("Log", 1, "vlog(x)", F)
ew("Log1p", 1, "vlog1p(x)", F)
ew("Sqrt", 1, "math.sqrt(x)", F)
ew("Rsqrt", 1, "1.0 / math.sqrt(np.float64(x))", F)
ew("Sin", 1, "math.sin(x)", F)
ew("Cos", 1, "math.cos(x)", F)
ew("Tan", 1, "math.tan(x)", F)
ew("Asin", 1, "math.asin(x)", F)
ew("Acos", 1, "math.acos(x)", F)
ew("Atan", 1, "math.atan(x)", F)
ew("Sinh", 1, "math.sinh(x)", F)
ew("Cosh", 1, "math.cosh(x)", F)
ew("Tanh", 1, "vtanh(x)", F)
ew("Asinh", 1, "math.asinh(x)", F)
ew("Acosh", 1, "math.acosh(x)", F)
ew("Atanh", 1, "math.atanh(x)", F)
ew("Erf", 1, "verf(x)", F)
ew("Erfc", 1, "math.erfc(x)", F)
ew("Floor", 1, "np.floor(x)", F)
ew("Ceil", 1, "np.ceil(x)", F)
# TensorFlow's integer Round returns 0 (an Eigen quirk); those dtypes stay with TensorFlow.
ew("Round", 1, "np.rint(x)", F)
ew("Rint", 1, "np.rint(x)", F)
ew("IsNan", 1, "x != x", F, out="bool")
ew("IsInf", 1, "math.isinf(x)", F, out="bool")
ew("IsFinite", 1, "math.isfinite(x)", F, out="bool")
ew("Invert", 1, "~x", I)

# --- activations -----------------------------------------------------------------------------
ew("Relu", 1, "relu(x)", FI)
ew("Relu6", 1, "relu6(x)", FI)
ew("Elu", 1, "x if not x < 0 else cst(x, vexp(x)) - cst(x, 1)", F)
ew("Selu", 1, "x * cst(x, 1.0507009873554805) if not x < 0 else "
               "(cst(x, vexp(x)) - cst(x, 1)) * cst(x, 1.7580993408473766)", F)
ew("LeakyRelu", 1, "x if x > 0 else x * np.float32(alpha)", F, params=("alpha",))
ew("Softplus", 1, "vsoftplus(x)", F)
ew("Softsign", 1, "x / (abs(x) + cst(x, 1))", F)
ew("Sigmoid", 1, "vsigmoid(x)", F)

# --- gradients (first input as TensorFlow names it: gradients or y) -------------------------
# The (y, dy) ones follow TensorFlow's vectorised (packet) functors, which handle most elements.
ew("ReluGrad", 2, "x * (y > 0)", FI)
ew("Relu6Grad", 2, "x * ((y > 0) & (y < 6))", FI)
ew("EluGrad", 2, "(y + cst(y, 1)) * x if y < 0 else x", F)
ew("SeluGrad", 2, "x * (y + cst(y, 1.7580993408473766)) if y < 0 else "
                   "x * cst(y, 1.0507009873554805)", F)
ew("LeakyReluGrad", 2, "x if y > 0 else x * np.float32(alpha)", F, params=("alpha",))
ew("SoftplusGrad", 2, "x / (math.exp(-y) + cst(y, 1))", F)
ew("SoftsignGrad", 2, "x / ((abs(y) + cst(y, 1)) * (abs(y) + cst(y, 1)))", F)
ew("SigmoidGrad", 2, "y * (x * (cst(x, 1) - x))", F)
ew("TanhGrad", 2, "y * (cst(x, 1) - x * x)", F)
ew("SqrtGrad", 2, "mul_no_nan(ftz(cst(x, 0.5) / x), y)", F)
ew("RsqrtGrad", 2, "mul_no_nan(cst(x, -0.5) * (x * x), mul_no_nan(x, y))", F)
ew("ReciprocalGrad", 2, "mul_no_nan(-(x * x), y)", F)
ew("InvGrad", 2, "mul_no_nan(-(x * x), y)", F)
