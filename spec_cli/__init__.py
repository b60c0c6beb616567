"""spec-cli: exact speculative decoding for local GGUF models on llama.cpp."""

__version__ = "0.1.0"

from .llama.cores import started  # noqa: E402  (first: what other programs use is counted from here)

__all__ = ["__version__", "started"]
