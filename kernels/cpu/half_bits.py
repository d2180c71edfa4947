"""float16/bfloat16 <-> float32 conversions on 16-bit patterns, for numba kernels (CPU).

numba has no float16 or bfloat16 arrays: half-precision kernels take their arrays viewed as
uint16, widen each element to float32, compute in float32 and round once on store, as
TensorFlow's Eigen half and bfloat16 types do for every operation.
float16 uses LLVM's half conversions (F16C on x86: exact widening, round-to-nearest-even
narrowing, NaN kept NaN). bfloat16 is the top half of a float32: widening is a shift, narrowing
rounds the low 16 bits to nearest even (as Eigen's float_to_bfloat16_rtne), NaN stays a quiet NaN.
"""
import numpy as np
from llvmlite import ir
import numba
from numba import njit, prange, types
from numba.extending import intrinsic

from kernels.cpu.scalar import ftz

# LLVM inlines these (alwaysinline) where numba would inline their IR into every call site and
# type it again there: a bfloat16 binary loop has four call sites of a function calling two
# or three of these, and compiled 1.7x faster this way with the same machine code speed
_jit = njit(cache=True, nogil=True, forceinline=True, error_model="numpy")


@intrinsic
def h2f(typingctx, b):
    """float16 bits -> float32."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def _f2h(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@intrinsic
def _u32_f32(typingctx, u):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _f32_u32(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@_jit
def f2h(x):
    """float32 (or any float) -> float16 bits, rounded to nearest even."""
    return _f2h(np.float32(x))


@_jit
def bf2f(b):
    """bfloat16 bits -> float32."""
    return _u32_f32(np.uint32(b) << np.uint32(16))


@_jit
def f2bf(x):
    """float32 (or any float) -> bfloat16 bits, rounded to nearest even; NaN -> quiet NaN."""
    x = np.float32(x)
    u = _f32_u32(x)
    if x != x:
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u += np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))


HALF = {"float16": (h2f, f2h), "bfloat16": (bf2f, f2bf)}


def bits(a):
    """A uint16 view of a float16/bfloat16 array (other arrays unchanged)."""
    return a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind in "fV" else a


@_jit
def rnd_h(x):
    """x (float32) rounded to float16 and back: one intermediate step of a float16 functor."""
    return h2f(f2h(ftz32(x)))


@_jit
def rnd_bf(x):
    """x (float32) rounded to bfloat16 and back (subnormal float32 first flushed, as TF's FTZ)."""
    return bf2f(f2bf(ftz32(x)))


@_jit
def ftz32(x):
    """x as float32, subnormals flushed to (signed) zero."""
    return ftz(np.float32(x))


# The conversion loops are written out, not made by a factory: numba keys a cached function
# by its bytecode and the pickled contents of its closure, and a dispatcher or intrinsic in a
# closure pickles with an identity of its process (Dispatcher._uuid), so every process missed
# the cache, compiled the loops again (0.8 s at the first bfloat16 cast of a mixed-precision
# fit, AMD EPYC Zen 5) and added an entry to their index (hundreds of files in a season). A
# name per variant also keeps two variants of one qualified name and argument types from
# meeting under one symbol (jit.named).
_loop = njit(cache=True, nogil=True)
_par = njit(cache=True, nogil=True, parallel=True)


@_loop
def _h2f_loop(src, dst):
    for i in range(dst.size):
        dst[i] = h2f(src[i])


@_loop
def _f2h_loop(src, dst):
    for i in range(dst.size):
        dst[i] = f2h(src[i])


@_loop
def _bf2f_loop(src, dst):
    for i in range(dst.size):
        dst[i] = bf2f(src[i])


@_loop
def _f2bf_loop(src, dst):
    for i in range(dst.size):
        dst[i] = f2bf(src[i])


# Blocked: the loop over blocks of a flat array on numba's team (conversions are memory-bound:
# one pass, both cores, instead of numpy's two or three passes on one).
@_jit
def _block(n, blocks, k):
    step = (n + blocks - 1) // blocks
    return k * step, min(n, k * step + step)


@_par
def _h2f_blocked(src, dst, blocks):
    for k in prange(blocks):
        lo, hi = _block(dst.size, blocks, k)
        if lo < hi:
            _h2f_loop(src[lo:hi], dst[lo:hi])


@_par
def _f2h_blocked(src, dst, blocks):
    for k in prange(blocks):
        lo, hi = _block(dst.size, blocks, k)
        if lo < hi:
            _f2h_loop(src[lo:hi], dst[lo:hi])


@_par
def _bf2f_blocked(src, dst, blocks):
    for k in prange(blocks):
        lo, hi = _block(dst.size, blocks, k)
        if lo < hi:
            _bf2f_loop(src[lo:hi], dst[lo:hi])


@_par
def _f2bf_blocked(src, dst, blocks):
    for k in prange(blocks):
        lo, hi = _block(dst.size, blocks, k)
        if lo < hi:
            _f2bf_loop(src[lo:hi], dst[lo:hi])


_PAR = {_h2f_loop: _h2f_blocked, _f2h_loop: _f2h_blocked, _bf2f_loop: _bf2f_blocked,
        _f2bf_loop: _f2bf_blocked}
PARALLEL_MIN = 1 << 18   # elements; below this one thread converts faster than two wake up


def _convert(loop, src, dst):
    """dst (flat) = loop's conversion of src (flat); the blocks depend on the size only."""
    threads = numba.get_num_threads()
    if dst.size >= PARALLEL_MIN and threads > 1:
        _PAR[loop](src, dst, threads)
    else:
        loop(src, dst)


def widen(a, out=None):
    """float16/bfloat16 array -> a new float32 array (exact). numpy's float16 conversions are
    software loops (measured per million: to float32 ~3.5 ms, from float32 ~35 ms); these
    numba loops use F16C (~0.08 ms each). bfloat16 is a shift of its bits (numpy's astype and
    shift: 7.4 ms for 8.4M values on the AVX2 EPYC VM, one blocked pass ~2 ms). out: a float32
    array of a's shape to write instead."""
    if out is None:
        out = np.empty(a.shape, np.float32)
    loop = _h2f_loop if a.dtype == np.float16 else _bf2f_loop
    # (bits first: ml_dtypes' bfloat16 copies a strided array element by element, ~110 ns each)
    _convert(loop, np.ascontiguousarray(a.view(np.uint16)).reshape(-1), out.reshape(-1))
    return out


def narrow_into(out, f):
    """Rounds the float32 array f into the float16/bfloat16 array out (nearest even; NaN stays
    a quiet NaN, overflow gives inf)."""
    if f.dtype == np.float32 and out.flags.c_contiguous:
        loop = _f2h_loop if out.dtype == np.float16 else _f2bf_loop
        _convert(loop, np.ascontiguousarray(f).reshape(-1), out.view(np.uint16).reshape(-1))
        return
    with np.errstate(all="ignore"):    # overflow to inf is the half type's answer
        np.copyto(out, f, casting="unsafe")
