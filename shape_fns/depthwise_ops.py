"""Shape functions: depthwise ops."""
