"""CPU kernels: einsum ops."""
