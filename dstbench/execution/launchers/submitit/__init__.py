"""The `submitit` launcher: its config model (`config`) and launcher (`launcher`)."""
