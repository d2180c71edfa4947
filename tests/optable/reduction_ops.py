"""Op table: reduction ops."""
CASES = []
