"""Helpers shared by shape functions: broadcasting, axes, attr checks."""
import numpy as np

from .errors import InvalidArgumentError
from .spec import Spec, fmt_shape


def broadcast_shapes(a, b, op="op"):
    """TensorFlow's binary broadcasting of two shapes (None = unknown dim or rank)."""
    if a is None or b is None:
        return None
    a0, b0 = a, b   # as given, for the message (stock's words)
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x is None or y is None:
            if x == 1:
                out.append(y)
            elif y == 1:
                out.append(x)
            else:
                out.append(x if x is not None else y)
        elif x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise InvalidArgumentError(
                f"Incompatible shapes: {fmt_shape(a0)} vs. {fmt_shape(b0)}")
    return tuple(out)


def same_dtype(inputs, op):
    d = inputs[0].dtype
    for s in inputs[1:]:
        if s.dtype != d:
            raise InvalidArgumentError(
                f"{op}: expected all inputs to have dtype {d.name}, got {s.dtype.name}")
    return d


def int_list(spec):
    v = spec.value
    if v is None:
        return None
    return [int(x) for x in np.asarray(v).reshape(-1)]


def unknown(dtype, rank=None):
    return Spec(None if rank is None else (None,) * rank, dtype)
