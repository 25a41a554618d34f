"""The `torchrun` launcher: its config model (`config`) and launcher (`launcher`)."""
