"""Op table: norm ops."""
CASES = []
