"""Execution on Spark: the global plan, the cycle engine and the physical operators."""
