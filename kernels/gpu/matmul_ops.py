"""Products on the GPU through cuBLAS (kernels/gpu/gemm.py: capturable in CUDA graphs;
batched products through cupy.matmul, which is not); float16 accumulates in float32."""
import cupy

import kernels

from . import DEVICE, FLOATS, gemm


@kernels.kernel("MatMul", device=DEVICE, dtypes=FLOATS)
def matmul(inputs, outputs, attrs):
    a, b = (cupy.ascontiguousarray(v) for v in inputs)
    gemm.matmul(a, b, outputs[0], bool(attrs.get("transpose_a")),
                bool(attrs.get("transpose_b")))


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
