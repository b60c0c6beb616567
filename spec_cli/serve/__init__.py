"""spec-cli serve: the HTTP server (needs the `serve` extra)."""
