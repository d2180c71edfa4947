"""GPU device kernels (CuPy); `import cupy` appears only here, in these modules and in the CUDA
device (tf_backend/devices/cuda.py). Same file names as kernels/cpu/; each module registers
`fn(inputs, outputs, attrs)` kernels under device "cuda" over CuPy arrays, with the inputs an op
reads on the host (kernels.HOST_INPUTS) given as host numpy arrays.

Half precision: float16 is stored in 16 bits and computed in float32 (elementwise math in
float registers, products through cuBLAS with float32 accumulation), as TensorFlow does.
"""
import numpy as np

DEVICE = "cuda"
FLOATS = ("float16", "float32", "float64")


def compute_dtype(dtype):
    """The type arithmetic runs in for a stored dtype: float32 for half types."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 and dtype.kind == "f" else dtype
