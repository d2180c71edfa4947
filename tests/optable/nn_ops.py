"""Op table: nn ops (conv, pooling, softmax, bias)."""
CASES = []
