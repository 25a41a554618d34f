"""Regression gates: suite expectations, run-to-run comparison, pytest-benchmark export."""
