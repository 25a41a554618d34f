"""The `subprocess` launcher: its config model (`config`) and launcher (`launcher`)."""
