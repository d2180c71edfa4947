"""Shape functions: gather scatter ops."""
