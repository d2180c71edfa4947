"""Softmax, LogSoftmax and BiasAdd on the GPU (float16 computed in float32)."""
import cupy

import kernels

from . import DEVICE, FLOATS, compute_dtype


def _softmax(log):
    def k(inputs, outputs, attrs):
        x = inputs[0]
        if x.size == 0:
            return
        xf = x.astype(compute_dtype(x.dtype), copy=False)
        z = xf - xf.max(axis=-1, keepdims=True)
        e = cupy.exp(z)
        s = e.sum(axis=-1, keepdims=True)
        outputs[0][...] = (z - cupy.log(s)) if log else e / s
    return k


kernels.kernel("Softmax", device=DEVICE, dtypes=FLOATS)(_softmax(False))
kernels.kernel("LogSoftmax", device=DEVICE, dtypes=FLOATS)(_softmax(True))


@kernels.kernel("BiasAdd", device=DEVICE, dtypes=FLOATS)
def bias_add(inputs, outputs, attrs):
    x, b = inputs
    if attrs.get("data_format", "NHWC") == "NCHW" and x.ndim > 2:
        b = b.reshape((-1,) + (1,) * (x.ndim - 2))
    cupy.add(x, b, out=outputs[0])
