"""CPU kernels: math ops outside the elementwise table (Cast, AddN, Select, SelectV2)."""
import numpy as np
from numba import njit, prange

from kernels import kernel
from kernels.cpu.elementwise import PARALLEL_MIN
from shape_fns.errors import Unsupported

_j = njit(cache=True, nogil=True)
_jp = njit(cache=True, nogil=True, parallel=True)

# --- Cast ----------------------------------------------------------------------------------
CAST_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "int64", "float32", "float64")
_INT_RANGE = {np.dtype(np.int32): 2.0 ** 31, np.dtype(np.int64): 2.0 ** 63}


def _f2i(x, out, lim, imin):
    # TensorFlow's float->int casts are x86 truncations: NaN and out-of-range give INT_MIN.
    for i in prange(x.size):
        v = x[i]
        out[i] = int(v) if (v >= -lim and v < lim) else imin


_f2i_s, _f2i_p = _j(_f2i), _jp(_f2i)


@kernel("Cast", dtypes=CAST_DTYPES, type_attr=("SrcT", "DstT"))
def cast(inputs, outputs, attrs):
    x, out = inputs[0], outputs[0]
    src, dst = x.dtype, out.dtype
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
    with np.errstate(all="ignore"):
        np.copyto(out, x, casting="unsafe")


# --- AddN ----------------------------------------------------------------------------------
@kernel("AddN", dtypes=("float32", "float64", "int32", "int64"))
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
    for i in prange(out.size):
        out[i] = t[i * st] if c[i * sc] else e[i * se]


_select_s, _select_p = _j(_select), _jp(_select)
_SELECT_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def _run_select(c, t, e, out):
    n = out.size
    if n == 0:
        return
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
