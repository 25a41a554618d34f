"""Compact DST: physically sized ViT blocks, importance statistics, tensor surgery."""
