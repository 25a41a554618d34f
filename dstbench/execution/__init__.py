"""Running a suite: orchestration, the case session inside a case process, interleaved rounds,
the accuracy track, progress, process lifelines, and the launchers (one folder each)."""
