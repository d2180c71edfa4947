"""CPU kernels: 2-D max/avg pooling and their gradients (numba, NHWC; NCHW transposed in/out).

TF semantics kept here: MaxPool starts from the dtype's lowest value and ignores NaN; MaxPoolGrad
sends each window's gradient to its first maximum in row-major order (a later element wins only
when strictly greater, so a leading NaN keeps it); AvgPool divides by the number of in-bounds
elements of each window.
"""
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from kernels import kernel
from kernels.cpu import jit
from kernels.cpu.half_bits import bf2f, f2bf, f2h, h2f, narrow_into
from kernels.cpu.scalar import ftz
from kernels.cpu.scratch import scratch
from shape_fns.host import onednn_runs
from shape_fns import InvalidArgumentError, Unsupported
from shape_fns.conv_ops import to_nhwc
from shape_fns.pooling_ops import pool_window

from .conv_ops import nhwc_in, nhwc_out

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 16       # output elements (times window size for the gradients)


def _max_pool(x, out, KH, KW, sh, sw, pt, pl, lowest):
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    OH, OW = out.shape[1], out.shape[2]
    for q in prange(out.shape[0] * OH):
        n = q // OH
        oh = q - n * OH
        h0 = oh * sh - pt
        hs, he = max(h0, 0), min(h0 + KH, H)
        for ow in range(OW):
            w0 = ow * sw - pl
            ws, we = max(w0, 0), min(w0 + KW, W)
            o = out[n, oh, ow]
            for c in range(C):
                o[c] = lowest
            for ih in range(hs, he):
                for iw in range(ws, we):
                    src = x[n, ih, iw]
                    for c in range(C):
                        v = src[c]
                        if o[c] < v:
                            o[c] = v


def _max_pool_bits(x, out, KH, KW, sh, sw, pt, pl, lowest, bf):
    """_max_pool over float16 (bf False) or bfloat16 (bf True) bit patterns (uint16): values
    widened to float32 in registers (exact), each window's maximum narrowed back (exact: it is
    one of them, or the type's lowest), so no array is widened or rounded (a 256x32x32x32
    bfloat16 pool: 6.9 ms through float32 arrays, most of it the two conversions, 3.0 ms this
    way). A module-level function of its own: numba does not cache closures."""
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    OH, OW = out.shape[1], out.shape[2]
    low = bf2f(lowest) if bf else h2f(lowest)
    for q in prange(out.shape[0] * OH):
        best = np.empty(C, np.float32)
        n = q // OH
        oh = q - n * OH
        h0 = oh * sh - pt
        hs, he = max(h0, 0), min(h0 + KH, H)
        for ow in range(OW):
            w0 = ow * sw - pl
            ws, we = max(w0, 0), min(w0 + KW, W)
            for c in range(C):
                best[c] = low
            for ih in range(hs, he):
                for iw in range(ws, we):
                    src = x[n, ih, iw]
                    for c in range(C):
                        v = bf2f(src[c]) if bf else h2f(src[c])
                        if best[c] < v:
                            best[c] = v
            o = out[n, oh, ow]
            for c in range(C):
                o[c] = f2bf(best[c]) if bf else f2h(best[c])


@njit(inline="always")
def _later_max(best, bits, b, bf):
    """One step of a window's maximum on bit patterns: b wins over (best, bits) when its value
    is larger (NaN never; the earlier of equal values stays)."""
    v = bf2f(b) if bf else h2f(b)
    return (v, b) if best < v else (best, bits)


def _max_pool_bits_2x2(x, out, lowest, bf):
    """_max_pool_bits for 2x2 windows at stride 2 inside the image (the common pool): the four
    inputs of each output compared in window order as widened floats (NaN never wins, the first
    of equal values stays), the winner's bits stored; one straight pass over channels that the
    compiler vectorises (a 256x32x32x32 bfloat16 pool: 1.5 ms through the general loops)."""
    OH, OW, C = out.shape[1], out.shape[2], out.shape[3]
    low = bf2f(lowest) if bf else h2f(lowest)
    for q in prange(out.shape[0] * OH):
        n = q // OH
        oh = q - n * OH
        r0 = x[n, 2 * oh]
        r1 = x[n, 2 * oh + 1]
        o = out[n, oh]
        for ow in range(OW):
            a, b = r0[2 * ow], r0[2 * ow + 1]
            c, d = r1[2 * ow], r1[2 * ow + 1]
            dst = o[ow]
            for k in range(C):
                best, bits = _later_max(low, lowest, a[k], bf)
                best, bits = _later_max(best, bits, b[k], bf)
                best, bits = _later_max(best, bits, c[k], bf)
                dst[k] = _later_max(best, bits, d[k], bf)[1]


def _max_pool_2x2(x, out, lowest):
    """_max_pool for 2x2 windows at stride 2 inside the image (float32/float64): the four inputs
    in window order, NaN never wins, the first of equal values stays; vectorised over channels
    (a 256x32x32x32 float32 pool: 1.25 ms through the general loops)."""
    OH, OW, C = out.shape[1], out.shape[2], out.shape[3]
    for q in prange(out.shape[0] * OH):
        n = q // OH
        oh = q - n * OH
        r0 = x[n, 2 * oh]
        r1 = x[n, 2 * oh + 1]
        o = out[n, oh]
        for ow in range(OW):
            a, b = r0[2 * ow], r0[2 * ow + 1]
            c, d = r1[2 * ow], r1[2 * ow + 1]
            dst = o[ow]
            for k in range(C):
                best = lowest
                for v in (a[k], b[k], c[k], d[k]):
                    best = v if best < v else best
                dst[k] = best


def _avg_pool(x, out, KH, KW, sh, sw, pt, pl):
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    OH, OW = out.shape[1], out.shape[2]
    for q in prange(out.shape[0] * OH):
        n = q // OH
        oh = q - n * OH
        h0 = oh * sh - pt
        hs, he = max(h0, 0), min(h0 + KH, H)
        for ow in range(OW):
            w0 = ow * sw - pl
            ws, we = max(w0, 0), min(w0 + KW, W)
            o = out[n, oh, ow]
            for c in range(C):
                o[c] = 0
            for ih in range(hs, he):
                for iw in range(ws, we):
                    src = x[n, ih, iw]
                    for c in range(C):
                        o[c] += src[c]
            cnt = (he - hs) * (we - ws)
            for c in range(C):
                o[c] /= cnt


def _max_pool_grad(x, dy, dx, KH, KW, sh, sw, pt, pl, zero):
    """Each window's gradient goes to its first maximum, per channel; parallel over images.
    The window's maximum per channel is kept as a value and a flat pixel index updated by
    selects (vectorised over channels). Windows that do not overlap (strides at least the
    window) write their pixels' gradients directly, the maximum's or 0; overlapping ones add
    into a zeroed dx. A gradient is written as stock's kernels write it, added to a zero under
    DAZ (zero: +0 of dx's dtype): -0 and subnormals become +0."""
    N, H, W, C = x.shape
    OH, OW = dy.shape[1], dy.shape[2]
    apart = sh >= KH and sw >= KW
    # windows that tile the image exactly: every pixel is written by its one window
    tiled = sh == KH and sw == KW and not pt and not pl and OH * sh >= H and OW * sw >= W
    for n in prange(N):
        best = np.empty(C, x.dtype)
        at = np.empty(C, np.int32)
        dxn = dx[n]
        if not tiled:
            for ih in range(H):     # pixels no window (or several) covers
                for iw in range(W):
                    d = dxn[ih, iw]
                    for c in range(C):
                        d[c] = 0
        for oh in range(OH):
            h0 = oh * sh - pt
            hs, he = max(h0, 0), min(h0 + KH, H)
            for ow in range(OW):
                w0 = ow * sw - pl
                ws, we = max(w0, 0), min(w0 + KW, W)
                if he <= hs or we <= ws:
                    continue
                src = x[n, hs, ws]
                first = hs * W + ws
                for c in range(C):
                    best[c] = src[c]
                    at[c] = first
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        src = x[n, ih, iw]
                        p = ih * W + iw
                        for c in range(C):
                            v = src[c]
                            b = best[c]
                            take = b < v
                            best[c] = v if take else b
                            at[c] = p if take else at[c]
                g = dy[n, oh, ow]
                if apart:
                    for ih in range(hs, he):
                        for iw in range(ws, we):
                            d = dxn[ih, iw]
                            p = ih * W + iw
                            for c in range(C):
                                gc = ftz(g[c]) + zero   # added to a zero, as stock's
                                d[c] = gc if at[c] == p else 0
                else:
                    for c in range(C):
                        a = at[c]
                        dxn[a // W, a % W, c] += ftz(g[c])


def _max_pool_grad_2x2(x, dy, dx, zero, one, relu, sums, add, bf):
    """_max_pool_grad for 2x2 windows at stride 2 inside the image: the window's first maximum
    found in registers (window order, NaN never taken), its four pixels written at once,
    vectorised over channels; pixels beyond the last window (odd sides) get 0 (zero: 0 of
    dx's dtype). float32/float64, or float16 (bf False) / bfloat16 (bf True) bit patterns
    (uint16), compared widened in registers, nothing widened in memory. Each maximum gets the
    gradient as stock writes it (_grad_of). relu: then ReluGrad(dx, x) in the same pass (x is
    a Relu's output): the maximum's gradient times (maximum > 0), as ReluGrad multiplies; the
    other pixels' +0 stays +0. add: sums (float64 [N * OH, C]) gets each window row's
    per-channel sums of what it wrote (a BiasAddGrad of dx, finished by the caller in a fixed
    order), read back from the rows just written. The rows are indexed flat (one base pointer a
    row): with a pointer per pixel and the sums in the same loop LLVM kept it scalar
    (32x26x26x16: 0.21 -> 0.086 ms on one thread)."""
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    OH, OW = dy.shape[1], dy.shape[2]
    for q in prange(dy.shape[0] * OH):
        n = q // OH
        oh = q - n * OH
        r0 = x[n, 2 * oh].reshape(-1)
        r1 = x[n, 2 * oh + 1].reshape(-1)
        d0 = dx[n, 2 * oh].reshape(-1)
        d1 = dx[n, 2 * oh + 1].reshape(-1)
        g = dy[n, oh].reshape(-1)
        for ow in range(OW):
            i0 = 2 * ow * C
            i1 = i0 + C
            go = ow * C
            for k in range(C):
                m1 = _wv(r0[i0 + k], bf)
                vb = _wv(r0[i1 + k], bf)
                vc = _wv(r1[i0 + k], bf)
                vd = _wv(r1[i1 + k], bf)
                t1 = m1 < vb
                m2 = vb if t1 else m1
                t2 = m2 < vc
                m3 = vc if t2 else m2
                t3 = m3 < vd      # the last strictly greater value wins
                t2 = t2 & (not t3)     # (bitwise: no branches)
                t1 = t1 & (not (t2 | t3))
                gk = _grad_of(g[go + k], relu, ftz(vd if t3 else m3) > 0, zero, one, bf)
                d0[i0 + k] = zero if (t1 | t2 | t3) else gk
                d0[i1 + k] = gk if t1 else zero
                d1[i0 + k] = gk if t2 else zero
                d1[i1 + k] = gk if t3 else zero
        if add:   # a window's four values are its gradient and three zeros: their sum is it
            srow = sums[q]
            srow[:] = 0
            for ow in range(OW):
                i0 = 2 * ow * C
                i1 = i0 + C
                for k in range(C):
                    srow[k] += _sum4(d0[i0 + k], d0[i1 + k], d1[i0 + k], d1[i1 + k], bf)
        for w in range(2 * OW * C, W * C):
            d0[w] = zero
            d1[w] = zero
        if oh == OH - 1:
            for h in range(2 * OH, H):
                dx[n, h] = zero


def _wv(v, bf):
    """An input value compared as float: itself, or float16/bfloat16 bits widened."""


@overload(_wv)
def _wv_typed(v, bf):
    if isinstance(v, types.Integer):
        def bits(v, bf):
            return bf2f(v) if bf else h2f(v)
        return bits

    def values(v, bf):
        return v
    return values


def _grad_of(g, relu, keep, zero, one, bf):
    """The gradient a window's maximum gets, as stock's MaxPoolGrad writes it (added to a
    zeroed buffer under DAZ: -0 and subnormals +0; half bits through _flushed) and, with relu,
    ReluGrad's product with keep (the flushed maximum > 0): its half kernel's FTZ product,
    rounded once (the gradient times 0: -0 for a negative one, NaN for Inf/NaN)."""


@overload(_grad_of, inline="always")
def _grad_of_typed(g, relu, keep, zero, one, bf):
    if isinstance(g, types.Integer):
        def bits(g, relu, keep, zero, one, bf):
            gk = _flushed(g, bf)
            if relu:
                v = ftz(_wv(gk, bf))
                if not keep:
                    v = v * np.float32(0)
                gk = f2bf(v) if bf else f2h(v)
            return gk
        return bits

    def values(g, relu, keep, zero, one, bf):
        gk = ftz(g) + zero
        if relu:
            gk = gk * (one if keep else zero)
        return gk
    return values


def _sum4(a, b, c, d, bf):
    """The sum of a window's four written values (three of them +0), as float64 is added."""


@overload(_sum4, inline="always")
def _sum4_typed(a, b, c, d, bf):
    if isinstance(a, types.Integer):
        def bits(a, b, c, d, bf):
            return _wv(a | b | c | d, bf)
        return bits

    def values(a, b, c, d, bf):
        return (a + b) + (c + d)
    return values


@njit(cache=True, nogil=True, inline="always")
def _flushed(b, bf):
    """A gradient's bits as stock's MaxPoolGrad writes them: it adds the gradient to a zeroed
    buffer (oneDNN's kernel and Eigen's alike), so -0 becomes +0, and a bfloat16 subnormal,
    a float32 subnormal under TensorFlow's DAZ, +0 too (float16's widen to normal floats)."""
    if bf:
        return np.uint16(0) if (b & np.uint16(0x7F80)) == 0 else b
    return np.uint16(0) if b == np.uint16(0x8000) else b


def _max_pool_grad_bits(x, dy, dx, KH, KW, sh, sw, pt, pl, bf):
    """_max_pool_grad of non-overlapping windows on float16 (bf False) or bfloat16 (bf True)
    bit patterns: x compared widened in registers, each pixel's gradient dy's own bits or +0
    (a copy: nothing to round, _flushed's zeros aside), so nothing is widened in memory."""
    N, H, W, C = x.shape
    OH, OW = dy.shape[1], dy.shape[2]
    tiled = sh == KH and sw == KW and not pt and not pl and OH * sh >= H and OW * sw >= W
    for n in prange(N):
        best = np.empty(C, np.float32)
        at = np.empty(C, np.int32)
        dxn = dx[n]
        if not tiled:
            for ih in range(H):
                for iw in range(W):
                    d = dxn[ih, iw]
                    for c in range(C):
                        d[c] = 0
        for oh in range(OH):
            h0 = oh * sh - pt
            hs, he = max(h0, 0), min(h0 + KH, H)
            for ow in range(OW):
                w0 = ow * sw - pl
                ws, we = max(w0, 0), min(w0 + KW, W)
                if he <= hs or we <= ws:
                    continue
                src = x[n, hs, ws]
                first = hs * W + ws
                for c in range(C):
                    best[c] = bf2f(src[c]) if bf else h2f(src[c])
                    at[c] = first
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        src = x[n, ih, iw]
                        p = ih * W + iw
                        for c in range(C):
                            v = bf2f(src[c]) if bf else h2f(src[c])
                            b = best[c]
                            take = b < v
                            best[c] = v if take else b
                            at[c] = p if take else at[c]
                g = dy[n, oh, ow]
                for ih in range(hs, he):
                    for iw in range(ws, we):
                        d = dxn[ih, iw]
                        p = ih * W + iw
                        for c in range(C):
                            gc = _flushed(g[c], bf)
                            d[c] = gc if at[c] == p else np.uint16(0)


def _avg_pool_grad(dy, dx, KH, KW, sh, sw, pt, pl):
    """Gather: each input pixel sums dy/count over the windows that contain it."""
    H, W, C = dx.shape[1], dx.shape[2], dx.shape[3]
    OH, OW = dy.shape[1], dy.shape[2]
    for p in prange(dx.shape[0] * H):
        n = p // H
        ih = p - n * H
        oh_lo = max(0, -((KH - 1 - ih - pt) // sh))    # ceil((ih + pt - KH + 1) / sh)
        oh_hi = min(OH - 1, (ih + pt) // sh)
        for iw in range(W):
            ow_lo = max(0, -((KW - 1 - iw - pl) // sw))
            ow_hi = min(OW - 1, (iw + pl) // sw)
            d = dx[n, ih, iw]
            for c in range(C):
                d[c] = 0
            for oh in range(oh_lo, oh_hi + 1):
                h0 = oh * sh - pt
                hc = min(h0 + KH, H) - max(h0, 0)
                for ow in range(ow_lo, ow_hi + 1):
                    w0 = ow * sw - pl
                    inv = 1.0 / (hc * (min(w0 + KW, W) - max(w0, 0)))
                    g = dy[n, oh, ow]
                    for c in range(C):
                        d[c] += g[c] * inv


def _pair(fn):
    return (njit(cache=True, nogil=True, error_model="numpy")(fn),
            jit.parallel(fn, error_model="numpy"))


_MAX, _AVG, _MAXG, _AVGG, _MAXB, _MAXGB, _MAXB2, _MAX2, _MAXG2 = (
    _pair(f) for f in (_max_pool, _avg_pool, _max_pool_grad, _avg_pool_grad, _max_pool_bits,
                       _max_pool_grad_bits, _max_pool_bits_2x2, _max_pool_2x2,
                       _max_pool_grad_2x2))
max_pool_s, avg_pool_s = _MAX[0], _AVG[0]   # by name: compiled regions (loops.py) call them
# float16 / bfloat16 max pools on bit patterns: dtype name -> (the dtype's lowest bits, bf)
_MAX_HALF = {"float16": (np.uint16(0xFBFF), False), "bfloat16": (np.uint16(0xFF7F), True)}
_BF16_NEG_INF = np.uint16(0xFF80)


def _pick(pair, work):
    return pair[1] if work >= PARALLEL_MIN else pair[0]


def _args(g):
    return g.kh, g.kw, g.sh, g.sw, g.pt, g.pl


def _pairs(g, x_shape, out_shape):
    """2x2 windows at stride 2, all inside the image (the common pool's fast paths)."""
    return (g.kh == g.kw == g.sh == g.sw == 2 and not g.pt and not g.pl
            and 2 * out_shape[1] <= x_shape[1] and 2 * out_shape[2] <= x_shape[2])


def _window(x_shape, attrs, op, dtype):
    fmt = attrs.get("data_format", "NHWC")
    g = pool_window(to_nhwc(x_shape, fmt), attrs, op)
    # stock runs float32 pools on oneDNN (where it is on: host.onednn_runs); float64 pools,
    # float32 without oneDNN and every MaxPoolGrad on TF's own NHWC-only kernels
    if fmt == "NCHW" and (not onednn_runs(dtype) or op == "MaxPoolGrad"):
        kind = op[:3] + "Pooling" + ("Grad" if op.endswith("Grad") else "")
        raise InvalidArgumentError(f"Default {kind}Op only supports NHWC on device type CPU")
    return fmt, g


@kernel("MaxPool", dtypes=FLOATS + tuple(_MAX_HALF))
def max_pool(inputs, outputs, attrs):
    """From the dtype's lowest value, NaN never wins; exact (float16/bfloat16 on their bit
    patterns: _max_pool_bits)."""
    x = inputs[0]
    out = outputs[0]
    fmt, g = _window(x.shape, attrs, "MaxPool", x.dtype)
    if out.size == 0:
        return
    half = _MAX_HALF.get(x.dtype.name)
    pairs = fmt == "NHWC" and _pairs(g, x.shape, out.shape)
    if half is None:
        pool, extra = _MAX, (x.dtype.type(np.finfo(x.dtype).min),)
        if pairs:
            _pick(_MAX2, out.size)(x, out, *extra)
            return
    else:
        if half[1] and onednn_runs(x.dtype):
            # stock's oneDNN bfloat16 pool starts from -Inf (its float32 one, and Eigen's, from
            # the lowest value): a window of NaN only gives -Inf there
            half = (_BF16_NEG_INF, True)
        pool, extra, x, out = _MAXB, half, x.view(np.uint16), out.view(np.uint16)
        if pairs:   # the common pool, in one vectorised pass
            _pick(_MAXB2, out.size)(x, out, *half)
            return
    dst, finish = nhwc_out(out, fmt)
    _pick(pool, out.size)(nhwc_in(x, fmt), dst, *_args(g), *extra)
    finish()


@kernel("AvgPool", dtypes=FLOATS)
def avg_pool(inputs, outputs, attrs):
    x = inputs[0]
    out = outputs[0]
    fmt, g = _window(x.shape, attrs, "AvgPool", x.dtype)
    if out.size == 0:
        return
    dst, finish = nhwc_out(out, fmt)
    _pick(_AVG, out.size)(nhwc_in(x, fmt), dst, *_args(g))
    finish()


@kernel("MaxPoolGrad", dtypes=FLOATS)
def max_pool_grad(inputs, outputs, attrs):
    x, _, dy = inputs
    dx = outputs[0]
    fmt, g = _window(x.shape, attrs, "MaxPoolGrad", x.dtype)
    if dx.size == 0:
        return
    if dy.size == 0:
        dx[...] = 0
        return
    if fmt == "NHWC" and _grad_2x2(x, dy, dx, g, False):
        return
    maxg = _MAXG[1] if x.shape[0] > 1 and dy.size * g.kh * g.kw >= PARALLEL_MIN else _MAXG[0]
    maxg(x, dy, dx, *_args(g), dx.dtype.type(0))


def max_pool_grad_relu(inputs, out, attrs, bias_grad=None):
    """out = ReluGrad(MaxPoolGrad(x, y, dy), x) in one pass, where x (the pool's input) is a
    Relu's output: 2x2 windows at stride 2 inside the image, NHWC float32/float64, the same
    values as the two kernels in turn (11 MB written and read twice less for a 128x26x26x32
    image); bias_grad ([C]): also BiasAddGrad(out), summed in float64 as its kernel does
    (per window row, then the rows in order); False where it does not apply (the caller runs
    the kernels)."""
    x, y, dy = inputs
    if (attrs.get("data_format", "NHWC") not in ("NHWC", b"NHWC") or x.ndim != 4 or dy.ndim != 4
            or (x.dtype not in FLOATS and x.dtype.name not in _MAX_HALF)
            or dy.dtype != x.dtype or out.dtype != x.dtype
            or out.shape != x.shape or not out.flags.c_contiguous or not dy.size):
        return False
    try:
        _, g = _window(x.shape, attrs, "MaxPoolGrad", x.dtype)
    except Exception:  # noqa: BLE001 - the MaxPoolGrad kernel raises stock's error
        return False
    if bias_grad is not None and (bias_grad.shape != (x.shape[3],) or bias_grad.dtype != x.dtype):
        return False
    return _grad_2x2(x, dy, out, g, True, bias_grad)


def _grad_2x2(x, dy, dx, g, relu, bias_grad=None):
    """_max_pool_grad_2x2 (then ReluGrad where relu; bias_grad: also its per-channel sums, the
    window rows' float64 sums added in order) where the windows are 2x2/2 inside the image;
    False elsewhere."""
    if (not _pairs(g, x.shape, dy.shape) or dy.shape[0] != x.shape[0]
            or dy.shape[3] != x.shape[3]):
        return False
    add = bias_grad is not None
    sums = scratch((dy.shape[0] * dy.shape[1] if add else 1, x.shape[3]), np.float64,
                   "pool_sums")
    half = _MAX_HALF.get(dx.dtype.name)
    if half is not None:
        if not (dx.flags.c_contiguous and x.flags.c_contiguous and dy.flags.c_contiguous):
            return False
        _pick(_MAXG2, dy.size * 4)(x.view(np.uint16), dy.view(np.uint16), dx.view(np.uint16),
                                   np.uint16(0), np.uint16(0), relu, sums, add, half[1])
        if add:   # as BiasAddGrad's half kernel: float64 sums, float32, then rounded once more
            narrow_into(bias_grad, sums.sum(axis=0).astype(np.float32))
        return True
    _pick(_MAXG2, dy.size * 4)(x, dy, dx, dx.dtype.type(0), dx.dtype.type(1), relu, sums, add,
                               False)
    if add:
        bias_grad[...] = sums.sum(axis=0)
    return True


def max_pool_grad_half(inputs, dx, attrs):
    """MaxPoolGrad of float16/bfloat16 with non-overlapping NHWC windows on bit patterns
    (_max_pool_grad_bits); False where it does not apply (the widening kernel runs it, and
    raises stock's errors)."""
    x, _, dy = inputs
    half = _MAX_HALF.get(dx.dtype.name)
    if half is None or x.dtype != dx.dtype or dy.dtype != dx.dtype or x.shape != dx.shape \
            or attrs.get("data_format", "NHWC") != "NHWC" or x.ndim != 4 or dy.ndim != 4:
        return False
    try:
        _, g = _window(x.shape, attrs, "MaxPoolGrad", x.dtype)
    except Exception:  # noqa: BLE001 - the widening kernel raises stock's error
        return False
    if g.sh < g.kh or g.sw < g.kw or not dx.size or not dy.size \
            or dy.shape != (x.shape[0], g.oh, g.ow, x.shape[3]):
        return False
    if _grad_2x2(x, dy, dx, g, False):
        return True
    _pick(_MAXGB, dy.size * g.kh * g.kw)(x.view(np.uint16), dy.view(np.uint16),
                                        dx.view(np.uint16), *_args(g), half[1])
    return True


@kernel("AvgPoolGrad", dtypes=FLOATS)
def avg_pool_grad(inputs, outputs, attrs):
    _, dy = inputs
    dx = outputs[0]
    fmt, g = _window(dx.shape, attrs, "AvgPoolGrad", dx.dtype)
    xs = to_nhwc(dx.shape, fmt)
    if dy.ndim != 4 or tuple(to_nhwc(dy.shape, fmt)) != (xs[0], g.oh, g.ow, xs[3]):
        raise Unsupported("grad_shape_mismatch")   # stock does not check this; leave it to TF
    if dx.dtype == np.float32 and onednn_runs(dx.dtype) and xs[0] and not xs[3]:
        # stock float32 (oneDNN) refuses an input with no channels
        raise InvalidArgumentError(
            f"AvgPoolGrad: Output only has 0 elements: orig_input_shape {list(dx.shape)}")
    if dx.size == 0:
        return
    if dy.size == 0:
        dx[...] = 0
        return
    dst, finish = nhwc_out(dx, fmt)
    _pick(_AVGG, dx.size * g.kh * g.kw)(nhwc_in(dy, fmt), dst, *_args(g))
    finish()
