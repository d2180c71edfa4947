"""CPU kernels: float16/bfloat16 for ops whose float32 kernels live in other modules
(convolutions, depthwise convolutions, pooling, batch norm, Einsum; MaxPool has its own half
kernel in pooling_ops, on bit patterns).

Half inputs are widened to float32 (exactly), the op's float32 kernel runs, and each half output
is rounded once to nearest even; float32 outputs (batch-norm statistics) are written directly.
TensorFlow's CPU kernels for these ops accumulate half data in float32 and round the result
once (Conv2D/BatchNorm) or accumulate in the half type itself (pooling's sums): the op table
measures the differences against stock and states the tolerance where they are not bit-equal.
"""
import numpy as np

from kernels import KERNELS, kernel
from kernels.cpu import bf16_gemm, conv_ops, gemm, pooling_ops
from kernels.cpu.half_bits import narrow_into, widen
from kernels.cpu.scratch import scratch
from shape_fns.errors import InvalidArgumentError
from shape_fns.conv_ops import conv_geometry
from shape_fns.host import onednn_runs

HALF = ("float16", "bfloat16")
F32 = np.dtype(np.float32)

# op -> the dtype attrs that name the half type (others, e.g. batch norm's U, stay float32)
OPS = {
    "Conv2D": ("T",), "Conv2DBackpropInput": ("T",), "Conv2DBackpropFilter": ("T",),
    "DepthwiseConv2dNative": ("T",), "DepthwiseConv2dNativeBackpropInput": ("T",),
    "DepthwiseConv2dNativeBackpropFilter": ("T",),
    "AvgPool": ("T",), "MaxPoolGrad": ("T",), "AvgPoolGrad": ("T",),
    "FusedBatchNormV3": ("T",), "FusedBatchNormGradV3": ("T",),
    "Einsum": ("T",),
}


# Where stock runs a half type on Eigen (float16 without AVX512_FP16: host.onednn_runs), batch
# norm's reserve spaces differ from oneDNN's (the float32 kernel's): output index -> the shape the
# float32 kernel expects (ours are zero, as Eigen's).
EIGEN_RESERVE = {"FusedBatchNormV3": {5: (0,)}, "FusedBatchNormGradV3": {3: (), 4: ()}}


def _float32_kernel(op, attrs):
    for k in KERNELS.get((op, "cpu"), ()):
        if not getattr(k.fn, "half_wrapper", False) and k.accepts(attrs) is None:
            return k.fn
    return None


def _bf16_window(op, out, arrays, x_shape, f_shape, attrs):
    """The geometry of a one-group NHWC bfloat16 convolution op where the CPU's bfloat16 dot
    products run (kernels/cpu/bf16_gemm.py); None: the float32 kernel runs it (and raises
    stock's errors)."""
    if (out.dtype.name != "bfloat16" or attrs.get("data_format", "NHWC") != "NHWC"
            or any(a.ndim != 4 for a in arrays) or not bf16_gemm.runs()):
        return None
    try:
        g, _, groups = conv_geometry(x_shape, f_shape, attrs, op, out.dtype)
    except Exception:  # noqa: BLE001 - the float32 kernel raises stock's error
        return None
    return g if groups == 1 else None


def _bf16_conv(inputs, out, attrs, bias=None, relu=False):
    """Conv2D (>= 16 output channels; + bias, Relu) on the bfloat16 dot products; False: not
    here."""
    x, f = inputs
    g = _bf16_window("Conv2D", out, (x, f), x.shape, f.shape, attrs)
    return (g is not None and bf16_gemm.conv_eligible(x.shape, f.shape, g, 1)
            and bf16_gemm.conv2d_into(out, x, f, g, bias=bias, relu=relu,
                                      keep=attrs.get("_filter_is_variable", False)))


def _bf16_backprop_input(inputs, dx, attrs):
    """Conv2DBackpropInput of a unit-stride convolution, as a convolution on the bfloat16 dot
    products (bf16_gemm.backprop_input_into); False: not here."""
    _, f, dy = inputs
    g = _bf16_window("Conv2DBackpropInput", dx, (dx, f, dy), dx.shape, f.shape, attrs)
    return g is not None and bf16_gemm.backprop_input_into(dx, f, dy, g)


def _bf16_backprop_filter(inputs, df, attrs):
    """Conv2DBackpropFilter of a unit-stride convolution on the bfloat16 dot products
    (bf16_gemm.backprop_filter_into), or of a first layer (few input channels, as
    conv_ops.backprop_filter_nhwc picks it) on the float32 tiles reading dy as bfloat16
    (bf16_gemm.backprop_filter_few_into: the bits of widening dy first, without its float32
    copy); False: not here."""
    x, _, dy = inputs
    g = _bf16_window("Conv2DBackpropFilter", df, (df, x, dy), x.shape, df.shape, attrs)
    if g is None:
        return False
    if bf16_gemm.backprop_filter_into(df, x, dy, g):
        return True
    return (x.shape[3] <= conv_ops.FEW_CHANNELS and bf16_gemm.runs_f32()
            and x.shape[0] * g.oh * g.ow >= conv_ops.FEW_TILES_MIN_PIXELS
            and bf16_gemm.backprop_filter_few_into(df, x, dy, g))


def bias_relu_product(op, attrs, inputs, bias, out):
    """out = Relu(op(inputs) + bias) for a bfloat16 Conv2D or MatMul on the CPU's bfloat16 dot
    products, added and clipped in float32 before the one rounding (stock's fused oneDNN
    convolution), or a float32 NHWC Conv2D on the float32 tiles (conv_ops.conv_bias_relu: one
    pass instead of three), or a float32 MatMul gemm runs on the tiles; None where that kernel
    does not run it (the caller runs the ops in turn)."""
    if out.dtype == np.float32 and op == "Conv2D":
        return out if conv_ops.conv_bias_relu(inputs, bias, out, attrs) else None
    if out.dtype == np.float32 and op == "MatMul":
        # where gemm's measured choice runs the product on the float32 tiles, the bias and
        # Relu are applied as the tile is stored (the same bits as the three kernels)
        a, b = inputs
        a = a.T if attrs["transpose_a"] else a
        b = b.T if attrs["transpose_b"] else b
        if (a.ndim != 2 or b.ndim != 2 or bias.shape != (out.shape[1],)
                or not gemm.tiles_chosen(a, b, out, attrs.get("_filter_is_variable", False))):
            return None
        return out if bf16_gemm.matmul_f32_into(out, a, b, bias, relu=True) else None
    if out.dtype.name != "bfloat16" or not bf16_gemm.runs():
        return None
    if op == "MatMul":
        a, b = inputs
        a = a.T if attrs["transpose_a"] else a
        b = b.T if attrs["transpose_b"] else b
        if a.ndim != 2 or not out.size or not a.shape[1] or bias.shape != (out.shape[1],):
            return None
        bf16_gemm.product_into(out, a, b, bias=bias, relu=True)
        return out
    f = inputs[1]
    if f.ndim != 4 or bias.shape != (f.shape[3],) \
            or not _bf16_conv(inputs, out, attrs, bias=bias, relu=True):
        return None
    return out


# kernels that run some half-precision cases without widening: op -> fn(inputs, out, attrs),
# True when it ran the call
DIRECT = {"Conv2D": _bf16_conv, "Conv2DBackpropInput": _bf16_backprop_input,
          "Conv2DBackpropFilter": _bf16_backprop_filter,
          "MaxPoolGrad": pooling_ops.max_pool_grad_half}


def _wrap(op, type_attrs):
    found = {}
    direct = DIRECT.get(op)

    no_dilations = op in ("Conv2DBackpropInput", "Conv2DBackpropFilter")

    def run(inputs, outputs, attrs):
        on_eigen = not onednn_runs(attrs["T"])
        if no_dilations and on_eigen and max(attrs.get("dilations") or [1]) > 1:
            # stock's Eigen backprops refuse dilations (oneDNN's take them)
            raise InvalidArgumentError(
                "Current CPU implementations do not yet support dilation rates larger than 1.")
        if direct is not None and direct(inputs, outputs[0], attrs):
            return
        a = dict(attrs)
        for t in type_attrs:
            a[t] = F32
        key = tuple(sorted((k, str(v)) for k, v in a.items() if isinstance(v, np.dtype)))
        fn = found.get(key)
        if fn is None:
            fn = found[key] = _float32_kernel(op, a)
        # float32 copies in this thread's work buffers: a fresh multi-MB array each call cost a
        # page fault per 4 KiB (a 256x32x32x32 bfloat16 convolution: 11.4 against 7.8 ms in
        # float32); the float32 kernel's own scratch slots have other names
        ins = [widen(x, scratch(x.shape, F32, f"half_in{k}")) if x.dtype.name in HALF else x
               for k, x in enumerate(inputs)]
        outs = [scratch(o.shape, F32, f"half_out{k}") if o.dtype.name in HALF else o
                for k, o in enumerate(outputs)]
        eigen = EIGEN_RESERVE.get(op) if on_eigen else None
        if eigen:   # the float32 kernel writes oneDNN's reserve-space shapes
            for k, shape in eigen.items():
                outs[k] = np.zeros(shape, F32)
        fn(ins, outs, a)
        if eigen:
            for k in eigen:
                outputs[k].fill(0)
        for k, (o, t) in enumerate(zip(outputs, outs)):
            if t is not o and not (eigen and k in eigen):
                narrow_into(o, t)

    run.half_wrapper = True
    run.__qualname__ = f"half.{op}"
    return run


for _op, _attrs in OPS.items():
    kernel(_op, dtypes=HALF, type_attr=_attrs[0])(_wrap(_op, _attrs))
