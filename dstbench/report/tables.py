"""Tables of derived results: the core table sections of a report, rendered with tabulate for the
terminal and Markdown (the HTML template renders the same `Table` objects)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from tabulate import tabulate

from dstbench.util.text import DASH, NOT_APPLICABLE, ci_text, clip, last_line, mib, missing, percent, present
from dstbench.results.replicates import frame_points, point_of
from dstbench.results.record import segment_samples
from dstbench.report.seeds import format_mean_ci
from dstbench.report.sections import Rendered, Table, register_table
from dstbench.results.pooling import pool_seeds
from dstbench.results.ranking import rank_cases
from dstbench.results.time_to_target import target_text


def _num(value: Any, fmt: str) -> str:
    return DASH if missing(value) else format(float(value), fmt)


def _times(value: Any) -> str:
    return DASH if missing(value) else f"{float(value):.2f}×"


def _speedup(r: pd.Series) -> str:
    if missing(r.get("speedup")):
        return DASH
    text = f"{r['speedup']:.2f}×"
    interval = ci_text(r.get("speedup_ci_low"), r.get("speedup_ci_high"))
    text = f"{text} {interval.removeprefix('95% CI ')}"
    if r.get("speedup_basis") == "unpaired":
        text += " unpaired"  # no segment of the reference was timed in the same round
    return text


def _iqr(r: pd.Series) -> str:
    """The IQR, or n/a for a case timed in fewer than two segments (its IQR would read 0.0)."""
    if r.get("status") == "ok" and len(segment_samples(r.get("segment_ms"))) < 2 and present(r.get("median_ms")):
        return NOT_APPLICABLE
    return _num(r.get("iqr_ms"), ".1f")


def _speedup_vs_dense(r: pd.Series) -> str:
    if missing(r.get("speedup_vs_dense")):
        return DASH
    interval = ci_text(r.get("speedup_vs_dense_ci_low"), r.get("speedup_vs_dense_ci_high"))
    return f"{r['speedup_vs_dense']:.2f}× {interval.removeprefix('95% CI ')}"


def _end_to_end(r: pd.Series) -> str:
    if missing(r.get("speedup_end_to_end")):
        return DASH
    interval = ci_text(r.get("speedup_end_to_end_ci_low"), r.get("speedup_end_to_end_ci_high"))
    return f"{r['speedup_end_to_end']:.2f}× {interval.removeprefix('95% CI ')}"


def _spread(r: pd.Series) -> str:
    """IQR / median, and whether that makes the case noisy (torch.utils.benchmark's thresholds)."""
    if missing(r.get("spread")):
        return DASH
    level = r.get("noise_level")
    return percent(r["spread"]) + (f" {level}" if isinstance(level, str) and level else "")


def _flags(r: pd.Series) -> str:
    """What makes a row's speed figures suspect: contention during its segments, a figure beyond
    what physics allows (docs/guides/reports.md)."""
    flags = ["contended"] if r.get("contended") is True else []
    if r.get("density_off_target") is True:
        flags.append("density off target")
    if isinstance(r.get("implausible"), str) and r["implausible"]:
        flags.append("implausible")
    return ", ".join(flags)


SPEED_NOTE = (
    "achieved is the density the case ran at, at its last timed segment ('off target': more than 0.01 from the "
    "density it is named by, also flagged). n is the number of timed segments; median and interquartile range are per segment, ms/step the median "
    "divided by the segment's steps; IQR/median above 10% marks a case noisy, above 25% very noisy. Speedup "
    "is {ref}'s segment / the method's segment timed in the same round of an interleaved group, its rounds "
    "grouped by the set of fresh processes that timed them: the mean of each process set's median, with a 95% "
    "interval that holds the process-to-process spread pooled over the run ({covers}; rounds in which either "
    "side was starved left out); 'unpaired': ratio of medians with a percentile bootstrap interval, where no "
    "round pairs them. Beside it the same against dense, and end to end: the time of the schedule's "
    "timing.total_steps steps at the step time without updates plus the updates the schedule makes at their "
    "measured cost, {ref}'s over the method's ('—' where an update's cost was not measured or the line predates "
    "the record; the frame's speedup_end_to_end_basis says which); FLOP limit "
    "is the speedup the FLOP count allows and 'of limit' the measured share of it; shape limit (compact methods) "
    "is the speedup small_dense, a plain dense model of the same shapes, reaches, and 'of shape limit' "
    "small_dense's time / the method's; topology share is the fraction of segment time spent in topology "
    "updates. Flags: 'contended', the case's segments were starved of CPU or GPU in one of its groups, or "
    "a quarter of a ratio's rounds were (result line's noise); "
    "'implausible', a figure beyond what physics allows (left out of the headline)."
)


COMPILE_NOTE = (
    " Under torch.compile (compile s shown): compile s is the compilation before the timed segments (the warm-up "
    "absorbs it: never in a sample); recompiles are the graphs torch compiled inside the timed segments and the time "
    "they took (part of the segments' time), which after a topology update (a compact method's resize) is charged to "
    "it: topology share counts it."
)


def _recompiles(r: pd.Series) -> str:
    """'2 (4490 ms)': graphs compiled in the timed segments and their compile time; — when eager."""
    if missing(r.get("recompiles")):
        return DASH
    return f"{int(r['recompiles'])} ({float(r.get('recompile_ms') or 0.0):.0f} ms)"


def covers(derived: pd.DataFrame) -> str:
    """What the run's speedup intervals cover, e.g. "intervals over 2 processes x 5 rounds"."""
    texts = sorted({t for t in derived.get("speedup_covers", pd.Series(dtype=object)).dropna() if t})
    return "intervals over " + " or ".join(texts) if texts else "no paired interval"


def run_label(run: Any, among: Iterable[Any] = ()) -> str:
    """A run folder as the report names it: its folder name, or where another run of `among` has
    the same name, as many of its parent folders as tell the two apart (`nightly/run1`)."""
    parts = Path(str(run)).parts
    others = [Path(str(o)).parts for o in among if str(o) != str(run)]
    for depth in range(1, len(parts) + 1):
        if not any(o[-depth:] == parts[-depth:] for o in others):
            return "/".join(parts[-depth:])
    return str(run)


def ordered(derived: pd.DataFrame) -> pd.DataFrame:
    """Rows in report order: by run, then sweep point, then density (dense first), then the suite's
    method order."""
    method_rank = {m: i for i, m in enumerate(pd.unique(derived["method"]))}
    run_rank = {r: i for i, r in enumerate(pd.unique(derived["run"]))} if "run" in derived else {}
    points = frame_points(derived)
    point_rank = {p: i for i, p in enumerate(pd.unique(points))}
    keyed = derived.assign(
        _run=derived["run"].map(run_rank) if run_rank else 0,
        _point=points.map(point_rank),
        _method=derived["method"].map(method_rank),
        _density=-derived["density"].astype(float),
    )
    columns = ["_run", "_point", "_density", "_method"]
    return keyed.sort_values(columns, kind="stable").drop(columns=columns)


def _executions_differ(derived: pd.DataFrame) -> bool:
    """Whether some masked case ran with another execution than `masked` (csr, semi_structured)."""
    if "execution" not in derived:
        return False
    return bool(derived["execution"].map(lambda e: isinstance(e, str) and e != "masked").any())


def _execution(r: pd.Series) -> str:
    """A masked case's execution; for the others their kind (dense, compact)."""
    execution = r.get("execution")
    return execution if isinstance(execution, str) else str(r.get("kind", DASH))


def _achieved(r: pd.Series) -> str:
    """The density the case ran at (`density_achieved`, at its last timed segment), marked when it is
    not the one the case is named by (gmp still pruning, a compact method's whole units)."""
    achieved = r.get("density_achieved")
    if not present(achieved):
        return DASH
    return f"{float(achieved):.3f}" + (" off target" if r.get("density_off_target") is True else "")


def identity_columns(derived: pd.DataFrame) -> tuple[list[str], Any]:
    """Leading columns naming a case (with the density it achieved); `run` only when several runs
    share the report, `execution` only when a masked method ran with sparse kernels (csr,
    semi_structured)."""
    several = "run" in derived and derived["run"].nunique() > 1
    executions = _executions_differ(derived)
    swept = bool(frame_points(derived).astype(bool).any())  # a sweep: each row's point, beside its method
    seeded = "seed" in derived and derived["seed"].nunique() > 1  # a row per (case, seed): its seed, beside its density
    headers = (
        (["run"] if several else []) + (["point"] if swept else []) + ["method"] + (["execution"] if executions else [])
        + ["density"] + (["seed"] if seeded else []) + ["achieved", "status"]
    )

    def cells(r: pd.Series) -> list[str]:
        return (
            ([run_label(r["run"], derived["run"].unique())] if several else [])
            + ([point_of(r)] if swept else [])
            + [str(r["method"])]
            + ([_execution(r)] if executions else [])
            + [f"{float(r['density']):g}"] + ([_num(r.get("seed"), ".0f")] if seeded else []) + [_achieved(r), str(r["status"])]
        )

    return headers, cells


def timed_rows(derived: pd.DataFrame) -> pd.DataFrame:
    """The rows the speed and memory tables show: in a `mode: both` run with `seeds:`, the later
    seeds that only trained (their lines say `mode: accuracy`) have no segments to show."""
    if "mode" not in derived or not (derived["mode"] == "both").any():
        return derived
    return derived[derived["mode"] != "accuracy"]


def _reference(derived: pd.DataFrame) -> str:
    return derived.attrs.get("reference") or next((r for r in derived["reference"] if isinstance(r, str)), "the reference")


def _classes(rows: pd.DataFrame) -> list[str]:
    return ["failed" if status != "ok" else "" for status in rows["status"]]


@register_table("speed", "Speed", order=10)
def speed_table(derived: pd.DataFrame) -> Table | None:
    derived = timed_rows(derived)
    if derived.empty:
        return None
    rows = ordered(derived)
    compiled = "compile" in derived and bool(derived["compile"].map(lambda c: isinstance(c, dict)).any())
    ref = _reference(derived)
    headers, cells = identity_columns(derived)
    body = [
        cells(r)
        + [
            _num(r.get("segments"), ".0f"), _num(r.get("median_ms"), ".1f"), _num(r.get("ms_per_step"), ".2f"),
            _iqr(r), _spread(r), _num(r.get("images_per_s"), ".1f"),
            _speedup(r), _speedup_vs_dense(r), _end_to_end(r), _times(r.get("flop_limit")), percent(r.get("flop_fraction")),
            _times(r.get("shape_limit")), percent(r.get("shape_fraction")), percent(r.get("topology_share")),
        ]
        + ([_num(r.get("compile_s"), ".1f"), _recompiles(r)] if compiled else [])
        + [_flags(r)]
        for _, r in rows.iterrows()
    ]
    return Table(
        headers + ["n", "median ms", "ms/step", "IQR ms", "IQR/median", "images/s", f"speedup vs {ref} [95% CI]",
                   "vs dense [95% CI]", "end to end [95% CI]", "FLOP limit", "of limit", "shape limit", "of shape limit",
                   "topology share"]
        + (["compile s", "recompiles"] if compiled else []) + ["flags"],
        body,
        align=["left"] * len(headers) + ["right"] * (16 if compiled else 14) + ["left"],
        note=SPEED_NOTE.format(ref=ref, covers=covers(derived)) + (COMPILE_NOTE if compiled else ""),
        row_classes=_classes(rows),
    )


@register_table("memory", "Memory", order=20)
def memory_table(derived: pd.DataFrame) -> Table | None:
    derived = timed_rows(derived)
    if derived.empty:
        return None
    rows = ordered(derived)
    ref = _reference(derived)
    headers, cells = identity_columns(derived)
    body = [
        cells(r)
        + [
            str(r["memory_basis"]), mib(r.get("memory_bytes")), percent(r.get("memory_reduction")),
            mib(r.get("state_bytes")), _times(r.get("state_ratio")),
            mib(r.get("activation_bytes")), _times(r.get("activation_ratio")),
        ]
        for _, r in rows.iterrows()
    ]
    return Table(
        headers + ["basis", "memory MiB", f"reduction vs {ref}", "state MiB", "state ratio", "activation MiB", "activation ratio"],
        body,
        align=["left"] * (len(headers) + 1) + ["right"] * 6,
        note=(
            f"Reduction is 1 - memory / memory({ref}) on the basis named: the CUDA allocator peak where "
            "measured, else training-state plus activation bytes counted exactly. State is parameters, "
            "gradients, optimizer state and method buffers; activations are the bytes saved for backward."
        ),
        row_classes=_classes(rows),
    )


def _seeds_text(r: pd.Series) -> str:
    """'2 seeds', '1 seed', '1 seed (1 failed)': what a case's pooled top-1 rests on."""
    n = int(r.get("seeds") or 0)
    failed = r.get("failed_seeds") if isinstance(r.get("failed_seeds"), list) else []
    return f"{n} seed{'s' if n != 1 else ''}" + (f" ({len(failed)} failed)" if failed else "")


def pooled_text(r: pd.Series, column: str, **style: Any) -> str:
    """A figure pooled over seeds, `column` and its `_ci_low`/`_ci_high`, as `format_mean_ci` writes it."""
    values = [r.get(column), r.get(f"{column}_ci_low"), r.get(f"{column}_ci_high")]
    return format_mean_ci(*(float(v) if present(v) else math.nan for v in values), **style)


@register_table("accuracy", "Accuracy", order=30)
def accuracy_table(derived: pd.DataFrame) -> Table | None:
    """One row per case, its seeds pooled (`dstbench.results.pooling.pool_seeds`): top-1 as the
    mean [95% CI], the seeds it rests on, and the drop paired by seed against dense (what the
    `top1_drop` expectation compares with by default), else against the reference."""
    if "top1" not in derived or derived["top1"].isna().all():
        return None
    ref = _reference(derived)
    drop_vs = "dense" if (derived["method"] == "dense").any() else ref
    rows = ordered(pool_seeds(derived, baseline=drop_vs))
    headers, cells = identity_columns(rows)
    timed = "target_seeds" in rows and bool((rows["target_seeds"] > 0).any())  # curves to time to a target
    letters = ranking_letters(derived)
    points = frame_points(rows)

    def group(i: Any, r: pd.Series) -> list[str]:
        return [letters.get((str(r.get("run", "")), points[i], str(r["case_id"])), DASH)] if letters else []

    body = [
        cells(r) + [pooled_text(r, "top1", unit="%"), _seeds_text(r)] + group(i, r) + [percent(r.get("top5")),
                    pooled_text(r, "top1_drop", digits=2, signed=True, unit=" pp")]
        + ([target_text(r)] if timed else [])
        + [_num(r.get("epochs"), "g"), _num(r.get("train_time_s"), ".0f")]
        for i, r in rows.iterrows()
    ]
    targets = sorted({str(b) for b in rows.get("target_basis", pd.Series(dtype=object)).dropna()}) if timed else []
    return Table(
        headers + ["top-1 [95% CI]", "seeds"] + (["group"] if letters else []) + ["top-5", f"top-1 drop vs {drop_vs} [95% CI]"]
        + (["steps to target"] if timed else []) + ["epochs", "train s"],
        body,
        align=["left"] * len(headers) + ["right", "right"] + (["left"] if letters else []) + ["right"] * (4 + timed),
        note=(
            "Top-1 on the dataset's test split (an image folder's val/) at the end of training. Over several seeds: the mean with a 95% Student-t "
            "interval (n - 1 degrees of freedom), top-5 and train seconds as means; the drop is the "
            f"{drop_vs} case's top-1 minus the method's in percentage points, paired by seed, with its interval "
            "over the pairs. One seed: its own figures, no interval."
            + (" Group: at each density (dense with every one), two cases share a letter exactly when their top-1 "
               "difference paired by seed is not significant (paired t-test, Holm over every pair at that density, "
               "family-wise alpha 0.05); `a` holds the highest mean." if letters else "")
            + (" Steps to target: the first training step at which test top-1 reached the target, interpolated "
               "between evaluations (precise to the evaluation period shown), the mean over seeds when every seed "
               f"reached it; target: {'; '.join(targets)}." if timed else "")
            + (" Seconds to the target: the Time to accuracy table." if timed else "")
        ),
        row_classes=_classes(rows),
    )


def ranking_letters(derived: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(run, point, case id) -> its letters in the ranking at its density
    (`dstbench.results.ranking`); dense, in every density's ranking, as "a (0.1), ab (0.5)". Empty
    unless some case has two or more seeds (one seed tests nothing)."""
    if "seed" not in derived or "top1" not in derived or not (derived.groupby("case_id")["seed"].nunique() > 1).any():
        return {}
    frame = derived.assign(_point=frame_points(derived), _run=derived["run"].astype(str) if "run" in derived else "")
    out: dict[tuple[str, str, str], list[str]] = {}
    for (run, point), rows in frame.groupby(["_run", "_point"], sort=False):
        densities = sorted({float(d) for d in rows.loc[rows["kind"] != "dense", "density"]}, reverse=True) or [1.0]
        for density in densities:
            ranking = rank_cases(rows, density)
            for case, letters in zip(ranking["case_id"], ranking["letters"]):
                dense = bool((rows.loc[rows["case_id"] == case, "kind"] == "dense").any()) and len(densities) > 1
                out.setdefault((run, point, case), []).append(f"{letters} ({density:g})" if dense else letters)
    return {key: ", ".join(values) for key, values in out.items()}


@register_table("failed", "Failed cases", order=40)
def failed_table(derived: pd.DataFrame) -> Table | None:
    failed = ordered(derived[derived["status"] != "ok"])
    if failed.empty:
        return None
    several = derived["run"].nunique() > 1 if "run" in derived else False
    body = [
        ([run_label(r["run"], derived["run"].unique())] if several else [])
        + [str(r["case_id"]), str(r["status"]), clip(last_line(r.get("error"), "(no message recorded)"), 300), _num(r.get("duration_s"), ".1f")]
        for _, r in failed.iterrows()
    ]
    return Table(
        (["run"] if several else []) + ["case", "status", "reason", "duration s"],
        body,
        align=(["left"] if several else []) + ["left", "left", "left", "right"],
        note="Cases that did not finish; the reason is the last line of the recorded error (its first 300 characters).",
        row_classes=["failed"] * len(body),
    )


def render_table(table: Table, fmt: str) -> str:
    """`table` laid out by tabulate in format `fmt` ("simple" terminal, "github" Markdown)."""
    rows, headers = table.rows, table.headers
    if fmt == "github":
        # A bare | inside a cell would end it (|error| in an expectation's detail).
        rows = [[str(cell).replace("|", "\\|") for cell in row] for row in rows]
        headers = [h.replace("|", "\\|") for h in headers]
    return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True, colalign=table.column_align())


def render_text(rendered: list[Rendered], fmt: str = "simple") -> str:
    """Titled tables (and any section errors) as text."""
    blocks = []
    for section in rendered:
        if section.error:
            blocks.append(f"{section.title}: could not be built ({section.error})")
        elif section.table is not None:
            blocks.append(f"{section.title}\n\n{render_table(section.table, fmt)}")
    return "\n\n".join(blocks)


def summary_table(derived: pd.DataFrame, reference: str, fmt: str = "simple") -> str:
    """The end-of-run table: speed and memory side by side, one row per case. `fmt`: a tabulate
    format ("simple" for terminals, "github" for Markdown)."""
    if derived.empty:
        return "(no results)"
    rows = ordered(derived)
    headers, cells = identity_columns(derived)
    body = [
        cells(r)
        + [
            _num(r.get("segments"), ".0f"), _num(r.get("median_ms"), ".1f"), _num(r.get("ms_per_step"), ".2f"),
            _spread(r), _num(r.get("images_per_s"), ".1f"), mib(r.get("peak_memory_bytes")),
            mib(r.get("state_bytes")), mib(r.get("activation_bytes")), _speedup(r), _speedup_vs_dense(r),
            percent(r.get("memory_reduction")), _flags(r),
        ]
        for _, r in rows.iterrows()
    ]
    headers += ["n", "median ms", "ms/step", "IQR/median", "images/s", "peak MiB", "state MiB", "activation MiB",
                f"speedup vs {reference}", "vs dense", "memory reduction", "flags"]
    return tabulate(body, headers=headers, tablefmt=fmt, disable_numparse=True)
