"""llama.cpp: the only layer that imports `llama_cpp` (through lib.py).

One job a module: `model` (load, close, sequences, decode, rewind, catch
up), `vocab` (tokens, pieces, special tokens, chat tokens, detokenizer),
`recurrent` (a recurrent state's checkpoints), `mtp` (the MTP head and its
hidden-state tape), `facts` (numerics, fingerprint, `describe`), `batch`
(the llama_batch and in-graph samplers), `probe` (what batches cost here),
`cpu`/`cpucheck`/`bufts` (what this CPU runs and how weights load),
`gguf` (a file's facts without loading it), `cores` (threads), `peer`
(llama-cpp-python's own loop, for bench).
"""
