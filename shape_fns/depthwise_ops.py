"""Shape functions: DepthwiseConv2dNative and its two backprops.

Stock CPU TensorFlow runs float32 on oneDNN and float64 on its Eigen kernels, which check
different things: oneDNN takes unequal strides, dilations and NCHW; Eigen takes none of these
and raises other classes for the same bad attrs. Where oneDNN's answer is not a plain result
(AbortedError, process aborts, input-shaped outputs for empty tensors, ignored attrs) we leave
the op to TensorFlow.
"""
import numpy as np

from .common import int_list
from .conv_ops import (REFERENCE_NAMES, from_nhwc, nhwc_axes, output_size, reference_kernel,
                       sizes_value, to_nhwc)
from .errors import InvalidArgumentError, UnimplementedError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

FLOAT64 = np.dtype(np.float64)
FORWARD = "DepthwiseConv2dNative"


class Geometry:
    """Depthwise window in NHWC terms; None where a size is unknown."""

    __slots__ = ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow", "pt", "pb", "pl", "pr")

    def padded(self):
        return bool(self.pt or self.pb or self.pl or self.pr)


def eigen(dtype, attrs, op):
    """True where stock runs TF's Eigen kernels: float64, float32 where oneDNN is off
    (host.onednn_runs: an AVX2-only CPU), and backprops with explicit padding (float16 too,
    which we do not run); float32 runs on oneDNN otherwise."""
    return reference_kernel(op, dtype, attrs)


def label(op, eg):
    """The op's name in stock's messages where its Eigen kernel (`eg`) runs it."""
    return REFERENCE_NAMES.get(op, op) if eg else op


def _hw_attr(attrs, name, fmt, eg, op):
    v = attrs.get(name)
    if v is None:
        return 1, 1
    v = [int(e) for e in v]
    n, h, w, c = nhwc_axes(fmt)
    if len(v) != 4:
        raise InvalidArgumentError(f"{op}: Sliding window {name} field must specify 4 dimensions")
    if name == "strides":
        if v[n] != 1 or v[c] != 1:
            msg = ("Current implementation does not yet support strides in the batch and depth "
                   "dimensions.")
            # only oneDNN's forward kernel says Unimplemented
            raise UnimplementedError(msg) if op == FORWARD and not eg else InvalidArgumentError(msg)
        if v[h] <= 0 or v[w] <= 0:
            raise InvalidArgumentError(f"{op}: Stride must be > 0, but got {min(v[h], v[w])}")
        if eg and v[h] != v[w]:
            raise InvalidArgumentError(
                "Current implementation only supports equal length strides in the row and "
                "column dimensions.")
    else:
        if op != "DepthwiseConv2dNative" and v != [1, 1, 1, 1]:
            raise Unsupported("attr:dilations")   # stock backprops ignore dilations
        if eg and v != [1, 1, 1, 1]:
            raise UnimplementedError(   # stock prints the attr as a vector: [2 1 1 1]
                "Current kernel implementation does not support dilations, received "
                f"[{' '.join(map(str, v))}]")
        if v[n] != 1 or v[c] != 1:
            raise InvalidArgumentError(
                "Current implementation does not yet support dilations in the batch and depth "
                "dimensions.")
        if v[h] <= 0 or v[w] <= 0:
            raise InvalidArgumentError(f"{op}: Dilated rates should be larger than 0.")
    return v[h], v[w]


def _explicit(attrs, fmt, eg):
    """(top, bottom, left, right) explicit paddings, checked as stock checks them."""
    pads = [int(e) for e in (attrs.get("explicit_paddings") or [])]
    explicit = attrs.get("padding") == "EXPLICIT"
    if not explicit:
        if pads:
            if not eg:
                raise Unsupported("attr:explicit_paddings")   # oneDNN ignores them
            raise InvalidArgumentError(
                "explicit_paddings attribute must be empty if the padding attribute is not "
                "EXPLICIT")
        return 0, 0, 0, 0
    n, h, w, c = nhwc_axes(fmt)
    bad = None
    if len(pads) != 8:
        bad = f"explicit_paddings attribute must contain 8 values, but got: {len(pads)}"
    elif min(pads) < 0:
        bad = "All elements of explicit_paddings must be nonnegative"
    elif pads[2 * n] or pads[2 * n + 1] or pads[2 * c] or pads[2 * c + 1]:
        bad = "Nonzero explicit padding in the batch or depth dimensions is not supported"
    if bad:
        if not eg:
            raise Unsupported("attr:explicit_paddings")   # oneDNN aborts or ignores them
        raise InvalidArgumentError(bad)
    return pads[2 * h], pads[2 * h + 1], pads[2 * w], pads[2 * w + 1]


def check_format(attrs, eg):
    fmt = attrs.get("data_format", "NHWC") or "NHWC"
    nhwc_axes(fmt)
    if fmt == "NCHW" and eg:
        raise UnimplementedError("Depthwise convolution on CPU is only supported for NHWC format")
    return fmt


def check_depth(c, fin, eg, op):
    """Input channels c against the filter's in_depth fin (None = unknown)."""
    if c is None or fin is None or c == fin:
        return
    if eg:
        if op == FORWARD:
            raise InvalidArgumentError(
                f"{op}: input and filter must have the same depth: {c} vs {fin}")
        raise InvalidArgumentError(
            f"{label(op, eg)}: input and filter must have the same in_depth: {c} vs {fin}")
    if fin == 0 or c % fin:
        raise InvalidArgumentError(
            f"{op}: input depth must be evenly divisible by filter depth: {c} vs {fin}")
    raise Unsupported("grouped_depthwise")   # oneDNN raises AbortedError


def geometry(in_hw, k_hw, attrs, fmt, eg, op):
    g = Geometry()
    g.sh, g.sw = _hw_attr(attrs, "strides", fmt, eg, op)
    g.dh, g.dw = _hw_attr(attrs, "dilations", fmt, eg, op)
    pt, pb, pl, pr = _explicit(attrs, fmt, eg)
    g.kh, g.kw = k_hw
    padding = attrs.get("padding", "VALID")
    g.oh, g.pt, g.pb = (None, 0, 0) if g.kh is None else output_size(
        in_hw[0], g.kh, g.sh, g.dh, padding, pt, pb)
    g.ow, g.pl, g.pr = (None, 0, 0) if g.kw is None else output_size(
        in_hw[1], g.kw, g.sw, g.dw, padding, pl, pr)
    return g


def _rank4(spec, what, op):
    if spec.shape is not None and len(spec.shape) != 4:
        sep = ": " if what == "filter" else ""   # stock's words differ per input
        raise InvalidArgumentError(f"{what} must be 4-dimensional{sep}{fmt_shape(spec.shape)}")


def _empty(shape):
    return shape is not None and any(d == 0 for d in shape)


def forward_geometry(x_shape, f_shape, attrs, dtype):
    """(fmt, x in NHWC, Geometry, out channels) of a DepthwiseConv2dNative; checks as stock."""
    op = FORWARD
    eg = eigen(dtype, attrs, op)
    fmt = check_format(attrs, eg)
    xs = to_nhwc(x_shape, fmt)
    if not eg and _empty(f_shape):
        raise InvalidArgumentError(
            f"{op}: filter must not have zero elements (i.e. all dimensions must be non-zero)")
    kh, kw, fin, m = f_shape if f_shape is not None else (None,) * 4
    check_depth(xs[3] if xs else None, fin, eg, op)
    g = geometry((None, None) if xs is None else xs[1:3], (kh, kw), attrs, fmt, eg, op)
    cout = None if fin is None or m is None else fin * m
    return fmt, xs, g, cout


@shape_fn("DepthwiseConv2dNative", value_free=True)
def depthwise_conv2d(inputs, attrs):
    x, f = inputs
    op = FORWARD
    _rank4(x, "input", op)
    _rank4(f, "filter", op)
    fmt, xs, g, cout = forward_geometry(x.shape, f.shape, attrs, x.dtype)
    n = xs[0] if xs else None
    out = from_nhwc((n, g.oh, g.ow, cout), fmt)
    if x.dtype != FLOAT64 and (_empty(x.shape) or _empty(out)):
        raise Unsupported("empty_depthwise")   # oneDNN returns an input-shaped tensor
    return [Spec(out, x.dtype)]


def expect_out_backprop(dy_shape, want, eg, op):
    """out_backprop (NHWC) must have the forward's output shape."""
    if dy_shape is None or any(d is None for d in dy_shape + tuple(want)):
        return
    if tuple(dy_shape) != tuple(want):
        if not eg:
            raise Unsupported("out_backprop_shape_mismatch")   # oneDNN: AbortedError
        names = ("batch", "rows", "columns", "depth")
        i = next(i for i in range(4) if dy_shape[i] != want[i])
        raise InvalidArgumentError(
            f"{label(op, eg)}: Number of {names[i]} of out_backprop doesn't match computed: "
            f"actual = {dy_shape[i]}, computed = {want[i]}")


def _sizes4(spec, eg, what, op):
    v = int_list(spec) if spec.shape is not None and len(spec.shape) == 1 else None
    if v is not None and eg and len(v) == 4 and min(v) < 0:
        i = next(i for i, d in enumerate(v) if d < 0)
        raise InvalidArgumentError(f"Dimension {i} of {what} must be >= 0")
    v = sizes_value(spec, what, op)
    if v is not None and len(v) != 4:
        if not eg:
            raise Unsupported(f"{what}_len{len(v)}")
        raise InvalidArgumentError(f"{label(op, eg)}: {what[:-6]} must be 4-dimensional")
    return v


@shape_fn("DepthwiseConv2dNativeBackpropInput")
def depthwise_backprop_input(inputs, attrs):
    sizes, f, dy = inputs
    op = "DepthwiseConv2dNativeBackpropInput"
    dtype = dy.dtype
    eg = eigen(dtype, attrs, op)
    if eg and f.shape is not None and len(f.shape) != 4:
        raise InvalidArgumentError(f"{label(op, eg)}: filter must be 4-dimensional: "
                                   f"{fmt_shape(f.shape)}")
    _rank4(f, "filter", op)
    _rank4(dy, "out_backprop", op)
    fmt = check_format(attrs, eg)
    v = _sizes4(sizes, eg, "input_sizes", op)
    if v is None:
        if sizes.shape is not None and sizes.shape[0] not in (None, 4):
            raise InvalidArgumentError(f"{op}: input_sizes must have 4 elements")
        return [Spec((None,) * 4, dtype)]
    xs = to_nhwc(v, fmt)
    kh, kw, fin, m = f.shape if f.shape is not None else (None,) * 4
    check_depth(xs[3], fin, eg, op)
    g = geometry(xs[1:3], (kh, kw), attrs, fmt, eg, op)
    cout = None if fin is None or m is None else fin * m
    expect_out_backprop(to_nhwc(dy.shape, fmt), (xs[0], g.oh, g.ow, cout), eg, op)
    if dtype != FLOAT64 and (_empty(v) or _empty(f.shape) or _empty(dy.shape)):
        raise Unsupported("empty_depthwise")
    return [Spec(tuple(v), dtype)]


@shape_fn("DepthwiseConv2dNativeBackpropFilter")
def depthwise_backprop_filter(inputs, attrs):
    x, sizes, dy = inputs
    op = "DepthwiseConv2dNativeBackpropFilter"
    _rank4(x, "input", op)
    _rank4(dy, "out_backprop", op)
    dtype = x.dtype
    eg = eigen(dtype, attrs, op)
    fmt = check_format(attrs, eg)
    v = sizes_value(sizes, "filter_sizes", op)
    if v is None:
        return [Spec((None,) * 4, dtype)]
    if len(v) != 4:
        raise InvalidArgumentError(f"{label(op, eg)}: filter must be 4-dimensional: {fmt_shape(v)}")
    xs = to_nhwc(x.shape, fmt)
    check_depth(xs[3] if xs else None, v[2], eg, op)
    g = geometry((None, None) if xs is None else xs[1:3], v[:2], attrs, fmt, eg, op)
    expect_out_backprop(to_nhwc(dy.shape, fmt), (xs[0] if xs else None, g.oh, g.ow, v[2] * v[3]),
                        eg, op)
    if dtype != FLOAT64 and (_empty(v) or _empty(x.shape) or _empty(dy.shape)):
        raise Unsupported("empty_depthwise")
    return [Spec(tuple(v), dtype)]

