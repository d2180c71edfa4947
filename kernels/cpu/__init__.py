"""CPU device kernels (numba, numpy, BLAS)."""
import os

# numba's OpenMP workers must not spin long after a parallel loop: on 2 cores they starve BLAS
# and TensorFlow's own threads (ResNet-50 through our programs: 307 ms with libgomp's default
# spin, ~150-160 ms with a short one). Passive waiting instead costs every back-to-back launch a
# wake-up (1M-element Relu 1.2x slower). libgomp reads this at the first parallel kernel.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")

import numba  # noqa: E402

# Kernels may be called from several threads at once; numba's `workqueue` layer aborts the
# process then (DESIGN.md §7). Ask for a thread-safe layer (omp or tbb) unless the user chose
# one; numba raises a clear error at the first parallel kernel if neither is available.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"
