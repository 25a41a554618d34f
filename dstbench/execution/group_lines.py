"""A run's lines as its groups end: the last line of each case in a run folder, and how a finished
group's results join the lines already there (shared cases across groups, `mode: both`'s timing and
training phases, a group timed again) in one write. `dstbench.execution.orchestrator` calls these as
the launcher hands groups back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dstbench.execution.launchers.base import GroupRun
from dstbench.execution.resume_machine import machine_differences
from dstbench.results.merge import merge_phases, merge_shared, strip_group
from dstbench.results.record import CaseResult, append_result, iter_results, replace_results
from dstbench.suite.groups import base_key, trained_line
from dstbench.suite.plan import run_line_key
from dstbench.suite.schema import SuiteConfig


def latest_lines(run_dir: Path, suite: SuiteConfig, ok_only: bool = False) -> dict[str, dict[str, Any]]:
    """The last line of each case in the run folder (a later line for a case wins, as in reports),
    by the key `suite`'s cases have (`run_line_key`: the case id, and the seed with `seeds:`);
    `ok_only`: only those whose status is ok (`--retry-failed` times the others again)."""
    key = run_line_key(suite)
    return {key(line): line for line in iter_results(run_dir) if not ok_only or line.get("status") == "ok"}


def write_group(
    run_dir: Path, suite: SuiteConfig, timed: GroupRun, shared: set[str], written: set[str], retry_failed: bool = False,
    here: dict[str, Any] | None = None, phase: str = "",
) -> list[CaseResult]:
    """A finished group's lines. A case timed in several groups (dense; the reference of pairs split
    from a group) merges with its line from the other groups, less what an earlier timing of this
    group left; a group timed again replaces its old lines; other lines are appended. Lines are
    keyed as `suite`'s cases are (`run_line_key`), so each seed's line is its own. `written`: the
    ids of the groups timed so far by this run (updated). `retry_failed`: a failed old line is
    replaced, never merged; so is a line timed on another machine than `here` (`--allow-other-machine`).
    `phase` (`mode: both`): a training joins its (case, seed)'s timing line (`merge_phases`), and a
    timing keeps the training a line already holds."""
    key = run_line_key(suite)
    every_line = latest_lines(run_dir, suite)
    # The lines a new timing merges with: with --retry-failed a failed old line is replaced whole.
    lines = {
        case: line for case, line in every_line.items()
        if (not retry_failed or line.get("status") == "ok") and not (here and machine_differences(line, here))
    }
    results = []
    for result in timed.results:
        result_key = key({"case_id": result.case_id, "seed": result.seed})
        old = lines.get(result_key)
        if phase == "training":
            results.append(merge_phases(old, result) if old is not None else result)
            continue
        if old is not None:
            earlier = [g for g in old.get("groups") or [] if g in written]
            if result_key in shared or earlier:
                if not any(base_key(g) == timed.group.base for g in earlier):
                    old = strip_group(old, timed.group.base)
                result = merge_shared(old, result)
            if phase == "timing" and trained_line(old) and old.get("status") == "ok":
                result = merge_phases(result, old)  # timed again after its training: the training stays
        results.append(result)
    # The groups this timing made, not those a merged line carries from before this run: an old
    # group of this density counted as written would be merged with its new timing, not replaced.
    written.update([timed.group_id, *(g for r in timed.results for g in r.groups)])
    replaced = {key({"case_id": r.case_id, "seed": r.seed}) for r in results} & set(every_line)
    if replaced or len(results) > 1:
        # One atomic rewrite: an interruption never leaves half a group in results.jsonl.
        replace_results(run_dir, replaced, results, key=key)
    else:
        for result in results:
            append_result(run_dir, result)
    return results


def failed_in(line: dict[str, Any] | None, written: set[str]) -> bool:
    """Whether `line` failed in one of the groups this run timed (`written`)."""
    return line is not None and line.get("status") != "ok" and any(g in written for g in line.get("groups") or [])

