"""The CPU device's fused kernels (library "fused_kernels", tf_backend/devices/base.py): what
program passes ask for where several ops run as one, each returning None/False where it does
not apply (the pass's node then runs the ops in turn)."""
from kernels.cpu.half_ops import bias_relu_product
from kernels.cpu.pooling_ops import max_pool_grad_relu

__all__ = ["bias_relu_product", "max_pool_grad_relu"]
