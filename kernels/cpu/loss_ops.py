"""CPU kernels: SparseSoftmaxCrossEntropyWithLogits and SoftmaxCrossEntropyWithLogits.

Both follow TF's formulation row by row: shifted = logits - max(logits),
loss = sum(labels * (log(sum(exp(shifted))) - shifted)), backprop = exp(shifted) / sum - labels,
so NaN/Inf propagate as in TF (a row of -Inf is NaN, an Inf logit NaNs its row).
"""
import math

import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from shape_fns import InvalidArgumentError

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 15   # logits; exp-heavy rows pay for threads early


def _sparse_rows(x, labels, loss, back):
    C = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        br = back[r]
        m = xr[0]
        for i in range(1, C):
            if xr[i] > m:
                m = xr[i]
        s = 0.0
        for i in range(C):
            e = math.exp(xr[i] - m)
            br[i] = e
            s += e
        lab = labels[r]
        loss[r] = math.log(s) - (xr[lab] - m)
        for i in range(C):
            br[i] = br[i] / s
        br[lab] -= 1


def _dense_rows(x, y, loss, back):
    C = x.shape[1]
    for r in prange(x.shape[0]):
        xr = x[r]
        yr = y[r]
        br = back[r]
        m = -np.inf
        if C:
            m = xr[0]
        for i in range(1, C):
            if xr[i] > m:
                m = xr[i]
        s = 0.0
        for i in range(C):
            e = math.exp(xr[i] - m)
            br[i] = e
            s += e
        ls = math.log(s)
        acc = 0.0
        for i in range(C):
            acc += yr[i] * (ls - (xr[i] - m))
        loss[r] = acc
        for i in range(C):
            br[i] = br[i] / s - yr[i]


def _first_bad(labels, C):
    for i in range(labels.size):
        if labels[i] < 0 or labels[i] >= C:
            return i
    return -1


_jit = njit(cache=True, nogil=True, error_model="numpy")


def _pjit(fn):
    return jit.parallel(fn, error_model="numpy")


_sparse_s, _sparse_p = _jit(_sparse_rows), _pjit(_sparse_rows)
_dense_s, _dense_p = _jit(_dense_rows), _pjit(_dense_rows)
_first_bad = _jit(_first_bad)


@kernel("SparseSoftmaxCrossEntropyWithLogits", dtypes=FLOATS)
def sparse_softmax_xent(inputs, outputs, attrs):
    x, labels = inputs
    loss, back = outputs
    C = x.shape[1]
    bad = _first_bad(labels, C) if labels.size else -1
    if bad >= 0:
        shown = " ".join(str(v) for v in labels[:1000])
        raise InvalidArgumentError(
            f"Received a label value of {labels[bad]} which is outside the valid range of "
            f"[0, {C}).  Label values: {shown}")
    if x.size == 0:
        return
    fn = _sparse_p if x.size >= PARALLEL_MIN else _sparse_s
    with np.errstate(all="ignore"):
        fn(x, labels, loss, back)


def _as_rows(a, shape):
    if a.shape == shape:
        return a
    return np.ascontiguousarray(np.broadcast_to(a, shape))


@kernel("SoftmaxCrossEntropyWithLogits", dtypes=FLOATS)
def softmax_xent(inputs, outputs, attrs):
    x, y = inputs
    loss, back = outputs
    if loss.size == 0:
        return
    shape = back.shape
    fn = _dense_p if back.size >= PARALLEL_MIN else _dense_s
    with np.errstate(all="ignore"):
        fn(_as_rows(x, shape), _as_rows(y, shape), loss, back)
