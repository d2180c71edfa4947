"""CPU kernels: nn ops (BiasAdd, BiasAddGrad, Softmax, LogSoftmax); conv and pooling kernels live
in conv_ops.py and pooling_ops.py."""
import math

import numpy as np
from numba import njit, prange

from kernels import kernel
from shape_fns import Unsupported

# registration of the split-off families until DEVICE_MODULES lists them
from . import conv_ops, pooling_ops  # noqa: F401

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 15   # elements; exp-heavy loops pay for threads earlier than adds do


def _softmax_rows(x, out, log):
    """Row-wise (log-)softmax of a 2-D array, max-shifted; sums accumulate in float64."""
    L = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        o = out[r]
        m = xr[0]
        for i in range(1, L):
            if xr[i] > m:
                m = xr[i]
        s = 0.0
        if log:
            for i in range(L):
                s += math.exp(xr[i] - m)
            ls = math.log(s)
            for i in range(L):
                o[i] = (xr[i] - m) - ls
        else:
            for i in range(L):
                e = math.exp(xr[i] - m)
                o[i] = e
                s += e
            inv = 1.0 / s
            for i in range(L):
                o[i] = o[i] * inv


def _nan_or_posinf(x):
    bad = False
    for i in range(x.size):
        bad |= not (x[i] < np.inf)
    return bad


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
_softmax_s = _jit(_softmax_rows)
_softmax_p = njit(cache=True, nogil=True, parallel=True, error_model="numpy")(_softmax_rows)
_nan_or_posinf = _jit(_nan_or_posinf)
_bias_grad_rows = _jit(_bias_grad_rows)
_bias_grad_nchw = _jit(_bias_grad_nchw)


def _softmax(x, out, log):
    if out.size == 0:
        return
    L = x.shape[-1]
    x2, o2 = x.reshape(-1, L), out.reshape(-1, L)
    (_softmax_p if x.size >= PARALLEL_MIN else _softmax_s)(x2, o2, log)


@kernel("Softmax", dtypes=FLOATS)
def softmax(inputs, outputs, attrs):
    x = inputs[0]
    if x.dtype == np.float32:
        # stock float32 Softmax is oneDNN's: rank <= 5 only (else AbortedError), and rows holding
        # NaN or +Inf come out lane-dependent (NaN at some positions, 0 elsewhere): leave both to TF
        if x.ndim > 5:
            raise Unsupported("rank>5_softmax")
        if x.size and _nan_or_posinf(x.reshape(-1)):
            raise Unsupported("nonfinite_softmax")
    _softmax(x, outputs[0], False)


@kernel("LogSoftmax", dtypes=FLOATS)
def log_softmax(inputs, outputs, attrs):
    _softmax(inputs[0], outputs[0], True)


def _channel_view(a, fmt):
    """a as (rows, C) for NHWC or (N, C, S) for NCHW of rank >= 3."""
    if fmt == "NCHW" and a.ndim >= 3:
        return a.reshape(a.shape[0], a.shape[1], -1)
    return a.reshape(-1, a.shape[-1])


@kernel("BiasAdd", dtypes=FLOATS)
def bias_add(inputs, outputs, attrs):
    x, b = inputs
    out = outputs[0]
    if attrs.get("data_format") == "NCHW" and x.ndim >= 3:
        b = b.reshape((b.shape[0],) + (1,) * (x.ndim - 2))
    with np.errstate(all="ignore"):
        np.add(x, b, out=out)


@kernel("BiasAddGrad", dtypes=FLOATS)
def bias_add_grad(inputs, outputs, attrs):
    dy = inputs[0]
    out = outputs[0]
    if dy.size == 0:
        out[...] = 0
        return
    v = _channel_view(dy, attrs.get("data_format"))
    if v.ndim == 3:
        _bias_grad_nchw(v, out)
    else:
        _bias_grad_rows(v, out)
