"""Shape functions: image ops."""
