"""CPU kernels: matmul ops."""
