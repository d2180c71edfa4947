"""CPU kernels: Conv3D and its V2 backprops (NDHWC) as im2col / col2im (numba) around gemm.py's
products, as conv_ops.py does for Conv2D. The shape fns (shape_fns/conv_ops.py window3) send
NCDHW, dilations, grouped or empty filters and bad shapes back to TensorFlow."""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import gemm, jit
from kernels.cpu.conv_ops import filter_grad_chunks
from kernels.cpu.scratch import scratch
from shape_fns.conv_ops import window3

FLOATS = (np.float32, np.float64)
PARALLEL_MIN = 1 << 17
COLS_MAX_BYTES = 32 << 20


def _im2col3(x, cols, q0, q1, OD, OH, OW, KD, KH, KW, sd, sh, sw, pf, pt, pl):
    """cols (rows, KD*KH*KW, C) <- patches of output rows q0..q1 (q = (n*OD + od)*OH + oh)."""
    D, H, W, C = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    for q in prange(q0, q1):
        n = q // (OD * OH)
        r = q - n * OD * OH
        od = r // OH
        oh = r - od * OH
        base = (q - q0) * OW
        for ow in range(OW):
            for kd in range(KD):
                i_d = od * sd - pf + kd
                for kh in range(KH):
                    ih = oh * sh - pt + kh
                    for kw in range(KW):
                        iw = ow * sw - pl + kw
                        dst = cols[base + ow, (kd * KH + kh) * KW + kw]
                        if 0 <= i_d < D and 0 <= ih < H and 0 <= iw < W:
                            src = x[n, i_d, ih, iw]
                            for c in range(C):
                                dst[c] = src[c]
                        else:
                            for c in range(C):
                                dst[c] = 0


def _col2im3(dcols, dx, n0, n1, OD, OH, OW, KD, KH, KW, sd, sh, sw, pf, pt, pl):
    """dx[n0:n1] <- each voxel's sum of its patch gradients in dcols (rows, KD*KH*KW, C)."""
    D, H, W, C = dx.shape[1], dx.shape[2], dx.shape[3], dx.shape[4]
    for p in prange((n1 - n0) * D * H):
        nl = p // (D * H)
        r = p - nl * D * H
        i_d = r // H
        ih = r - i_d * H
        for iw in range(W):
            d = dx[n0 + nl, i_d, ih, iw]
            for c in range(C):
                d[c] = 0
            for kd in range(KD):
                td = i_d + pf - kd
                if td < 0 or td % sd != 0 or td // sd >= OD:
                    continue
                for kh in range(KH):
                    th = ih + pt - kh
                    if th < 0 or th % sh != 0 or th // sh >= OH:
                        continue
                    for kw in range(KW):
                        tw = iw + pl - kw
                        if tw < 0 or tw % sw != 0 or tw // sw >= OW:
                            continue
                        row = ((nl * OD + td // sd) * OH + th // sh) * OW + tw // sw
                        src = dcols[row, (kd * KH + kh) * KW + kw]
                        for c in range(C):
                            d[c] += src[c]


_im2col_s = njit(cache=True, nogil=True)(_im2col3)
_im2col_p = jit.parallel(_im2col3)
_col2im_s = njit(cache=True, nogil=True)(_col2im3)
_col2im_p = jit.parallel(_col2im3)


def _args(g):
    return (*g.o, *g.k, *g.s, *g.p)


def _pointwise(g):
    return g.k == [1, 1, 1] and g.p == [0, 0, 0]


def _pixels(x, g):
    """A pointwise convolution's input pixels (strided), as (pixels, C)."""
    sd, sh, sw = g.s
    xs = x if g.s == [1, 1, 1] else np.ascontiguousarray(x[:, ::sd, ::sh, ::sw])
    return xs.reshape(-1, x.shape[4])


def _patches(x, K, g):
    """(Q output rows, rows per chunk, OW, cols buffer, fill(q0, q1)) for im2col in chunks."""
    OD, OH, OW = g.o
    Q = x.shape[0] * OD * OH
    step = min(Q, max(1, COLS_MAX_BYTES // (OW * K * x.itemsize)))
    cols = scratch((step * OW, K), x.dtype, "cols")
    cols3 = cols.reshape(step * OW, -1, x.shape[4])
    im2col = _im2col_p if cols.size >= PARALLEL_MIN else _im2col_s
    return Q, step, OW, cols, lambda q0, q1: im2col(x, cols3, q0, q1, *_args(g))


def forward(x, f, out, g):
    K, CO = int(np.prod(g.k)) * x.shape[4], f.shape[4]
    w2 = f.reshape(K, CO)
    o2 = out.reshape(-1, CO)
    if _pointwise(g):
        gemm.matmul(_pixels(x, g), w2, o2)
        return
    Q, step, OW, cols, fill = _patches(x, K, g)
    for q0 in range(0, Q, step):
        q1 = min(Q, q0 + step)
        fill(q0, q1)
        gemm.matmul(cols[:(q1 - q0) * OW], w2, o2[q0 * OW:q1 * OW])


def backprop_input(f, dy, dx, g):
    N, C = dx.shape[0], dx.shape[4]
    K, CO = int(np.prod(g.k)) * C, f.shape[4]
    wt = f.reshape(K, CO).T
    dy2 = dy.reshape(-1, CO)
    if _pointwise(g) and g.s == [1, 1, 1]:
        gemm.matmul(dy2, wt, dx.reshape(-1, C))
        return
    per = int(np.prod(g.o)) * K * dx.itemsize
    step = min(N, max(1, COLS_MAX_BYTES // max(per, 1)))
    dcols = scratch((step * int(np.prod(g.o)), K), dx.dtype, "cols")
    col2im = _col2im_p if dcols.size >= PARALLEL_MIN else _col2im_s
    rows = int(np.prod(g.o))
    for n0 in range(0, N, step):
        n1 = min(N, n0 + step)
        m = (n1 - n0) * rows
        gemm.matmul(dy2[n0 * rows:n1 * rows], wt, dcols[:m])
        col2im(dcols.reshape(-1, int(np.prod(g.k)), C), dx, n0, n1, *_args(g))


def backprop_filter(x, dy, df, g):
    K, CO = int(np.prod(g.k)) * x.shape[4], df.shape[4]
    df2 = df.reshape(K, CO)
    dy2 = dy.reshape(-1, CO)
    if _pointwise(g):
        gemm.matmul(_pixels(x, g).T, dy2, df2)
        return
    Q, step, OW, cols, fill = _patches(x, K, g)
    filter_grad_chunks(cols, dy2, df2, Q, step, OW, fill)


def _run(fn, geometry_shapes, attrs, present, out, operands):
    """Geometry (shape fn rules), nothing to compute for empty operands, else fn on contiguous
    operands under numpy's quiet error state (TensorFlow returns inf/NaN)."""
    g = window3(*geometry_shapes, attrs)
    if not (out.size and all(a.size for a in present)):
        out[...] = 0
        return
    with np.errstate(all="ignore"):
        fn(*(np.ascontiguousarray(a) for a in operands), out, g)


@kernel("Conv3D", dtypes=FLOATS)
def conv3d(inputs, outputs, attrs):
    x, f = inputs
    _run(forward, (x.shape, f.shape), attrs, (x,), outputs[0], (x, f))


@kernel("Conv3DBackpropInputV2", dtypes=FLOATS)
def conv3d_backprop_input(inputs, outputs, attrs):
    _, f, dy = inputs
    dx = outputs[0]
    _run(backprop_input, (dx.shape, f.shape), attrs, (dy,), dx, (f, dy))


@kernel("Conv3DBackpropFilterV2", dtypes=FLOATS)
def conv3d_backprop_filter(inputs, outputs, attrs):
    x, _, dy = inputs
    df = outputs[0]
    _run(backprop_filter, (x.shape, df.shape), attrs, (x, dy), df, (x, dy))
