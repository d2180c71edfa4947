"""CPU kernels: Conv2D and its backprops as im2col / col2im (numba) around one BLAS GEMM.

All three work in NHWC; NCHW inputs are transposed in and out. Stock TF runs float32 on oneDNN
and float64 (and float32 backprops with explicit padding) on its reference kernels, which accept
less (NHWC only, no dilated backprops); we raise what each raises. Empty float32 inputs and
outputs (stock oneDNN returns odd results), mismatched backprop shapes and grouped convolutions
go back to TensorFlow.
"""
import types

import numpy as np
from numba import get_num_threads, get_thread_id, njit, prange

from kernels import kernel
from kernels.cpu import bf16_gemm, gemm, jit, variants, winograd
from kernels.cpu.gemm import _NO_TRANS, _ROW_MAJOR, _TRANS, _dgemm, _sgemm
from kernels.cpu.scratch import scratch
from shape_fns.host import onednn_runs
from shape_fns import InvalidArgumentError, UnimplementedError, Unsupported
from shape_fns.conv_ops import conv_geometry, label, nhwc_axes, reference_kernel, to_nhwc

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 17        # elements of the im2col buffer; below this one thread is faster
COLS_MAX_BYTES = 32 << 20     # bigger im2col buffers are built and multiplied in chunks
COLS_CHUNK_BYTES = 4 << 20    # forward: chunks this size, each multiplied while still in cache
                              # (ResNet stem, 7.4 MB of patches: 2.0 ms instead of 2.45)


def _im2col(x, cols, q0, q1, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl):
    """cols (rows, KH*KW, C) <- input patches of output image rows q0..q1 (q = n*OH + oh)."""
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    for q in prange(q0, q1):
        n = q // OH
        oh = q - n * OH
        r0 = (q - q0) * OW
        for ow in range(OW):
            for kh in range(KH):
                ih = oh * sh - pt + kh * dh
                for kw in range(KW):
                    iw = ow * sw - pl + kw * dw
                    # a separate destination view per tap keeps the copy loop vectorisable
                    dst = cols[r0 + ow, kh * KW + kw]
                    if 0 <= ih < H and 0 <= iw < W:
                        src = x[n, ih, iw]
                        for c in range(C):
                            dst[c] = src[c]
                    else:
                        for c in range(C):
                            dst[c] = 0


def _im2col_runs(x, cols, q0, q1, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl):
    """_im2col for dw == 1: the KW taps of one kernel row read one contiguous run of KW*C
    input values, copied as one vectorised loop (the ResNet stem's C=3 copies 21 values at a
    time instead of 3: 0.45 ms instead of 1.6 for its 12544 x 147 patches)."""
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    R = KW * C
    x2 = x.reshape(x.shape[0], H, W * C)
    c2 = cols.reshape(cols.shape[0], KH * R)
    for q in prange(q0, q1):
        n = q // OH
        oh = q - n * OH
        for ow in range(OW):
            row = c2[(q - q0) * OW + ow]
            iw0 = ow * sw - pl
            for kh in range(KH):
                ih = oh * sh - pt + kh * dh
                dst = row[kh * R:(kh + 1) * R]
                if 0 <= ih < H and iw0 >= 0 and iw0 + KW <= W:
                    src = x2[n, ih, iw0 * C:iw0 * C + R]
                    for j in range(R):
                        dst[j] = src[j]
                elif 0 <= ih < H:
                    for kw in range(KW):
                        iw = iw0 + kw
                        if 0 <= iw < W:
                            src = x2[n, ih, iw * C:(iw + 1) * C]
                            for c in range(C):
                                dst[kw * C + c] = src[c]
                        else:
                            for c in range(C):
                                dst[kw * C + c] = 0
                else:
                    for j in range(R):
                        dst[j] = 0


def _pixel_grad(d, dcols, r0, ih, iw, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl):
    """d <- the sum of input pixel (ih, iw)'s patch gradients over its taps; dcols (rows,
    KH*KW, C) holds its image's output pixels from row r0."""
    for c in range(d.shape[0]):
        d[c] = 0
    for kh in range(KH):
        th = ih + pt - kh * dh
        if th < 0 or th % sh != 0 or th // sh >= OH:
            continue
        oh = th // sh
        for kw in range(KW):
            tw = iw + pl - kw * dw
            if tw < 0 or tw % sw != 0 or tw // sw >= OW:
                continue
            src = dcols[r0 + oh * OW + tw // sw, kh * KW + kw]
            for c in range(d.shape[0]):
                d[c] += src[c]


_pixel_grad_j = njit(cache=True, nogil=True, inline="always")(_pixel_grad)


def _col2im(dcols, dx, n0, n1, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl):
    """dx[n0:n1] <- sum of the patch gradients in dcols (rows, KH*KW, C) over each pixel's taps."""
    H, W = dx.shape[1], dx.shape[2]
    for p in prange((n1 - n0) * H):
        nl = p // H
        ih = p - nl * H
        for iw in range(W):
            _pixel_grad_j(dx[n0 + nl, ih, iw], dcols, nl * OH * OW, ih, iw, OH, OW, KH, KW,
                          sh, sw, dh, dw, pt, pl)


def _backprop_input_blocks(dcols_all, dx, pdy, pw, N, G, OH, OW, KH, KW, sh, sw, dh, dw, pt,
                           pl, CO, double):
    """dx <- col2im(dy @ w^T) in blocks of G whole images: a block's patch gradients go into
    its thread's dcols (rows, KH*KW, C) (one BLAS call) and are summed into its own images'
    pixels there."""
    H, W, C = dx.shape[1], dx.shape[2], dx.shape[3]
    K = KH * KW * C
    it = 8 if double else 4
    for b in prange((N + G - 1) // G):
        dcols = dcols_all[get_thread_id()]
        n0 = b * G
        n1 = min(N, n0 + G)
        m = (n1 - n0) * OH * OW
        if double:
            _dgemm(_ROW_MAJOR, _NO_TRANS, _TRANS, m, K, CO, 1.0, pdy + n0 * OH * OW * CO * it,
                   CO, pw, CO, 0.0, dcols.ctypes.data, K)
        else:
            _sgemm(_ROW_MAJOR, _NO_TRANS, _TRANS, m, K, CO, np.float32(1.0),
                   pdy + n0 * OH * OW * CO * it, CO, pw, CO, np.float32(0.0),
                   dcols.ctypes.data, K)
        for n in range(n0, n1):
            for ih in range(H):
                for iw in range(W):
                    _pixel_grad_j(dx[n, ih, iw], dcols, (n - n0) * OH * OW, ih, iw, OH, OW,
                                  KH, KW, sh, sw, dh, dw, pt, pl)


_backprop_input_blocks_p = jit.parallel(_backprop_input_blocks)
BLOCK_BYTES = 256 << 10      # a thread's block of patch gradients: in its L2 for col2im
BLOCK_MIN_K = 32             # patch lengths below this keep the chunked path
BLOCK_MIN_ROWS = 100         # pixels per block below which one product over the chunk wins
BLOCKS_ENABLED = True        # False: the chunked path (A/B runs, tests)


def _backprop_input_by_blocks(f, dy, dx, g):
    """backprop_input_nhwc by _backprop_input_blocks; False where it does not apply: one
    image's patch gradients larger than 4 blocks, or blocks of fewer than BLOCK_MIN_ROWS
    pixels (AMD EPYC, against the chunked path: a Keras MNIST CNN's 128x13x13x32 gradient
    0.67x, 64x12x12x64 0.79x, 64x16x16x128 with a 1x3 filter 0.81x; 7x7 images with 128 or
    512 channels 1.16-1.23x, BLAS being slow on 49-row products)."""
    N, H, W, C = dx.shape
    KH, KW, _, CO = f.shape
    OH, OW = dy.shape[1], dy.shape[2]
    K = KH * KW * C
    per = OH * OW * K * dx.itemsize
    # below PARALLEL_MIN patch-gradient elements one thread's chunked path is as fast
    if not (BLOCKS_ENABLED and K >= BLOCK_MIN_K and N * OH * OW * K >= PARALLEL_MIN
            and per <= 4 * BLOCK_BYTES and dy.dtype == f.dtype == dx.dtype
            and dx.dtype in (np.float32, np.float64) and f.flags.c_contiguous
            and dx.flags.c_contiguous and gemm.available()):
        return False
    dy = np.ascontiguousarray(dy)
    G = max(1, BLOCK_BYTES // per)
    if G * OH * OW < BLOCK_MIN_ROWS:
        return False
    T = get_num_threads()
    dcols = scratch((T, G * OH * OW, KH * KW, C), dx.dtype, "block_cols")
    gemm.single_thread_enter()
    try:
        _backprop_input_blocks_p(dcols, dx, dy.ctypes.data, f.ctypes.data, N, G, OH, OW,
                                 *_geom_args(g), CO, dx.dtype == np.float64)
    finally:
        gemm.single_thread_exit()
    return True


_im2col_s = njit(cache=True, nogil=True)(_im2col)
_im2col_p = jit.parallel(_im2col)
_runs_s = jit.readonly_inputs(njit(cache=True, nogil=True)(_im2col_runs), ("cols",))
_runs_p = jit.readonly_inputs(jit.parallel(_im2col_runs), ("cols",))
_col2im_s = njit(cache=True, nogil=True)(_col2im)
_col2im_p = jit.parallel(_col2im)


def _readonly(a):
    """`a` as a read-only view: the patch builders then see one array type whether the input is
    TensorFlow's memory (read-only to us) or our own buffer, and numba compiles them once
    (each parallel specialisation is ~1.8 s of a first run's compiles)."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _im2col_fn(g, size):
    if g.dw == 1:
        return _runs_p if size >= PARALLEL_MIN else _runs_s
    return _im2col_p if size >= PARALLEL_MIN else _im2col_s


def _geom_args(g):
    return g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl


def _pointwise(g):
    """A 1x1 window with no padding: the convolution is a GEMM over (strided) pixels."""
    return g.kh == 1 and g.kw == 1 and not (g.pt or g.pb or g.pl or g.pr)


def _check_padded(a, g, first):
    """After the fact: go back to TensorFlow when `a` holds an Inf/NaN and there is padding.

    oneDNN skips padded taps; im2col multiplies them by 0, which turns an Inf/NaN in the other
    operand (filter, or out_backprop for the filter gradient) into NaN. Every result element
    sums over all taps, so a non-finite value in `a` shows in `first` (the first output pixel,
    or the first filter-gradient row): only then is `a` itself scanned (a 512x512x3x3 filter
    costs 0.4 ms to sum, for every call). Raising after writing is safe: the fallback computes
    a fresh output and this one is dropped."""
    if g.pt or g.pb or g.pl or g.pr:
        with np.errstate(all="ignore"):
            if np.isfinite(first).all():
                return
            total = a.sum()
        if not np.isfinite(total):
            raise Unsupported("nonfinite_with_padding")


DIRECT_MIN_PIXELS = 256   # output pixels below which packing the filter per call costs too much


def _direct(x):
    """Whether bf16_gemm's float32 tiles run this convolution's kind: float32 on AVX-512F
    (the sums in oneDNN's order: taps, then channels, one FMA each)."""
    return x.dtype == np.float32 and bf16_gemm.runs_f32()


def _tiles_apply(x, f, out, g):
    """Whether the float32 tiles can run this NHWC convolution (a 1x1 one is a BLAS product)."""
    return (_direct(x) and not _pointwise(g) and out.flags.c_contiguous
            and out.shape[0] * out.shape[1] * out.shape[2] >= DIRECT_MIN_PIXELS
            and bf16_gemm.conv_eligible(x.shape, f.shape, g, 1))


# Winograd against the float32 tiles (AMD EPYC Zen 5, 2 threads, OpenBLAS on its own kernels):
# it wins on layers of >= 64 channels whose input stays in cache (1x56x56x64 0.43 vs 0.53 ms,
# 1x28x28x128 0.40 vs 0.56) and with kept transforms of deep ones (1x14x14x256 0.37 vs 0.51);
# the tiles win on fewer channels (32x13x13x16 -> 32 VALID 0.11 vs 0.19, 8x28x28x32 0.29 vs
# 0.34) and on bigger inputs (8x56x56x64 4.4 vs 5.2-5.3, 128x13x13x32 -> 64 1.4 vs 2.2-2.4).
WINOGRAD_MIN_CHANNELS = 64
WINOGRAD_OVER_DIRECT_BYTES = 1 << 20
WINOGRAD_KEPT_MIN_CHANNELS = 128


def _winograd_first(x, f, g, tiles, filter_is_variable):
    """Winograd where the float32 tiles do not run, else where it measured faster (above)."""
    if not winograd.applies(x, f, g):
        return False
    c = x.shape[3]
    return (not tiles or (c >= WINOGRAD_MIN_CHANNELS and x.nbytes <= WINOGRAD_OVER_DIRECT_BYTES)
            or (filter_is_variable and c >= WINOGRAD_KEPT_MIN_CHANNELS))


# Without AVX-512F (8-lane FMA: the tiles' 24 accumulators spill) the rule above does not hold,
# and a float32 convolution's kernel is chosen by measurement per shape (variants.py) among
# those that run it: im2col + BLAS, Winograd where it applies, and the tiles for few input
# channels (a network's first layer). AMD EPYC Zen 3 (AVX2), 2 threads, ms: the Keras MNIST
# CNN's 128x28x28x1 -> 32 VALID forward: tiles 1.27, im2col 2.1-2.7 (stock 4.7); its filter
# gradient: tiles 0.92, per-image sums 4.0 (stock 5.9); its 128x13x13x32 -> 64 forward:
# im2col 5.4, Winograd 6.0, tiles 9.5 (stock 5.0): with more channels the tiles lose, and are
# not measured (their compile is not spent on layers they would not win).
def _measured_here(x):
    return x.dtype == np.float32 and not _direct(x)


def measured_name(family, x_shape, f_shape, g):
    """The variants.py name of a measured choice (tests force one under it)."""
    return variants.name(family, (tuple(x_shape), tuple(f_shape), g.sh, g.sw, g.dh, g.dw,
                                  g.pt, g.pb, g.pl, g.pr))


class _Scratch:
    """One output buffer for the candidates' measured runs, made on first use (a choice known
    from the table measures nothing)."""

    def __init__(self, like):
        self.like, self.a = like, None

    def __call__(self):
        if self.a is None:
            self.a = np.empty_like(self.like)
        return self.a


def _forward_measured(x, f, out, g, keep):
    """The forward kernel measured for this shape ("tiles", "winograd" or "im2col"), or None
    where the rule decides (AVX-512F, float64, a 1x1 product)."""
    if not _measured_here(x) or _pointwise(g):
        return None
    wino = winograd.applies(x, f, g)
    tiles = (x.shape[3] <= FEW_CHANNELS and out.flags.c_contiguous
             and out.shape[0] * out.shape[1] * out.shape[2] >= DIRECT_MIN_PIXELS
             and bf16_gemm.conv_eligible(x.shape, f.shape, g, 1))
    if not (wino or tiles):
        return "im2col"
    name = measured_name("conv_f32_forward", x.shape, f.shape, g)
    got = variants.chosen(name)
    if got is not None:   # (every call after the first: no candidates built)
        return got
    s = _Scratch(out)
    cands = {}   # the rule's order: the first wins a tie
    if wino:
        cands["winograd"] = lambda: (winograd.conv3x3(x, f, s(), g, keep)
                                     or _im2col_forward(x, f, s(), g, keep))
    cands["im2col"] = lambda: _im2col_forward(x, f, s(), g, keep)
    if tiles:
        cands["tiles"] = lambda: (bf16_gemm.conv2d_into(s(), x, f, g, keep=keep)
                                  or _im2col_forward(x, f, s(), g, keep))
    with np.errstate(all="ignore"):
        return variants.choose_named(name, cands)


def conv_bias_relu(inputs, bias, out, attrs):
    """out = Relu(Conv2D(inputs) + bias) for float32 NHWC in one pass, the epilogue applied in
    the tiles' registers (the same float32 values as the three ops in turn); False where
    conv_nhwc would take another path, or the geometry is not one it runs (the caller runs the
    ops in turn, and their kernels raise stock's errors)."""
    x, f = inputs
    if (x.ndim != 4 or f.ndim != 4 or x.dtype != np.float32 or f.dtype != np.float32
            or bias.dtype != np.float32 or bias.shape != (f.shape[-1],)
            or (not _direct(x) and x.shape[3] > FEW_CHANNELS)):
        return False
    try:
        fmt, _, g = _geometry(x.shape, f.shape, attrs, "Conv2D", x.dtype)
    except Exception:  # noqa: BLE001 - the Conv2D kernel raises stock's error
        return False
    if fmt != "NHWC" or out.shape != (x.shape[0], g.oh, g.ow, f.shape[3]):
        return False
    keep = attrs.get("_filter_is_variable", False)
    if not _direct(x):
        if _forward_measured(x, f, out, g, keep) != "tiles":
            return False
    else:
        tiles = _tiles_apply(x, f, out, g)
        if not tiles or _winograd_first(x, f, g, tiles, keep):
            return False
    with np.errstate(all="ignore"):
        return bf16_gemm.conv2d_into(out, x, f, g, bias=bias, relu=True, keep=keep)


def conv_nhwc(x, f, out, g, filter_is_variable=False):
    if _pointwise(g):
        C, CO = f.shape[2], f.shape[3]
        xs = x if g.sh == g.sw == 1 else np.ascontiguousarray(x[:, ::g.sh, ::g.sw])
        gemm.matmul(xs.reshape(-1, C), f.reshape(C, CO), out.reshape(-1, CO),
                    filter_is_variable)
        return
    run = _forward_measured(x, f, out, g, filter_is_variable)
    if run is None:   # the rule: AVX-512F's tiles, Winograd where it measured faster
        tiles = _tiles_apply(x, f, out, g)
        wino = _winograd_first(x, f, g, tiles, filter_is_variable)
    else:
        tiles, wino = run == "tiles", run == "winograd"
    if wino and winograd.conv3x3(x, f, out, g, filter_is_variable):
        return   # (a non-finite result is recomputed below, the direct way)
    if tiles and bf16_gemm.conv2d_into(out, x, f, g, keep=filter_is_variable):
        return   # FMA tiles over the taps
    _im2col_forward(x, f, out, g, filter_is_variable)


def _im2col_forward(x, f, out, g, filter_is_variable):
    N, H, W, C = x.shape
    KH, KW, _, CO = f.shape
    OH, OW = out.shape[1], out.shape[2]
    K = KH * KW * C
    w2 = f.reshape(K, CO)
    o2 = out.reshape(N * OH * OW, CO)
    step = max(1, COLS_CHUNK_BYTES // (OW * K * x.itemsize))   # image rows per chunk
    Q = N * OH
    step = min(step, Q)
    cols = scratch((step * OW, K), x.dtype, "cols")
    cols3 = cols.reshape(step * OW, KH * KW, C)
    im2col, xr = _im2col_fn(g, cols.size), _readonly(x)
    for q0 in range(0, Q, step):
        q1 = min(Q, q0 + step)
        m = (q1 - q0) * OW
        im2col(xr, cols3, q0, q1, OH, OW, *_geom_args(g))
        gemm.matmul(cols[:m], w2, o2[q0 * OW:q1 * OW], filter_is_variable)


WINOGRAD_BACKPROP_MIN_SIDE = 14


def _backprop_input_winograd(f, dy, dx, g):
    """dx by Winograd where it applies: for stride 1, the input gradient is the forward
    convolution of dy with the filter turned 180 degrees and its channels swapped, padded by
    KH-1-pt on top and KW-1-pl on the left (2.25x fewer multiplies than im2col's products, no
    col2im scatter). On AMD EPYC, against im2col: 8x56x56x64 and 4x28x28x128 gradients 0.57x,
    a Keras MNIST CNN's 128x13x13x32 1.06x (odd sides waste a sixth of the 2x2 tiles): hence
    WINOGRAD_BACKPROP_MIN_SIDE. False when it does not apply or an output is not finite (dx
    then partly written: the caller recomputes it)."""
    pt, pl = f.shape[0] - 1 - g.pt, f.shape[1] - 1 - g.pl
    if (g.sh != 1 or g.sw != 1 or g.dh != 1 or g.dw != 1 or pt < 0 or pl < 0
            or min(dx.shape[1], dx.shape[2]) < WINOGRAD_BACKPROP_MIN_SIDE):
        return False
    gb = types.SimpleNamespace(sh=1, sw=1, dh=1, dw=1, pt=pt, pl=pl, oh=dx.shape[1],
                               ow=dx.shape[2])
    fb = np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2))
    return winograd.applies(dy, fb, gb) and winograd.conv3x3(dy, fb, dx, gb)


def backprop_input_nhwc(f, dy, dx, g):
    N, H, W, C = dx.shape
    KH, KW, _, CO = f.shape
    OH, OW = dy.shape[1], dy.shape[2]
    if _direct(dx) and dx.flags.c_contiguous and (bf16_gemm.backprop_input_valid_into(dx, f, dy, g)
                                                   or bf16_gemm.backprop_input_into(dx, f, dy, g)):
        return
    if _backprop_input_winograd(f, dy, dx, g):
        return
    K = KH * KW * C
    wt = f.reshape(K, CO).T
    dy2 = dy.reshape(N * OH * OW, CO)
    if _pointwise(g) and g.sh == g.sw == 1:
        gemm.matmul(dy2, wt, dx.reshape(-1, C))
        return
    if _backprop_input_by_blocks(f, dy, dx, g):
        return
    per = OH * OW * K * dx.itemsize
    step = min(N, max(1, COLS_MAX_BYTES // max(per, 1)))   # images per chunk
    dcols = scratch((step * OH * OW, K), dx.dtype, "cols")
    col2im = _col2im_p if dcols.size >= PARALLEL_MIN else _col2im_s
    for n0 in range(0, N, step):
        n1 = min(N, n0 + step)
        m = (n1 - n0) * OH * OW
        gemm.matmul(dy2[n0 * OH * OW:n1 * OH * OW], wt, dcols[:m])
        col2im(dcols.reshape(-1, KH * KW, C), dx, n0, n1, OH, OW, *_geom_args(g))


def _filter_grad_few(x, dy, part, KH, KW, sh, sw, dh, dw, pt, pl):
    """part[n] = image n's filter gradient, summed over its output pixels in float32 (a
    window's taps outside the image skipped, as stock's kernels skip them): vectorised over the
    output channels, the filter gradient small enough to stay in L1."""
    N, H, W, C = x.shape
    OH, OW = dy.shape[1], dy.shape[2]
    for n in prange(N):
        acc = part[n]
        acc[...] = 0
        for oh in range(OH):
            for kh in range(KH):
                ih = oh * sh + kh * dh - pt
                if ih < 0 or ih >= H:
                    continue
                for ow in range(OW):
                    g = dy[n, oh, ow]
                    for kw in range(KW):
                        iw = ow * sw + kw * dw - pl
                        if iw < 0 or iw >= W:
                            continue
                        src = x[n, ih, iw]
                        for c in range(C):
                            v = src[c]
                            a = acc[kh, kw, c]
                            for o in range(a.shape[0]):
                                a[o] += v * g[o]


_FEW = tuple(jit.readonly_inputs(d, ("part",)) for d in (
    njit(cache=True, nogil=True, error_model="numpy")(_filter_grad_few),
    jit.parallel(_filter_grad_few, error_model="numpy")))
FEW_MAX = 4096   # filter gradient elements (16 KiB of float32) for _filter_grad_few
FEW_CHANNELS = 4  # input channels up to which it runs (a network's first layer: gray, RGB(A))
FEW_TILES_MIN_PIXELS = 4096   # output pixels from which the float32 tiles run it (AMD EPYC Zen 5:
                              # 128x28x28x1 -> 32: 0.21 vs 1.29 ms; 4x9x9x2 -> 70: 0.046 vs 0.023)


def backprop_filter_nhwc(x, dy, df, g):
    N, H, W, C = x.shape
    KH, KW, _, CO = df.shape
    OH, OW = dy.shape[1], dy.shape[2]
    if (C <= FEW_CHANNELS and N * OH * OW >= FEW_TILES_MIN_PIXELS
            and (_direct(x) or _few_filter_grad_measured(x, dy, df, g) == "tiles")
            and bf16_gemm.backprop_filter_few_into(df, x, dy, g)):
        return   # a first layer on the float32 tiles: rows (kw, c), the pixels reduced
    _filter_grad_own(x, dy, df, g)


def _few_filter_grad_measured(x, dy, df, g):
    """Without AVX-512F, a first layer's filter gradient measured for this shape: "tiles"
    (bf16_gemm's few-row kernel) or "own" (what follows in backprop_filter_nhwc)."""
    if (not _measured_here(x) or g.sh != 1 or g.sw != 1 or g.dw != 1 or df.shape[3] < 16
            or df.shape[1] * df.shape[2] > bf16_gemm.FEW_ROWS_MAX):
        return "own"   # (where the tiles' kernel declines)
    name = measured_name("conv_f32_few_filter_grad", x.shape, df.shape, g)
    got = variants.chosen(name)
    if got is not None:
        return got
    s = _Scratch(df)
    with np.errstate(all="ignore"):
        return variants.choose_named(name, {
            "own": lambda: _filter_grad_own(x, dy, s(), g),
            "tiles": lambda: (bf16_gemm.backprop_filter_few_into(s(), x, dy, g)
                              or _filter_grad_own(x, dy, s(), g))})


def _filter_grad_own(x, dy, df, g):
    N, H, W, C = x.shape
    KH, KW, _, CO = df.shape
    OH, OW = dy.shape[1], dy.shape[2]
    K = KH * KW * C
    if C <= FEW_CHANNELS and K * CO <= FEW_MAX and x.dtype == np.float32 and N:
        # a first layer: im2col's columns would be K wide, its GEMM a thin reduction over every
        # pixel; per-image sums in L1, added in image order (the bits do not depend on threads)
        part = scratch((N, KH, KW, C, CO), np.float32, "few")
        _FEW[1 if N > 1 else 0](x, dy, part, KH, KW, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl)
        np.sum(part, axis=0, out=df)
        return
    if not _pointwise(g) and _direct(x) and _filter_grad_tiles(x, dy, df, g):
        return
    df2 = df.reshape(K, CO)
    dy2 = dy.reshape(N * OH * OW, CO)
    if _pointwise(g):
        xs = x if g.sh == g.sw == 1 else np.ascontiguousarray(x[:, ::g.sh, ::g.sw])
        gemm.matmul(xs.reshape(-1, C).T, dy2, df2)
        return
    Q = N * OH
    step = min(Q, max(1, COLS_MAX_BYTES // (OW * K * x.itemsize)))
    cols = scratch((step * OW, K), x.dtype, "cols")
    cols3 = cols.reshape(step * OW, KH * KW, C)
    im2col, xr = _im2col_fn(g, cols.size), _readonly(x)
    filter_grad_chunks(cols, dy2, df2, Q, step, OW,
                       lambda q0, q1: im2col(xr, cols3, q0, q1, OH, OW, *_geom_args(g)))


def _filter_grad_tiles(x, dy, df, g):
    """A float32 filter gradient on the tiles: the input channels first (backprop_filter_into)
    or the NHWC input read in place (backprop_filter_few_into's kernel for any channels), by
    measurement per shape (kernels/cpu/variants.py). AMD EPYC Zen 5, 2 threads, one run each,
    ms, channels first / NHWC: 128x28x28x32 -> 64 VALID 18.0 / 8.3, 128x28x28x64 SAME 33.5 /
    23.3, 128x13x13x32 -> 64 VALID 1.60 / 1.45, 8x28x28x32 -> 64 VALID 0.69 / 0.99, 8x28x28x64
    SAME 1.20 / 2.41: neither wins everywhere. False where neither runs."""
    padded = g.pt or g.pb or g.pl or g.pr
    if (x.dtype != np.float32 or g.sh != 1 or g.sw != 1 or g.dw != 1 or df.shape[3] < 16
            or df.shape[2] < 8 or not df.size or not dy.size or not VARIANTS
            or (padded and bf16_gemm._nonfinite(dy))):   # (checked once: dy_finite below)
        return bf16_gemm.backprop_filter_into(df, x, dy, g)
    scratch_df = np.empty_like(df)
    run = variants.choose("conv_filter_grad_f32",
                          (x.shape, df.shape, g.pt, g.pb, g.pl, g.pr, g.dh),
                          {"channels_first": lambda: bf16_gemm.backprop_filter_into(
                              scratch_df, x, dy, g),
                           "nhwc": lambda: bf16_gemm.backprop_filter_few_into(
                               scratch_df, x, dy, g, any_rows=True, dy_finite=True)})
    if run == "nhwc" and bf16_gemm.backprop_filter_few_into(df, x, dy, g, any_rows=True,
                                                            dy_finite=True):
        return True
    return bf16_gemm.backprop_filter_into(df, x, dy, g)


VARIANTS = True   # False: the channels-first filter gradient only (A/B runs, tests)


def filter_grad_chunks(cols, dy2, df2, Q, step, OW, fill):
    """df2 = sum over chunks of cols^T @ dy2 rows: `fill(q0, q1)` writes the patches of output
    rows q0..q1 (OW pixels each) into cols; the first chunk writes df2, the rest add to it."""
    part = None
    for q0 in range(0, Q, step):
        q1 = min(Q, q0 + step)
        m = (q1 - q0) * OW
        fill(q0, q1)
        if q0 == 0:
            gemm.matmul(cols[:m].T, dy2[:m], df2)
        else:
            part = np.empty_like(df2) if part is None else part
            gemm.matmul(cols[:m].T, dy2[q0 * OW:q1 * OW], part)
            df2 += part


def nhwc_in(a, fmt):
    return a if fmt != "NCHW" else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def nhwc_out(out, fmt):
    """(array to compute into, finish()) for an output in the op's data format."""
    if fmt != "NCHW":
        return out, lambda: None
    n, c, h, w = out.shape
    tmp = np.empty((n, h, w, c), out.dtype)
    return tmp, lambda: np.copyto(out, tmp.transpose(0, 3, 1, 2))


def _expect_dy(dy_nhwc, want):
    if tuple(dy_nhwc) != tuple(want):
        # stock (oneDNN) raises AbortedError for this, a class we do not have: let TF raise it
        raise Unsupported("out_backprop_shape_mismatch")


_GEOMETRY = {}   # checked geometry of the shapes and attrs seen (programs call with the same)


def _tuple(v):
    return None if v is None else tuple(v)


def _geometry_key(x_shape, f_shape, attrs, op, dtype):
    """What a convolution's checked geometry depends on (shapes, window attrs, dtype and
    whether stock runs it on oneDNN)."""
    return (tuple(x_shape), tuple(f_shape), op, dtype, onednn_runs(dtype),
            attrs.get("data_format"), attrs.get("padding"), _tuple(attrs.get("strides")),
            _tuple(attrs.get("dilations")), _tuple(attrs.get("explicit_paddings")))


def kept_geometry(x_shape, f_shape, attrs, op, dtype, check):
    """check(x_shape, f_shape, attrs, op, dtype): a convolution's geometry, checked as stock
    checks it, kept per shapes, attrs and dtype (working it out again took ~15 us of a pointwise
    convolution's ~40 us: NASNet's 1x1 convolutions); errors are raised every time."""
    key = _geometry_key(x_shape, f_shape, attrs, op, dtype)
    got = _GEOMETRY.get(key)
    if got is None:
        got = check(x_shape, f_shape, attrs, op, dtype)
        if len(_GEOMETRY) >= 4096:
            _GEOMETRY.clear()
        _GEOMETRY[key] = got
    return got


def _geometry(x_shape, f_shape, attrs, op, dtype):
    """(data format, input shape in NHWC, Window) of a convolution."""
    return kept_geometry(x_shape, f_shape, attrs, op, dtype, _geometry_checked)


def _geometry_checked(x_shape, f_shape, attrs, op, dtype):
    fmt = attrs.get("data_format", "NHWC")
    nhwc_axes(fmt)
    xs = to_nhwc(x_shape, fmt)
    g, cout, groups = conv_geometry(xs, f_shape, attrs, op, dtype)
    if groups != 1:
        raise Unsupported("grouped_conv")
    # stock runs float64, float32 without oneDNN (host.onednn_runs: an AVX2-only CPU), and
    # float32 backprops with explicit padding, on TF's reference kernels
    if dtype == np.float64 or reference_kernel(op, dtype, attrs):
        if fmt == "NCHW":
            if op == "Conv2D":
                raise UnimplementedError(
                    "The Conv2D op currently only supports the NHWC tensor format on the CPU. "
                    "The op was given the format: NCHW")
            raise InvalidArgumentError(f"{label(op, dtype, attrs)}Op only supports NHWC.")
        if op != "Conv2D" and (g.dh > 1 or g.dw > 1):
            raise InvalidArgumentError(
                "Current CPU implementations do not yet support dilation rates larger than 1.")
    return fmt, xs, g


def _empty(arrays, out):
    """True when there is nothing to compute; float32 empties go back to TF (oneDNN quirks)."""
    if out.size and all(a.size for a in arrays):
        return False
    if onednn_runs(out.dtype):
        raise Unsupported("empty_conv")   # e.g. stock float32 Conv2D returns its input here
    out[...] = 0
    return True


@kernel("Conv2D", dtypes=FLOATS)
def conv2d(inputs, outputs, attrs):
    x, f = inputs
    out = outputs[0]
    fmt, xs, g = _geometry(x.shape, f.shape, attrs, "Conv2D", x.dtype)
    if _empty((x,), out):
        return
    dst, finish = nhwc_out(out, fmt)
    with np.errstate(all="ignore"):
        conv_nhwc(nhwc_in(x, fmt), f, dst, g, attrs.get("_filter_is_variable", False))
    _check_padded(f, g, dst.reshape(-1, dst.shape[-1])[0])
    finish()


@kernel("Conv2DBackpropInput", dtypes=FLOATS)
def conv2d_backprop_input(inputs, outputs, attrs):
    _, f, dy = inputs
    dx = outputs[0]
    if dx.ndim != 4:
        raise InvalidArgumentError(f"input_sizes must be 4-dimensional, got: {dx.ndim}")
    fmt, xs, g = _geometry(dx.shape, f.shape, attrs, "Conv2DBackpropInput", dx.dtype)
    _expect_dy(to_nhwc(dy.shape, fmt), (xs[0], g.oh, g.ow, f.shape[3]))
    if _empty((dy,), dx):
        return
    dst, finish = nhwc_out(dx, fmt)
    with np.errstate(all="ignore"):
        backprop_input_nhwc(f, nhwc_in(dy, fmt), dst, g)
    finish()


@kernel("Conv2DBackpropFilter", dtypes=FLOATS)
def conv2d_backprop_filter(inputs, outputs, attrs):
    x, _, dy = inputs
    df = outputs[0]
    fmt, xs, g = _geometry(x.shape, df.shape, attrs, "Conv2DBackpropFilter", x.dtype)
    _expect_dy(to_nhwc(dy.shape, fmt), (xs[0], g.oh, g.ow, df.shape[3]))
    if _empty((x, dy), df):
        return
    with np.errstate(all="ignore"):
        backprop_filter_nhwc(nhwc_in(x, fmt), nhwc_in(dy, fmt), df, g)
    _check_padded(dy, g, df.reshape(-1, df.shape[-1])[0])
