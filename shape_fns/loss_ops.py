"""Shape functions: loss ops."""
