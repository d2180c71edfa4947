"""CPU kernels: loss ops."""
