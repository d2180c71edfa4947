"""Shape functions: einsum ops."""
