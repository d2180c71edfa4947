"""CPU kernels: DepthwiseConv2dNative and its backprops as direct numba loops over image rows.

A filter (KH, KW, C, M) is run as a channel-wise one over C*M channels, the input's channels
repeated M times (the input gradient sums them back). Each loop owns whole output rows (forward,
input gradient) or a chunk of rows with its own partial sums (filter gradient), so threads never
share a write; with unit width stride each tap is one contiguous multiply-add over a row.
Loops visit only the taps that fall inside the image, as oneDNN (float32) does; TF's Eigen
kernels (float64) multiply padding zeros by the other operand, which differs only when that
operand holds Inf/NaN: those inputs go back to TensorFlow. NCHW (float32 only) is transposed in
and out.
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import filter_cache, jit
from shape_fns import Unsupported
from shape_fns.depthwise_ops import check_format, eigen, forward_geometry, geometry

from .conv_ops import kept_geometry, nhwc_in, nhwc_out

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 16   # multiply-adds; below this one thread is faster
TILE_FLOATS = 512        # a tiled filter tap spans this many values (L1-resident, 9 taps)
ROWS_PER_CHUNK = 64      # output rows summed in the array dtype before combining in float64


def _ow_range(off, sw, W, OW):
    """[ow0, ow1): the outputs whose tap at input column ow*sw + off lies inside [0, W)."""
    ow0 = 0 if off >= 0 else (sw - 1 - off) // sw
    if W - 1 - off < 0:
        return ow0, ow0
    return ow0, max(ow0, min(OW, (W - 1 - off) // sw + 1))


def _tap(orow, xrow, fk, ft, ow0, ow1, off, sw, C):
    """orow[ow] += xrow[ow*sw + off] * one filter tap for ow in [ow0, ow1).

    With sw == 1 in contiguous runs against ft, the tap tiled over a few pixels (B*C values, B =
    ft.size // C); else pixel by pixel with fk (C,).
    """
    if sw == 1:
        B = ft.size // C
        for o in range(ow0, ow1, B):
            L = min(B, ow1 - o) * C
            dst = orow[o * C:o * C + L]
            src = xrow[(o + off) * C:(o + off) * C + L]
            for j in range(L):
                dst[j] += src[j] * ft[j]
    else:
        for ow in range(ow0, ow1):
            dst = orow[ow * C:ow * C + C]
            src = xrow[(ow * sw + off) * C:(ow * sw + off) * C + C]
            for c in range(C):
                dst[c] += src[c] * fk[c]


def _row3(dst, r, fa, fb, fc, s, e, L, first):
    """dst[:L] (+)= one filter row's three taps over input row r from offset s, step e.

    One row of taps per pass keeps seven streams per loop, few enough for LLVM's runtime alias
    checks, so the loop vectorises (all nine taps in one loop do not).
    """
    a, b, c = r[s:s + L], r[s + e:s + e + L], r[s + 2 * e:s + 2 * e + L]
    if first:
        for j in range(L):
            dst[j] = a[j] * fa[j] + b[j] * fb[j] + c[j] * fc[j]
    else:
        for j in range(L):
            dst[j] += a[j] * fa[j] + b[j] * fb[j] + c[j] * fc[j]


def _interior3(orow, r0, r1, r2, f, ft, owa, owb, sw, dw, pl, C):
    """orow[owa:owb] = the full 3x3 window sum, rows r0..r2 (all taps inside the image)."""
    e = dw * C
    if sw == 1:
        B = ft.shape[2] // C
        for o in range(owa, owb, B):
            L = min(B, owb - o) * C
            s = (o - pl) * C
            dst = orow[o * C:o * C + L]
            _row3(dst, r0, ft[0, 0], ft[0, 1], ft[0, 2], s, e, L, True)
            _row3(dst, r1, ft[1, 0], ft[1, 1], ft[1, 2], s, e, L, False)
            _row3(dst, r2, ft[2, 0], ft[2, 1], ft[2, 2], s, e, L, False)
        return
    for ow in range(owa, owb):
        s = (ow * sw - pl) * C
        dst = orow[ow * C:ow * C + C]
        _row3(dst, r0, f[0, 0], f[0, 1], f[0, 2], s, e, C, True)
        _row3(dst, r1, f[1, 0], f[1, 1], f[1, 2], s, e, C, False)
        _row3(dst, r2, f[2, 0], f[2, 1], f[2, 2], s, e, C, False)


def _pixel(dst, xr2, r0, ih0, f, ow, H, W, sw, dh, dw, pl, C):
    """dst (C,) = one output pixel's window sum over the taps inside the image."""
    for c in range(C):
        dst[c] = 0
    for kh in range(f.shape[0]):
        ih = ih0 + kh * dh
        if ih < 0 or ih >= H:
            continue
        xrow = xr2[r0 + ih]
        for kw in range(f.shape[1]):
            iw = ow * sw - pl + kw * dw
            if iw < 0 or iw >= W:
                continue
            src = xrow[iw * C:iw * C + C]
            fk = f[kh, kw]
            for c in range(C):
                dst[c] += src[c] * fk[c]


def _forward(x, f, ft, out, sh, sw, dh, dw, pt, pl):
    """out (N, OH, OW, C) <- channel-wise correlation of x (N, H, W, C) with f (KH, KW, C).

    ft is f tiled over a few output pixels ((KH, KW, B*C), unit width stride only) so that a
    tap over a row is a contiguous multiply-add. 3x3 windows fully inside the image are summed
    in one pass per filter row; the pixels at the image edges one by one.
    """
    N, H, W, C = x.shape
    KH, KW = f.shape[0], f.shape[1]
    OH, OW = out.shape[1], out.shape[2]
    xr2 = x.reshape(N * H, W * C)
    o2 = out.reshape(N * OH, OW * C)
    owa, owb = 0, 0
    if KH == 3 and KW == 3:
        a0, b0 = _ow_range(-pl, sw, W, OW)
        a2, b2 = _ow_range(2 * dw - pl, sw, W, OW)
        owa, owb = max(a0, a2), min(b0, b2)
    for q in prange(N * OH):
        n = q // OH
        oh = q - n * OH
        orow = o2[q]
        ih0 = oh * sh - pt
        if owb > owa and ih0 >= 0 and ih0 + 2 * dh < H:
            _interior3(orow, xr2[n * H + ih0], xr2[n * H + ih0 + dh], xr2[n * H + ih0 + 2 * dh],
                       f, ft, owa, owb, sw, dw, pl, C)
            for ow in range(owa):
                _pixel(orow[ow * C:ow * C + C], xr2, n * H, ih0, f, ow, H, W, sw, dh, dw, pl, C)
            for ow in range(owb, OW):
                _pixel(orow[ow * C:ow * C + C], xr2, n * H, ih0, f, ow, H, W, sw, dh, dw, pl, C)
            continue
        for j in range(OW * C):
            orow[j] = 0
        for kh in range(KH):
            ih = ih0 + kh * dh
            if ih < 0 or ih >= H:
                continue
            xrow = xr2[n * H + ih]
            for kw in range(KW):
                off = kw * dw - pl
                ow0, ow1 = _ow_range(off, sw, W, OW)
                _tap(orow, xrow, f[kh, kw], ft[kh, kw], ow0, ow1, off, sw, C)


def _backprop_input(f, ft, dy, dx, sh, sw, dh, dw, pt, pl):
    """dx (N, H, W, C) <- channel-wise input gradient; each task owns whole rows of dx."""
    N, H, W, C = dx.shape
    KH, KW = f.shape[0], f.shape[1]
    OH, OW = dy.shape[1], dy.shape[2]
    g2 = dy.reshape(N * OH, OW * C)
    d2 = dx.reshape(N * H, W * C)
    for p in prange(N * H):
        n = p // H
        ih = p - n * H
        drow = d2[p]
        for j in range(W * C):
            drow[j] = 0
        for kh in range(KH):
            th = ih + pt - kh * dh
            if th < 0 or th % sh != 0 or th // sh >= OH:
                continue
            grow = g2[n * OH + th // sh]
            for kw in range(KW):
                off = kw * dw - pl
                ow0, ow1 = _ow_range(off, sw, W, OW)
                if sw == 1:
                    # dx[ow + off] += dy[ow] * f: _tap's shape with the two rows' roles swapped
                    B = ft.shape[2] // C
                    for o in range(ow0, ow1, B):
                        L = min(B, ow1 - o) * C
                        dst = drow[(o + off) * C:(o + off) * C + L]
                        src = grow[o * C:o * C + L]
                        fr = ft[kh, kw]
                        for j in range(L):
                            dst[j] += src[j] * fr[j]
                else:
                    fk = f[kh, kw]
                    for ow in range(ow0, ow1):
                        dst = drow[(ow * sw + off) * C:(ow * sw + off) * C + C]
                        src = grow[ow * C:ow * C + C]
                        for c in range(C):
                            dst[c] += src[c] * fk[c]


def _backprop_filter(x, dy, acc, rows_per, sh, sw, dh, dw, pt, pl):
    """acc[k] (KH, KW, OW*C) <- per-output-column filter gradient sums of output rows
    k*rows_per .. (k+1)*rows_per (summed over k and OW by the caller)."""
    N, H, W, C = x.shape
    KH, KW = acc.shape[1], acc.shape[2]
    OH, OW = dy.shape[1], dy.shape[2]
    xr2 = x.reshape(N * H, W * C)
    g2 = dy.reshape(N * OH, OW * C)
    Q = N * OH
    for k in prange(acc.shape[0]):
        a = acc[k]
        af = a.reshape(-1)
        for j in range(af.size):
            af[j] = 0
        for q in range(k * rows_per, min(Q, (k + 1) * rows_per)):
            n = q // OH
            oh = q - n * OH
            grow = g2[q]
            for kh in range(KH):
                ih = oh * sh - pt + kh * dh
                if ih < 0 or ih >= H:
                    continue
                xrow = xr2[n * H + ih]
                for kw in range(KW):
                    ar = a[kh, kw]
                    off = kw * dw - pl
                    ow0, ow1 = _ow_range(off, sw, W, OW)
                    if sw == 1:
                        dst = ar[ow0 * C:ow1 * C]
                        src = xrow[(ow0 + off) * C:(ow1 + off) * C]
                        g = grow[ow0 * C:ow1 * C]
                        for j in range(dst.size):
                            dst[j] += src[j] * g[j]
                    else:
                        for ow in range(ow0, ow1):
                            dst = ar[ow * C:ow * C + C]
                            src = xrow[(ow * sw + off) * C:(ow * sw + off) * C + C]
                            g = grow[ow * C:ow * C + C]
                            for c in range(C):
                                dst[c] += src[c] * g[c]


_jit = njit(cache=True, nogil=True, error_model="numpy")
_fma = {"contract"}   # fused multiply-add, as oneDNN's kernels use
_sjit = njit(cache=True, nogil=True, error_model="numpy", fastmath=_fma)


def _pjit(fn):
    return jit.parallel(fn, error_model="numpy", fastmath=_fma)


_ow_range = _jit(_ow_range)
_tap = _sjit(_tap)
_row3 = _sjit(_row3)
_interior3 = _sjit(_interior3)
_pixel = _sjit(_pixel)
_forward_s, _forward_p = (jit.readonly_inputs(_sjit(_forward), ("out",)),
                          jit.readonly_inputs(_pjit(_forward), ("out",)))
_backprop_input_s, _backprop_input_p = _sjit(_backprop_input), _pjit(_backprop_input)
_backprop_filter_s, _backprop_filter_p = _sjit(_backprop_filter), _pjit(_backprop_filter)


def _tiled(f3, g):
    """f3 (KH, KW, C) tiled over TILE_FLOATS // C pixels for unit width strides, else a stub."""
    if g.sw != 1:
        return np.zeros((1, 1, 1), f3.dtype)
    kh, kw, c = f3.shape
    b = max(1, TILE_FLOATS // c)
    return np.ascontiguousarray(np.broadcast_to(f3[:, :, None, :], (kh, kw, b, c))).reshape(
        kh, kw, b * c)


def _per_channel(x, m):
    """x with each channel repeated m times: channel c*m+j of a multiplier-m filter sees it."""
    return x if m == 1 else np.repeat(x, m, axis=3)


def _args(g):
    return g.sh, g.sw, g.dh, g.dw, g.pt, g.pl


def _finite(a):
    with np.errstate(all="ignore"):
        return bool(np.isfinite(a.sum()))


def _eigen_nonfinite(a, eg):
    # TF's Eigen kernels multiply padding zeros by `a`: 0 * Inf is NaN there
    if eg and a.size and not _finite(a):
        raise Unsupported("nonfinite_eigen_padding")


def _forward_checked(x_shape, f_shape, attrs, op, dtype):
    return forward_geometry(x_shape, f_shape, attrs, dtype)


@kernel("DepthwiseConv2dNative", dtypes=FLOATS)
def depthwise_conv2d(inputs, outputs, attrs):
    x, f = inputs
    out = outputs[0]
    fmt, _, g, _ = kept_geometry(x.shape, f.shape, attrs, "DepthwiseConv2dNative", x.dtype,
                                 _forward_checked)
    if g.padded():
        _eigen_nonfinite(f, eigen(x.dtype, attrs, "DepthwiseConv2dNative"))
    if out.size == 0:
        return
    if x.size == 0 or f.size == 0:
        out[...] = 0
        return
    dst, finish = nhwc_out(out, fmt)
    KH, KW, _, M = f.shape
    f3 = f.reshape(KH, KW, -1)
    fn = _forward_p if out.size * KH * KW >= PARALLEL_MIN else _forward_s
    ft = None
    if g.sw == 1 and attrs.get("_filter_is_variable", False):
        # an inference program's filter: its tiled form kept between calls (NASNetMobile's 160
        # depthwise convolutions built theirs per call: ~5 us each)
        ft = filter_cache.get(f3, "dw_tiled", lambda w: _tiled(w, g),
                              KH * KW * max(1, TILE_FLOATS // f3.shape[2]) * f3.shape[2]
                              * f3.itemsize)
    if ft is None:
        ft = _tiled(f3, g)
    fn(_per_channel(nhwc_in(x, fmt), M), f3, ft, dst, *_args(g))   # (numba: no numpy warnings)
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
    KH, KW, C, M = f.shape
    f3 = f.reshape(KH, KW, -1)
    dy4 = nhwc_in(dy, fmt)
    full = dst if M == 1 else np.empty(dst.shape[:3] + (C * M,), dst.dtype)
    par = dy.size * KH * KW >= PARALLEL_MIN
    with np.errstate(all="ignore"):
        if g.sh == 1 and g.sw == 1:
            # a unit-stride input gradient is the forward correlation of out_backprop with the
            # flipped filter, padded by what the forward's padding leaves of the window
            fl = np.ascontiguousarray(f3[::-1, ::-1])
            (_forward_p if par else _forward_s)(
                dy4, fl, _tiled(fl, g), full, 1, 1, g.dh, g.dw,
                (KH - 1) * g.dh - g.pt, (KW - 1) * g.dw - g.pl)
        else:
            (_backprop_input_p if par else _backprop_input_s)(
                f3, _tiled(f3, g), dy4, full, *_args(g))
        if M > 1:
            np.sum(full.reshape(dst.shape + (M,)), axis=4, out=dst)
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
    KH, KW, C, M = df.shape
    x4, dy4 = _per_channel(nhwc_in(x, fmt), M), nhwc_in(dy, fmt)
    N, OH, OW, CM = dy4.shape
    Q = N * OH
    # float32 partial sums over at most ROWS_PER_CHUNK rows each, combined in float64
    chunks = 1 if dy.size * KH * KW < PARALLEL_MIN else max(min(Q, 16), -(-Q // ROWS_PER_CHUNK))
    rows_per = -(-Q // chunks)
    chunks = -(-Q // rows_per)
    acc = np.empty((chunks, KH, KW, OW * CM), dy.dtype)
    fn = _backprop_filter_p if chunks > 1 else _backprop_filter_s
    with np.errstate(all="ignore"):
        fn(x4, dy4, acc, rows_per, *_args(g))
        total = acc.reshape(chunks, KH, KW, OW, CM).sum(axis=(0, 3), dtype=np.float64)
        df.reshape(KH, KW, CM)[...] = total
