"""CPU kernels: ResizeBilinear/ResizeNearestNeighbor and their grads (NHWC), MirrorPad(+Grad).

Resizes reproduce TensorFlow's CPU kernels step by step: float32 source coordinates from its
scalers (legacy, align_corners, half_pixel_centers), clamped neighbours, the lerp formula
top + (bottom - top) * lerp in float32, subnormals flushed as its CPU threads do (a slower
loop, taken only when inputs are small enough for subnormals to arise), and the gradients'
accumulation order. Nearest-neighbour and mirror padding are data movement.
"""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from shape_fns.image_ops import mirror_pad_amounts

from .scalar import ftz

NUM = ("float32", "float64", "int32", "int64")
F32 = np.float32
PARALLEL_MIN = 1 << 16   # output elements


def _scale(in_size, out_size, align):
    """TensorFlow's CalculateResizeScale, in float32. Its 2.21 bilinear gradient gives a
    1-pixel original the unaligned scale (for the forward ops the choice is unobservable)."""
    if align and out_size > 1 and in_size > 1:
        return F32(in_size - 1) / F32(out_size - 1)
    return F32(in_size) / F32(out_size)


def _source(out_size, scale, half_pixel):
    """Float32 source coordinate of each output index (HalfPixelScaler / LegacyScaler)."""
    i = np.arange(out_size, dtype=F32)
    if half_pixel:
        return (i + F32(0.5)) * scale - F32(0.5)
    return i * scale


def _lerp_table(out_size, in_size, align, half_pixel):
    v = _source(out_size, _scale(in_size, out_size, align), half_pixel)
    fl = np.floor(v)
    lo = np.maximum(fl.astype(np.int64), 0)
    hi = np.minimum(np.ceil(v).astype(np.int64), in_size - 1)
    return lo, hi, (v - fl).astype(F32)


def _needs_flush(x):
    """Whether subnormals can arise: only from float values this small (lerps are 0 or above
    ~3e-8, so larger values keep every intermediate normal)."""
    if x.dtype.kind != "f" or x.size == 0:
        return False
    a = np.abs(x)
    return bool(((a < 1e-10) & (a != 0)).any())


def _bilinear(x, out, ylo, yhi, yl, xlo, xhi, xl, flush):
    oh, ow, c = out.shape[1], out.shape[2], out.shape[3]
    for q in prange(out.shape[0] * oh):
        b = q // oh
        y = q - b * oh
        r0, r1, ly, o = x[b, ylo[y]], x[b, yhi[y]], yl[y], out[b, y]
        for j in range(ow):
            a0, a1, lx = xlo[j], xhi[j], xl[j]
            for k in range(c):
                tl, tr = F32(r0[a0, k]), F32(r0[a1, k])
                bl, br = F32(r1[a0, k]), F32(r1[a1, k])
                if flush:  # loop-invariant: compiled as two loops
                    tl, tr, bl, br = ftz(tl), ftz(tr), ftz(bl), ftz(br)
                    top = ftz(tl + ftz(ftz(tr - tl) * lx))
                    bottom = ftz(bl + ftz(ftz(br - bl) * lx))
                    o[j, k] = ftz(top + ftz(ftz(bottom - top) * ly))
                else:
                    top = tl + (tr - tl) * lx
                    bottom = bl + (br - bl) * lx
                    o[j, k] = top + (bottom - top) * ly


_bilinear_s = njit(cache=True, nogil=True, error_model="numpy")(_bilinear)
_bilinear_p = jit.parallel(_bilinear, error_model="numpy")


@kernel("ResizeBilinear", dtypes=NUM)
def resize_bilinear(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    _, h, w, _ = x.shape
    oh, ow = out.shape[1], out.shape[2]
    if (oh, ow) == (h, w):  # TensorFlow's no-op resize is a plain cast
        with np.errstate(all="ignore"):
            out[...] = x
        return
    align, half = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
    ys, xs = _lerp_table(oh, h, align, half), _lerp_table(ow, w, align, half)
    fn = _bilinear_p if out.size >= PARALLEL_MIN else _bilinear_s
    fn(x, out, *ys, *xs, _needs_flush(x))


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def _bilinear_grad(g, out, ylo, yhi, yl, xlo, xhi, xl, flush):
    """TensorFlow's loop: per input-gradient pixel, four weighted adds (weights in float32)."""
    oh, ow, c = g.shape[1], g.shape[2], g.shape[3]
    for b in prange(g.shape[0]):
        ob = out[b]
        ob[...] = 0
        for y in range(oh):
            t, u, ly = ylo[y], yhi[y], yl[y]
            iy = F32(1) - ly
            for j in range(ow):
                le, ri, lx = xlo[j], xhi[j], xl[j]
                ix = F32(1) - lx
                for k in range(c):
                    v = g[b, y, j, k]
                    if flush:
                        v = ftz(v)
                        ob[t, le, k] = ftz(ob[t, le, k] + ftz(ftz(v * iy) * ix))
                        ob[t, ri, k] = ftz(ob[t, ri, k] + ftz(ftz(v * iy) * lx))
                        ob[u, le, k] = ftz(ob[u, le, k] + ftz(ftz(v * ly) * ix))
                        ob[u, ri, k] = ftz(ob[u, ri, k] + ftz(ftz(v * ly) * lx))
                    else:
                        ob[t, le, k] += v * iy * ix
                        ob[t, ri, k] += v * iy * lx
                        ob[u, le, k] += v * ly * ix
                        ob[u, ri, k] += v * ly * lx


@kernel("ResizeBilinearGrad", dtypes=("float32", "float64"))
def resize_bilinear_grad(inputs, outputs, attrs):
    g, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    h, w = out.shape[1], out.shape[2]
    oh, ow = g.shape[1], g.shape[2]
    align, half = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
    _bilinear_grad(g, out, *_lerp_table(oh, h, align, half), *_lerp_table(ow, w, align, half),
                   _needs_flush(g))


def _nearest(out_size, in_size, align, half_pixel):
    """TensorFlow's nearest-neighbour source index of each output index."""
    scale, i = _scale(in_size, out_size, align), np.arange(out_size, dtype=F32)
    v = (i + F32(0.5)) * scale if half_pixel else i * scale  # HalfPixelScalerForNN: no -0.5
    fl = np.floor(v)
    if align:  # roundf: halves away from zero (v >= 0 here)
        fl = fl + (v - fl >= F32(0.5))
    idx = np.minimum(fl.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half_pixel else idx


@kernel("ResizeNearestNeighbor", dtypes=NUM)
def resize_nearest_neighbor(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    _, h, w, _ = x.shape
    oh, ow = out.shape[1], out.shape[2]
    align, half = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
    src = (_nearest(oh, h, align, half)[:, None] * w + _nearest(ow, w, align, half)).reshape(-1)
    n, c = x.shape[0], x.shape[3]
    # "clip": indices are in range; "raise" with out= would copy through a buffer
    x.reshape(n, h * w, c).take(src, 1, out.reshape(n, oh * ow, c), "clip")


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def _nearest_grad(g, out, ys, xs, flush):
    for b in prange(g.shape[0]):
        ob = out[b]
        ob[...] = 0
        for y in range(g.shape[1]):
            oy = ys[y]
            for j in range(g.shape[2]):
                o, src = ob[oy, xs[j]], g[b, y, j]
                for k in range(g.shape[3]):
                    if flush:
                        o[k] = ftz(o[k] + ftz(src[k]))
                    else:
                        o[k] += src[k]


@kernel("ResizeNearestNeighborGrad", dtypes=("float32", "float64", "int32"))
def resize_nearest_neighbor_grad(inputs, outputs, attrs):
    g, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    h, w = out.shape[1], out.shape[2]
    oh, ow = g.shape[1], g.shape[2]
    align, half = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
    # Each gradient pixel goes to the original pixel the forward pass read it from.
    _nearest_grad(g, out, _nearest(oh, h, align, half), _nearest(ow, w, align, half),
                  _needs_flush(g))


def _pads(inputs, attrs, grad):
    x = inputs[0]
    mode = attrs.get("mode", "REFLECT")
    pads = mirror_pad_amounts(x.shape, inputs[1].reshape(x.ndim, 2).tolist(), mode, grad)
    return pads, 1 if mode == "REFLECT" else 0


@kernel("MirrorPad", dtypes=NUM + ("bool",))
def mirror_pad(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    pads, off = _pads(inputs, attrs, False)
    if out.size == 0:
        return
    out[tuple(slice(lo, lo + n) for (lo, _), n in zip(pads, x.shape))] = x
    # Dimension by dimension, mirror from the part already filled: dims before d are complete,
    # dims after d hold only the input's extent.
    for d, ((lo, hi), n) in enumerate(zip(pads, x.shape)):
        pre = (slice(None),) * d
        post = tuple(slice(a, a + m) for (a, _), m in zip(pads[d + 1:], x.shape[d + 1:]))
        if lo:
            src = np.arange(2 * lo + off - 1, lo + off - 1, -1)
            out[pre + (slice(0, lo),) + post] = out[pre + (src,) + post]
        if hi:
            src = np.arange(lo + n - 1 - off, lo + n - 1 - off - hi, -1)
            out[pre + (slice(lo + n, lo + n + hi),) + post] = out[pre + (src,) + post]


@kernel("MirrorPadGrad", dtypes=NUM)
def mirror_pad_grad(inputs, outputs, attrs):
    g, out = inputs[0], outputs[0]
    pads, off = _pads(inputs, attrs, True)
    if out.size == 0:
        return
    # Fold one dimension at a time: the core, plus each padded band added onto the positions
    # it mirrors (distinct within a band, so plain fancy-index adds are safe).
    with np.errstate(all="ignore"):
        for d, (lo, hi) in enumerate(pads):
            n = g.shape[d] - lo - hi
            pre = (slice(None),) * d
            core = g[pre + (slice(lo, lo + n),)].copy()
            if lo:
                core[pre + (np.arange(lo + off - 1, off - 1, -1),)] += g[pre + (slice(0, lo),)]
            if hi:
                core[pre + (np.arange(n - 1 - off, n - 1 - off - hi, -1),)] += \
                    g[pre + (slice(lo + n, lo + n + hi),)]
            g = core
    np.copyto(out, g)
    if out.dtype.kind == "f":  # TensorFlow's CPU threads flush subnormal sums to zero
        out[np.abs(out) < np.finfo(out.dtype).tiny] = 0
