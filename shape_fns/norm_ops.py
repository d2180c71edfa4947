"""Shape functions: norm ops."""
