"""Physical operators, one module each; ``lower`` picks the operator for a plan node."""
