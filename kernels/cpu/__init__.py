"""CPU device kernels (numba, numpy, BLAS)."""
