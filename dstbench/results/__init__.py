"""Results: the line record and its merge rules, the run folder, coverage, frames and derived
figures, expectation verdicts. Nothing here imports torch."""
