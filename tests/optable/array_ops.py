"""Op table: array ops (data movement; exact comparison)."""
CASES = []
