"""Shape functions: 2-D max/avg pooling and their gradients."""
from .conv_ops import nhwc_axes, output_size, sizes_value, to_nhwc, from_nhwc, Window
from .errors import InvalidArgumentError, UnimplementedError, Unsupported
from .host import onednn_runs
from .registry import shape_fn
from .spec import Spec, fmt_shape


FORWARD = ("MaxPool", "AvgPool")


def _pool_attr(attrs, name, fmt, op=None):
    """(h, w) of ksize or strides, checked as stock's generic CPU kernels word it (op: the
    forward pool's name; its checks differ a little from the gradients')."""
    v = list(attrs.get(name) or ())
    if op in FORWARD and len(v) < 4:      # the op definition's minimum, checked before any kernel
        raise InvalidArgumentError(f"Length for attr '{name}' of {len(v)} must be at least "
                                   f"minimum 4")
    if len(v) != 4:
        raise InvalidArgumentError(f"Sliding window {name} field must specify 4 dimensions")
    n, h, w, c = nhwc_axes(fmt)
    if op == "AvgPool" and name == "ksize" and min(v) <= 0:
        raise InvalidArgumentError(
            f"ksize must be a positive int32 value, got:{next(k for k in v if k <= 0)}")
    if op in FORWARD and name == "strides" and v[n] == 1 and v[c] == 1 and min(v) <= 0:
        raise InvalidArgumentError(
            f"Stride must be > 0, but got {next(k for k in (v[h], v[w]) if k <= 0)}")
    if min(v) <= 0:
        raise InvalidArgumentError(
            f"Sliding window {name} must be positive. The specified or inferred {name} is: "
            f"{','.join(map(str, v))}")
    if v[n] != 1:
        raise UnimplementedError("Pooling is not yet supported on the batch dimension.")
    if v[c] != 1:
        raise Unsupported(f"attr:{name}:depthwise")  # depthwise pooling: leave it to TF
    return v[h], v[w]


def pool_window(in_nhwc, attrs, op):
    """Window geometry of a pooling op (explicit paddings for MaxPool only)."""
    fmt = attrs.get("data_format", "NHWC")
    g = Window()
    g.kh, g.kw = _pool_attr(attrs, "ksize", fmt, op)
    g.sh, g.sw = _pool_attr(attrs, "strides", fmt, op)
    g.dh = g.dw = 1
    padding = attrs.get("padding", "VALID")
    pt = pb = pl = pr = 0
    if padding == "EXPLICIT":
        p = list(attrs.get("explicit_paddings") or [])
        if len(p) != 8:
            raise InvalidArgumentError(
                f"explicit_paddings attribute must contain 8 values, but got: {len(p)}")
        n, h, w, c = nhwc_axes(fmt)
        if min(p) < 0 or p[2 * n] or p[2 * n + 1] or p[2 * c] or p[2 * c + 1]:
            raise Unsupported("attr:explicit_paddings")
        pt, pb, pl, pr = p[2 * h], p[2 * h + 1], p[2 * w], p[2 * w + 1]
        for name, pad, k in (("Top", pt, g.kh), ("Bottom", pb, g.kh), ("Left", pl, g.kw),
                             ("Right", pr, g.kw)):
            if pad >= k:
                raise InvalidArgumentError(
                    f"{op}: {name} padding {pad} needs to be smaller than the window size {k}")
    hw = (None, None) if in_nhwc is None else in_nhwc[1:3]
    g.oh, g.pt, g.pb = output_size(hw[0], g.kh, g.sh, 1, padding, pt, pb)
    g.ow, g.pl, g.pr = output_size(hw[1], g.kw, g.sw, 1, padding, pl, pr)
    return g


def _input4(spec, op, what="Input", fmt="NHWC"):
    if spec.shape is None:
        return None
    if len(spec.shape) != 4:
        if len(spec.shape) == 5:
            raise Unsupported("rank5_pooling")
        if what == "Input" and not onednn_runs(spec.dtype):    # TensorFlow's generic kernel
            raise InvalidArgumentError(
                f"tensor_in_shape must have 2 spatial dimensions. {len(spec.shape)} "
                f"{int(fmt == 'NCHW')}")
        if what == "Input":   # stock's words: its pools also take 5-D (those run on TensorFlow)
            raise InvalidArgumentError(
                f"Input must be 4 or 5-dimensional: {fmt_shape(spec.shape)} ({op})")
        raise InvalidArgumentError(f"{op}: {what} must be 4-dimensional: {fmt_shape(spec.shape)}")
    return spec.shape


def pooled_shape(x_shape, attrs, op):
    """(output shape in the op's data format, Window) of a pool over x_shape."""
    fmt = attrs.get("data_format", "NHWC")
    xs = to_nhwc(x_shape, fmt)
    g = pool_window(xs, attrs, op)
    if xs is None:
        return None, g
    return from_nhwc((xs[0], g.oh, g.ow, xs[3]), fmt), g


def _pool(inputs, attrs, op):
    x = inputs[0]
    shape = _input4(x, "Pool", fmt=attrs.get("data_format", "NHWC"))
    out, _ = pooled_shape(shape, attrs, op)
    return [Spec(out, x.dtype)]


@shape_fn("MaxPool", value_free=True)
def max_pool(inputs, attrs):
    return _pool(inputs, attrs, "MaxPool")


@shape_fn("AvgPool", value_free=True)
def avg_pool(inputs, attrs):
    return _pool(inputs, attrs, "AvgPool")


def _expect(spec, shape, what, op):
    if spec.shape is None or shape is None:
        return
    if any(a is not None and b is not None and a != b for a, b in zip(spec.shape, shape)) or \
            len(spec.shape) != len(shape):
        raise InvalidArgumentError(
            f"{op}: Expected {what} shape to be {fmt_shape(shape)}, but got "
            f"{fmt_shape(spec.shape)}")


@shape_fn("MaxPoolGrad", value_free=True)
def max_pool_grad(inputs, attrs):
    x, y, dy = inputs
    op = "MaxPoolGrad"
    shape = _input4(x, op, "tensor_in")
    out, _ = pooled_shape(shape, attrs, op)
    _expect(y, out, "orig_output", op)
    _expect(dy, out, "grad", op)
    return [Spec(x.shape, x.dtype)]


@shape_fn("AvgPoolGrad")
def avg_pool_grad(inputs, attrs):
    sizes, dy = inputs
    op = "AvgPoolGrad"
    v = sizes_value(sizes, "orig_input_shape", op)
    if v is None:
        return [Spec((None,) * 4, dy.dtype)]
    if len(v) != 4:
        raise InvalidArgumentError(f"{op}: orig_input_shape must have 4 elements, got {len(v)}")
    return [Spec(tuple(v), dy.dtype)]
