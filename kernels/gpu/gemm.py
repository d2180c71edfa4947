"""Row-major products on cuBLAS through its C API (cublasGemmEx), on the current stream.

CuPy's own cuBLAS calls refuse to run while a stream is being captured (its setStream guard),
so a program recorded into a CUDA graph could not contain a product. This module calls the
same cuBLAS library that CuPy loaded (found in the process's mapped libraries after CuPy's
first product), with one handle per thread, a workspace of our own (so nothing is allocated
during capture, as cuBLAS's documentation for graphs asks) and float32 accumulation for
float16 (CUBLAS_COMPUTE_32F: no TF32, no half accumulation).
"""
import ctypes
import threading

import cupy
import numpy as np

OP_N, OP_T = 0, 1
CUDA_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
WORKSPACE = 32 << 20

_lib = None
_lock = threading.Lock()
_local = threading.local()


def _library():
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            a = cupy.ones((2, 2), np.float32)
            cupy.matmul(a, a)                 # makes CuPy load libcublas
            cupy.cuda.get_current_stream().synchronize()
            path = None
            with open("/proc/self/maps") as f:
                for line in f:
                    name = line.rsplit(None, 1)[-1]
                    if "/libcublas.so" in name:
                        path = name
                        break
            if path is None:
                raise RuntimeError("CuPy's cuBLAS is not mapped in this process")
            lib = ctypes.CDLL(path)
            vp, i = ctypes.c_void_p, ctypes.c_int
            lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
            lib.cublasSetStream_v2.argtypes = [vp, vp]
            lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
            lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i,
                                         i, i, i]
            _lib = lib
    return _lib


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed with status {status}")


def _handle():
    h = getattr(_local, "handle", None)
    if h is None:
        lib = _library()
        h = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        ws = cupy.empty(WORKSPACE, np.uint8)
        _check(lib.cublasSetWorkspace_v2(h, ws.data.ptr, WORKSPACE), "cublasSetWorkspace")
        _local.handle, _local.workspace = h, ws
    return h


_ONE32, _ZERO32 = ctypes.c_float(1.0), ctypes.c_float(0.0)
_ONE64, _ZERO64 = ctypes.c_double(1.0), ctypes.c_double(0.0)


def matmul(a, b, out, transpose_a=False, transpose_b=False):
    """out[m, n] = op(a) @ op(b) for C-contiguous 2-D CuPy arrays of one float dtype."""
    m, n = out.shape
    k = a.shape[0] if transpose_a else a.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        out.fill(0)
        return
    lib, h = _library(), _handle()
    t = CUDA_TYPES[np.dtype(out.dtype)]
    wide = out.dtype == np.float64
    one, zero = (_ONE64, _ZERO64) if wide else (_ONE32, _ZERO32)
    _check(lib.cublasSetStream_v2(h, cupy.cuda.get_current_stream().ptr), "cublasSetStream")
    # row-major C = A @ B is column-major C^T = B^T @ A^T: B first, then A
    _check(lib.cublasGemmEx(h, OP_T if transpose_b else OP_N, OP_T if transpose_a else OP_N,
                            n, m, k, ctypes.byref(one), b.data.ptr, t, b.shape[1],
                            a.data.ptr, t, a.shape[1], ctypes.byref(zero), out.data.ptr, t, n,
                            COMPUTE_64F if wide else COMPUTE_32F, GEMM_DEFAULT), "cublasGemmEx")
