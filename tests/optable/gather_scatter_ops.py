"""Op table: gather scatter ops."""
CASES = []
