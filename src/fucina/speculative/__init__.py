"""Backend-free speculative layers: the draft contract, the draft sources and indexes, the drafting
policy and the decoder.

Nothing in this package imports a backend or llama_cpp (a test enforces it).
"""
