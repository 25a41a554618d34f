"""Helpers every layer may use: text for people, exit codes, optional extras, bounded YAML, files,
torch.distributed, thread counts and the package's version. Nothing here imports another dstbench module."""
