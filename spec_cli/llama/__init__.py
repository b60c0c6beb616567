"""llama.cpp: the only layer that imports `llama_cpp` (backend), and what batches cost here (probe)."""
