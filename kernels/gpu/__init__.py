"""GPU device kernels (CuPy); `import cupy` appears only here and in the CUDA device."""
