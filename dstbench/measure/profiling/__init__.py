"""Profiling: where each case's time, memory and energy go.

`profile_case` (called by the case session, `dstbench.execution.case_session`, when a suite has `profile: true`) runs a few steps that end
in a topology update under `torch.profiler`, saves a Chrome/Perfetto trace under the run folder's
`traces/` and fills the result line's `profile`. The command `dstbench profile SUITE` is `dstbench.cli.profile`.
"""

from dstbench.measure.profiling.capture import plan_window, profile_case

__all__ = ["plan_window", "profile_case"]
