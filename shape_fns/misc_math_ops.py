"""Shape functions: ClipByValue, L2Loss, MatrixBandPart and InTopKV2."""
import numpy as np

from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape


def _same_or_scalar(s, t):
    if s is None or t is None or s == ():
        return True
    return len(s) == len(t) and all(a is None or b is None or a == b for a, b in zip(s, t))


@shape_fn("ClipByValue", value_free=True)
def clip_by_value(inputs, attrs):
    t, lo, hi = inputs
    if not (_same_or_scalar(lo.shape, t.shape) and _same_or_scalar(hi.shape, t.shape)):
        raise InvalidArgumentError(
            "clip_value_min and clip_value_max must be either of the same shape as input, or a "
            f"scalar. input shape: {fmt_shape(t.shape)}clip_value_min shape: "
            f"{fmt_shape(lo.shape)}clip_value_max shape: {fmt_shape(hi.shape)} (ClipByValue)")
    return [Spec(t.shape, t.dtype)]


@shape_fn("L2Loss", value_free=True)
def l2_loss(inputs, attrs):
    return [Spec((), inputs[0].dtype)]


@shape_fn("MatrixBandPart")
def matrix_band_part(inputs, attrs):
    """Ours for at-least-2-D input and scalar bands within the matrix; anything else goes back
    to TensorFlow (Unsupported), whose kernel words the error."""
    x, lo, hi = inputs
    if x.shape is not None and len(x.shape) < 2:
        raise Unsupported("MatrixBandPart: rank")
    for v, d in ((lo, -2), (hi, -1)):
        if v.shape is not None and len(v.shape) != 0:
            raise Unsupported("MatrixBandPart: band not a scalar")
        if v.value is not None and x.shape is not None and x.shape[d] is not None \
                and int(v.value) > x.shape[d]:
            raise Unsupported("MatrixBandPart: band larger than the matrix")
    return [Spec(x.shape, x.dtype)]


@shape_fn("InTopKV2")
def in_top_k(inputs, attrs):
    """bool[batch]; bad ranks and mismatched batches go back to TensorFlow (a negative k is
    taken, as stock takes it: no target is in the top k)."""
    p, t, k = inputs
    if (p.shape is not None and len(p.shape) != 2) or (t.shape is not None and len(t.shape) != 1) \
            or (k.shape is not None and len(k.shape) != 0):
        raise Unsupported("InTopKV2: shapes or k")
    b = p.shape[0] if p.shape is not None else None
    if t.shape is not None and b is not None and t.shape[0] is not None and t.shape[0] != b:
        raise Unsupported("InTopKV2: batch sizes differ")
    return [Spec((b if b is not None else (t.shape[0] if t.shape is not None else None),),
                 np.dtype(bool))]
