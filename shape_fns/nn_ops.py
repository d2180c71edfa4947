"""Shape functions: nn ops (BiasAdd, BiasAddGrad, Softmax, LogSoftmax); conv and pooling live in
conv_ops.py and pooling_ops.py."""
import numpy as np

from .common import same_dtype
from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

FLOAT32 = np.dtype(np.float32)


def channel_axis(rank, data_format):
    if data_format in ("NHWC", None, ""):
        return rank - 1
    if data_format == "NCHW":
        return 1
    raise Unsupported(f"attr:data_format={data_format}")


def _at_least_2d(spec, op):
    if spec.shape is not None and len(spec.shape) < 2:
        raise InvalidArgumentError(
            f"{op}: Input tensor must be at least 2D: {fmt_shape(spec.shape)}")


@shape_fn("BiasAdd", value_free=True)
def bias_add(inputs, attrs):
    x, b = inputs
    dt = same_dtype(inputs, "BiasAdd")
    _at_least_2d(x, "BiasAdd")
    if b.shape is not None and len(b.shape) != 1:
        raise InvalidArgumentError(f"BiasAdd: Biases must be 1D: {fmt_shape(b.shape)}")
    if x.shape is not None and b.shape is not None:
        c = x.shape[channel_axis(len(x.shape), attrs.get("data_format"))]
        if c is not None and b.shape[0] is not None and c != b.shape[0]:
            raise InvalidArgumentError(
                "BiasAdd: Must provide as many biases as the last dimension of the input "
                f"tensor: {fmt_shape(b.shape)} vs. {fmt_shape(x.shape)}")
    return [Spec(x.shape, dt)]


@shape_fn("BiasAddGrad", value_free=True)
def bias_add_grad(inputs, attrs):
    dy = inputs[0]
    _at_least_2d(dy, "BiasAddGrad")
    if dy.shape is None:
        return [Spec((None,), dy.dtype)]
    return [Spec((dy.shape[channel_axis(len(dy.shape), attrs.get("data_format"))],), dy.dtype)]


@shape_fn("LogSoftmax", value_free=True)
def log_softmax(inputs, attrs):
    x = inputs[0]
    if x.shape is not None and len(x.shape) == 0:
        raise InvalidArgumentError(f"logits must have >= 1 dimension, got {fmt_shape(x.shape)}")
    return [Spec(x.shape, x.dtype)]


@shape_fn("Softmax", value_free=True)
def softmax(inputs, attrs):
    x = inputs[0]
    if x.shape is not None and len(x.shape) == 0 and x.dtype == FLOAT32:
        # stock float32 Softmax is oneDNN's, which raises AbortedError here: let TF raise it
        raise Unsupported("rank0_softmax")
    return log_softmax(inputs, attrs)
