"""CPU device kernels (numba, numpy, BLAS)."""
import os

# numba's OpenMP workers must not spin after a parallel loop: on 2 cores they starve BLAS and
# TensorFlow's own threads (ResNet-50 through our programs: 307 ms spinning, 160 ms passive).
# libgomp reads this when numba first loads its OpenMP layer, i.e. at the first parallel kernel.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402

# Kernels may be called from several threads at once; numba's `workqueue` layer aborts the
# process then (DESIGN.md §7). Ask for a thread-safe layer (omp or tbb) unless the user chose
# one; numba raises a clear error at the first parallel kernel if neither is available.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"
