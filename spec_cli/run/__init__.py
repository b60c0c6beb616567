"""Sessions: the speculative loop (engine), proposers, loading a pair, one generation (session), bench."""
