"""Shape functions: reduction ops (Sum, Mean, Max, Min, Prod, All, Any, ArgMax, ArgMin)."""
import numpy as np

from .common import int_list
from .errors import InvalidArgumentError
from .registry import shape_fn
from .spec import Spec, fmt_shape

REDUCE = ("Sum", "Mean", "Max", "Min", "Prod", "All", "Any")


def reduction_axes(rank, axes):
    """The set of reduced axes in [0, rank); InvalidArgument for an axis out of range.

    Duplicates collapse here, as in TensorFlow's shape inference; the kernel rejects them.
    """
    red = set()
    for a in axes:
        if not -rank <= a < rank:
            raise InvalidArgumentError(
                f"Invalid reduction dimension ({a} for input with {rank} dimension(s))")
        red.add(a + rank if a < 0 else a)
    return red


_shapes = {}   # (input shape, axes, keep_dims) -> output shape; eager calls repeat a lot


@shape_fn(*REDUCE)
def reduce(inputs, attrs):
    x, axis = inputs
    keep = bool(attrs.get("keep_dims", False))
    v = axis.value
    if v is None or x.shape is None:
        return [Spec(None if (x.shape is None or not keep) else (None,) * len(x.shape), x.dtype)]
    v = np.asarray(v)
    key = (x.shape, v.item() if v.ndim == 0 else tuple(v.reshape(-1).tolist()), keep)
    shape = _shapes.get(key)
    if shape is None:
        red = reduction_axes(len(x.shape), key[1] if v.ndim else (key[1],))
        shape = tuple(1 if i in red else d for i, d in enumerate(x.shape) if keep or i not in red)
        if len(_shapes) > 4096:
            _shapes.clear()
        _shapes[key] = shape
    return [Spec(shape, x.dtype)]


@shape_fn("ArgMax", "ArgMin")
def arg_reduce(inputs, attrs):
    x, dim = inputs
    out_dt = attrs.get("output_type")
    if dim.shape is not None and len(dim.shape) != 0:
        raise InvalidArgumentError(
            f"dim must be a scalar, but received tensor of shape: {fmt_shape(dim.shape)}")
    if x.shape is None:
        return [Spec(None, out_dt)]
    rank = len(x.shape)
    d = int_list(dim)
    if d is None:
        return [Spec(() if rank <= 1 else (None,) * (rank - 1), out_dt)]
    d = d[0]
    if not -rank <= d < rank:
        raise InvalidArgumentError(
            f"Expected dimension in the range [{-rank}, {rank}), but got {d}")
    d = d + rank if d < 0 else d
    return [Spec(tuple(s for i, s in enumerate(x.shape) if i != d), out_dt)]
