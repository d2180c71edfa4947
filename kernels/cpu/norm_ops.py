"""CPU kernels: norm ops."""
