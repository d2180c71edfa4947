"""CPU kernels: ClipByValue and L2Loss (numpy/BLAS).

ClipByValue is TensorFlow's std::max(std::min(t, max), min): a NaN in t stays, a NaN bound is
ignored, and min wins over max when min > max (numpy's minimum/maximum would propagate NaN).
"""
import numpy as np

from kernels import kernel


@kernel("ClipByValue", dtypes=("float32", "float64", "int32", "int64"))
def clip_by_value(inputs, outputs, attrs):
    x, lo, hi = inputs
    out = outputs[0]
    np.copyto(out, x)
    np.copyto(out, hi, where=hi < x)
    np.copyto(out, lo, where=out < lo)


@kernel("L2Loss", dtypes=("float32", "float64"))
def l2_loss(inputs, outputs, attrs):
    f = inputs[0].reshape(-1)
    with np.errstate(all="ignore"):
        outputs[0][()] = np.dot(f, f) * f.dtype.type(0.5)
