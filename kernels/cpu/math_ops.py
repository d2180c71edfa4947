"""CPU kernels: math ops."""
