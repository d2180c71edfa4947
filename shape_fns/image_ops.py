"""Shape functions: ResizeBilinear/ResizeNearestNeighbor (+ grads, NHWC) and MirrorPad(+Grad).

`mirror_pad_amounts` holds TensorFlow's MirrorPad/MirrorPadGrad checks for the CPU kernels.
"""
import numpy as np

from .errors import InvalidArgumentError, UnimplementedError
from .registry import shape_fn
from .spec import Spec, fmt_shape

F32 = np.dtype(np.float32)


def _no_both(op, attrs):
    if attrs.get("half_pixel_centers", False) and attrs.get("align_corners", False):
        raise InvalidArgumentError(f"{op}: If half_pixel_centers is True, align_corners must be False.")


def _size(spec, op):
    """(height, width) from a size input (None where unknown); must be a 2-element vector."""
    ss = spec.shape
    if ss is not None:
        if len(ss) != 1:
            raise InvalidArgumentError(f"shape_t must be 1-dimensional{fmt_shape(ss)}")
        if ss[0] not in (2, None):
            raise InvalidArgumentError(f"shape_t must have two elements{fmt_shape(ss)}")
    if spec.value is None:
        return None, None
    h, w = (int(v) for v in spec.value.reshape(-1))
    return h, w


def _rank4(shape, what, op):
    if shape is not None and len(shape) != 4:
        raise InvalidArgumentError(f"{what} must be 4-dimensional{fmt_shape(shape)}")
    return (None,) * 4 if shape is None else shape


def _resize(inputs, attrs, op):
    x, size = inputs
    _no_both(op, attrs)
    n, h, w, c = _rank4(x.shape, "input", op)
    if c == 0:
        raise InvalidArgumentError(f"{op}: image must have at least one channel")
    if h == 0 or w == 0:
        raise InvalidArgumentError(f"{op}: input image must be of non-zero size: {fmt_shape(x.shape)}")
    oh, ow = _size(size, op)
    if oh is not None and (oh <= 0 or ow <= 0):
        raise InvalidArgumentError(f"{op}: output dimensions must be positive, got [{oh},{ow}]")
    return (n, oh, ow, c)


@shape_fn("ResizeBilinear")
def resize_bilinear(inputs, attrs):
    return [Spec(_resize(inputs, attrs, "ResizeBilinear"), F32)]


@shape_fn("ResizeNearestNeighbor")
def resize_nearest_neighbor(inputs, attrs):
    return [Spec(_resize(inputs, attrs, "ResizeNearestNeighbor"), inputs[0].dtype)]


@shape_fn("ResizeBilinearGrad", value_free=True)
def resize_bilinear_grad(inputs, attrs):
    g, orig = inputs
    op = "ResizeBilinearGrad"
    _no_both(op, attrs)
    n, rh, rw, c = _rank4(g.shape, "input_grad", op)
    if rh == 0 or rw == 0:
        raise InvalidArgumentError(f"{op}: resized dimensions must be positive: {fmt_shape(g.shape)}")
    _, h, w, _ = _rank4(orig.shape, "original_image", op)
    if h == 0 or w == 0:
        raise InvalidArgumentError(
            f"{op}: original dimensions must be positive: {fmt_shape(orig.shape)}")
    return [Spec((n, h, w, c), orig.dtype)]


@shape_fn("ResizeNearestNeighborGrad")
def resize_nearest_neighbor_grad(inputs, attrs):
    g, size = inputs
    op = "ResizeNearestNeighborGrad"
    n, _, _, c = _rank4(g.shape, "input", op)
    h, w = _size(size, op)
    if h is not None and (h <= 0 or w <= 0):
        raise InvalidArgumentError(f"{op}: shape_t's elements must be positive, got [{h},{w}]")
    return [Spec((n, h, w, c), g.dtype)]


def mirror_pad_amounts(shape, paddings, mode, grad):
    """Validated [(before, after)] for MirrorPad (grad=False) or MirrorPadGrad (grad=True)."""
    op = "MirrorPadGrad" if grad else "MirrorPad"
    reflect = mode == "REFLECT"
    out = []
    for d, (lo, hi) in zip(shape, paddings):
        if lo < 0 or hi < 0:
            raise InvalidArgumentError(   # stock's two kernels word it differently
                f"Paddings must be non-negative: {lo}, {hi} ({op})" if grad else
                f"paddings must be non-negative: {lo} {hi} ({op})")
        if grad and lo + hi >= d:
            raise InvalidArgumentError(
                f"Total paddings must be less than the input dimension size: {lo + hi} "
                f"was not less than {d} ({op})")
        n = d - lo - hi if grad else d
        if (reflect and (lo >= n or hi >= n)) or (not reflect and (lo > n or hi > n)):
            where = "output dimension size" if grad else "dimension size"
            words = (f"paddings must be less than the {where}: {lo}, {hi} not less than {n}"
                     if reflect else f"paddings must be no greater than the {where}: {lo}, "
                     f"{hi} greater than {n}")
            raise InvalidArgumentError(f"{words} ({op} {mode}, input {fmt_shape(shape)})")
        out.append((lo, hi))
    return out


def _mirror_pad(inputs, attrs, grad):
    x, p = inputs
    xs, ps = x.shape, p.shape
    mode = attrs.get("mode", "REFLECT")
    if xs is not None and len(xs) > 5:
        raise UnimplementedError(f"MirrorPad: inputs rank not in [0,5]: {len(xs)}")
    if ps is not None and (len(ps) != 2 or ps[1] not in (2, None)):
        raise InvalidArgumentError(f"MirrorPad: paddings must be a matrix with 2 columns: {fmt_shape(ps)}")
    if xs is not None and ps is not None and ps[0] not in (len(xs), None):
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs{fmt_shape(ps)}"
            f"{' ' if grad else ', '}{fmt_shape(xs)} ({'MirrorPadGrad' if grad else 'MirrorPad'})")
    if xs is None:
        r = ps[0] if ps is not None else None
        return [Spec(None if r is None else (None,) * r, x.dtype)]
    if p.value is None:
        return [Spec((None,) * len(xs), x.dtype)]
    pads = [tuple(int(v) for v in row) for row in p.value.reshape(len(xs), 2)]
    if None in xs:
        return [Spec([None if d is None else (d - lo - hi if grad else d + lo + hi)
                      for d, (lo, hi) in zip(xs, pads)], x.dtype)]
    pads = mirror_pad_amounts(xs, pads, mode, grad)
    return [Spec([d - lo - hi if grad else d + lo + hi for d, (lo, hi) in zip(xs, pads)], x.dtype)]


@shape_fn("MirrorPad")
def mirror_pad(inputs, attrs):
    return _mirror_pad(inputs, attrs, False)


@shape_fn("MirrorPadGrad")
def mirror_pad_grad(inputs, attrs):
    return _mirror_pad(inputs, attrs, True)
