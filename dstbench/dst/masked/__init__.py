"""Masked (full-tensor) DST: masks, layer distributions, prune and grow scorers."""
