"""Winograd F(2x2, 3x3) for float32 3x3 stride-1 convolutions (Lavin & Gray, 2015).

Each 2x2 block of output pixels (a tile) is computed from the 4x4 input patch under it:
Y = A^T [ (G g G^T) . (B^T d B) ] A. The elementwise product over the 16 transform positions,
summed over input channels, is 16 GEMMs of (tiles x C) @ (C x CO): 16 multiplies per tile and
channel pair instead of im2col's 36, and the input is expanded 4x instead of 9x. Inside
ResNet-50 (batch 1, 2 cores, between its 1x1 convolutions) the 3x3 layers took, against
im2col + GEMM: 56x56x64 and 28x28x128 about 0.5-0.85x, 14x14x256 0.75x (49 tiles). At 7x7x512
(16 tiles) reading the 16 transformed weight matrices (16/9 of the filter's bytes) costs more
than the multiplies saved: 1.1-1.2x im2col's time even with the transformed filter cached
(in-process A/B, integration/ab_resnet.py): hence TILES_MIN.

Numerics: the transforms only add, subtract and halve, so the error is of the same order as a
direct sum (measured 0.5-1.4x im2col's distance from a float64 result on random data), inside
the convolution bound of tf_backend.numerics. An Inf or NaN anywhere in a patch spreads to the
patch's other outputs through the transforms (Inf - Inf), and a near-overflow input can overflow
in them; so when any output is not finite, `conv3x3` reports it and the caller recomputes the
convolution the direct way.

Transformed filters are kept between calls where filter_cache.py allows it (inference
functions: the filter is a variable read by a program that writes no variables). Inside
ResNet-50 the transform of a 3x3x256x256 filter read cold from memory took about 1 ms per call,
close to the convolution's GEMMs.
"""
import numpy as np
from numba import njit, prange

from kernels.cpu import filter_cache, gemm, jit
from kernels.cpu.scratch import scratch

TILES_MIN = 40                # tiles per call below which the 16 small GEMMs lose to one GEMM
CHANNELS_MIN = 16             # a narrow K or N makes the 16 GEMMs inefficient
CHUNK_BYTES = 16 << 20        # transformed input per chunk of tile rows
PARALLEL_MIN = 1 << 16        # transformed elements; below this the transforms run on one thread


def applies(x, f, g):
    """True when this algorithm is used for Conv2D(x, f) with geometry g (NHWC, float32)."""
    return (x.dtype == np.float32 and f.dtype == np.float32
            and applies_to(x.shape[0], f.shape, g))


def applies_to(n, f_shape, g):
    """applies() from the batch size and the filter's shape (float32 operands)."""
    if f_shape[0] != 3 or f_shape[1] != 3 or g.sh != 1 or g.sw != 1 or g.dh != 1 or g.dw != 1:
        return False
    if f_shape[2] < CHANNELS_MIN or f_shape[3] < CHANNELS_MIN:
        return False
    tiles = n * ((g.oh + 1) // 2) * ((g.ow + 1) // 2)
    return tiles >= TILES_MIN


def _input_transform(x, V, p0, p1, TH, TW, pt, pl):
    """V[16, tiles, C] <- B^T d B for the tiles of tile rows p0..p1 (p = n*TH + th)."""
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    for p in prange(p0, p1):
        n = p // TH
        th = p - n * TH
        d = np.empty((4, 4, C), np.float32)
        for tw in range(TW):
            t = (p - p0) * TW + tw
            for i in range(4):
                ih = 2 * th - pt + i
                for j in range(4):
                    iw = 2 * tw - pl + j
                    row = d[i, j]
                    if 0 <= ih < H and 0 <= iw < W:
                        src = x[n, ih, iw]
                        for c in range(C):
                            row[c] = src[c]
                    else:
                        for c in range(C):
                            row[c] = 0
            for j in range(4):
                for c in range(C):
                    a0, a1, a2, a3 = d[0, j, c], d[1, j, c], d[2, j, c], d[3, j, c]
                    d[0, j, c] = a0 - a2
                    d[1, j, c] = a1 + a2
                    d[2, j, c] = a2 - a1
                    d[3, j, c] = a1 - a3
            for i in range(4):
                v0, v1, v2, v3 = V[4 * i, t], V[4 * i + 1, t], V[4 * i + 2, t], V[4 * i + 3, t]
                for c in range(C):
                    a0, a1, a2, a3 = d[i, 0, c], d[i, 1, c], d[i, 2, c], d[i, 3, c]
                    v0[c] = a0 - a2
                    v1[c] = a1 + a2
                    v2[c] = a2 - a1
                    v3[c] = a1 - a3


def _filter_transform(f, U):
    """U[16, C, CO] <- G g G^T for every (input, output) channel pair."""
    C, CO = f.shape[2], f.shape[3]
    h = np.float32(0.5)
    g = np.empty((4, 3, CO), np.float32)
    for c in range(C):
        for k in range(3):
            for o in range(CO):
                g0, g1, g2 = f[0, k, c, o], f[1, k, c, o], f[2, k, c, o]
                g[0, k, o] = g0
                g[1, k, o] = h * (g0 + g1 + g2)
                g[2, k, o] = h * (g0 - g1 + g2)
                g[3, k, o] = g2
        for i in range(4):
            u0, u1, u2, u3 = U[4 * i, c], U[4 * i + 1, c], U[4 * i + 2, c], U[4 * i + 3, c]
            for o in range(CO):
                g0, g1, g2 = g[i, 0, o], g[i, 1, o], g[i, 2, o]
                u0[o] = g0
                u1[o] = h * (g0 + g1 + g2)
                u2[o] = h * (g0 - g1 + g2)
                u3[o] = g2


def _output_transform(M, out, p0, p1, TH, TW):
    """out <- A^T m A for the tiles of tile rows p0..p1; returns how many tile rows produced a
    non-finite value (x - x is 0 exactly when x is finite)."""
    OH, OW, CO = out.shape[1], out.shape[2], out.shape[3]
    bad = 0
    for p in prange(p0, p1):
        n = p // TH
        th = p - n * TH
        r = np.empty((2, 4, CO), np.float32)
        nonfinite = False
        for tw in range(TW):
            t = (p - p0) * TW + tw
            for j in range(4):
                m0, m1, m2, m3 = M[j, t], M[4 + j, t], M[8 + j, t], M[12 + j, t]
                r0, r1 = r[0, j], r[1, j]
                for o in range(CO):
                    r0[o] = m0[o] + m1[o] + m2[o]
                    r1[o] = m1[o] - m2[o] - m3[o]
            for i in range(2):
                oh = 2 * th + i
                if oh >= OH:
                    continue
                ri = r[i]
                y0 = out[n, oh, 2 * tw]
                for o in range(CO):
                    v = ri[0, o] + ri[1, o] + ri[2, o]
                    y0[o] = v
                    nonfinite |= (v - v) != 0
                if 2 * tw + 1 < OW:
                    y1 = out[n, oh, 2 * tw + 1]
                    for o in range(CO):
                        v = ri[1, o] - ri[2, o] - ri[3, o]
                        y1[o] = v
                        nonfinite |= (v - v) != 0
        if nonfinite:
            bad += 1
    return bad


_in_s = jit.readonly_inputs(njit(cache=True, nogil=True)(_input_transform), ("V",))
_in_p = jit.readonly_inputs(jit.parallel(_input_transform), ("V",))
_out_s = njit(cache=True, nogil=True)(_output_transform)
_out_p = jit.parallel(_output_transform)
_filter = jit.readonly_inputs(njit(cache=True, nogil=True)(_filter_transform), ("U",))


def conv3x3(x, f, out, g, cache=False):
    """out <- Conv2D(x, f) (NHWC float32, 3x3, stride 1, no dilation, `applies`). Returns False
    when an output is not finite: `out` is then partly written and must be recomputed. `cache`:
    the filter may be cached (see the module doc)."""
    N, _, _, C = x.shape
    CO = f.shape[3]
    OH, OW = out.shape[1], out.shape[2]
    TH, TW = (OH + 1) // 2, (OW + 1) // 2
    P = N * TH
    step = max(1, min(P, CHUNK_BYTES // (16 * TW * max(C, CO) * 4)))   # tile rows per chunk
    U = _filter_cached(f) if cache else None
    if U is None:
        U = scratch((16, C, CO), np.float32, "winograd_filter")
        _filter(f, U)
    for p0 in range(0, P, step):
        p1 = min(P, p0 + step)
        T = (p1 - p0) * TW
        V = scratch((16, T, C), np.float32, "winograd_in")
        M = scratch((16, T, CO), np.float32, "winograd_out")
        par = V.size >= PARALLEL_MIN
        (_in_p if par else _in_s)(x, V, p0, p1, TH, TW, g.pt, g.pl)
        gemm.matmul_stacked(V, U, M)
        if (_out_p if par else _out_s)(M, out, p0, p1, TH, TW):
            return False
    return True


def _filter_cached(f):
    """The transformed filter from the cache (computed and stored on a miss), or None when `f`
    is not cacheable."""
    return filter_cache.get(f, "winograd", _transformed, 16 * f.shape[2] * f.shape[3] * 4)


def _transformed(f):
    U = np.empty((16,) + f.shape[2:], np.float32)
    _filter(f, U)
    return U
