"""The `inprocess` launcher: its config model (`config`) and launcher (`launcher`)."""
