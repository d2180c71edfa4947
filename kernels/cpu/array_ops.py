"""CPU kernels: array ops."""
