"""A `Comparison` as text: the table of matched cases and the whole report `dstbench compare`
prints, on the terminal or as Markdown (a pull-request comment), ending in the gate's verdict."""

from __future__ import annotations

import math

from tabulate import tabulate

from dstbench.gates.compare import CaseComparison, Comparison, exit_code
from dstbench.gates.time_rule import TimeVerdict, interval_level
from dstbench.gates.sides import key_text, several_seeds
from dstbench.util.exitcodes import EXIT_FAILED, EXIT_USAGE
from dstbench.util.text import markdown_text, percent


def _time_cell(t: TimeVerdict | None, threshold: float) -> str:
    if t is None:
        return "—"
    times = f"{t.baseline_ms:.1f} -> {t.current_ms:.1f} ms"
    if not math.isfinite(t.ratio):
        return times
    change = f"{t.ratio:.3f}x" + (f" [{t.ci_low:.3f}, {t.ci_high:.3f}]" if math.isfinite(t.ci_low) else "")
    # The p of the test against the band's edge on the estimate's side, Holm-adjusted.
    edge = f"{1 + threshold / 100:g}x" if t.ratio >= 1 else f"{max(0.0, 1 - threshold / 100):g}x"
    return f"{times} ({change}, p vs {edge} = {t.p_value:.3g})"


def _memory_cell(c: CaseComparison, metric: str) -> str:
    for m in c.memory:
        if m.metric == metric:
            return f"{m.current:,} ({percent(m.change, digits=2, signed=True)})" if m.change else f"{m.current:,} (=)"
    return "—"


def _verdict_cell(c: CaseComparison) -> str:
    if c.regressions:
        return "REGRESSION: " + ", ".join(c.regressions)
    if c.improvements:
        return "improved: " + ", ".join(c.improvements) + ("; INCONCLUSIVE: time" if c.inconclusive else "")
    if c.inconclusive:
        return f"INCONCLUSIVE: time ({c.time.why})"
    if c.baseline_status != "ok" or c.current_status != "ok":
        return f"not compared ({c.baseline_status} -> {c.current_status})"
    if c.time is not None and c.time.verdict == "shift accepted":
        return "ok (a shift of every case, accepted: --accept-machine-shift)"
    return "ok"


def _points(value: float, signed: bool = False) -> str:
    return f"{value * 100:{'+' if signed else ''}.2f}" if math.isfinite(value) else "—"


def top1_table(comparison: Comparison, fmt: str = "simple") -> str:
    """One row per trained case: top-1 on each side (mean over its seeds), the change in points with
    its (1 - 2 alpha) interval and what it rests on, and the verdict (`dstbench.gates.top1_compare`)."""
    rows = []
    for t in comparison.top1:
        change = f"{_points(t.change, True)} pp" + (
            f" [{_points(t.ci_low, True)}, {_points(t.ci_high, True)}]" if math.isfinite(t.ci_low) else "")
        rows.append([t.case, f"{_points(t.baseline)}%", f"{_points(t.current)}%", change, t.basis, t.verdict, t.note])
    if fmt == "github":
        rows = [[markdown_text(cell) for cell in row] for row in rows]
    threshold = comparison.settings.get("top1_threshold", 1.0)
    level = f"{interval_level(comparison.settings.get('alpha', 0.05)) * 100:g}%"
    headers = ["case", "top-1 baseline", "top-1 current", f"change [{level} CI]", "over", f"verdict (+/-{threshold:g} pp)", "notes"]
    return "top-1 (mean over each run's seeds):\n" + tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


def fields_table(comparison: Comparison, fmt: str = "simple") -> str:
    """One row per case and tracker field asked for (`--metric`): each side's mean, the relative
    change with its interval where sampled, what it rests on, the verdict (`dstbench.gates.field_compare`)."""
    rows = []
    for v in comparison.fields:
        interval = f" [{v.ci_low * 100:+.1f}, {v.ci_high * 100:+.1f}]" if math.isfinite(v.ci_low) else ""
        change = f"{v.change * 100:+.1f}%{interval}" if math.isfinite(v.change) else "new"
        unit = f" {v.unit}" if v.unit else ""
        rows.append([v.metric, v.case, f"{v.baseline:.4g}{unit}", f"{v.current:.4g}{unit}", change, v.basis, v.verdict, v.note])
    if fmt == "github":
        rows = [[markdown_text(cell) for cell in row] for row in rows]
    level = f"{interval_level(comparison.settings.get('alpha', 0.05)) * 100:g}%"
    headers = ["metric", "case", "baseline", "current", f"change [{level} CI]", "over", "verdict", "notes"]
    return "tracker fields (--metric; mean over each run's seeds):\n" + tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


def table(comparison: Comparison, fmt: str = "simple") -> str:
    """One row per matched case; `fmt` is a tabulate format ("simple", "github")."""
    s = comparison.settings
    with_peak = any(m.metric == "peak" for c in comparison.cases for m in c.memory)
    level = f"{interval_level(s['alpha']) * 100:g}%"
    headers = ["case"] + ([] if s["memory_only"] else [f"time (median per segment; change [{level} CI], Holm-adjusted p)"])
    headers += (["peak bytes"] if with_peak else []) + ["state bytes", "activation bytes", "verdict", "notes"]
    rows = []
    for c in comparison.cases:
        row = [c.case] + ([] if s["memory_only"] else [_time_cell(c.time, s["time_threshold"])])
        row += ([_memory_cell(c, "peak")] if with_peak else [])
        row += [_memory_cell(c, "state"), _memory_cell(c, "activation"), _verdict_cell(c), "; ".join(c.notes)]
        rows.append(row)
    if fmt == "github":  # Markdown: names and notes come from user files
        rows = [[markdown_text(cell) for cell in row] for row in rows]
    return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


def render(comparison: Comparison, *, strict: bool = False, markdown: bool = False) -> str:
    """The whole report: settings, environment warnings, the table, one-sided cases, a summary."""
    s = comparison.settings
    gates = f"memory +/-{s['memory_threshold']:g}%"
    if not s["memory_only"]:
        basis = {"relative": "relative to each run's dense, dense on its own times", "absolute": "absolute"}.get(
            s.get("time_basis"), "relative to each run's dense where both have it, dense on its own times, else absolute")
        band, level = f"+/-{s['time_threshold']:g}%", f"{interval_level(s['alpha']) * 100:g}%"
        gates = (
            f"time ({basis}, across processes): changed when beyond {band} at one-sided p < {s['alpha']:g}, "
            f"Holm-adjusted over {s.get('tests', 0)} cases; unchanged when the {level} interval lies inside {band} "
            "(two one-sided tests); " + gates
        )
    lines = [("## " if markdown else "") + "dstbench compare", ""]
    for label, side in (("baseline", comparison.baseline), ("current", comparison.current)):
        where = f"`{side.path}`" if markdown else str(side.path)
        commit = side.meta.get("commit") or ("unknown: not a git checkout" if side.meta.get("source") == "not a git checkout" else "unknown")
        lines.append(f"{'- ' if markdown else ''}{label}: {where} (commit {commit})")
    lines += [f"{'- ' if markdown else ''}gates: {gates}", ""]
    for difference in comparison.env_differences:
        lines.append(f"{'ERROR' if strict else 'WARNING'}: {difference}")
    for difference in comparison.protocol_differences:
        lines.append(f"WARNING: {difference} (--allow-protocol-change: every time verdict inconclusive)")
    if comparison.env_differences or comparison.protocol_differences:
        lines.append("")
    lines.append(table(comparison, "github" if markdown else "simple"))
    seeded = several_seeds(comparison.baseline, comparison.current)
    absent = ("only in baseline (allowed: --allow-missing)" if s.get("allow_missing")
              else "MISSING from the current run (a failure; --allow-missing accepts it)")
    other_seeds = [k for k in comparison.only_baseline if k not in comparison.absent]
    for label, keys in ((absent, comparison.absent), ("only in baseline, the case run at other seeds (not compared)", other_seeds),
                        ("only in current (not compared)", comparison.only_current)):
        if keys:
            lines += ["", f"{label}: " + ", ".join(f"{key_text(k, seeded=seeded)} [suite {k.suite_hash}]" for k in keys)]
    for shift in comparison.shifts:
        lines += ["", ("" if shift.accepted or not shift.slower else "TIME REFERENCE: ") + shift.text()]
    if comparison.top1:
        lines += ["", top1_table(comparison, "github" if markdown else "simple")]
    if comparison.fields:
        lines += ["", fields_table(comparison, "github" if markdown else "simple")]
    elif comparison.settings.get("metrics"):
        lines += ["", f"tracker fields ({', '.join(comparison.settings['metrics'])}): no case has a value on both sides"]
    regressed, improved, inconclusive = comparison.regressed, comparison.improved, comparison.inconclusive
    lines += [
        "",
        f"{len(comparison.cases)} cases compared: {len(regressed)} regressed, {len(improved)} improved, "
        f"{len(inconclusive)} inconclusive"
        + (" (--strict: a failure)" if strict and inconclusive else "")
        + (", environment mismatch (--strict)" if strict and comparison.env_differences else ""),
    ]
    if comparison.top1:
        counts = {v: sum(t.verdict == v for t in comparison.top1) for v in ("regression", "improvement", "inconclusive", "unchanged")}
        lines.append(
            f"top-1 of {len(comparison.top1)} cases: {counts['regression']} regressed, {counts['improvement']} improved, "
            f"{counts['inconclusive']} inconclusive, {counts['unchanged']} unchanged"
        )
    verdict = overall_verdict(comparison, strict)
    lines += ["", f"**Verdict: {verdict}**" if markdown else f"verdict: {verdict}"]
    return "\n".join(lines) + "\n"


def overall_verdict(comparison: Comparison, strict: bool = False) -> str:
    """The gate's answer in one line, as the exit code gives it: PASS, FAIL (and which cases
    regressed in what) or ERROR (incomparable environments under --strict)."""
    code = exit_code(comparison, strict)
    if code == EXIT_USAGE:
        return "ERROR: the runs' environments differ (--strict)"
    if code == EXIT_FAILED:
        parts = [f"{c.case} ({', '.join(c.regressions)})" for c in comparison.regressed]
        seeded = several_seeds(comparison.baseline, comparison.current)
        missing = [key_text(k, seeded=seeded) for k in comparison.missing]
        if len(missing) == 1:
            parts.append(f"{missing[0]} (missing from the current run)")
        elif missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            parts.append(f"{len(missing)} cases missing from the current run ({shown})")
        parts += [f"{t.case} (top-1 {_points(t.change, True)} pp)" for t in comparison.top1_regressed]
        parts += [f"{v.case} ({v.metric} {v.change * 100:+.1f}%)" for v in comparison.fields_regressed]
        if strict:
            parts += [f"{v.case} ({v.metric} inconclusive, --strict)" for v in comparison.fields_inconclusive]
            parts += [f"{c.case} (time inconclusive, --strict)" for c in comparison.inconclusive]
            parts += [f"{t.case} (top-1 inconclusive, --strict)" for t in comparison.top1_inconclusive]
        return "FAIL: " + "; ".join(parts)
    return f"PASS: no regression in {len(comparison.cases)} cases"
