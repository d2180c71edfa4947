"""Sum, Mean, Max, Min, Prod over axes given on the host; float16 reduces in float32."""
import cupy
import numpy as np

import kernels

from . import DEVICE, FLOATS, compute_dtype


def _reduce(name):
    def k(inputs, outputs, attrs):
        x, axes = inputs
        out = outputs[0]
        ax = tuple(sorted({int(a) % x.ndim for a in np.asarray(axes).reshape(-1)})) \
            if x.ndim else ()
        if name in ("sum", "mean", "prod"):
            r = getattr(cupy, name)(x, axis=ax, dtype=compute_dtype(x.dtype))
        else:
            r = getattr(cupy, name)(x, axis=ax)
        out[...] = r.reshape(out.shape)
    k.__qualname__ = f"reduce_{name}"
    return k


for _op, _name in (("Sum", "sum"), ("Mean", "mean"), ("Prod", "prod"), ("Max", "max"),
                   ("Min", "min")):
    kernels.kernel(_op, device=DEVICE, dtypes=FLOATS)(_reduce(_name))
