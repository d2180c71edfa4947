"""Op table: depthwise ops."""
CASES = []
