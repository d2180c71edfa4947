"""CPU kernels: image ops."""
