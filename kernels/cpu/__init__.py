"""CPU device kernels (numba, numpy, BLAS)."""
import numba

# Kernels may be called from several threads at once; numba's `workqueue` layer aborts the
# process then (DESIGN.md §7). Ask for a thread-safe layer (omp or tbb) unless the user chose
# one; numba raises a clear error at the first parallel kernel if neither is available.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"
