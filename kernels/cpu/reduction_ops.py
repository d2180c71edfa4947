"""CPU kernels: reduction ops."""
