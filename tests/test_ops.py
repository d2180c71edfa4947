"""Every op-table case against stock TensorFlow: values, dtypes, shapes, errors, ledger."""
import numpy as np
import pytest

from shape_fns import host
from tests import harness
from tests.optable import all_cases

CASES = all_cases()


def _params():
    for c in CASES:
        for dt in c.dtypes:
            marks = [pytest.mark.skip(reason=c.skip)] if c.skip else []
            yield pytest.param(c, np.dtype(dt), id=f"{c.name}-{dt}", marks=marks)


@pytest.mark.parametrize("case,dtype", list(_params()))
def test_op_matches_stock(case, dtype, tf):
    rng = np.random.default_rng(1234)
    samples = case.samples(dtype, rng)
    assert samples, "a case needs samples"
    for i, args in enumerate(samples):
        try:
            ref = harness.run_stock(case.fn, args)
        except tf.errors.OpError as e:
            # stock refuses this sample on this CPU (its Eigen kernel where oneDNN is off:
            # NCHW, dilations): ours refuses it with the same class
            ours_cls, ours_exc = harness.raised(case.fn, args, "on")
            assert ours_cls is type(e), f"stock raised {e!r}, ours {ours_exc!r}"
            continue
        ours, stats = harness.run_ours(case.fn, args)
        n = case.reduction_len(args) if case.reduction_len else 1
        harness.assert_matches(ours, ref, case.kind, n, case.rtol, case.atol,
                               what=f"{case.name} sample {i}")
        handback = ONEDNN_HANDBACK if host.onednn_runs(dtype) else EIGEN_HANDBACK
        if _handed_back(stats, case.op, handback):
            continue
        assert harness.backend_calls(stats, case.op) > 0, (
            f"{case.op} did not run on our kernel for sample {i}: {stats['ops'].get(case.op)}")


# what our kernels hand back to TensorFlow, by design, where stock runs an Eigen kernel (the
# reason is in the ledger): Eigen multiplies depthwise padding zeros by non-finite values
EIGEN_HANDBACK = {"nonfinite_eigen_padding"}
# ... and where stock runs oneDNN's kernel: its softmax of a row holding NaN or +Inf depends on
# the vector lane (NaN at some positions, 0 at others)
ONEDNN_HANDBACK = {"nonfinite_softmax"}


def _handed_back(stats, op, reasons):
    o = stats["ops"].get(op) or {}
    return not o.get("backend") and o.get("reasons") and set(o["reasons"]) <= reasons


def _error_params():
    for c in CASES:
        if c.errors is None:
            continue
        for dt in c.dtypes[:1] if c.errors else ():
            marks = [pytest.mark.skip(reason=c.skip)] if c.skip else []
            yield pytest.param(c, np.dtype(dt), id=f"{c.name}-{dt}", marks=marks)


# ops whose error messages carry stock's own words, our details after them (issue 17): every
# op with error cases is here or in STOCK_WORDS_GENERIC
STOCK_WORDS = set("""Add AddN AddV2 All Any ArgMax ArgMin Atan2 BatchMatMulV2 BatchMatMulV3 BatchToSpaceND Bitcast
BiasAdd BiasAddGrad DepthToSpace InTopKV2 MatrixBandPart SpaceToBatchND SpaceToDepth
BitwiseAnd BitwiseOr BitwiseXor BroadcastGradientArgs BroadcastTo ClipByValue ConcatOffset ConcatV2 Cumprod
Cumsum Div DivNoNan Einsum EluGrad Equal ExpandDims Fill FloorDiv FloorMod GatherV2 MirrorPad MirrorPadGrad Range
Slice Split SplitV StridedSlice FusedBatchNormGradV3 FusedBatchNormV2 FusedBatchNormV3 GatherNd
Greater GreaterEqual InvGrad InvertPermutation LeakyReluGrad LeftShift Less LessEqual LogSoftmax
LogicalAnd LogicalOr Max MaxPoolGrad Maximum Mean Min Minimum Mul MulNoNan NotEqual OneHot Pack
Pad PadV2 Pow Prod RealDiv ReciprocalGrad Relu6Grad ReluGrad Reshape ResizeBilinear
ResizeBilinearGrad ResizeNearestNeighbor ResizeNearestNeighborGrad ReverseV2 RightShift
RsqrtGrad ScatterNd Select SelectV2 SeluGrad SigmoidGrad Softmax SoftmaxCrossEntropyWithLogits SoftplusGrad
SoftsignGrad SparseSoftmaxCrossEntropyWithLogits SqrtGrad SquaredDifference Squeeze
StridedSliceGrad Sub Sum TanhGrad TensorScatterAdd TensorScatterSub TensorScatterUpdate Tile TopKV2 Transpose TruncateDiv TruncateMod Unpack
UnsortedSegmentSum Where Xdivy Xlog1py Xlogy StatelessRandomGetKeyCounter StatelessRandomUniformV2""".split())


# ops whose error words are stock's where oneDNN does not run the dtype (TensorFlow's generic
# kernels, host.onednn_runs); oneDNN's own kernels word some errors differently, unchecked yet
STOCK_WORDS_GENERIC = {"MatMul", "BatchMatMul", "Conv3D", "MaxPool", "AvgPool", "AvgPoolGrad",
                       "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                       "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                       "DepthwiseConv2dNativeBackpropFilter"}


# ops whose oneDNN kernel takes an input that TensorFlow's own kernel refuses (oneDNN's Conv3D
# takes a 4-D input beside a 5-D filter)
ONEDNN_ACCEPTS = {"Conv3D"}


def test_every_op_with_error_cases_checks_stock_words():
    ops = {p.values[0].op for p in _error_params()}
    assert ops - STOCK_WORDS - STOCK_WORDS_GENERIC == set()


@pytest.mark.parametrize("case,dtype", list(_error_params()))
def test_op_errors_match_stock(case, dtype, tf):
    for args in case.errors(dtype):
        stock_cls, stock_exc = harness.raised(case.fn, args, "off")
        if stock_cls is None and (not host.onednn_runs(dtype) or case.op in ONEDNN_ACCEPTS):
            # an input only one of stock's kernels refuses: where the other runs (oneDNN off
            # on this CPU, or on for an op in ONEDNN_ACCEPTS) stock takes it, and so must we
            ours_cls, ours_exc = harness.raised(case.fn, args, "on")
            assert ours_cls is None, f"stock accepted {case.name} error input, ours {ours_exc!r}"
            continue
        assert stock_cls is not None, f"stock TensorFlow did not raise for {case.name} error input"
        # a Python error from the case itself (wrong arity) would pass both ways: not a check
        assert issubclass(stock_cls, tf.errors.OpError) or stock_cls is ValueError, stock_exc
        ours_cls, ours_exc = harness.raised(case.fn, args, "on")
        assert ours_cls is stock_cls, f"stock raised {stock_exc!r}, ours {ours_exc!r}"
        if case.op in STOCK_WORDS or (case.op in STOCK_WORDS_GENERIC
                                      and not host.onednn_runs(dtype)):
            # stock's message text, our details after it
            words = harness.stock_words(stock_exc)
            assert words and words in str(ours_exc), (words, str(ours_exc))


@pytest.mark.parametrize("n", [5, (1 << 17) + 3])
@pytest.mark.parametrize("op", ["subtract", "divide", "squared_difference", "maximum"])
def test_scalar_first_binary_matches_stock(tf, op, n):
    """A scalar x with a full y (0.01 * g, 1 - p) runs the loops' scalar-first branch, below and
    above the parallel size: the same bits as stock, y untouched."""
    import tf_backend
    y = np.linspace(-3.0, 5.0, n).astype(np.float32)
    y[::7] = 0.0
    keep = y.copy()
    x, ty = tf.constant(np.float32(1.5)), tf.constant(y)
    fn = getattr(tf.math, op)
    stock = fn(x, ty).numpy()
    with tf_backend.enabled():
        ours = fn(x, ty).numpy()
    np.testing.assert_array_equal(ours, stock)
    np.testing.assert_array_equal(ty.numpy(), keep)
