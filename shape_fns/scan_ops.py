"""Shape functions: scan ops."""
