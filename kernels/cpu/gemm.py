"""Matrix products for the CPU kernels: numpy's OpenBLAS, called single-threaded from each thread
of numba's thread team, one block of the product per thread.

Why not np.matmul with OpenBLAS's own threads: on this 2-vCPU VM a chain of ResNet-50's 1x1
convolution GEMMs (27 products, each with its own cold weights) took 32-33 ms through
np.matmul (OpenBLAS, 2 threads) and 17-18 ms as two single-threaded OpenBLAS calls on row (or,
for few rows, column) halves run by numba's two threads; results are bit-identical (each
output element is the same micro-kernel's dot product). And OpenBLAS's worker threads spin for
a while after each product: a numba parallel loop started then waits for a core (a batch-norm
epilogue after a GEMM took 1.0 ms in parallel against 0.1 ms serial). With every product on
numba's team, one team serves both.

The BLAS is numpy's own (scipy-openblas, ILP64 `scipy_cblas_[sd]gemm64_`), found next to numpy
and bound as numba external symbols; OpenBLAS is held to one thread while any of our products
runs (`single_thread_enter`). Where that library is missing (another numpy build) or an
operand's layout is not a BLAS one, np.matmul runs instead, OpenBLAS still held to one thread.
Batched products (`matmul_nd`) run one matrix per job, or one 2-D product when the batch
shares its weight; products of few rows with a kept transposed weight run `_nt`, a numba dot
product kernel (see `matmul`). Blocks are run by as many
threads as numba's count on the calling thread allows (tf_backend's executor sets it to 1 where
another heavy node runs beside), so the cores are never oversubscribed; how a product is cut
depends on its shape only, so its bits do not depend on the threads.
"""
import ctypes
import glob
import math
import os
import threading
import time

import numpy as np
from numba import config, get_num_threads, njit, prange, types

from kernels.cpu import bf16_gemm, filter_cache, jit

ENABLED = True          # False: np.matmul everywhere (A/B runs)
TEAM_MIN = 1 << 18      # multiply-adds; smaller products are not worth a parallel region
BLOCK = 16              # row/column blocks are multiples of this (OpenBLAS's sgemm tile)
ROWS_MIN = 32           # rows per block below which a product is cut into column blocks
NT_ENABLED = True       # False: products with kept weights go to BLAS too (A/B runs)
TILES_ENABLED = True    # False: the float32 tiles are no candidate of the choice (A/B runs)
NT_ROWS_MAX = 128       # rows up to which a product with a kept weight runs `_nt`
NT_MIN = 1 << 15        # multiply-adds below which `_nt` is not worth its parallel region
# Products below this go straight to np.matmul, as the checks in `matmul` would send them (below
# NT_MIN and TEAM_MIN), and without the one-thread hold: OpenBLAS runs products of at most
# 65536 * GEMM_MULTITHREAD_THRESHOLD (4) multiply-adds on the calling thread anyway.
TINY = min(NT_MIN, TEAM_MIN, 1 << 16)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

_state = {"ok": None}
_lock = threading.Lock()
_threads = {"set": None, "get": None, "holders": 0, "saved": None}
_threads_lock = threading.Lock()


def _find_lib():
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas64_*.so"))):
        lib = ctypes.CDLL(path)
        if all(hasattr(lib, s) for s in ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_",
                                         "scipy_openblas_set_num_threads64_",
                                         "scipy_openblas_get_num_threads64_")):
            return lib
    return None


def available():
    """Whether products run on the team (numpy's OpenBLAS found and bound)."""
    if _state["ok"] is None:
        with _lock:
            if _state["ok"] is None:
                ok = False
                try:
                    lib = _find_lib()
                    if lib is not None:
                        import llvmlite.binding as llvm
                        for sym, fn in (("tfb_sgemm", lib.scipy_cblas_sgemm64_),
                                        ("tfb_dgemm", lib.scipy_cblas_dgemm64_)):
                            llvm.add_symbol(sym, ctypes.cast(fn, ctypes.c_void_p).value)
                        _threads["set"] = lib.scipy_openblas_set_num_threads64_
                        _threads["set"].argtypes = [ctypes.c_int]
                        _threads["get"] = lib.scipy_openblas_get_num_threads64_
                        _threads["get"].restype = ctypes.c_int
                        ok = True
                except (OSError, ImportError, AttributeError):   # pragma: no cover
                    ok = False
                _state["ok"] = ok
    return _state["ok"]


_i32, _i64 = types.int32, types.int64
_sgemm = types.ExternalFunction("tfb_sgemm", types.void(
    _i32, _i32, _i32, _i64, _i64, _i64, types.float32, _i64, _i64, _i64, _i64, types.float32,
    _i64, _i64))
_dgemm = types.ExternalFunction("tfb_dgemm", types.void(
    _i32, _i32, _i32, _i64, _i64, _i64, types.float64, _i64, _i64, _i64, _i64, types.float64,
    _i64, _i64))


def share_blas(k):
    """Use 1/k of numpy's OpenBLAS threads from now on (k processes share this host's cores:
    OpenBLAS splits a product statically over its threads, so one descheduled thread stalls the
    product). Process-wide, as OpenBLAS's count is; a hold in progress restores to it."""
    if k <= 1 or not available():
        return
    with _threads_lock:
        cur = _threads["saved"] if _threads["holders"] else _threads["get"]()
        n = max(1, cur // k)
        if _threads["holders"]:
            _threads["saved"] = n
        elif n != cur:
            _threads["set"](n)


def single_thread_enter():
    """Hold numpy's OpenBLAS to one thread until the matching `single_thread_exit` (ours run
    on numba's team, one block per thread; executor.py holds a BLAS-backed node beside another
    to one thread). One process-wide count with holders counted: in OpenBLAS 0.3.31
    `openblas_set_num_threads_local` sets the process-wide count too (measured: set on one
    thread, every thread sees it), so setting and restoring it per thread from two threads at
    once could leave it at one for good, every later numpy product of the user's at half
    speed."""
    if not available():
        return
    with _threads_lock:
        if _threads["holders"] == 0:
            saved = _threads["saved"] = _threads["get"]()
            if saved != 1:
                _threads["set"](1)
        _threads["holders"] += 1


def single_thread_exit():
    if not available():
        return
    with _threads_lock:
        _threads["holders"] -= 1
        if _threads["holders"] == 0 and _threads["saved"] != 1:
            _threads["set"](_threads["saved"])


def _run_jobs(jobs, double):
    # one job per row: transa, transb, M, N, K, a address, lda, b address, ldb, c address, ldc
    for j in prange(jobs.shape[0]):
        job = jobs[j]
        if double:
            _dgemm(_ROW_MAJOR, job[0], job[1], job[2], job[3], job[4], 1.0, job[5], job[6],
                   job[7], job[8], 0.0, job[9], job[10])
        else:
            _sgemm(_ROW_MAJOR, job[0], job[1], job[2], job[3], job[4], np.float32(1.0),
                   job[5], job[6], job[7], job[8], np.float32(0.0), job[9], job[10])


_team = jit.parallel(_run_jobs)
_one = njit(nogil=True, cache=True)(_run_jobs)


def _nt(a, bt, out):
    # out[i, j] = sum_k a[i, k] * bt[j, k]: each output a dot product along contiguous rows,
    # vectorised along k (reassociation allowed); a tile of 4 rows x 6 columns keeps 24 vector
    # sums in registers and reads each weight row once per 4 rows of `a`. Which loop computes
    # an element (tile, leftover row, leftover column) depends on the shape only.
    M, K = a.shape
    N = bt.shape[0]
    for g in prange(N // 6):
        j = g * 6
        for i in range(0, M - 3, 4):
            s00 = s01 = s02 = s03 = s04 = s05 = np.float32(0)
            s10 = s11 = s12 = s13 = s14 = s15 = np.float32(0)
            s20 = s21 = s22 = s23 = s24 = s25 = np.float32(0)
            s30 = s31 = s32 = s33 = s34 = s35 = np.float32(0)
            for k in range(K):
                a0, a1, a2, a3 = a[i, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
                b0, b1, b2 = bt[j, k], bt[j + 1, k], bt[j + 2, k]
                b3, b4, b5 = bt[j + 3, k], bt[j + 4, k], bt[j + 5, k]
                s00 += a0 * b0
                s01 += a0 * b1
                s02 += a0 * b2
                s03 += a0 * b3
                s04 += a0 * b4
                s05 += a0 * b5
                s10 += a1 * b0
                s11 += a1 * b1
                s12 += a1 * b2
                s13 += a1 * b3
                s14 += a1 * b4
                s15 += a1 * b5
                s20 += a2 * b0
                s21 += a2 * b1
                s22 += a2 * b2
                s23 += a2 * b3
                s24 += a2 * b4
                s25 += a2 * b5
                s30 += a3 * b0
                s31 += a3 * b1
                s32 += a3 * b2
                s33 += a3 * b3
                s34 += a3 * b4
                s35 += a3 * b5
            o = out[i]
            o[j], o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5] = s00, s01, s02, s03, s04, s05
            o = out[i + 1]
            o[j], o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5] = s10, s11, s12, s13, s14, s15
            o = out[i + 2]
            o[j], o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5] = s20, s21, s22, s23, s24, s25
            o = out[i + 3]
            o[j], o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5] = s30, s31, s32, s33, s34, s35
        for i in range(M - M % 4, M):
            t0 = t1 = t2 = t3 = t4 = t5 = np.float32(0)
            for k in range(K):
                v = a[i, k]
                t0 += v * bt[j, k]
                t1 += v * bt[j + 1, k]
                t2 += v * bt[j + 2, k]
                t3 += v * bt[j + 3, k]
                t4 += v * bt[j + 4, k]
                t5 += v * bt[j + 5, k]
            o = out[i]
            o[j], o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5] = t0, t1, t2, t3, t4, t5
    for j in range(N - N % 6, N):
        for i in range(M):
            t = np.float32(0)
            for k in range(K):
                t += a[i, k] * bt[j, k]
            out[i, j] = t


_NT_MATH = {"reassoc", "contract"}   # no nnan/ninf: Inf and NaN keep their IEEE results
_nt_team = jit.readonly_inputs(jit.parallel(_nt, fastmath=_NT_MATH), ("out",))

NN_ROWS_MAX = 8      # rows up to which a weight too large to keep transposed runs `_nn`
NN_CHUNK = 1024      # rows of the weight per partial sum of `_nn`


def _nn(a, b, out):
    # out = a @ b for a few rows of `a` and a C-contiguous (K, N) weight `b`, read once in its
    # own layout: the K rows of b are cut into fixed chunks (one per job), each chunk's rows are
    # streamed once, every row of `a` adding a[i, k] * b[k, :] (four k at a time) into its
    # partial row; the partials are then summed in chunk order. The cut depends on the shape
    # only, so bits do not depend on threads. AMD EPYC, 2 cores, 1 x 25088 x 4096: 9-12 ms,
    # against 13-15 ms for OpenBLAS's gemv and 28 ms for its sgemm (which packs b).
    M, K = a.shape
    N = b.shape[1]
    nch = (K + NN_CHUNK - 1) // NN_CHUNK
    part = np.zeros((nch, M, N), np.float32)
    for c in prange(nch):
        k = c * NN_CHUNK
        k1 = min(K, k + NN_CHUNK)
        while k + 4 <= k1:
            r0, r1, r2, r3 = b[k], b[k + 1], b[k + 2], b[k + 3]
            for i in range(M):
                acc = part[c, i]
                a0, a1, a2, a3 = a[i, k], a[i, k + 1], a[i, k + 2], a[i, k + 3]
                for j in range(N):
                    acc[j] += (a0 * r0[j] + a1 * r1[j]) + (a2 * r2[j] + a3 * r3[j])
            k += 4
        while k < k1:
            r = b[k]
            for i in range(M):
                acc = part[c, i]
                s = a[i, k]
                for j in range(N):
                    acc[j] += s * r[j]
            k += 1
    for i in range(M):
        o = out[i]
        for j in range(N):
            o[j] = part[0, i, j]
        for c in range(1, nch):
            p = part[c, i]
            for j in range(N):
                o[j] += p[j]


_nn_team = jit.parallel(_nn, fastmath={"contract"})


def _operand(a, rows, cols):
    """(trans flag, leading dimension) of a 2-D operand BLAS can read in place, else None."""
    it = a.itemsize
    s0, s1 = a.strides
    if (s1 == it or cols == 1) and s0 % it == 0 and s0 >= cols * it:
        return _NO_TRANS, max(s0 // it, cols, 1)
    if (s0 == it or rows == 1) and s1 % it == 0 and s1 >= rows * it:
        return _TRANS, max(s1 // it, rows, 1)
    return None


def _ceil(a, b):
    return -(-a // b)


def _blocks():
    """How many blocks a product is cut into: numba's thread pool size, fixed for the process.
    The blocks depend on the shapes only, never on the threads at hand (one thread runs them in
    turn), so a result has the same bits however many threads run it: OpenBLAS picks its
    small-matrix kernel by size, whose sums round differently from its packed kernel's."""
    return config.NUMBA_NUM_THREADS


def _team_can_run(a, b, out, work):
    """Products too small, of another dtype, with an output overlapping an operand (np.matmul
    copies such an operand) or without the library go to np.matmul."""
    dt = out.dtype
    return (work >= TEAM_MIN and dt in (np.float32, np.float64) and a.dtype == dt
            and b.dtype == dt and ENABLED and available()
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def _nt_weight(a, b, out, b_stays):
    """b's transpose as a C-contiguous (N, K) array when the product runs `_nt`, else None:
    b.T itself when it is one (a transpose_b MatMul), else b's transpose from filter_cache
    when the caller says b stays (an inference program's variable read)."""
    M, K = a.shape
    N = b.shape[1]
    if not (NT_ENABLED and M <= NT_ROWS_MAX and M * N * K >= NT_MIN
            and a.dtype == b.dtype == out.dtype == np.float32 and a.strides[1] == 4
            and out.flags.c_contiguous and not np.may_share_memory(out, a)
            and not np.may_share_memory(out, b)):
        return None
    if b.T.flags.c_contiguous:
        return b.T
    return filter_cache.get(b, "transposed", _transposed) if b_stays else None


def _nn_ok(a, b, out, b_stays):
    """A kept weight too large to keep transposed (filter_cache.fits), multiplied by few rows:
    read it as it is, once, instead of transposing 400 MB per call or packing it in BLAS."""
    M, K = a.shape
    N = b.shape[1]
    return (b_stays and NT_ENABLED and M <= NN_ROWS_MAX and M * N * K >= NT_MIN
            and a.dtype == b.dtype == out.dtype == np.float32 and b.flags.c_contiguous
            and out.flags.c_contiguous and not filter_cache.fits(b.nbytes)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def _tiles_can_run(a, b, out):
    """Whether the float32 tiles reading B in place (bf16_gemm.matmul_f32_into) may run the
    product: a candidate of the measured choice (CHOOSE; the fixed rule never picks them)."""
    return (CHOOSE and TILES_ENABLED and ENABLED and bf16_gemm.product_f32_eligible(a, b, out)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def _plan(a, b, out, b_stays):
    """(kernel, b's kept transpose, team jobs) for a product of TINY or more multiply-adds:
    "nn" (a weight too large to keep transposed), else the measured choice ("nt", "team",
    "blas", "tiles"; CHOOSE off: the fixed rule), or "numpy" where nothing else can run it."""
    bt = _nt_weight(a, b, out, b_stays)
    if bt is None and _nn_ok(a, b, out, b_stays):
        return "nn", None, None
    key = run = jobs = None
    if CHOOSE:
        key = _choice_key(a, b, out, bt)
        run = _choices.get(key)
    if run is None:
        jobs = _team_jobs(a, b, out, a.shape[0], a.shape[1], b.shape[1])
        tiles = _tiles_can_run(a, b, out)
        if bt is None and jobs is None and not tiles:
            return "numpy", bt, None
        run = _choose(key, a, b, out, bt, jobs, tiles)
    return run, bt, jobs


def tiles_chosen(a, b, out, b_stays=False):
    """Whether matmul runs this product on the float32 tiles (measuring its choice now if it
    has none yet): a fused epilogue (bias, Relu) may then be applied in the tiles' registers
    (bf16_gemm.matmul_f32_into) instead of in a pass of its own."""
    return (a.shape[0] * a.shape[1] * b.shape[1] >= TINY and _tiles_can_run(a, b, out)
            and _plan(a, b, out, b_stays)[0] == "tiles")


def _tiles_into(out, a, b):
    return bf16_gemm.matmul_f32_into(out, a, b)


def _transposed(b):
    return np.ascontiguousarray(b.T)


def matmul(a, b, out, b_stays=False):
    """out[...] = a @ b for 2-D a (M, K), b (K, N) and out (M, N) of one float dtype; `a` and `b`
    may be transposed views. Never writes a or b. `b_stays`: b is a weight that stays the same
    between calls (filter_cache's terms), so its transpose may be kept.

    Which kernel runs a product that more than one can run (`_nt` on b's transpose, BLAS blocks
    on numba's team, np.matmul on one thread) is measured, per shape and CPU (`_choose`): on
    Intel Xeon (session 6) `_nt` won at few rows with weights cold from memory (0.64-0.84 of
    the team's time at ResNet-50's 49-row 7x7 layers, 0.43 at 1 row); on AMD EPYC it lost 2x
    from 32 rows up even with 8 MB weights, and np.matmul on one thread beat the team below
    ~1M multiply-adds (the team's jobs array and wake-up cost more than the product)."""
    M, K = a.shape
    N = b.shape[1]
    if M * N * K < TINY:   # what the checks in _plan would decide, without them
        np.matmul(a, b, out=out)
        return
    run, bt, jobs = _plan(a, b, out, b_stays)
    if run == "nn":
        _nn_team(a, b, out)
        return
    if run == "tiles" and _tiles_into(out, a, b):
        return
    if run == "nt":
        _nt_team(a, bt, out)
        return
    if run == "team":
        if jobs is None:
            jobs = _team_jobs(a, b, out, M, K, N)
        if jobs is not None:
            _run(_team if len(jobs) > 1 and get_num_threads() > 1 else _one, jobs,
                 out.dtype == np.float64)
            return
    numpy_matmul(a, b, out)


_job_templates = {}    # layout key -> the blocks with zero base addresses, or None


def _team_jobs(a, b, out, M, K, N):
    """The product's blocks for numba's team (one BLAS call per row), or None when the team
    cannot run it (layouts BLAS cannot read in place, too small, another dtype, overlaps).
    The blocks depend on the layout only: they are worked out once per layout and the call's
    addresses added (building them from tuples cost more than a 64x64x256 product)."""
    if not _team_can_run(a, b, out, M * N * K):
        return None
    key = (out.dtype.char, M, K, N, a.strides, b.strides, out.strides)
    t = _job_templates.get(key, False)
    if t is False:
        t = _job_templates[key] = _job_template(a, b, out, M, K, N)
    if t is None:
        return None
    return _add_addresses(t, a, b, out)


@njit(cache=True, nogil=True)
def _add_addresses(t, a, b, out):
    """The template's blocks at these operands' addresses (numpy's .ctypes costs ~3 us each)."""
    jobs = t.copy()
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    for i in range(jobs.shape[0]):
        jobs[i, 5] += pa
        jobs[i, 7] += pb
        jobs[i, 9] += pc
    return jobs


def _job_template(a, b, out, M, K, N):
    dt = out.dtype
    fa, fb = _operand(a, M, K), _operand(b, K, N)
    if fa is None or fb is None or out.strides[1] != dt.itemsize \
            or out.strides[0] != N * dt.itemsize:
        return None
    P = _blocks()
    if P > 1 and M >= ROWS_MIN * P and (M >= N or N < 2 * BLOCK * P):   # row blocks
        step = _ceil(_ceil(M, P), BLOCK) * BLOCK
        return np.array([(fa[0], fb[0], min(step, M - r), N, K, r * a.strides[0], fa[1],
                          0, fb[1], r * out.strides[0], N) for r in range(0, M, step)],
                        np.int64)
    if P > 1 and N >= 2 * BLOCK * P:       # column blocks (few rows: 7x7 layers, small batch)
        step = _ceil(_ceil(N, P), BLOCK) * BLOCK
        return np.array([(fa[0], fb[0], M, min(step, N - c), K, 0, fa[1],
                          c * b.strides[1], fb[1], c * out.strides[1], N)
                         for c in range(0, N, step)], np.int64)
    return np.array([(fa[0], fb[0], M, N, K, 0, fa[1], 0, fb[1], 0, N)], np.int64)


# Kernel choice by measurement. A product's key: dtype, M x K x N, the operands' layouts and
# where `_nt`'s weight comes from; its choice is measured on first use, on the call's own
# operands (caches as the program leaves them) into a scratch output, each candidate once to
# warm up and then CHOICE_RUNS times alternately, the fastest minimum wins. The user's output
# is only ever written by the chosen kernel, and a choice never changes afterwards in a
# process, so a product's bits do not depend on when it ran or on the threads at hand.
# Choices are kept on disk (`<cache dir>/gemm_choice.json`) per CPU model and numba pool size;
# TF_BACKEND_AUTOTUNE=measure measures again. CHOOSE = False: the earlier fixed rule (`_nt`
# whenever it can run, else the team, else np.matmul), for A/B runs.
CHOOSE = True
CHOICE_RUNS = 5
SOLO_MAX = 1 << 22   # multiply-adds up to which np.matmul on one thread competes with the team
_choices = {}            # key -> "nt" | "team" | "blas" | "tiles", this process
_choice_stats = {"measured": 0, "loaded": 0, "won": {}}
_choice_file = {"table": None}
_choice_lock = threading.Lock()


def _choice_key(a, b, out, bt):
    """dtype, M, K, N, whether a and b are read untransposed, and where `_nt`'s weight comes
    from (none, b's own transposed layout, a kept transpose)."""
    it = out.itemsize
    src = 0 if bt is None else (1 if b.strides[0] == it else 2)
    return (out.dtype.char, a.shape[0], a.shape[1], b.shape[1], a.strides[1] == it,
            b.strides[1] == it, src)


_CHOICE_TABLE = "gemm_choice.json"   # in kernels.cache_dir(): {host key: {shape key: kernel}}
CHOICE_VERSION = 2   # the candidates changed (2: the float32 tiles): choices measured anew


def _host_key():
    from shape_fns.host import cpu_key
    return f"{cpu_key()} pool={_blocks()} v{CHOICE_VERSION}"


def _disk_table():
    if _choice_file["table"] is None:
        import kernels
        _choice_file["table"] = kernels.host_choices(_CHOICE_TABLE, _host_key())
    return _choice_file["table"]


# TF_BACKEND_GEMM_RECORD=0: choices hold for the process only (the test suite: two xdist
# workers on two cores measure each other's load; a choice measured there and kept had a
# 64x256x256 transposed-weight product run `_nt` at 129 us where the team takes 68)
RECORD = os.environ.get("TF_BACKEND_GEMM_RECORD", "1") != "0"


def _record(key, choice):
    if RECORD:
        import kernels
        kernels.record_choice(_CHOICE_TABLE, _host_key(), key, choice)


def _choose(key, a, b, out, bt, jobs, tiles=False):
    # np.matmul on one thread is a candidate only where the team is one thread too or the
    # product is small enough for the team's wake-ups to matter: a measurement disturbed by
    # other work (two test workers on two cores) must not leave a large product at half speed
    # for good, as one left ResNet-50's 49 x 512 x 2048 products on one thread
    solo = jobs is None or len(jobs) == 1 or a.shape[0] * a.shape[1] * b.shape[1] < SOLO_MAX
    cands = (([] if bt is None else ["nt"]) + ([] if jobs is None else ["team"])
             + (["blas"] if solo else []) + (["tiles"] if tiles else []))
    if key is None or len(cands) == 1:
        return cands[0]
    name = "|".join(map(str, key))
    with _choice_lock:
        got = _disk_table().get(name)
        if got in cands:
            _choices[key] = got
            _choice_stats["loaded"] += 1
            return got
    got = _measure(a, b, bt, out, jobs, cands)
    with _choice_lock:
        _choices[key] = got
        _disk_table()[name] = got
        _choice_stats["measured"] += 1
        _choice_stats["won"][got] = _choice_stats["won"].get(got, 0) + 1
        _record(name, got)
    return got


def _measure(a, b, bt, out, jobs, cands):
    scratch = np.empty_like(out)
    if jobs is not None:    # the same blocks, written to the scratch output
        jobs = jobs.copy()
        jobs[:, 9] += scratch.ctypes.data - out.ctypes.data
    double = out.dtype == np.float64
    fns = {"nt": lambda: _nt_team(a, bt, scratch),
           "team": lambda: _run(_team if len(jobs) > 1 and get_num_threads() > 1 else _one,
                                jobs, double),
           "blas": lambda: numpy_matmul(a, b, scratch),
           "tiles": lambda: _tiles_into(scratch, a, b)}
    best = {c: float("inf") for c in cands}
    for c in cands:
        fns[c]()
    for _ in range(CHOICE_RUNS):
        for c in cands:
            t0 = time.perf_counter()
            fns[c]()
            best[c] = min(best[c], time.perf_counter() - t0)
    return min(cands, key=lambda c: (best[c], cands.index(c)))


def choice_stats():
    """{"measured", "loaded", "won": {kernel: n}, "shapes": n}: products whose kernel was
    measured or loaded from disk in this process, and which won."""
    with _choice_lock:
        return {"measured": _choice_stats["measured"], "loaded": _choice_stats["loaded"],
                "won": dict(_choice_stats["won"]), "shapes": len(_choices)}


def _run(fn, jobs, double):
    single_thread_enter()
    try:
        fn(jobs, double)
    finally:
        single_thread_exit()


def matmul_stacked(a, b, out):
    """out[i] = a[i] @ b[i] for 3-D float arrays (Winograd's 16 products, batched matmuls): the
    products are shared out among the team's threads. a[i] and b[i] may be transposed views;
    out's matrices must be C-contiguous."""
    B, M, K = a.shape
    N = b.shape[2]
    it = out.itemsize
    fa = _operand(a[0], M, K) if B else None
    fb = _operand(b[0], K, N) if B else None
    if (fa is None or fb is None or out.strides[2] != it or out.strides[1] != N * it
            or not _team_can_run(a, b, out, B * M * N * K)):
        numpy_matmul(a, b, out)
        return
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    sa, sb, sc = a.strides[0], b.strides[0], out.strides[0]
    jobs = np.array([(fa[0], fb[0], M, N, K, pa + i * sa, fa[1], pb + i * sb, fb[1],
                      pc + i * sc, N) for i in range(B)], np.int64)
    _run(_team if get_num_threads() > 1 else _one, jobs, out.dtype == np.float64)


STACK_MAX = 4096   # batched products with more matrices than this go to np.matmul


def matmul_nd(a, b, out, b_stays=False):
    """out = a @ b (numpy's matmul broadcasting) for float arrays of rank >= 2; `out` has the
    broadcast shape. A weight shared by the whole batch (a Keras
    Dense layer on a sequence: (..., M, K) @ (K, N)) makes one 2-D product over all rows;
    other batches run one matrix product per job on the team. Anything else (a non-contiguous
    `out`, a batch no single stride walks) goes to np.matmul
    with OpenBLAS held to one thread: its own worker threads spin after a call and would take
    the cores from numba's team (a transformer block's parallel elementwise loops ran 5-10x
    slower after its attention products)."""
    if a.ndim == 2 and b.ndim == 2:
        matmul(a, b, out, b_stays)
        return
    K, N = b.shape[-2], b.shape[-1]
    if (all(d == 1 for d in b.shape[:-2]) and a.shape[:-2] == out.shape[:-2]
            and out.flags.c_contiguous):
        a2 = _merged_rows(a)
        if a2 is not None:
            matmul(a2, b.reshape(K, N), out.reshape(-1, N), b_stays)
            return
    batch = out.shape[:-2]
    count = math.prod(batch)
    if 0 < count <= STACK_MAX and out.flags.c_contiguous:
        a3 = _stacked(a, batch, count)
        b3 = _stacked(b, batch, count)
        if a3 is not None and b3 is not None:
            matmul_stacked(a3, b3, out.reshape((count,) + out.shape[-2:]))
            return
    numpy_matmul(a, b, out)


def _merged_rows(a):
    """a (..., M, K) as a (rows, K) view without a copy, or None."""
    v = a.view()
    try:
        v.shape = (-1, a.shape[-1])
    except AttributeError:
        return None
    return v


def _stacked(a, batch, count):
    """a broadcast to batch + its matrix shape, as a (count, rows, cols) view (stride 0 where
    broadcast) whose matrices are evenly spaced, or None."""
    v = np.broadcast_to(a, tuple(batch) + a.shape[-2:])
    lead = [(n, st) for n, st in zip(v.shape[:-2], v.strides[:-2]) if n != 1]
    step = lead[-1][1] if lead else 0
    expect = step
    for n, st in reversed(lead):   # each leading dimension a whole multiple of the next
        if st != expect:
            return None
        expect = st * n
    return np.lib.stride_tricks.as_strided(v, (count,) + v.shape[-2:],
                                           (step,) + v.strides[-2:], writeable=False)


def numpy_matmul(a, b, out):
    """np.matmul(a, b, out=out) with OpenBLAS held to one thread (no spinning workers)."""
    single_thread_enter()
    try:
        np.matmul(a, b, out=out)
    finally:
        single_thread_exit()
