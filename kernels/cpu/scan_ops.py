"""CPU kernels: scan ops."""
