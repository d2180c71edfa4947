"""Op table: loss ops."""
CASES = []
