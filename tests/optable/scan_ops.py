"""Op table: scan ops."""
CASES = []
