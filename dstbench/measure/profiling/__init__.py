"""Profiling: where each case's time, memory and energy go.

`profile_case` (called by the runner when a suite has `profile: true`) runs a few steps that end
in a topology update under `torch.profiler`, saves a Chrome/Perfetto trace under the run folder's
`traces/` and fills the result line's `profile`. `main` is `dstbench profile SUITE`.
"""

from dstbench.measure.profiling.capture import plan_window, profile_case
from dstbench.cli.profile import format_profile, main

__all__ = ["format_profile", "main", "plan_window", "profile_case"]
