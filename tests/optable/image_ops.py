"""Op table: image ops."""
CASES = []
