"""Shape functions: math ops (elementwise families, gradients of activations, Cast, AddN, Select)."""
import numpy as np

from .common import broadcast_shapes, same_dtype
from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape

BOOL = np.dtype(bool)

# Elementwise families: the kernel table (kernels/elementwise_table.py) gives the arithmetic;
# these lists give the shape rule, and a test keeps the two in step.
UNARY = """Neg Abs Sign Exp Expm1 Log Log1p Sqrt Rsqrt Square Reciprocal Inv Tanh Sigmoid Relu Relu6
Elu Selu LeakyRelu Softplus Softsign Erf Erfc Sin Cos Tan Floor Ceil Round Rint LogicalNot Invert Atan
Asin Acos Sinh Cosh Asinh Acosh Atanh Gelu""".split()
BINARY = """Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv TruncateMod Maximum
Minimum Pow SquaredDifference LogicalAnd LogicalOr Xdivy Xlogy Xlog1py Atan2 MulNoNan BitwiseAnd
BitwiseOr BitwiseXor LeftShift RightShift""".split()
COMPARE = "Less LessEqual Greater GreaterEqual Equal NotEqual".split()
BOOL_UNARY = {"IsNan", "IsInf", "IsFinite"}
# Activation gradients (gradients, features|outputs): TensorFlow requires equal shapes.
GRAD_SAME_SHAPE = """ReluGrad Relu6Grad EluGrad SeluGrad LeakyReluGrad SoftplusGrad
SoftsignGrad""".split()
# Gradients (y, dy) of cwise ops: equal element counts; the output takes y's shape.
GRAD_Y_DY = "SigmoidGrad TanhGrad SqrtGrad RsqrtGrad ReciprocalGrad InvGrad".split()


@shape_fn(*UNARY, value_free=True)
def unary(inputs, attrs):
    x = inputs[0]
    return [Spec(x.shape, x.dtype)]


@shape_fn(*sorted(BOOL_UNARY), value_free=True)
def unary_predicate(inputs, attrs):
    return [Spec(inputs[0].shape, BOOL)]


@shape_fn(*BINARY, value_free=True)
def binary(inputs, attrs):
    x, y = inputs
    dt = same_dtype(inputs, "binary op")
    return [Spec(broadcast_shapes(x.shape, y.shape), dt)]


@shape_fn(*COMPARE, value_free=True)
def compare(inputs, attrs):
    x, y = inputs
    same_dtype(inputs, "comparison")
    if attrs.get("incompatible_shape_error", True):
        return [Spec(broadcast_shapes(x.shape, y.shape), BOOL)]
    # Equal/NotEqual without the error: shapes that do not broadcast give one scalar answer.
    if not (x.fully_defined and y.fully_defined):
        return [Spec(None, BOOL)]
    try:
        return [Spec(broadcast_shapes(x.shape, y.shape), BOOL)]
    except InvalidArgumentError:
        return [Spec((), BOOL)]


def merge_shapes(shapes, what):
    """The most specific shape compatible with all `shapes`; InvalidArgument when they differ."""
    out = None
    for i, s in enumerate(shapes):
        if s is None:
            continue
        if out is None:
            out = tuple(s)
            continue
        if len(s) != len(out) or any(a is not None and b is not None and a != b
                                     for a, b in zip(out, s)):
            raise InvalidArgumentError(
                f"{what} must have the same size and shape.  "
                f"Input 0: {fmt_shape(shapes[0])} != input {i}: {fmt_shape(s)}")
        out = tuple(a if a is not None else b for a, b in zip(out, s))
    return out


def _grad_same_shape(op):
    what = f"Inputs to operation {op} of type {op}"   # stock's words

    def grad_same_shape(inputs, attrs):
        dt = same_dtype(inputs, "activation gradient")
        return [Spec(merge_shapes([s.shape for s in inputs], what), dt)]
    return grad_same_shape


for _op in GRAD_SAME_SHAPE:
    shape_fn(_op, value_free=True)(_grad_same_shape(_op))


@shape_fn(*GRAD_Y_DY, value_free=True)
def grad_y_dy(inputs, attrs):
    y, dy = inputs
    dt = same_dtype(inputs, "cwise gradient")
    if y.fully_defined and dy.fully_defined:
        ny, nd = int(np.prod(y.shape)), int(np.prod(dy.shape))
        if ny != nd:
            raise InvalidArgumentError(
                "The two arguments to a cwise op must have same number of elements, "
                f"got {ny} and {nd}")
    return [Spec(y.shape, dt)]


@shape_fn("Cast", value_free=True)
def cast(inputs, attrs):
    return [Spec(inputs[0].shape, attrs["DstT"])]


@shape_fn("AddN", value_free=True)
def add_n(inputs, attrs):
    dt = same_dtype(inputs, "AddN")
    return [Spec(merge_shapes([s.shape for s in inputs], "Inputs to operation AddN of type AddN"), dt)]


@shape_fn("SelectV2", value_free=True)
def select_v2(inputs, attrs):
    c, t, e = inputs
    dt = same_dtype([t, e], "SelectV2")
    try:
        shape = broadcast_shapes(c.shape, broadcast_shapes(t.shape, e.shape))
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"condition {fmt_shape(c.shape)}, then {fmt_shape(t.shape)}, and else "
            f"{fmt_shape(e.shape)} must be broadcastable") from None
    return [Spec(shape, dt)]


@shape_fn("Select", value_free=True)
def select(inputs, attrs):
    c, t, e = inputs
    dt = same_dtype([t, e], "Select")
    if c.shape is not None and t.shape is not None and len(c.shape) != 0 and not (
            len(c.shape) == 1 and len(t.shape) > 1):
        # cond, then and else of one shape: stock's words, its inputs numbered 0-2
        return [Spec(merge_shapes([c.shape, t.shape, e.shape],
                                  "Inputs to operation Select of type Select"), dt)]
    shape = merge_shapes([t.shape, e.shape], "'then' and 'else'")
    if c.shape is None or shape is None or len(c.shape) == 0:
        return [Spec(shape, dt)]
    if len(c.shape) == 1 and len(shape) > 1:
        if None not in (c.shape[0], shape[0]) and c.shape[0] != shape[0]:
            raise InvalidArgumentError(
                f"Number of batches of 'then' must match size of 'cond', but saw: "
                f"{shape[0]} vs. {c.shape[0]}")
        return [Spec((c.shape[0] if shape[0] is None else shape[0],) + shape[1:], dt)]
    return [Spec(merge_shapes([shape, c.shape], "'cond', 'then' and 'else'"), dt)]
