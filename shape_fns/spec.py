"""Spec: what a shape function knows about one tensor (shape, dtype, maybe its value)."""
import numpy as np

# TensorFlow's DataType enum <-> numpy dtype (types.proto; only the dtypes our kernels may see)
_ENUM_TO_NP = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16,
               6: np.int8, 9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16,
               22: np.uint32, 23: np.uint64}
ENUM_TO_DTYPE = {k: np.dtype(v) for k, v in _ENUM_TO_NP.items()}
DTYPE_TO_ENUM = {v: k for k, v in ENUM_TO_DTYPE.items()}
try:  # bfloat16 through ml_dtypes (a TensorFlow dependency)
    import ml_dtypes
    ENUM_TO_DTYPE[14] = np.dtype(ml_dtypes.bfloat16)
    DTYPE_TO_ENUM[np.dtype(ml_dtypes.bfloat16)] = 14
except ImportError:  # pragma: no cover
    pass


class Spec:
    """shape: tuple of int|None (None = unknown dim) or None (unknown rank).

    dtype: numpy dtype. value: numpy array when the value is known on the host
    (always in eager mode; for constants in programs), else None.
    """

    __slots__ = ("shape", "dtype", "value")

    def __init__(self, shape, dtype, value=None):
        self.shape = None if shape is None else tuple(shape)
        self.dtype = np.dtype(dtype)
        self.value = value

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    @property
    def fully_defined(self):
        return self.shape is not None and all(d is not None for d in self.shape)

    def __eq__(self, other):
        return isinstance(other, Spec) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"Spec({fmt_shape(self.shape)}, {self.dtype.name})"


def fmt_shape(shape):
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def describe(specs):
    """'float32[2,3], int32[]' — used in every error message."""
    return ", ".join(f"{s.dtype.name}{fmt_shape(s.shape)}" for s in specs)
