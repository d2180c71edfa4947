"""Shape functions: ClipByValue and L2Loss."""
from .errors import InvalidArgumentError
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
