"""Shape functions: math ops (elementwise families, reductions, matmul)."""
import numpy as np

from .common import broadcast_shapes, same_dtype
from .registry import shape_fn
from .spec import Spec

BOOL = np.dtype(bool)

# Elementwise families: the kernel table (kernels/elementwise_table.py) gives the arithmetic;
# these lists give the shape rule, and a test keeps the two in step.
UNARY = """Neg Abs Sign Exp Expm1 Log Log1p Sqrt Rsqrt Square Reciprocal Inv Tanh Sigmoid Relu Relu6
Elu Selu LeakyRelu Softplus Softsign Erf Erfc Sin Cos Tan Floor Ceil Round Rint LogicalNot Invert Atan Asin Acos Sinh Cosh Asinh Acosh Atanh Gelu""".split()
BINARY = """Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv TruncateMod Maximum
Minimum Pow SquaredDifference LogicalAnd LogicalOr Xdivy Xlogy Xlog1py Atan2 MulNoNan BitwiseAnd
BitwiseOr BitwiseXor ReluGrad Relu6Grad EluGrad SeluGrad LeakyReluGrad SoftplusGrad SoftsignGrad
SigmoidGrad TanhGrad SqrtGrad RsqrtGrad ReciprocalGrad InvGrad""".split()
COMPARE = "Less LessEqual Greater GreaterEqual Equal NotEqual".split()
BOOL_UNARY = {"IsNan", "IsInf", "IsFinite"}


@shape_fn(*UNARY)
def unary(inputs, attrs):
    x = inputs[0]
    return [Spec(x.shape, x.dtype)]


@shape_fn(*sorted(BOOL_UNARY))
def unary_predicate(inputs, attrs):
    return [Spec(inputs[0].shape, BOOL)]


@shape_fn(*BINARY)
def binary(inputs, attrs):
    x, y = inputs
    dt = same_dtype(inputs, "binary op")
    return [Spec(broadcast_shapes(x.shape, y.shape), dt)]


@shape_fn(*COMPARE)
def compare(inputs, attrs):
    x, y = inputs
    same_dtype(inputs, "comparison")
    return [Spec(broadcast_shapes(x.shape, y.shape), BOOL)]
