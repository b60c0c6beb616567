"""The terminal: live view, progress, tables and errors on stderr (rich)."""
