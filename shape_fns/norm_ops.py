"""Shape functions: FusedBatchNormV3 and FusedBatchNormGradV3.

Stock CPU TensorFlow runs 4-D batch norm on oneDNN for the dtypes oneDNN takes on this CPU
(float32 always, bfloat16 with AVX-512, float16 with AVX512_FP16: host.onednn_runs) and
everything else (5-D NDHWC, float16 elsewhere) on Eigen; the two differ in reserve-space shapes
(oneDNN: reserve_space_3 is [0] and the gradient's reserve_space_4/5 are scalars; Eigen: [] and
[0]). We give the shapes of the kernel stock picks here, and leave 5-D formats to TensorFlow.
"""
import numpy as np

from .errors import InvalidArgumentError, Unsupported
from .host import onednn_runs
from .registry import shape_fn
from .spec import Spec, fmt_shape


def channel_axis(attrs):
    fmt = attrs.get("data_format", "NHWC") or "NHWC"
    if fmt == "NHWC":
        return 3
    if fmt == "NCHW":
        return 1
    raise Unsupported(f"attr:data_format={fmt}")   # 5-D formats run on Eigen


def _rank(spec, rank, msg):
    if spec.shape is not None and len(spec.shape) != rank:
        raise InvalidArgumentError(f"{msg}{fmt_shape(spec.shape)}")


def _rank_x(spec, dtype):
    """x must be 4-D for oneDNN's kernel; stock's Eigen kernel (host.onednn_runs) also takes
    5-D, which we leave to it."""
    if onednn_runs(dtype):
        _rank(spec, 4, "input must be 4-dimensional")
    elif spec.shape is not None and len(spec.shape) == 5:
        raise Unsupported("5-D batch norm")
    else:
        _rank(spec, 4, "input must be 4 or 5-dimensional")


def _size(spec):
    if spec.shape is None or any(d is None for d in spec.shape):
        return None
    return int(np.prod(spec.shape, dtype=np.int64))


def _same_channels(spec, c, msg):
    n = _size(spec)
    if n is not None and c is not None and n != c:
        raise InvalidArgumentError(f"{msg} must have the same number of elements as the channels "
                                   f"of x, got {n} and {c}")


def _channels(x, axis):
    return None if x.shape is None else x.shape[axis]


def reserve_space_3_shape(dtype):
    """FusedBatchNormV3's reserve_space_3 as the kernel stock picks for `dtype` makes it."""
    return (0,) if onednn_runs(dtype) else ()   # Eigen's is a scalar


def with_u(attrs):
    """V3's attrs from V2's or V1's: V1 has no U (its statistics share T)."""
    return attrs if "U" in attrs else dict(attrs, U=attrs.get("T"))


def _vector(spec, c):
    return Spec(spec.shape if spec.shape is not None else (c,), spec.dtype)


@shape_fn("FusedBatchNormV3", value_free=True)
def fused_batch_norm(inputs, attrs):
    x, scale, offset, mean, var = inputs
    axis = channel_axis(attrs)
    _rank_x(x, x.dtype)
    for spec, what in ((scale, "scale"), (offset, "offset"), (mean, "estimated_mean"),
                       (var, "estimated_variance")):
        _rank(spec, 1, f"{what} must be 1-dimensional")
    c = _channels(x, axis)
    _same_channels(scale, c, "scale")
    _same_channels(offset, c, "offset")
    training = attrs.get("is_training", True)
    factor = attrs.get("exponential_avg_factor", 1.0)
    if not training or factor != 1.0:
        prefix = "When is_training=false" if not training else "When exponential_avg_factor != 1"
        _same_channels(mean, c, f"{prefix}, mean")
        _same_channels(var, c, f"{prefix}, variance")
    u = scale.dtype
    vec = _vector(scale, c)
    r3 = reserve_space_3_shape(x.dtype)
    return [Spec(x.shape, x.dtype), vec, vec, vec, vec, Spec(r3, u)]


@shape_fn("FusedBatchNormGradV3", value_free=True)
def fused_batch_norm_grad(inputs, attrs):
    dy, x, scale, r1, r2, _ = inputs
    axis = channel_axis(attrs)
    _rank_x(dy, x.dtype)
    _rank_x(x, x.dtype)
    _rank(scale, 1, "scale must be 1-dimensional")
    _rank(r1, 1, "saved mean must be 1-dimensional")
    _rank(r2, 1, "saved variance must be 1-dimensional")
    if dy.fully_defined and x.fully_defined and dy.shape != x.shape:
        raise InvalidArgumentError(
            f"x and y_backprop must have same shape, but x has shape {fmt_shape(x.shape)} and "
            f"y_backprop has shape {fmt_shape(dy.shape)}")
    c = _channels(x, axis)
    _same_channels(scale, c, "scale")
    _same_channels(r1, c, "reserve_space_1")
    _same_channels(r2, c, "reserve_space_2")
    shape = x.shape if x.shape is not None else dy.shape
    vec = _vector(scale, c)
    # oneDNN's reserve_space_4/5 are scalars (TF's graph inference says [0])
    r45 = () if onednn_runs(x.dtype) else (0,)
    return [Spec(shape, x.dtype), vec, vec, Spec(r45, scale.dtype), Spec(r45, scale.dtype)]


# FusedBatchNormV2 (T, U) and FusedBatchNorm (T only, float32): V3 without reserve_space_3;
# FusedBatchNormGradV2/FusedBatchNormGrad: V3's gradient without the reserve_space_3 input.
@shape_fn("FusedBatchNormV2", "FusedBatchNorm", value_free=True)
def fused_batch_norm_v2(inputs, attrs):
    return fused_batch_norm(inputs, with_u(attrs))[:5]


@shape_fn("FusedBatchNormGradV2", "FusedBatchNormGrad", value_free=True)
def fused_batch_norm_grad_v2(inputs, attrs):
    r3 = Spec(reserve_space_3_shape(inputs[1].dtype), inputs[2].dtype)
    return fused_batch_norm_grad(list(inputs) + [r3], with_u(attrs))
