"""Shape functions: Conv2D and its two backprops, plus the sliding-window geometry pools share."""
import numpy as np

from .host import onednn_runs
from .common import int_list
from .errors import InvalidArgumentError, UnimplementedError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

INT32 = np.dtype(np.int32)


class Window:
    """Geometry of one 2-D sliding window op in NHWC terms (None where a size is unknown)."""

    __slots__ = ("kh", "kw", "sh", "sw", "dh", "dw", "oh", "ow", "pt", "pb", "pl", "pr")

    def pads(self):
        return self.pt, self.pb, self.pl, self.pr


def nhwc_axes(data_format, rank=4):
    """(n, h, w, c) axis indices for a data format."""
    if data_format in ("NHWC", None, ""):
        return 0, 1, 2, 3
    if data_format == "NCHW":
        return 0, 2, 3, 1
    raise Unsupported(f"attr:data_format={data_format}")


def to_nhwc(shape, data_format):
    if shape is None:
        return None
    n, h, w, c = nhwc_axes(data_format)
    return shape[n], shape[h], shape[w], shape[c]


def from_nhwc(dims, data_format):
    if nhwc_axes(data_format) == (0, 1, 2, 3):
        return tuple(dims)
    return dims[0], dims[3], dims[1], dims[2]


def output_size(size, k, stride, dilation, padding, before=0, after=0):
    """TensorFlow's GetWindowedOutputSizeVerbose: (out, pad_before, pad_after); out may be None."""
    eff = (k - 1) * dilation + 1
    if size is None:
        return None, 0, 0
    if padding == "SAME":
        out = (size + stride - 1) // stride
        need = max(0, (out - 1) * stride + eff - size)
        return out, need // 2, need - need // 2
    if padding == "VALID":
        before = after = 0
    num = size + before + after - eff + stride
    out = int(num / stride)  # C++ division truncates toward zero
    if out < 0:
        raise InvalidArgumentError(
            f"Computed output size would be negative: {out} [input_size: {size}, "
            f"effective_filter_size: {eff}, stride: {stride}]")
    return out, before, after


def spatial_attr(attrs, name, data_format, what, default=1, eigen=False):
    """(h, w) of a 4-element strides/dilations/ksize attr; checks TF's constraints (`eigen`:
    as stock's reference kernels do, which refuse batch/depth dilations as unimplemented)."""
    v = attrs.get(name)
    if v is None:
        return default, default
    v = list(v)
    if len(v) != 4:
        raise InvalidArgumentError(f"Sliding window {name} field must specify 4 dimensions")
    n, h, w, c = nhwc_axes(data_format)
    if v[n] != 1 or v[c] != 1:
        msg = (f"Current implementation does not yet support {what} in the batch and depth "
               "dimensions.")
        raise (UnimplementedError(msg) if name == "strides" or eigen
               else InvalidArgumentError(msg))
    if v[h] <= 0 or v[w] <= 0:
        raise InvalidArgumentError(f"{name} must be > 0, but got {v}")
    return v[h], v[w]


def explicit_pads(attrs, data_format):
    """(top, bottom, left, right) of explicit_paddings, or zeros unless padding is EXPLICIT."""
    if attrs.get("padding") != "EXPLICIT":
        return 0, 0, 0, 0
    p = list(attrs.get("explicit_paddings") or [])
    if len(p) != 8:
        raise InvalidArgumentError(
            f"explicit_paddings attribute must contain 8 values, but got: {len(p)}")
    n, h, w, c = nhwc_axes(data_format)
    if min(p) < 0 or p[2 * n] or p[2 * n + 1] or p[2 * c] or p[2 * c + 1]:
        # stock (oneDNN) aborts on negative pads and ignores batch/depth pads: leave it to TF
        raise Unsupported("attr:explicit_paddings")
    return p[2 * h], p[2 * h + 1], p[2 * w], p[2 * w + 1]


def window(in_hw, k_hw, attrs, data_format, dilations=True, eigen=False):
    """Window geometry for spatial input sizes (h, w) and window sizes (kh, kw)."""
    g = Window()
    g.kh, g.kw = k_hw
    g.sh, g.sw = spatial_attr(attrs, "strides", data_format, "strides")
    g.dh, g.dw = (spatial_attr(attrs, "dilations", data_format, "dilations", eigen=eigen)
                  if dilations else (1, 1))
    pt, pb, pl, pr = explicit_pads(attrs, data_format)
    padding = attrs.get("padding", "VALID")
    if g.kh is None or g.kw is None:
        g.oh = g.ow = None
        g.pt = g.pb = g.pl = g.pr = 0
        return g
    g.oh, g.pt, g.pb = output_size(in_hw[0], g.kh, g.sh, g.dh, padding, pt, pb)
    g.ow, g.pl, g.pr = output_size(in_hw[1], g.kw, g.sw, g.dw, padding, pl, pr)
    return g


def _rank4(spec, what, op, words=None):
    if spec.shape is not None and len(spec.shape) != 4:
        raise InvalidArgumentError(
            f"{words or op + ': ' + what} must be 4-dimensional: {fmt_shape(spec.shape)}")


# the names TensorFlow's reference kernels give themselves in their error messages
REFERENCE_NAMES = {"Conv2DBackpropInput": "Conv2DCustomBackpropInput",
                   "Conv2DBackpropFilter": "Conv2DCustomBackpropFilter",
                   "DepthwiseConv2dNativeBackpropInput": "DepthwiseConv2DBackpropInput",
                   "DepthwiseConv2dNativeBackpropFilter": "DepthwiseConv2DBackpropFilter"}
_FORWARD = ("Conv2D", "DepthwiseConv2dNative")


def reference_kernel(op, dtype, attrs):
    """Whether stock runs TensorFlow's reference (Eigen) kernel, not oneDNN's, for this
    convolution: float64, float32 without oneDNN (host.onednn_runs: an AVX2-only CPU),
    backprops with explicit padding."""
    return (dtype is None or not onednn_runs(dtype)
            or (op not in _FORWARD and attrs.get("padding") == "EXPLICIT"))


def label(op, dtype, attrs):
    """The op's name as stock's error messages give it (its reference kernel's own name)."""
    return REFERENCE_NAMES.get(op, op) if reference_kernel(op, dtype, attrs) else op


def conv_geometry(x_nhwc, f_shape, attrs, op="Conv2D", dtype=None):
    """Checks a Conv2D-like op and returns (Window, out_channels, groups); groups may be None."""
    fmt = attrs.get("data_format", "NHWC")
    if op == "Conv2D":
        s = attrs.get("strides")
        if s is not None and len(s) == 4:
            n, h, w, c = nhwc_axes(fmt)
            if s[n] == 1 and s[c] == 1 and (s[h] <= 0 or s[w] <= 0):
                raise InvalidArgumentError("Row and column strides should be larger than 0.")
    if f_shape is not None:
        if op == "Conv2D" and any(d == 0 for d in f_shape):
            if f_shape[2] == 0 or onednn_runs(dtype):   # else TF's reference kernel (float64)
                raise InvalidArgumentError(
                    f"{op}: filter must not have zero elements (i.e. all dimensions must be "
                    f"non-zero): {fmt_shape(f_shape)}")
            raise Unsupported("empty_filter")
        kh, kw, fin, cout = f_shape
    else:
        kh = kw = fin = cout = None
    c = x_nhwc[3] if x_nhwc is not None else None
    groups = None
    if c is not None and fin:
        if c % fin:
            raise InvalidArgumentError(
                f"{label(op, dtype, attrs)}: input depth must be evenly divisible by filter "
                f"depth: {c} vs {fin}")
        groups = c // fin
        if groups != 1 and cout is not None and cout % groups:
            raise InvalidArgumentError(
                f"{op}: output depth must be evenly divisible by number of groups: "
                f"{cout} vs {groups}")
    hw = (None, None) if x_nhwc is None else x_nhwc[1:3]
    eigen = dtype is not None and not onednn_runs(dtype)
    return window(hw, (kh, kw), attrs, fmt, eigen=eigen), cout, groups


@shape_fn("Conv2D", value_free=True)
def conv2d(inputs, attrs):
    x, f = inputs[0], inputs[1]
    _rank4(x, "input", "Conv2D")
    _rank4(f, "filter", "Conv2D", "convolution filter")
    fmt = attrs.get("data_format", "NHWC")
    xs = to_nhwc(x.shape, fmt)
    g, cout, _ = conv_geometry(xs, f.shape, attrs, "Conv2D", x.dtype)
    n = xs[0] if xs is not None else None
    return [Spec(from_nhwc((n, g.oh, g.ow, cout), fmt), x.dtype)]


def sizes_value(spec, what, op):
    """A host int vector input (input_sizes, filter_sizes, orig_input_shape) as a list or None."""
    if spec.shape is not None and len(spec.shape) != 1:
        raise InvalidArgumentError(f"{op}: {what} must be a vector: {fmt_shape(spec.shape)}")
    v = int_list(spec)
    if v is not None and min(v, default=0) < 0:
        raise InvalidArgumentError(f"{op}: {what} has a negative dimension: {v}")
    return v


@shape_fn("Conv2DBackpropInput")
def conv2d_backprop_input(inputs, attrs):
    sizes, f, dy = inputs
    op = "Conv2DBackpropInput"
    _rank4(f, "filter", op, f"{label(op, dy.dtype, attrs)}: filter")
    _rank4(dy, "out_backprop", op)
    fmt = attrs.get("data_format", "NHWC")
    v = sizes_value(sizes, "input_sizes", op)
    if v is None:
        n = sizes.shape[0] if sizes.shape is not None else None
        if n not in (None, 2, 4):
            raise InvalidArgumentError(f"{op}: input_sizes must be 4 or 2 elements, got {n}")
        return [Spec((None,) * 4, dy.dtype)]
    if len(v) == 2:
        # spatial sizes only: batch from out_backprop, depth from the filter
        dys = to_nhwc(dy.shape, fmt)
        v = from_nhwc((dys[0] if dys else None, v[0], v[1],
                       f.shape[2] if f.shape is not None else None), fmt)
    elif len(v) != 4:
        raise InvalidArgumentError(
            f"{op}: input_sizes must be 4-dimensional, got: {len(v)}")
    return [Spec(tuple(v), dy.dtype)]


@shape_fn("Conv2DBackpropFilter")
def conv2d_backprop_filter(inputs, attrs):
    x, sizes, dy = inputs
    op = "Conv2DBackpropFilter"
    _rank4(x, "input", op)
    _rank4(dy, "out_backprop", op)
    v = sizes_value(sizes, "filter_sizes", op)
    if v is None:
        return [Spec((None,) * 4, x.dtype)]
    if len(v) != 4:
        raise InvalidArgumentError(
            f"{label(op, x.dtype, attrs)}: filter must be 4-dimensional: {fmt_shape(v)}")
    return [Spec(tuple(v), x.dtype)]


# --- Conv3D (NDHWC) ------------------------------------------------------------------------
# Ours runs NDHWC, unit dilations, ungrouped, non-empty filters. Everything else goes back to
# TensorFlow (Unsupported), whose CPU kernel decides: on an AVX2-only CPU its Eigen kernel
# refuses NCDHW and dilations, with oneDNN on it may run them, so the answer is stock's either
# way; so do the rank, stride and depth errors, whose text is TensorFlow's own.

class Window3:
    __slots__ = ("k", "s", "o", "p")   # per spatial dim (d, h, w): size, stride, out, pad before


def window3(x_shape, f_shape, attrs):
    """Conv3D geometry for NDHWC input and DHWIO filter shapes (entries may be None)."""
    if attrs.get("data_format", "NDHWC") != "NDHWC":
        raise Unsupported("data_format:NCDHW")
    strides = list(attrs.get("strides", ()))
    dil = list(attrs.get("dilations", (1,) * 5))
    if len(strides) != 5 or strides[0] != 1 or strides[4] != 1 or min(strides) < 1:
        raise Unsupported("strides")
    if any(d != 1 for d in dil):
        raise Unsupported("dilations")
    if x_shape is not None and len(x_shape) != 5 or f_shape is not None and len(f_shape) != 5:
        raise Unsupported("rank")
    if f_shape is not None:
        if any(d == 0 for d in f_shape if d is not None):
            raise Unsupported("empty_filter")
        c = x_shape[4] if x_shape is not None else None
        if c is not None and f_shape[3] is not None and c != f_shape[3]:
            raise Unsupported("depth")     # grouped, or not divisible: TensorFlow's text
    g = Window3()
    g.s = strides[1:4]
    g.k = [None] * 3 if f_shape is None else list(f_shape[:3])
    g.o, g.p = [None] * 3, [0] * 3
    for i in range(3):
        size = None if x_shape is None else x_shape[i + 1]
        if size is not None and g.k[i] is not None:
            # a negative size raises stock's InvalidArgumentError and words
            g.o[i], g.p[i], _ = output_size(size, g.k[i], g.s[i], 1, attrs.get("padding", "VALID"))
    return g


@shape_fn("Conv3D", value_free=True)
def conv3d(inputs, attrs):
    x, f = inputs[0], inputs[1]
    g = window3(x.shape, f.shape, attrs)
    n = x.shape[0] if x.shape is not None else None
    cout = f.shape[4] if f.shape is not None else None
    return [Spec((n, *g.o, cout), x.dtype)]


@shape_fn("Conv3DBackpropInputV2")
def conv3d_backprop_input(inputs, attrs):
    sizes, f, dy = inputs
    v = sizes_value(sizes, "input_sizes", "Conv3DBackpropInputV2")
    if v is None:
        return [Spec((None,) * 5, dy.dtype)]
    if len(v) != 5:
        raise Unsupported("input_sizes")
    g = window3(tuple(v), f.shape, attrs)
    _expect3(dy, v[0], g, f.shape[4] if f.shape is not None else None)
    return [Spec(tuple(v), dy.dtype)]


@shape_fn("Conv3DBackpropFilterV2")
def conv3d_backprop_filter(inputs, attrs):
    x, sizes, dy = inputs
    v = sizes_value(sizes, "filter_sizes", "Conv3DBackpropFilterV2")
    if v is None:
        return [Spec((None,) * 5, x.dtype)]
    if len(v) != 5:
        raise Unsupported("filter_sizes")
    g = window3(x.shape, tuple(v), attrs)
    _expect3(dy, x.shape[0] if x.shape is not None else None, g, v[4])
    return [Spec(tuple(v), x.dtype)]


def _expect3(dy, n, g, cout):
    """out_backprop must have the forward's output shape; else TensorFlow says what is wrong."""
    want = (n, *g.o, cout)
    if dy.shape is None or len(dy.shape) != 5 or any(
            a is not None and b is not None and a != b for a, b in zip(dy.shape, want)):
        raise Unsupported("out_backprop_shape")
