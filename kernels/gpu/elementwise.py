"""Elementwise ops on the GPU, generated from the one table (kernels/elementwise_table.py).

Each entry's float expression (a small Python subset) is translated to CUDA C once; an entry
whose expression uses a name without a CUDA counterpart here is not registered on the GPU (the
loader names it). A kernel computes in float32 for float16 storage (float64 for float64) and
rounds once on store; CuPy's ElementwiseKernel broadcasts its inputs. `fused(exprs)` builds one
kernel for a chain of table ops (the CUDA device's fusion pass).
"""
import ast
import hashlib

import cupy
import numpy as np

import kernels
from kernels.elementwise_table import TABLE

from . import DEVICE, compute_dtype

PREAMBLE = r"""
__device__ inline F relu(F x) { return (x > (F)0 || x != x) ? x : (F)0; }
__device__ inline F relu6(F x) { return x != x ? x : (x < (F)0 ? (F)0 : (x > (F)6 ? (F)6 : x)); }
__device__ inline F sign_f(F x) { return x != x ? x : (x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : (F)0)); }
__device__ inline F fmax_nan(F x, F y) { return x != x ? x : (y != y ? y : (x < y ? y : x)); }
__device__ inline F fmin_nan(F x, F y) { return x != x ? x : (y != y ? y : (y < x ? y : x)); }
__device__ inline F vsigmoid(F x) { double z = (double)x; return (F)(z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z))); }
__device__ inline F vsoftplus(F x) { double z = (double)x; return (F)((z > 0 ? z : 0.0) + log1p(exp(-fabs(z)))); }
__device__ inline F ftz(F x) { return x; }
// TensorFlow's float64 Erf gives NaN once x*x overflows (kernels/cpu/scalar.py verf)
__device__ inline F verf(F x) { return (sizeof(F) == 8 && isinf(x * x)) ? (F)__longlong_as_double(0x7ff8000000000000ULL) : (F)erf(x); }
"""

# table name -> CUDA C name (same arity); math.* and the np.* rounding functions map to libdevice
CALLS = {
    "relu": "relu", "relu6": "relu6", "sign_f": "sign_f", "fmax_nan": "fmax_nan",
    "fmin_nan": "fmin_nan", "vsigmoid": "vsigmoid", "sigmoid": "vsigmoid",
    "vsoftplus": "vsoftplus", "softplus": "vsoftplus", "ftz": "ftz",
    "vexp": "exp", "vlog": "log", "vlog1p": "log1p", "vtanh": "tanh", "verf": "verf",
    "verfc": "erfc", "vexpm1": "expm1",
    "abs": "fabs",
}
MATH = {"exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
        "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "pow", "atan2",
        "isinf", "isfinite", "floor", "ceil", "rint", "trunc", "fmod"}


class Untranslatable(Exception):
    pass


HALF = np.dtype(np.float16)


def to_c(expr, names, params, half=False):
    """CUDA C for a table expression over `names` (x, y -> C variables) and attr values.
    half: TensorFlow's intermediate roundings of a "half" expression (`rnd`, and constants
    `cst(x, c)` stored in half) round to float16 here."""
    def h(v):
        return f"((F)(float16)({v}))" if half else f"((F){v})"

    def c(n):
        if isinstance(n, ast.Name):
            if n.id in names:
                return names[n.id]
            if params.get(n.id) is not None:
                return f"((F){float(params[n.id])!r})"
            raise Untranslatable(n.id)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) \
                and not isinstance(n.value, bool):
            return f"((F){float(n.value)!r})"
        if isinstance(n, ast.BinOp):
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(n.op))
            if op is None:
                raise Untranslatable(type(n.op).__name__)
            return f"({c(n.left)} {op} {c(n.right)})"
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.USub):
                return f"(-{c(n.operand)})"
            if isinstance(n.op, ast.Not):
                return f"(!{c(n.operand)})"
            raise Untranslatable(type(n.op).__name__)
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            op = {ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "==",
                  ast.NotEq: "!="}.get(type(n.ops[0]))
            if op is None:
                raise Untranslatable("compare")
            return f"((F)({c(n.left)} {op} {c(n.comparators[0])}))"
        if isinstance(n, ast.BoolOp):
            op = " && " if isinstance(n.op, ast.And) else " || "
            return "((F)(" + op.join(f"({v}) != (F)0" for v in map(c, n.values)) + "))"
        if isinstance(n, ast.IfExp):
            return f"(({c(n.test)}) != (F)0 ? {c(n.body)} : {c(n.orelse)})"
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                and n.value.id == "math" and n.attr in ("inf", "nan"):
            return {"inf": "((F)__int_as_float(0x7f800000))",
                    "nan": "((F)__int_as_float(0x7fc00000))"}[n.attr]
        if isinstance(n, ast.Call):
            f = n.func
            args = [c(a) for a in n.args]
            if isinstance(f, ast.Name):
                if f.id == "cst":
                    return h(args[1])
                if f.id == "rnd" and half:
                    return h(args[0])
                if f.id in CALLS:
                    return f"((F){CALLS[f.id]}({', '.join(args)}))"
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if f.value.id == "np" and f.attr == "float32":     # an attr as TF stores it
                    return f"((F)(float)({args[0]}))"
                if f.value.id == "np" and f.attr == "float64":
                    return f"((F)(double)({args[0]}))"
                if f.value.id in ("math", "np") and f.attr in MATH:
                    return f"((F){f.attr}({', '.join(args)}))"
            raise Untranslatable(ast.dump(f))
        raise Untranslatable(type(n).__name__)
    return c(ast.parse(expr, mode="eval").body)


def translate(op, names, attrs, dtype=np.float32):
    """CUDA C of a table op's float expression for `dtype` (float16: the table's half
    expression where it has one), or raise Untranslatable."""
    e = TABLE[op]
    half = np.dtype(dtype) == HALF
    expr = (e.half_expr("h") if half else None) or e.expr_for("f")
    if expr is None or e.check:
        raise Untranslatable(op)
    return to_c(expr, names, {p: attrs.get(p) for p in e.params}, half)


_cache = {}
# CuPy's type placeholders are single letters; F is the compute type, Y the output's
TYPES = "ABCDEGHJKLMNOPQRSUVW"
MAX_INPUTS = len(TYPES)


def fused(steps, n_inputs, out_dtype):
    """One ElementwiseKernel for a chain: steps = [(op, attrs, [operand refs])], a ref is
    ("in", i) or ("step", j); the last step's value is stored as out_dtype. Cached."""
    key = (tuple((op, tuple(sorted((k, repr(v)) for k, v in attrs.items())), tuple(refs))
                 for op, attrs, refs in steps), n_inputs, np.dtype(out_dtype).str)
    k = _cache.get(key)
    if k is not None:
        return k
    F = "double" if compute_dtype(out_dtype) == np.float64 else "float"
    half = np.dtype(out_dtype) == HALF
    body = []
    for j, (op, attrs, refs) in enumerate(steps):
        args = [f"((F)a{r})" if kind == "in" else f"t{r}" for kind, r in refs]
        names = dict(zip("xy", args))
        v = translate(op, names, attrs, out_dtype)
        # each op of a half chain stores its result in half, as the unfused ops do
        body.append(f"F t{j} = {f'(F)(float16)({v})' if half else v};")
    body.append(f"out0 = (Y)(t{len(steps) - 1});")
    ins = ", ".join(f"{TYPES[i]} a{i}" for i in range(n_inputs))
    k = cupy.ElementwiseKernel(ins, "Y out0", "\n".join(body),
                               "tfb_ew_" + hashlib.sha1(repr(key).encode()).hexdigest()[:16],
                               preamble=f"#define F {F}\n" + PREAMBLE)
    _cache[key] = k
    return k


def _make(op, arity):
    def k(inputs, outputs, attrs):
        refs = [("in", i) for i in range(arity)]
        fused([(op, attrs, refs)], arity, outputs[0].dtype)(*inputs, outputs[0])
    k.__qualname__ = f"ew_{op}"
    return k


def _register():
    for op, e in TABLE.items():
        if e.out != "same" or e.check:
            continue
        dtypes = []
        for d in (d for d in e.dtypes if d in ("float16", "float32", "float64")):
            try:
                translate(op, {"x": "x", "y": "y"}, {p: 1.0 for p in e.params}, d)
                dtypes.append(d)
            except Untranslatable:
                pass
        if dtypes:
            kernels.kernel(op, device=DEVICE, dtypes=dtypes)(_make(op, e.arity))


_register()
