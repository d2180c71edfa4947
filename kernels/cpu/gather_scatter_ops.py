"""CPU kernels: gather scatter ops."""
