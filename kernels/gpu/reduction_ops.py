"""Sum, Mean, Max, Min, Prod over axes given on the host; float16 reduces in float32."""
import cupy
import numpy as np

import kernels

from . import DEVICE, FLOATS, compute_dtype


EMPTY = {"sum": lambda d: 0, "prod": lambda d: 1, "mean": lambda d: np.nan,
         "max": lambda d: -np.inf, "min": lambda d: np.inf}


def _reduce(name):
    def k(inputs, outputs, attrs):
        x, axes = inputs
        out = outputs[0]
        ax = tuple(sorted({int(a) % x.ndim for a in np.asarray(axes).reshape(-1)})) \
            if x.ndim else ()
        if out.size == 0:
            return
        if x.size == 0:     # TensorFlow's identities: 0, 1, NaN (0/0), lowest, highest
            out.fill(EMPTY[name](x.dtype))
            return
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
