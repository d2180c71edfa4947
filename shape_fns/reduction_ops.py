"""Shape functions: reduction ops."""
