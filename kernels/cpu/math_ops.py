"""CPU kernels: math ops outside the elementwise table (Cast, AddN, Select, SelectV2)."""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu import jit
from kernels.cpu.elementwise import PARALLEL_MIN
from kernels.cpu.half_bits import _h2f_loop, narrow_into, widen
from shape_fns.errors import Unsupported

_j = njit(cache=True, nogil=True)


def _jp(fn):
    return jit.parallel(fn)


# --- Cast ----------------------------------------------------------------------------------
CAST_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "int64", "float32", "float64",
               "float16", "bfloat16")
_HALF = ("float16", "bfloat16")
_HALF_DT = frozenset(np.dtype(n) for n in _HALF)   # (dtype.name costs ~0.6 us a call)
_TINY32 = np.float32(1.1754943508222875e-38)
_INT_RANGE = {np.dtype(np.int32): 2.0 ** 31, np.dtype(np.int64): 2.0 ** 63}


def _f2i(x, out, lim, imin):
    # TensorFlow's float->int casts are x86 truncations: NaN and out-of-range give INT_MIN.
    for i in prange(x.size):
        v = x[i]
        out[i] = int(v) if (v >= -lim and v < lim) else imin


_f2i_s, _f2i_p = _j(_f2i), _jp(_f2i)


def _flush(f):
    return np.where(np.abs(f) < _TINY32, np.copysign(np.float32(0), f), f)


def _cast_half(x, out, src, dst):
    """Casts from or to float16/bfloat16 as Eigen's half types convert: everything goes through
    float32 (float64 and int64 sources round twice, as in TensorFlow)."""
    if src == np.float16 and dst == np.float32:
        if out.size:
            _h2f_loop(x.view(np.uint16).reshape(-1), out.reshape(-1))
        return
    if src == np.float32 and dst.name in _HALF:   # numba's rounding loop, not ml_dtypes' casts
        narrow_into(out, x)
        return
    if src.name == "bfloat16" and dst == np.float32:   # the top half of the float32 bits
        np.left_shift(x.view(np.uint16), np.uint32(16), out=out.view(np.uint32), dtype=np.uint32)
        return
    if src.name in _HALF:
        if dst == np.bool_:     # any nonzero bit pattern is true: NaN and subnormals too
            np.not_equal(x.view(np.uint16) & np.uint16(0x7FFF), 0, out=out)
            return
        f = widen(x)   # exact; bfloat16 subnormals kept, as TensorFlow's shift
        if dst == np.float64 and src.name == "bfloat16":
            f = _flush(f)   # DAZ on the way to double
        if dst.kind in "iu":
            lim = _INT_RANGE.get(dst)
            if lim is None:   # TF saturates some elements and wraps others (packet vs scalar)
                raise Unsupported(f"cast:{src.name}->{dst.name}")
            if out.size:      # truncation; NaN and out of range give INT_MIN
                (_f2i_p if out.size >= PARALLEL_MIN else _f2i_s)(
                    f.reshape(-1), out.reshape(-1), lim, -int(lim))
            return
        x = f
    elif x.dtype != np.float32:
        with np.errstate(all="ignore"):
            x = x.astype(np.float32)
        if src == np.float64:
            x = _flush(x)   # the double -> float conversion flushes subnormals (FTZ)
    with np.errstate(all="ignore"):
        np.copyto(out, x, casting="unsafe")


@kernel("Cast", dtypes=CAST_DTYPES, type_attr=("SrcT", "DstT"))
def cast(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    src, dst = x.dtype, out.dtype
    if src in _HALF_DT or dst in _HALF_DT:
        if attrs.get("Truncate") and src != dst:
            raise Unsupported("cast:Truncate with a half type")
        _cast_half(x, out, src, dst)
        return
    if src.kind == "f" and dst.kind in "iu":
        lim = _INT_RANGE.get(dst)
        if lim is None:  # float->small int is compiler-defined in TensorFlow; leave it there
            raise Unsupported(f"cast:{src.name}->{dst.name}")
        if out.size:
            (_f2i_p if out.size >= PARALLEL_MIN else _f2i_s)(
                x.reshape(-1), out.reshape(-1), lim, -int(lim))
        return
    if src.kind == "f" and dst == np.bool_:
        # TensorFlow treats subnormals as zero (DAZ); NaN is true.
        np.logical_not(np.abs(x) < np.finfo(src).tiny, out=out)
        return
    if attrs.get("Truncate") and src == np.float64 and dst == np.float32:
        # Truncate drops the 29 mantissa bits float32 lacks (NaNs untouched), then casts.
        bits = x.view(np.uint64) & np.uint64(0xFFFFFFFFE0000000)
        x = np.where(np.isnan(x), x, bits.view(np.float64))
    if src.kind == "f" and dst.itemsize < src.itemsize:   # may overflow to inf: no warning
        with np.errstate(all="ignore"):
            np.copyto(out, x, casting="unsafe")
    else:
        np.copyto(out, x, casting="unsafe")


# --- AddN ----------------------------------------------------------------------------------
# numpy's float16 and ml_dtypes' bfloat16 additions round each sum from float32, as Eigen does.
@kernel("AddN", dtypes=("float32", "float64", "int32", "int64", "float16", "bfloat16"))
def add_n(inputs, outputs, attrs):
    out = outputs[0]
    if len(inputs) == 1:
        np.copyto(out, inputs[0])
        return
    with np.errstate(all="ignore"):
        np.add(inputs[0], inputs[1], out=out)
        for a in inputs[2:]:
            np.add(out, a, out=out)


# --- Select / SelectV2 -----------------------------------------------------------------------
def _select(c, t, e, out, sc, st, se):
    # the usual layouts as loops of their own, both values read before the choice: LLVM
    # vectorises that (one loop with i * stride reads and a conditional read ran 3 ns a value:
    # Keras' dropout, where(mask, x, 0.0), 570 us for 200K values, now 50)
    n = out.size
    if sc and st and se:
        for i in prange(n):
            ti, ei = t[i], e[i]
            out[i] = ti if c[i] else ei
    elif sc and st:
        ev = e[0]
        for i in prange(n):
            ti = t[i]
            out[i] = ti if c[i] else ev
    elif sc and se:
        tv = t[0]
        for i in prange(n):
            ei = e[i]
            out[i] = tv if c[i] else ei
    else:
        for i in prange(n):
            ti, ei = t[i * st], e[i * se]
            out[i] = ti if c[i * sc] else ei


_select_s, _select_p = _j(_select), _jp(_select)
_SELECT_DTYPES = ("float32", "float64", "int32", "int64", "bool", "float16", "bfloat16")


def _run_select(c, t, e, out):
    n = out.size
    if n == 0:
        return
    if out.dtype.name in _HALF:   # numba has no half types: move the 16-bit patterns
        t, e, out = t.view(np.uint16), e.view(np.uint16), out.view(np.uint16)
    if all(a.size == n or a.size == 1 for a in (c, t, e)):
        (_select_p if n >= PARALLEL_MIN else _select_s)(
            c.reshape(-1), t.reshape(-1), e.reshape(-1), out.reshape(-1),
            int(c.size == n), int(t.size == n), int(e.size == n))
    else:
        np.copyto(out, e)
        np.copyto(out, t, where=c)


@kernel("SelectV2", dtypes=_SELECT_DTYPES)
def select_v2(inputs, outputs, attrs):
    _run_select(*inputs, outputs[0])


@kernel("Select", dtypes=_SELECT_DTYPES)
def select(inputs, outputs, attrs):
    c, t, e = inputs
    if c.ndim == 1 and t.ndim > 1:  # one condition per row
        c = c.reshape(c.shape + (1,) * (t.ndim - 1))
    _run_select(c, t, e, outputs[0])
