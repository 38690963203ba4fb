"""Sources that feed streams and sinks that receive query results."""
