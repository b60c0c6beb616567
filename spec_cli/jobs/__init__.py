"""`spec-cli batch`: a file (or folder) of requests in, answers out, every request in one engine batch."""
