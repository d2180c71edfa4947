"""A reference numpy device for tf_backend: the whole path a hardware maker follows.

1. Subclass `tf_backend.devices.Device`, set `name` and `capabilities`.
2. Provide memory: `allocate`, `copy_in`, `copy_out` (here host numpy arrays, copied at the
   edges as a real accelerator would copy to and from its own memory), and `synchronize`.
3. Provide kernels: register `fn(inputs, outputs, attrs)` in the shared registry under the
   device's name (`kernels.kernel(op, device=...)`), or override `lookup`.
4. Advertise the class in the `tf_backend.devices` entry-point group (pyproject.toml).
Then `tf_backend.runtime.load(path, device="numpy")` runs exported programs on it.
"""
import numpy as np

import kernels
from tf_backend.devices import Capabilities, Device

NAME = "numpy"
FLOATS = ("float32", "float64")


def _binary(ufunc):
    def k(inputs, outputs, attrs):
        ufunc(inputs[0], inputs[1], out=outputs[0])
    return k


def _unary(f):
    def k(inputs, outputs, attrs):
        outputs[0][...] = f(inputs[0])
    return k


for _op, _fn in (("AddV2", np.add), ("Sub", np.subtract), ("Mul", np.multiply)):
    kernels.kernel(_op, device=NAME, dtypes=FLOATS)(_binary(_fn))
kernels.kernel("Relu", device=NAME, dtypes=FLOATS)(_unary(lambda x: np.maximum(x, 0)))
kernels.kernel("Tanh", device=NAME, dtypes=FLOATS)(_unary(np.tanh))
kernels.kernel("Sigmoid", device=NAME, dtypes=FLOATS)(_unary(lambda x: 1 / (1 + np.exp(-x))))


@kernels.kernel("MatMul", device=NAME, dtypes=FLOATS)
def matmul(inputs, outputs, attrs):
    a, b = inputs
    a = a.T if attrs.get("transpose_a") else a
    b = b.T if attrs.get("transpose_b") else b
    np.matmul(a, b, out=outputs[0])


@kernels.kernel("BiasAdd", device=NAME, dtypes=FLOATS)
def bias_add(inputs, outputs, attrs):
    x, b = inputs
    if attrs.get("data_format", "NHWC") == "NCHW" and x.ndim > 2:
        b = b.reshape((-1,) + (1,) * (x.ndim - 2))
    np.add(x, b, out=outputs[0])


class NumpyDevice(Device):
    name = NAME
    capabilities = Capabilities(FLOATS, supports_programs=True, host_memory=True, views=False)

    def load(self):
        pass   # kernels registered at import

    def allocate(self, shape, dtype):
        return np.empty(shape, dtype)

    def copy_in(self, array):
        return np.array(array, copy=True)

    def copy_out(self, buffer, owned=False):
        return np.array(buffer, copy=True)
