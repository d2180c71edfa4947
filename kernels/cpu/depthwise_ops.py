"""CPU kernels: depthwise ops."""
