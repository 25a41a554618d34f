"""What a report says first: the headline lines printed above the tables (the reference they are
compared against: `dstbench.results.run_folder.choose_reference`, the same for every command)."""

from __future__ import annotations

import pandas as pd

from dstbench.report.time_to_accuracy import target_headline
from dstbench.results.derive import data_loading, headline, run_warnings
from dstbench.report.compact_topology import empty_block_notes


def target_line(to_target: dict) -> str:
    """The headline's time-to-target line: the fastest case to the target, or that none reached it."""
    if not to_target["reached"]:
        return f"no case reached the target ({to_target['target']})"
    return (f"fastest to target: {to_target['method']} at density {to_target['density']:g}, {to_target['ci']} s estimated "
            f"from measured step times over {to_target['seeds']} seed{'s' if to_target['seeds'] != 1 else ''} ({to_target['target']})")


def headline_text(derived: pd.DataFrame) -> str:
    """The fastest case against the reference (or that none is faster), the best memory reduction,
    the cases and expectations tallied, and warnings."""
    from dstbench.report.expectations import counts, coverage_notes, run_verdicts

    h = headline(derived)
    lines = []
    if h["speedup"]:
        s = h["speedup"]
        dense = s.get("vs_dense")
        basis = ", ".join(x for x in (s.get("basis"), s.get("covers")) if x)
        basis = f", {basis}" if basis else ""
        lead = f"fastest vs {h['reference']}: " if s["faster"] else f"no method faster than {h['reference']}; closest "
        lines.append(
            f"{lead}{s['value']:.2f}x ({s['method']} at density {s['density']:g}, "
            f"{s['ci']}{basis}{', contended' if s.get('contended') else ''})"
            + (f"; vs dense {dense['value']:.2f}x ({dense['ci']})" if dense else "")
        )
    to_target = target_headline(derived)
    if to_target is not None:
        lines.append(target_line(to_target))
    if h["memory"]:
        m = h["memory"]
        harness = "; " + ", ".join(h["harness"]) + " for every method" if h.get("harness") else ""
        lines.append(
            f"best memory reduction vs {h['reference']}: {m['value'] * 100:.1f}% ({m['method']} at density "
            f"{m['density']:g}, {m['basis']}{harness})"
        )
    lines.append(f"cases: {h['cases'] - h['failed']} of {h['cases']} ok" + (f", {h['failed']} failed" if h["failed"] else ""))
    for note in coverage_notes(derived):
        lines.append(f"{'INCOMPLETE RUN' if note['incomplete'] else 'selection'} {note['run']}: {note['summary']}")
    tally = counts(run_verdicts(derived))
    if any(tally.values()):
        lines.append(
            f"expectations: {tally['PASS']} of {tally['PASS'] + tally['FAIL']} passed"
            + (f", {tally['FAIL']} failed" if tally["FAIL"] else "") + (f", {tally['SKIPPED']} skipped" if tally["SKIPPED"] else "")
        )
    loading = data_loading(derived)
    if loading:
        lines.append(f"data loading: {' | '.join(loading)}")
    lines += [f"empty blocks: {note}" for note in empty_block_notes(derived)]
    lines += [f"WARNING {w}" for w in run_warnings(derived)]
    return "\n".join(lines)

