"""Derived artifacts of checkpoints (split, compress): streamed, verified, then renamed."""
