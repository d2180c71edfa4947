"""numba helpers the generated loop functions (kernels/cpu/loops.py) call. TF-free."""
import numpy as np
from numba import njit, prange

from kernels.cpu import jit

from kernels.cpu.gemm import _ROW_MAJOR, _NO_TRANS, _TRANS, _dgemm, _sgemm
from kernels.cpu.scalar import fp_env_get, fp_env_set


@njit(cache=True, nogil=True)
def csr_get():
    """This thread's MXCSR (a compiled loop that raised leaves its FTZ/DAZ set: the caller
    restores what it read before)."""
    return fp_env_get()


@njit(cache=True, nogil=True)
def csr_set(v):
    fp_env_set(v)


def _mm32(a, b, out, ta, tb):
    """out = op(a) @ op(b) for C-contiguous float32 arrays, one BLAS call on this thread
    (numpy's OpenBLAS; the caller holds its thread count)."""
    M, N = out.shape
    _sgemm(_ROW_MAJOR, _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS, M, N,
           a.shape[0] if ta else a.shape[1], np.float32(1.0), a.ctypes.data,
           max(a.shape[1], 1), b.ctypes.data, max(b.shape[1], 1), np.float32(0.0),
           out.ctypes.data, max(N, 1))


def _mm64(a, b, out, ta, tb):
    M, N = out.shape
    _dgemm(_ROW_MAJOR, _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS, M, N,
           a.shape[0] if ta else a.shape[1], 1.0, a.ctypes.data, max(a.shape[1], 1),
           b.ctypes.data, max(b.shape[1], 1), 0.0, out.ctypes.data, max(N, 1))


# the MatMul kernel calls them too, with tensors' read-only views (jit.readonly_inputs: one
# compile for both kinds of operands)
mm32 = jit.readonly_inputs(njit(cache=True, nogil=True)(_mm32), ("out",))
mm64 = jit.readonly_inputs(njit(cache=True, nogil=True)(_mm64), ("out",))


def _mm2_32(a1, b1, o1, ta1, tb1, a2, b2, o2, ta2, tb2):
    # two independent products, one per thread of numba's team (each one BLAS call, so the
    # bits do not depend on the threads); 64x64x256 pairs: 27 us against 50 in turn
    for p in prange(2):
        if p == 0:
            mm32(a1, b1, o1, ta1, tb1)
        else:
            mm32(a2, b2, o2, ta2, tb2)


def _mm2_64(a1, b1, o1, ta1, tb1, a2, b2, o2, ta2, tb2):
    for p in prange(2):
        if p == 0:
            mm64(a1, b1, o1, ta1, tb1)
        else:
            mm64(a2, b2, o2, ta2, tb2)


mm2_32 = jit.parallel(_mm2_32)
mm2_64 = jit.parallel(_mm2_64)


@njit(cache=True, nogil=True)
def grow(buf, n):
    """A list buffer with room for item n (a list's length, at most its capacity): buf itself,
    or a copy twice its capacity. The items are copied by an element loop: for a slice
    assignment numba compiles a shape-mismatch error message, 1.6-5.5 s of every signature's
    compile (AVX2 EPYC)."""
    cap = buf.shape[0]
    if n < cap:
        return buf
    new = np.empty((max(2 * cap, 8),) + buf.shape[1:], buf.dtype)
    src = buf.reshape(-1)
    dst = new.reshape(-1)
    for k in range(src.size):     # all `cap` items: n == cap here
        dst[k] = src[k]
    return new


@njit(cache=True, nogil=True)
def rsum_lead(x, mean):
    """Sum (or mean) over the rows of a (rows, cols) array, in row order."""
    rows, cols = x.shape
    out = np.zeros(cols, x.dtype)
    for r in range(rows):
        for c in range(cols):
            out[c] += x[r, c]
    if mean and rows:
        for c in range(cols):
            out[c] = out[c] / rows
    return out


@njit(cache=True, nogil=True)
def rsum_trail(x, mean):
    """Sum (or mean) over the columns of a (rows, cols) array, per row."""
    rows, cols = x.shape
    out = np.zeros(rows, x.dtype)
    for r in range(rows):
        s = out[r]
        for c in range(cols):
            s += x[r, c]
        out[r] = s / cols if mean and cols else s
    return out


@njit(cache=True, nogil=True)
def take(src, idx, out):
    """out[k] = src[idx[k]] over flat arrays (data movement by an index map)."""
    for k in range(idx.size):
        out[k] = src[idx[k]]


@njit(cache=True, nogil=True)
def take_rows(src, off, stride, rows, cols, out):
    """out[r * cols + c] = src[off + r * stride + c]: an index map made of equally spaced runs
    (a Split or StridedSlice along the last axis, a block of rows) as row copies the compiler
    vectorises, instead of one lookup per element."""
    for r in range(rows):
        s = off + r * stride
        o = r * cols
        for c in range(cols):
            out[o + c] = src[s + c]


@njit(cache=True, nogil=True)
def take_runs(src, starts, cols, out):
    """out[r * cols + c] = src[starts[r] + c]: runs of `cols` consecutive elements from
    anywhere (a ConcatV2 along the last axis gathers rows of its parts in turn)."""
    for r in range(starts.size):
        s = starts[r]
        o = r * cols
        for c in range(cols):
            out[o + c] = src[s + c]


@njit(cache=True, nogil=True)
def put_flat(dst, off, src):
    for k in range(src.size):
        dst[off + k] = src[k]


@njit(cache=True, nogil=True)
def put_item(buf, i, v, add):
    """buf[i] = v (or buf[i] += v: an item's gradient added into an accumulator list) for a
    list buffer [capacity, *element] and a C-contiguous item."""
    row = buf.reshape((buf.shape[0], -1))[i]
    vf = v.reshape(-1)
    if add:
        for k in range(vf.size):
            row[k] += vf[k]
    else:
        for k in range(vf.size):
            row[k] = vf[k]


@njit(cache=True, nogil=True)
def put_rows(buf, i, p, v, add):
    """put_item into half p of item i of a list split by rows (kernels/cpu/loop_split.py): the
    buffer is [capacity, 2, *half item], each half's rows written by its own thread."""
    put_item(buf.reshape((buf.shape[0] * 2, -1)), i * 2 + p, v, add)
