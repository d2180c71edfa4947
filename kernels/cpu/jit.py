"""numba compilation helpers for the CPU kernels."""
import types

from numba import njit


def parallel(fn, **options):
    """njit(parallel=True, cache=True, nogil=True, **options) over a copy of `fn` with its own
    qualified name.

    numba's on-disk cache files a function under its qualified name and first line, and keys
    the entries by signature and bytecode only, not by options such as parallel=True. The
    serial and the parallel compilation of one function therefore load each other's machine
    code: whichever compiled first served both (measured: the "parallel" im2col and Winograd
    transforms ran on one thread, and the GEMM team's parallel driver once ran its blocks in
    turn, ResNet-50 taking 108 ms instead of 60). A copy named `<name>__parallel` gets its own
    cache file."""
    clone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "__parallel",
                               fn.__defaults__, fn.__closure__)
    clone.__qualname__ = fn.__qualname__ + "__parallel"
    clone.__module__ = fn.__module__
    clone.__doc__ = fn.__doc__
    opts = {"cache": True, "nogil": True, **options, "parallel": True}
    return njit(**opts)(clone)
