"""The one table of elementwise ops; each device turns it into kernels.

An entry's `expr` is a scalar expression in a small Python subset over the inputs `x` (and `y`)
and the op's attrs named in `params`. Names it may call are the helpers in
`kernels/cpu/scalar.py` (each device provides the same names) plus `math.*`. `expr` may be a
dict keyed by dtype kind: "f" float, "i" signed int, "u" unsigned int, "b" bool.
`out` is "same" (the input dtype) or "bool".
"""

F = ("float32", "float64")
I = ("int32", "int64")
FI = F + I
FIB = FI + ("bool",)


class Ew:
    __slots__ = ("name", "arity", "expr", "dtypes", "out", "params")

    def __init__(self, name, arity, expr, dtypes, out="same", params=()):
        self.name, self.arity, self.expr = name, arity, expr
        self.dtypes, self.out, self.params = tuple(dtypes), out, tuple(params)

    def expr_for(self, kind):
        if isinstance(self.expr, str):
            return self.expr
        return self.expr.get(kind) or self.expr.get("*")


TABLE = {}


def ew(name, arity, expr, dtypes, out="same", params=()):
    TABLE[name] = Ew(name, arity, expr, dtypes, out, params)


# --- binary arithmetic -------------------------------------------------------------------
ew("AddV2", 2, "x + y", FI)
ew("Add", 2, "x + y", FI)
ew("Sub", 2, "x - y", FI)
ew("Mul", 2, "x * y", FI)

# --- unary -------------------------------------------------------------------------------
ew("Neg", 1, "-x", FI)
ew("Relu", 1, "relu(x)", FI)
