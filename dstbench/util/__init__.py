"""Helpers every layer may use: text for people, exit codes, optional extras, bounded YAML, files,
torch.distributed and thread counts. Nothing here imports another dstbench module."""
