"""Shape functions: array ops."""
