"""CPU kernels: DepthwiseConv2dNative and its backprops as direct numba loops over image rows.

The filter (KH, KW, C, M) is read as (KH, KW, C*M): output channel c*M+m sees input channel c.
Each loop owns whole output rows (forward, input gradient) or a chunk of rows with its own
partial sums (filter gradient), so threads never share a write. Loops visit only the taps that
fall inside the image, as oneDNN (float32) does; TF's Eigen kernels (float64) multiply padding
zeros by the other operand, which differs only when that operand holds Inf/NaN: those inputs go
back to TensorFlow. NCHW (float32 only) is transposed in and out.
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from shape_fns import Unsupported
from shape_fns.depthwise_ops import check_format, eigen, forward_geometry, geometry

from .conv_ops import nhwc_in, nhwc_out

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 16   # multiply-adds; below this one thread is faster


def _ow_range(off, sw, W, OW):
    """[ow0, ow1): the outputs whose tap at input column ow*sw + off lies inside [0, W)."""
    ow0 = 0 if off >= 0 else (sw - 1 - off) // sw
    if W - 1 - off < 0:
        return ow0, ow0
    return ow0, max(ow0, min(OW, (W - 1 - off) // sw + 1))


def _forward(x, f, out, sh, sw, dh, dw, pt, pl):
    N, H, W, C = x.shape
    KH, KW, CM = f.shape
    M = CM // C
    OH, OW = out.shape[1], out.shape[2]
    for q in prange(N * OH):
        n = q // OH
        oh = q - n * OH
        o = out[n, oh]
        for ow in range(OW):
            orow = o[ow]
            for j in range(CM):
                orow[j] = 0
        for kh in range(KH):
            ih = oh * sh - pt + kh * dh
            if ih < 0 or ih >= H:
                continue
            xr = x[n, ih]
            for kw in range(KW):
                fk = f[kh, kw]
                off = kw * dw - pl
                ow0, ow1 = _ow_range(off, sw, W, OW)
                if M == 1:
                    for ow in range(ow0, ow1):
                        xp = xr[ow * sw + off]
                        op = o[ow]
                        for c in range(C):
                            op[c] += xp[c] * fk[c]
                else:
                    for ow in range(ow0, ow1):
                        xp = xr[ow * sw + off]
                        op = o[ow]
                        for c in range(C):
                            v = xp[c]
                            for m in range(M):
                                op[c * M + m] += v * fk[c * M + m]


def _backprop_input(f, dy, dx, sh, sw, dh, dw, pt, pl):
    N, H, W, C = dx.shape
    KH, KW, CM = f.shape
    M = CM // C
    OH, OW = dy.shape[1], dy.shape[2]
    for p in prange(N * H):
        n = p // H
        ih = p - n * H
        d = dx[n, ih]
        for iw in range(W):
            drow = d[iw]
            for c in range(C):
                drow[c] = 0
        for kh in range(KH):
            th = ih + pt - kh * dh
            if th < 0 or th % sh != 0 or th // sh >= OH:
                continue
            gr = dy[n, th // sh]
            for kw in range(KW):
                fk = f[kh, kw]
                off = kw * dw - pl
                ow0, ow1 = _ow_range(off, sw, W, OW)
                if M == 1:
                    for ow in range(ow0, ow1):
                        gp = gr[ow]
                        dp = d[ow * sw + off]
                        for c in range(C):
                            dp[c] += gp[c] * fk[c]
                else:
                    for ow in range(ow0, ow1):
                        gp = gr[ow]
                        dp = d[ow * sw + off]
                        for c in range(C):
                            s = dp[c]
                            for m in range(M):
                                s += gp[c * M + m] * fk[c * M + m]
                            dp[c] = s


def _backprop_filter(x, dy, part, rows_per, sh, sw, dh, dw, pt, pl):
    """part[k] (KH, KW, C*M) <- filter gradient of output rows k*rows_per .. (k+1)*rows_per."""
    N, H, W, C = x.shape
    KH, KW, CM = part.shape[1], part.shape[2], part.shape[3]
    M = CM // C
    OH, OW = dy.shape[1], dy.shape[2]
    Q = N * OH
    for k in prange(part.shape[0]):
        acc = part[k]
        acc[:] = 0
        for q in range(k * rows_per, min(Q, (k + 1) * rows_per)):
            n = q // OH
            oh = q - n * OH
            gr = dy[n, oh]
            for kh in range(KH):
                ih = oh * sh - pt + kh * dh
                if ih < 0 or ih >= H:
                    continue
                xr = x[n, ih]
                for kw in range(KW):
                    a = acc[kh, kw]
                    off = kw * dw - pl
                    ow0, ow1 = _ow_range(off, sw, W, OW)
                    for ow in range(ow0, ow1):
                        xp = xr[ow * sw + off]
                        gp = gr[ow]
                        for c in range(C):
                            v = xp[c]
                            for m in range(M):
                                a[c * M + m] += v * gp[c * M + m]


_jit = njit(cache=True, nogil=True, error_model="numpy")
_pjit = njit(cache=True, nogil=True, error_model="numpy", parallel=True)
_ow_range = _jit(_ow_range)
_forward_s, _forward_p = _jit(_forward), _pjit(_forward)
_backprop_input_s, _backprop_input_p = _jit(_backprop_input), _pjit(_backprop_input)
_backprop_filter_s, _backprop_filter_p = _jit(_backprop_filter), _pjit(_backprop_filter)


def _args(g):
    return g.sh, g.sw, g.dh, g.dw, g.pt, g.pl


def _finite(a):
    with np.errstate(all="ignore"):
        return bool(np.isfinite(a.sum()))


def _eigen_nonfinite(a, eg):
    # TF's Eigen kernels multiply padding zeros by `a`: 0 * Inf is NaN there
    if eg and a.size and not _finite(a):
        raise Unsupported("nonfinite_eigen_padding")


@kernel("DepthwiseConv2dNative", dtypes=FLOATS)
def depthwise_conv2d(inputs, outputs, attrs):
    x, f = inputs
    out = outputs[0]
    fmt, _, g, _ = forward_geometry(x.shape, f.shape, attrs, x.dtype)
    if g.padded():
        _eigen_nonfinite(f, eigen(x.dtype, attrs, "DepthwiseConv2dNative"))
    if out.size == 0:
        return
    if x.size == 0 or f.size == 0:
        out[...] = 0
        return
    dst, finish = nhwc_out(out, fmt)
    KH, KW = f.shape[:2]
    fn = _forward_p if out.size * KH * KW >= PARALLEL_MIN else _forward_s
    with np.errstate(all="ignore"):
        fn(nhwc_in(x, fmt), f.reshape(KH, KW, -1), dst, *_args(g))
    finish()


@kernel("DepthwiseConv2dNativeBackpropInput", dtypes=FLOATS)
def depthwise_backprop_input(inputs, outputs, attrs):
    _, f, dy = inputs
    dx = outputs[0]
    op = "DepthwiseConv2dNativeBackpropInput"
    eg = eigen(dx.dtype, attrs, op)
    fmt = check_format(attrs, eg)
    dxs = dx.shape if fmt != "NCHW" else (dx.shape[0], dx.shape[2], dx.shape[3], dx.shape[1])
    g = geometry(dxs[1:3], f.shape[:2], attrs, fmt, eg, op)
    _eigen_nonfinite(f, eg)
    if dx.size == 0:
        return
    if dy.size == 0 or f.size == 0:
        dx[...] = 0
        return
    dst, finish = nhwc_out(dx, fmt)
    KH, KW = f.shape[:2]
    fn = _backprop_input_p if dy.size * KH * KW >= PARALLEL_MIN else _backprop_input_s
    with np.errstate(all="ignore"):
        fn(f.reshape(KH, KW, -1), nhwc_in(dy, fmt), dst, *_args(g))
    finish()


@kernel("DepthwiseConv2dNativeBackpropFilter", dtypes=FLOATS)
def depthwise_backprop_filter(inputs, outputs, attrs):
    x, _, dy = inputs
    df = outputs[0]
    op = "DepthwiseConv2dNativeBackpropFilter"
    eg = eigen(x.dtype, attrs, op)
    fmt = check_format(attrs, eg)
    xs = x.shape if fmt != "NCHW" else (x.shape[0], x.shape[2], x.shape[3], x.shape[1])
    g = geometry(xs[1:3], df.shape[:2], attrs, fmt, eg, op)
    if g.padded():
        _eigen_nonfinite(dy, eg)
    if df.size == 0:
        return
    if x.size == 0 or dy.size == 0:
        df[...] = 0
        return
    KH, KW = df.shape[:2]
    x4, dy4 = nhwc_in(x, fmt), nhwc_in(dy, fmt)
    Q = dy4.shape[0] * dy4.shape[1]
    work = dy.size * KH * KW
    chunks = 1 if work < PARALLEL_MIN else min(Q, 32)
    rows_per = -(-Q // chunks)
    chunks = -(-Q // rows_per)
    part = np.empty((chunks, KH, KW, df.shape[2] * df.shape[3]), np.float64)
    fn = _backprop_filter_p if chunks > 1 else _backprop_filter_s
    with np.errstate(all="ignore"):
        fn(x4, dy4, part, rows_per, *_args(g))
        df.reshape(part.shape[1:])[...] = part.sum(axis=0)
