"""Shape functions: matmul ops."""
