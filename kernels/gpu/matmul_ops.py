"""Products on the GPU through cuBLAS (cupy.matmul); float16 accumulates in float32."""
import cupy

import kernels

from . import DEVICE, FLOATS


@kernels.kernel("MatMul", device=DEVICE, dtypes=FLOATS)
def matmul(inputs, outputs, attrs):
    a, b = inputs
    if attrs.get("transpose_a"):
        a = a.T
    if attrs.get("transpose_b"):
        b = b.T
    cupy.matmul(a, b, out=outputs[0])


@kernels.kernel("BatchMatMulV2", "BatchMatMulV3", "BatchMatMul", device=DEVICE, dtypes=FLOATS,
                type_attr=None)
def batch_matmul(inputs, outputs, attrs):
    a, b = inputs
    if attrs.get("adj_x"):
        a = a.swapaxes(-1, -2)
    if attrs.get("adj_y"):
        b = b.swapaxes(-1, -2)
    out = outputs[0]
    r = cupy.matmul(a, b)
    out[...] = r
