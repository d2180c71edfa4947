"""CPU device kernels (numba, numpy, BLAS)."""
import os

# How long numba's OpenMP workers spin after a parallel loop before they sleep (libgomp reads
# GOMP_SPINCOUNT at the first parallel kernel; a user's setting, or OMP_WAIT_POLICY, wins).
# Too long starves BLAS and TensorFlow's own threads on 2 cores (ResNet-50 through our programs:
# 307 ms with libgomp's default 300000, ~150-160 ms with a short spin). Too short costs every
# team kernel after a serial stretch a wake-up of the sleeping worker: 40-100 us on the Zen 5 VM,
# and on the AVX2-only EPYC (Zen 3) VM of session 21, where a thread hand-off costs ~50 us each
# way, our tf.function runs paid it several times a call. There a spin of 30000 (~1 ms of the
# other core after the last team kernel) against 2000 (~65 us), stock and ours in one process:
# Transformer block b1 5.88 -> 4.35 ms (stock 5.1-5.2), MLP b64 2.13 -> 1.33 ms (stock 1.6-1.9),
# MLP SGD step 3.72 -> 3.00 ms, MNIST CNN step 26.8 -> 25.1 ms, recurrent step 16.7 -> 16.0 ms;
# whole scripts: the MNIST-shaped training script (`tfb ab --repeats 4`) 12.43 -> 10.94 s
# (stock 12.1-12.7), the recurrent classifier's fit (5 shuffled rounds) and a Keras MLP fit
# with Adam (3 runs) unchanged within the VM's noise; 300000 was slower than 30000. Earlier
# sessions kept 2000: on the Zen 5 VM 20000 made tf.function loops 8-15% faster and a Keras MLP
# fit slower in 2 of 4 runs, and an older AVX2 EPYC session measured a recurrent step using
# more CPU for no gain. Compare CPU time as well as wall when changing this.
SPIN_COUNT = "30000"
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)

import numba  # noqa: E402

# Kernels may be called from several threads at once; numba's `workqueue` layer aborts the
# process then (DESIGN.md §7). Ask for a thread-safe layer (omp or tbb) unless the user chose
# one; numba raises a clear error at the first parallel kernel if neither is available.
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"

from . import jit as _jit  # noqa: E402

_jit.lock_cache_saves()   # before any kernel is compiled and saved
_jit.defer_linking_bitcode()   # before any kernel is loaded
