"""CPU kernels: nn ops (BiasAdd, BiasAddGrad, Softmax, LogSoftmax); conv and pooling kernels live
in conv_ops.py and pooling_ops.py."""
import numpy as np
from numba import njit

from kernels import kernel
from shape_fns import Unsupported
from shape_fns.host import onednn_runs


FLOATS = (np.float32, np.float64)
HALF = ("float16", "bfloat16")   # stored in 16 bits, computed in float32 (as TensorFlow's Eigen)


def _bias_grad_rows(dy, out):
    """out[c] = sum over rows of dy (M, C), accumulated in float64."""
    acc = np.zeros(dy.shape[1], np.float64)
    for r in range(dy.shape[0]):
        row = dy[r]
        for c in range(dy.shape[1]):
            acc[c] += row[c]
    for c in range(dy.shape[1]):
        out[c] = acc[c]


def _bias_grad_nchw(dy, out):
    """out[c] = sum over n, s of dy (N, C, S), accumulated in float64."""
    for c in range(dy.shape[1]):
        acc = 0.0
        for n in range(dy.shape[0]):
            for s in range(dy.shape[2]):
                acc += dy[n, c, s]
        out[c] = acc


_jit = njit(cache=True, nogil=True, error_model="numpy")
_bias_grad_rows = _jit(_bias_grad_rows)
_bias_grad_nchw = _jit(_bias_grad_nchw)


def _softmax(x, out, log, check_nonfinite=False):
    """Max-shifted (log-)softmax over the last axis in numpy passes (numpy's SIMD exp is several
    times faster than a scalar exp in a numba loop)."""
    if out.size == 0:
        return
    with np.errstate(all="ignore"):
        m = x.max(axis=-1, keepdims=True)
        if check_nonfinite and (np.isnan(m) | (m == np.inf)).any():
            # stock's oneDNN Softmax gives lane-dependent results for rows holding NaN or +Inf
            # (NaN at some positions, 0 elsewhere; Eigen's: NaN across the row): leave those to TF
            raise Unsupported("nonfinite_softmax")
        np.subtract(x, m, out=out)
        np.exp(out, out=out)
        s = out.sum(axis=-1, keepdims=True)
        if log:
            np.subtract(x, m, out=out)
            out -= np.log(s)
        else:
            out /= s


def _half_softmax(x, out, log, check_nonfinite=False):
    """float16/bfloat16: computed in float32, rounded once."""
    tmp = np.empty(out.shape, np.float32)
    _softmax(x.astype(np.float32), tmp, log, check_nonfinite)
    with np.errstate(all="ignore"):
        np.copyto(out, tmp, casting="unsafe")


@kernel("Softmax", dtypes=FLOATS + HALF)
def softmax(inputs, outputs, attrs):
    x = inputs[0]
    f32 = onednn_runs(x.dtype)   # float32; bfloat16/float16 where the CPU has them (host.py)
    if x.dtype.itemsize == 2 and not (f32 and x.ndim > 5):
        return _half_softmax(x, outputs[0], False, check_nonfinite=f32)
    if f32 and x.ndim > 5:
        raise Unsupported("rank>5_softmax")   # stock float32 (oneDNN) raises AbortedError
    _softmax(x, outputs[0], False, check_nonfinite=f32)


@kernel("LogSoftmax", dtypes=FLOATS + HALF)
def log_softmax(inputs, outputs, attrs):
    if inputs[0].dtype.itemsize == 2:
        return _half_softmax(inputs[0], outputs[0], True)
    _softmax(inputs[0], outputs[0], True)


def _channel_view(a, fmt):
    """a as (rows, C) for NHWC or (N, C, S) for NCHW of rank >= 3."""
    if fmt == "NCHW" and a.ndim >= 3:
        return a.reshape(a.shape[0], a.shape[1], -1)
    return a.reshape(-1, a.shape[-1])


@kernel("BiasAdd", dtypes=FLOATS + HALF)
def bias_add(inputs, outputs, attrs):
    x, b = inputs
    out = outputs[0]
    if attrs.get("data_format") == "NCHW" and x.ndim >= 3:
        b = b.reshape((b.shape[0],) + (1,) * (x.ndim - 2))
    with np.errstate(all="ignore"):
        if out.dtype.itemsize == 2:
            # half/bfloat16: the float32 sum rounded once, as Eigen's half/bfloat16 operator+
            out[...] = np.add(x.astype(np.float32), b.astype(np.float32))
        else:
            np.add(x, b, out=out)


@kernel("BiasAddGrad", dtypes=FLOATS + HALF)
def bias_add_grad(inputs, outputs, attrs):
    dy = inputs[0]
    out = outputs[0]
    if dy.size == 0:
        out[...] = 0
        return
    half = out.dtype.itemsize == 2
    if half:   # TensorFlow accumulates half/bfloat16 in float32; we do in float64, then round
        dy, res, out = dy.astype(np.float32), out, np.empty(out.shape, np.float32)
    v = _channel_view(dy, attrs.get("data_format"))
    if v.ndim == 3:
        _bias_grad_nchw(v, out)
    else:
        _bias_grad_rows(v, out)
    if half:
        with np.errstate(over="ignore"):   # a sum past the 16-bit range is Inf, as in TF
            res[...] = out
