"""CPU kernels: nn ops (BiasAdd, BiasAddGrad, Softmax, LogSoftmax); conv and pooling kernels live
in conv_ops.py and pooling_ops.py."""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from kernels.cpu.half_bits import bf2f, h2f, narrow_into, widen
from kernels.cpu.scratch import scratch
from kernels.cpu.scalar import vexp
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


def _bias_grad_rows_bits(bits, out, bf16):
    """_bias_grad_rows of float16/bfloat16 bits (M, C), each value widened exactly as it is
    read: the same float64 sums as widening the whole array first, without its float32 copy
    (a 64x32x32x32 bfloat16 gradient: an 8 MB write and read per call)."""
    acc = np.zeros(bits.shape[1], np.float64)
    for r in range(bits.shape[0]):
        row = bits[r]
        for c in range(bits.shape[1]):
            acc[c] += bf2f(row[c]) if bf16 else h2f(row[c])
    for c in range(bits.shape[1]):
        out[c] = acc[c]


_jit = njit(cache=True, nogil=True, error_model="numpy")
_bias_grad_rows = _jit(_bias_grad_rows)
_bias_grad_rows_bits = _jit(_bias_grad_rows_bits)
_bias_grad_nchw = _jit(_bias_grad_nchw)


def _softmax_rows(x, out, log):
    """Max-shifted (log-)softmax of each row of x (R, C) into out, exp by the table's vexp
    (Eigen's float32 algorithm); True when a row holds NaN or +Inf (the row is then NaN, as in
    numpy's and Eigen's passes)."""
    bad = False
    for r in prange(x.shape[0]):
        row = x[r]
        o = out[r]
        # the maximum ignoring NaN, in four independent chains; a NaN anywhere makes the sum
        # (so the row) NaN below, as +Inf does through inf - inf
        n = row.shape[0]
        m0 = m1 = m2 = m3 = row[0]
        n4 = n // 4 * 4
        for i in range(0, n4, 4):
            m0 = row[i] if row[i] > m0 else m0
            m1 = row[i + 1] if row[i + 1] > m1 else m1
            m2 = row[i + 2] if row[i + 2] > m2 else m2
            m3 = row[i + 3] if row[i + 3] > m3 else m3
        for i in range(n4, n):
            m0 = row[i] if row[i] > m0 else m0
        m0 = m1 if m1 > m0 else m0
        m2 = m3 if m3 > m2 else m2
        m = m2 if m2 > m0 else m0
        for i in range(n):
            o[i] = vexp(row[i] - m)
        s0 = s1 = s2 = s3 = 0.0   # four partial sums: the adds pipeline
        for i in range(0, n4, 4):
            s0 += o[i]
            s1 += o[i + 1]
            s2 += o[i + 2]
            s3 += o[i + 3]
        for i in range(n4, n):
            s0 += o[i]
        s = (s0 + s1) + (s2 + s3)
        if s != s or m == np.inf:
            bad = True
        if log:
            ls = np.log(s)
            for i in range(n):
                o[i] = (row[i] - m) - ls
        else:
            d = row.dtype.type(s)
            for i in range(n):
                o[i] = o[i] / d
    return bad


_ROWS = (njit(cache=True, nogil=True, error_model="numpy")(_softmax_rows),
         jit.parallel(_softmax_rows, error_model="numpy"))
ROWS_PARALLEL_MIN = 1 << 14   # elements; below this one thread


def _softmax(x, out, log, check_nonfinite=False):
    """Max-shifted (log-)softmax over the last axis: rows in numba (one pass for the maximum, one
    for exp and the sum, one to scale; a (1, 8, 128, 128) attention softmax 0.39 ms in numpy's
    five passes on one thread, against stock's 0.2), numpy's passes for empty or odd layouts."""
    if out.size == 0:
        return
    if x.dtype in FLOATS and x.ndim >= 1 and x.shape[-1] and x.flags.c_contiguous \
            and out.flags.c_contiguous:
        x2, o2 = x.reshape(-1, x.shape[-1]), out.reshape(-1, x.shape[-1])
        bad = _ROWS[1 if x.size >= ROWS_PARALLEL_MIN else 0](x2, o2, log)
        if check_nonfinite and bad:
            # stock's oneDNN Softmax gives lane-dependent results for rows holding NaN or +Inf
            # (NaN at some positions, 0 elsewhere; Eigen's: NaN across the row): leave those to TF
            raise Unsupported("nonfinite_softmax")
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
            # (numba's conversion loops: ml_dtypes' casts run ~1 ns a value)
            f = widen(x, scratch(x.shape, np.float32, "bias_x"))
            np.add(f, widen(b), out=f)
            narrow_into(out, f)
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
    v = _channel_view(dy, attrs.get("data_format"))
    if half and v.ndim == 2:   # (rows, C): each value widened as it is read
        acc = np.empty(out.shape, np.float32)
        _bias_grad_rows_bits(np.ascontiguousarray(v).view(np.uint16), acc,
                             out.dtype.name == "bfloat16")
        narrow_into(out, acc)
        return
    if half:   # TensorFlow accumulates half/bfloat16 in float32; we do in float64, then round
        v, res, out = (widen(v, scratch(v.shape, np.float32, "bias_x")), out,
                       np.empty(out.shape, np.float32))
    if v.ndim == 3:
        _bias_grad_nchw(v, out)
    else:
        _bias_grad_rows(v, out)
    if half:   # a sum past the 16-bit range is Inf, as in TF
        narrow_into(res, out)
