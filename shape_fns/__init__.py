"""Pure shape/dtype rules, one per TensorFlow op type; no TensorFlow, no arrays, no devices."""
import importlib

from .errors import (BackendError, InvalidArgumentError, OutOfRangeError,  # noqa: F401
                     UnimplementedError, InternalError, Unsupported)
from .registry import SHAPE_FNS, VALUE_FREE, shape_fn, get  # noqa: F401
from .spec import Spec, describe, fmt_shape  # noqa: F401

MODULES = (
    "math_ops", "reduction_ops", "matmul_ops", "array_ops", "array_concat_ops",
    "array_index_ops", "strided_slice", "nn_ops", "conv_ops", "pooling_ops",
    "gather_scatter_ops", "scan_ops", "misc_math_ops", "image_ops", "einsum_ops", "norm_ops",
    "depthwise_ops", "loss_ops", "random_ops",
)
_loaded = False


def load_all():
    """Import every shape-fn module (registration happens at import)."""
    global _loaded
    if not _loaded:
        for m in MODULES:
            importlib.import_module(f"{__name__}.{m}")
        _loaded = True
    return SHAPE_FNS
