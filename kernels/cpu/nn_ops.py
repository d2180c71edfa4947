"""CPU kernels: nn ops."""
