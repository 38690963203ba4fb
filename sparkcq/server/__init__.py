"""The long-running service: one engine, a cycle loop, and a control API over HTTP/JSON."""
