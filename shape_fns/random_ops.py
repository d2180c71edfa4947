"""Shape rules of the stateless random ops we run (kernels/cpu/random_ops.py)."""
import numpy as np

from .errors import InvalidArgumentError, Unsupported
from .registry import shape_fn
from .spec import Spec, fmt_shape

U64 = np.dtype(np.uint64)


@shape_fn("StatelessRandomGetKeyCounter", value_free=True)
def get_key_counter(inputs, attrs):
    seed = inputs[0]
    if seed.shape is not None and seed.shape != (2,) and None not in seed.shape:
        raise InvalidArgumentError(f"seed must have shape [2], not {fmt_shape(seed.shape)}")
    return [Spec((1,), U64), Spec((2,), U64)]


@shape_fn("StatelessRandomUniformV2")
def uniform_v2(inputs, attrs):
    shape, key, counter, alg = inputs
    dtype = np.dtype(attrs["dtype"])
    if key.shape not in (None, (1,)) or counter.shape not in (None, (2,)) \
            or alg.shape not in (None, ()):
        raise Unsupported("key_counter_alg_shape")   # TensorFlow's kernel says what is wrong
    if shape.value is None:
        n = shape.shape[0] if shape.shape is not None and len(shape.shape) == 1 else None
        return [Spec(None if n is None else (None,) * n, dtype)]
    dims = np.asarray(shape.value)
    if dims.ndim != 1 or (dims < 0).any():
        raise Unsupported("shape_value")
    return [Spec(tuple(int(d) for d in dims), dtype)]
