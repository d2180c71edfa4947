"""Shape functions: SparseSoftmaxCrossEntropyWithLogits and SoftmaxCrossEntropyWithLogits."""
from .common import broadcast_shapes
from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape


@shape_fn("SparseSoftmaxCrossEntropyWithLogits", value_free=True)
def sparse_xent(inputs, attrs):
    logits, labels = inputs
    ls, bs = logits.shape, labels.shape
    if ls is not None and len(ls) != 2:
        raise InvalidArgumentError(f"logits must be 2-D, but got shape {fmt_shape(ls)}")
    if bs is not None and len(bs) != 1:
        raise InvalidArgumentError(f"labels must be 1-D, but got shape {fmt_shape(bs)}")
    batch = ls[0] if ls is not None else None
    if bs is not None:
        if batch is not None and bs[0] is not None and batch != bs[0]:
            raise InvalidArgumentError(
                "logits and labels must have the same first dimension, got logits shape "
                f"{fmt_shape(ls)} and labels shape {fmt_shape(bs)}")
        batch = bs[0] if batch is None else batch
    if ls is not None and ls[1] == 0:
        raise InvalidArgumentError(
            f"Must have at least one class, but got logits shape {fmt_shape(ls)}")
    classes = ls[1] if ls is not None else None
    return [Spec((batch,), logits.dtype), Spec((batch, classes), logits.dtype)]


@shape_fn("SoftmaxCrossEntropyWithLogits", value_free=True)
def softmax_xent(inputs, attrs):
    logits, labels = inputs
    try:
        shape = broadcast_shapes(logits.shape, labels.shape)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"logits and labels must be broadcastable: logits_size={fmt_shape(logits.shape)} "
            f"labels_size={fmt_shape(labels.shape)}") from None
    if shape is None:
        if logits.shape is not None and len(logits.shape) == 2:
            shape = logits.shape
        else:
            return [Spec((None,), logits.dtype), Spec((None, None), logits.dtype)]
    if len(shape) != 2:
        raise InvalidArgumentError(
            "logits and labels must be either 2-dimensional, or broadcasted to be "
            "2-dimensional")
    return [Spec((shape[0],), logits.dtype), Spec(shape, logits.dtype)]
