"""CPU device kernels (numba, numpy, BLAS)."""
import os

# numba's OpenMP workers must not spin long after a parallel loop: on 2 cores they starve BLAS
# and TensorFlow's own threads (ResNet-50 through our programs: 307 ms with libgomp's default
# spin, ~150-160 ms with a short one). Passive waiting instead costs every back-to-back launch a
# wake-up (1M-element Relu 1.2x slower; `tfb bench` mlp-b64 6% slower than with 20000). Keras
# training steps mix our kernels with TensorFlow's and serial loops, where a spinning worker
# only takes the other core: on the AVX2 EPYC VM a recurrent classifier's step used 53 ms of
# CPU for 33 ms wall with 20000 spins, 33 ms for 25-26 ms wall with 2000 (an MLP fit's step
# 8.8 -> 6.5 ms of CPU, wall 5.4 -> 5.0), the benchmarks unchanged. libgomp reads this at the
# first parallel kernel. On the 2-core Zen 5 VM (session 20) 20000 made our tf.function loops
# 8-15% faster (a Transformer block b1 1.34-1.39 -> 1.17 ms: a team product after a serial
# stretch waits ~40-100 us for the sleeping worker) and whole scripts no faster, while a Keras
# MLP fit ran ~20% slower in 2 of 4 runs: kept at 2000.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "2000")

import numba  # noqa: E402

# Kernels may be called from several threads at once; numba's `workqueue` layer aborts the
# process then (DESIGN.md §7). Ask for a thread-safe layer (omp or tbb) unless the user chose
# one; numba raises a clear error at the first parallel kernel if neither is available.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"

from . import jit as _jit  # noqa: E402

_jit.lock_cache_saves()   # before any kernel is compiled and saved
_jit.defer_linking_bitcode()   # before any kernel is loaded
