"""CPU kernels: matmul ops (MatMul, BatchMatMul, BatchMatMulV2, BatchMatMulV3).

Floats go to BLAS (transposes are views: BLAS takes them as flags) through kernels/cpu/gemm.py:
numba's thread team, one single-threaded OpenBLAS call per block or per matrix of a batch.
numpy has no BLAS for integers and its generic loop is ~20x slower than TensorFlow's, so integer
products use a numba loop; integer overflow wraps as in TensorFlow.
"""
import numpy as np
from numba import njit, prange

from numba.core import types as nt

from kernels import kernel, specializer
from kernels.cpu import bf16_gemm, gemm, jit
from kernels.cpu.loop_helpers import mm32, mm64
from kernels.cpu.reduction_ops import quiet

NUM = ("float32", "float64", "int32", "int64")
HALF = ("float16", "bfloat16")   # stored in 16 bits, multiplied and accumulated in float32
PARALLEL_MIN = 1 << 24    # multiply-adds; smaller products do not repay a parallel region


@njit(cache=True, nogil=True)
def _imatmul(a, b, out):
    # a (B, m, k), b (B, k, n), out (B, m, n), all C-contiguous; i-p-j order vectorises over j.
    for t in range(out.shape[0]):
        for i in range(out.shape[1]):
            row = out[t, i]
            row[:] = 0
            for p in range(a.shape[2]):
                s = a[t, i, p]
                for j in range(row.shape[0]):
                    row[j] += s * b[t, p, j]


@njit(cache=True, nogil=True, parallel=True)
def _imatmul_par(a, b, out):
    m = out.shape[1]
    for r in prange(out.shape[0] * m):
        t, i = r // m, r % m
        row = out[t, i]
        row[:] = 0
        for p in range(a.shape[2]):
            s = a[t, i, p]
            for j in range(row.shape[0]):
                row[j] += s * b[t, p, j]


def _int_matmul(x, y, out):
    """out = x @ y for integer x (..., m, k), y (..., k, n) that may be transposed views."""
    batch = out.shape[:-2]
    m, n, k = out.shape[-2], out.shape[-1], x.shape[-1]
    if out.size == 0:
        return
    if k == 0:
        out.fill(0)
        return
    nb = 1
    for s in batch:
        nb *= s
    x3 = np.ascontiguousarray(np.broadcast_to(x, batch + (m, k))).reshape(nb, m, k)
    y3 = np.ascontiguousarray(np.broadcast_to(y, batch + (k, n))).reshape(nb, k, n)
    f = _imatmul_par if nb * m * n * k >= PARALLEL_MIN else _imatmul
    f(x3, y3, out.reshape(nb, m, n))


def _product(x, y, out, y_stays=False):
    if out.dtype.itemsize == 2:   # float16/bfloat16 (no 16-bit integers here)
        if (out.dtype.name == "bfloat16" and x.ndim == 2 and y.ndim == 2 and out.size
                and x.shape[1] and bf16_gemm.runs()):
            bf16_gemm.product_into(out, x, y)   # the CPU's bfloat16 dot products
            return
        x32, y32 = x.astype(np.float32), y.astype(np.float32)
        r = np.empty(np.broadcast_shapes(x32.shape[:-2], y32.shape[:-2])
                     + (x32.shape[-2], y32.shape[-1]), np.float32)
        quiet(gemm.numpy_matmul, x32, y32, r)
        quiet(np.copyto, out, r, casting="unsafe")
    elif out.dtype.kind == "f":   # 0 * inf = NaN is TensorFlow's answer too
        quiet(gemm.matmul_nd, x, y, out, y_stays)
    else:
        _int_matmul(x, y, out)


_TINY_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@kernel("MatMul", dtypes=NUM + HALF)
def matmul(inputs, outputs, attrs):
    a, b = inputs
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    out = outputs[0]
    k = a.shape[0] if ta else a.shape[1]
    if out.size * k < gemm.TINY and out.dtype in _TINY_FLOATS:
        if (out.size and k and a.dtype == out.dtype and b.dtype == out.dtype
                and a.flags.c_contiguous and b.flags.c_contiguous and gemm.available()):
            # one BLAS call from numba, as compiled regions make it: np.matmul spends ~1 us
            # before its BLAS call (a 4x4 float32 product from Python, AMD EPYC Zen 3:
            # np.matmul 1.3-2.0 us, mm32 0.7 us with writeable operands)
            (mm32 if out.dtype.itemsize == 4 else mm64)(a, b, out, ta, tb)
            return
        # what gemm.matmul does with it, three calls sooner
        quiet(np.matmul, a.T if ta else a, b.T if tb else b, out=out)
        return
    a = a.T if ta else a
    b = b.T if tb else b
    _product(a, b, out, attrs.get("_filter_is_variable", False))


@specializer("MatMul")
def _tiny_matmul(attrs, in_specs, out_specs, generic):
    """A program's tiny float product (static shapes) as one call of mm32/mm64's compiled
    entry point: the generic kernel's checks (flags, sizes, dtypes, the library) made once here,
    and numba's typing of five arguments skipped once the dispatcher has compiled them (a 4x4
    float32 product from Python, AMD EPYC Zen 3: generic kernel 1.9 us, this 1.0, of which the
    checks below ~0.5). Operands it does not expect (not C-contiguous, other shapes or dtypes)
    go to the generic kernel."""
    dt = np.dtype(out_specs[0].dtype)
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    sa, sb, so = (tuple(s.shape) for s in (*in_specs, out_specs[0]))
    if (dt not in _TINY_FLOATS or any(np.dtype(s.dtype) != dt for s in in_specs)
            or len(sa) != 2 or len(sb) != 2):
        return None
    k = sa[0] if ta else sa[1]
    size = so[0] * so[1] if len(so) == 2 else 0
    if not (size and k and size * k < gemm.TINY and gemm.available()):
        return None
    mm = mm32 if dt.itemsize == 4 else mm64
    arr = nt.Array(nt.float32 if dt.itemsize == 4 else nt.float64, 2, "C")
    sig = (arr.copy(readonly=True), arr.copy(readonly=True), arr, nt.boolean, nt.boolean)
    entry = [None]

    def tiny_matmul(inputs, outputs, attrs):
        a, b = inputs
        if (a.shape == sa and b.shape == sb and a.dtype is dt and b.dtype is dt
                and a.flags.c_contiguous and b.flags.c_contiguous):
            ep = entry[0]
            if ep is None:   # the dispatcher compiles (or loads, or defers) it first
                mm(a, b, outputs[0], ta, tb)
                entry[0] = jit.entry_point(mm, sig)
                return
            ep(a, b, outputs[0], ta, tb)
            return
        generic(inputs, outputs, attrs)

    return tiny_matmul


@kernel("BatchMatMul", "BatchMatMulV2", dtypes=NUM + HALF)
@kernel("BatchMatMulV3", dtypes=NUM, type_attr=("Ta", "Tb", "Tout"))
def batch_matmul(inputs, outputs, attrs):
    x, y = inputs
    # Real dtypes only, so the adjoint is the transpose.
    if attrs["adj_x"]:
        x = np.swapaxes(x, -1, -2)
    if attrs["adj_y"]:
        y = np.swapaxes(y, -1, -2)
    _product(x, y, outputs[0], attrs.get("_filter_is_variable", False))
