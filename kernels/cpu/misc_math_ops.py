"""CPU kernels: ClipByValue, L2Loss (numpy/BLAS), MatrixBandPart and InTopKV2.

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


@kernel("MatrixBandPart")
def matrix_band_part(inputs, outputs, attrs):
    """Keep the band: rows - cols <= num_lower and cols - rows <= num_upper (negative: all)."""
    x, lo, hi = inputs
    out = outputs[0]
    if out.size == 0:
        return
    lo, hi = int(lo), int(hi)
    m, n = x.shape[-2:]
    d = np.arange(m)[:, None] - np.arange(n)[None, :]
    keep = np.ones((m, n), bool)
    if lo >= 0:
        keep &= d <= lo
    if hi >= 0:
        keep &= -d <= hi
    np.copyto(out, np.where(keep, x, np.zeros((), x.dtype)))


@kernel("InTopKV2", dtypes=("int32", "int64"))   # T: the targets and k; predictions float32
def in_top_k(inputs, outputs, attrs):
    """TensorFlow's rule: false where the target is out of range or any prediction of the row is
    not finite, else (number of predictions strictly above the target's) < k."""
    p, t, k = inputs
    out = outputs[0]
    if out.size == 0:
        return
    n = p.shape[1]
    t = t.astype(np.int64)
    ok = (t >= 0) & (t < n)
    with np.errstate(invalid="ignore"):
        tv = p[np.arange(p.shape[0]), np.where(ok, t, 0)]
        more = (p > tv[:, None]).sum(axis=1)
    np.copyto(out, ok & np.isfinite(p).all(axis=1) & (more < int(k)))
