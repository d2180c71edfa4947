"""Shape functions: nn ops."""
