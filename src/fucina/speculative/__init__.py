"""Backend-free speculative layers: draft sources, indexes, the decoder and its gate.

Nothing in this package imports a backend or llama_cpp (a test enforces it).
"""
