"""Op table: einsum ops."""
CASES = []
