"""Op table: matmul ops."""
CASES = []
