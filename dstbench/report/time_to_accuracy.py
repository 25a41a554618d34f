"""The report's "Time to accuracy" sections: what each case's top-1 cost in (estimated) seconds.

A run with accuracy curves gets a table (top-1 with its seeds, the drop against dense, steps and
seconds to the target with their intervals, the speedup to target, how many seeds reached it),
top-1 against estimated training seconds (`dstbench.results.target_time`: each evaluation's step
priced at the case's measured step and update times), and a Pareto view of speedup to target
against the accuracy given up. A report over two or more workloads (sweep points, or runs of
different suites) adds AlgoPerf-style performance profiles. `target_headline` is the headline's
line: the fastest case to the target, or that none reached it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns

from dstbench.report.figures import Plot, legend_outside, new_figure, palette
from dstbench.report.sections import Table, register_plot, register_table
from dstbench.report.seeds import format_mean_ci
from dstbench.report.tables import ordered, pooled_text, run_label
from dstbench.results.pooling import pool_seeds
from dstbench.results.replicates import frame_points
from dstbench.results.run_files import setup_without_seed
from dstbench.results.run_folder import RunFolder
from dstbench.results.time_to_target import target_text
from dstbench.util.text import present

TAUS = np.linspace(1.0, 4.0, 61)  # performance profiles: within a factor tau of the best, 1 to 4
# The profiles' band: seeds resampled within each workload, this many times, at this level.
PROFILE_RESAMPLES = 1000
PROFILE_LEVEL = 0.95


def method_colors(derived: pd.DataFrame) -> dict[str, Any]:
    """A colour per method, the page's (`figures.palette` over the methods in report order)."""
    return palette(list(pd.unique(ordered(derived)["method"].astype(str))))


def _drop_baseline(derived: pd.DataFrame) -> str:
    return "dense" if (derived["method"] == "dense").any() else str(derived.attrs.get("reference") or "dense")


def pooled_cases(derived: pd.DataFrame) -> pd.DataFrame | None:
    """One row per case over its seeds, with its time to target, when the run has accuracy curves."""
    if "curve" not in derived or "steps_to_target" not in derived:
        return None
    pooled = pool_seeds(derived, baseline=_drop_baseline(derived))
    if "target_seeds" not in pooled or not (pooled["target_seeds"].fillna(0) > 0).any():
        return None
    return ordered(pooled)


def _seconds(r: Any) -> str:
    value = r.get("time_to_target_s")
    if not present(value):
        return "—"
    digits = 2 if float(value) < 10 else 1 if float(value) < 100 else 0
    low, high = (float(r[c]) if present(r.get(c)) else math.nan for c in ("time_to_target_ci_low", "time_to_target_ci_high"))
    return format_mean_ci(float(value), low, high, scale=1, digits=digits)


def _reached(r: Any) -> str:
    seeds = r.get("target_seeds")
    if not present(seeds) or not seeds:
        return "—"
    return f"{round(float(r['target_reached']) * float(seeds))} of {int(seeds)}"


@register_table("time_to_accuracy", "Time to accuracy", order=31)
def time_to_accuracy_table(derived: pd.DataFrame) -> Table | None:
    rows = pooled_cases(derived)
    if rows is None:
        return None
    reference, base = derived.attrs.get("reference") or "the reference", _drop_baseline(derived)
    several = "run" in rows and rows["run"].nunique() > 1
    body = [
        ([run_label(r["run"], rows["run"].unique())] if several else [])
        + [f"{r['method']}@{float(r['density']):g}" + (f" [{p}]" if (p := frame_points(rows.loc[[i]]).iloc[0]) else ""),
           pooled_text(r, "top1", unit="%") + f" ({int(r['seeds'])} seed{'s' if r['seeds'] != 1 else ''})",
           pooled_text(r, "top1_drop", digits=2, signed=True, unit=" pp"), target_text(r), _seconds(r),
           pooled_text(r, "time_to_target_speedup", scale=1, digits=2, unit="x"),
           pooled_text(r, "time_to_target_speedup_vs_dense", scale=1, digits=2, unit="x"), _reached(r),
           f"{float(r['train_time_to_target_s']):.3g}" if present(r.get("train_time_to_target_s")) else "—"]
        for i, r in rows.iterrows()
    ]
    targets = sorted({str(b) for b in rows.get("target_basis", pd.Series(dtype=object)).dropna()})
    bases = [str(b) for b in rows.get("time_to_target_speedup_basis", pd.Series(dtype=object)) if isinstance(b, str) and b]
    unpaired = sum("unpaired" in b for b in bases)
    pairing = ("the speedups pair seeds, and step times round by round where the two cases were timed in the same "
               "interleaved rounds" + (f" ({len(bases) - unpaired} of {len(bases)}; the others compare each case's own "
                                       "step times)" if unpaired else ""))
    return Table(
        (["run"] if several else [])
        + ["case", "top-1 [95% CI]", f"drop vs {base}", "steps to target", "time to target s",
           f"speedup vs {reference}", "vs dense", "reached", "accuracy-run s"],
        body, align=(["left"] if several else []) + ["left"] + ["right"] * 8,
        note=(
            f"Target: {'; '.join(targets)}. Figures in brackets are 95% intervals. Time to target = steps to target x the case's measured time of a step "
            "without updates + the updates made before it x the measured mean cost of one update (its timed segments in "
            "the same run: an estimate, not the accuracy run's own clock); the interval holds the seeds' "
            f"spread and the timing's (delta method); {pairing}. A case any seed of which missed the target or failed "
            "has no time: 'not reached (reached in k of n seeds)'. Speedups are to the target. The accuracy run's own clock "
            "at the target (accuracy-run s, its mean over seeds) is a check: each training runs alone, so it is not "
            "compared across cases."
        ),
    )


def estimated_curves(derived: pd.DataFrame) -> pd.DataFrame:
    """Every evaluation of every case and seed with its estimated training seconds: the step priced
    at the case's measured step time, plus its updates so far at the measured update cost."""
    rows = []
    ok = derived[derived["status"] == "ok"] if "status" in derived else derived
    for _, r in ok.iterrows():
        step_ms, update_ms = r.get("step_ms_without_updates"), r.get("update_ms")
        curve = r.get("curve")
        if not present(step_ms) or not isinstance(curve, list):
            continue
        for point in curve:
            if not isinstance(point, dict) or not present(point.get("top1")):
                continue
            updates = point.get("topology_updates") or 0
            if updates and not present(update_ms):
                continue  # updates that were never priced: no estimate
            seconds = (float(point["step"]) * float(step_ms) + (float(updates) * float(update_ms) if updates else 0.0)) / 1e3
            rows.append({"case": str(r["case_id"]), "method": str(r["method"]), "density": f"{float(r['density']):g}",
                         "seed": r.get("seed"), "step": point["step"], "seconds": seconds, "top1": float(point["top1"]) * 100})
    return pd.DataFrame(rows)


@register_plot(
    "time_to_accuracy_curves", "Time to accuracy: top-1 against estimated seconds", order=166,
    caption="Test top-1 at each evaluation against estimated training seconds (its step x the case's measured time "
    "per step without updates + its updates so far x their measured mean cost); the line is the mean over seeds, "
    "the band their range; the dashed line is the target.",
)
def time_to_accuracy_curves(derived: pd.DataFrame) -> Plot | None:
    points = estimated_curves(derived)
    if points.empty:
        return None
    cases = list(pd.unique(points["case"]))
    methods = method_colors(derived)
    colors = {case: methods[case.split("@")[0]] for case in cases}  # a method's colour, as in every plot of the page
    figure, ax = new_figure()
    for case in cases:  # each case on its own: two densities of one method share a colour, not a line
        sns.lineplot(data=points[points["case"] == case], x="seconds", y="top1", color=colors[case], errorbar=("pi", 100),
                     marker="o", ax=ax, legend=False)
    targets = [float(t) for t in pd.unique(derived.get("target_top1", pd.Series(dtype=float))) if present(t)]
    for target in targets[:1]:
        ax.axhline(target * 100, color="0.4", linestyle="--", linewidth=1)
    ax.set(xlabel="estimated training seconds", ylabel="test top-1 (%)")
    handles = [ax.plot([], [], color=colors[c], marker="o")[0] for c in cases]
    legend_outside(ax, handles, cases)
    seeds = int(points.groupby("case")["seed"].nunique().max())
    last = points[points["step"] == points.groupby("case")["step"].transform("max")]
    final = last.groupby("case", sort=False)[["top1", "seconds"]].mean()
    alt = "; ".join(f"{case} ends at {r['top1']:.1f}% after {r['seconds']:.3g} s" for case, r in final.iterrows())
    return Plot(figure, f"Test top-1 against estimated seconds over {seeds} seed(s) per case (mean and range): {alt}.",
                "Time to accuracy: top-1 against estimated seconds")


def pareto_front(points: pd.DataFrame, x: str, y: str, intervals: tuple[str, str, str, str] | None = None) -> pd.Series:
    """Whether each row is Pareto-efficient: no other row has an `x` as low (less accuracy given up)
    and a `y` as high (faster), one of them strictly. With `intervals` (the columns of x's low and
    high, y's low and high ends), a row is dominated only by one better beyond the intervals on both
    axes: its whole x interval below the row's and its whole y interval above it; a missing end
    counts as the point itself."""
    values = points[[x, y]].to_numpy(dtype=float)
    if intervals is None:
        efficient = []
        for i, (xi, yi) in enumerate(values):
            dominated = any((xj <= xi and yj >= yi) and (xj < xi or yj > yi) for j, (xj, yj) in enumerate(values) if j != i)
            efficient.append(not dominated)
        return pd.Series(efficient, index=points.index)
    ends = points[list(intervals)].to_numpy(dtype=float)
    ends = np.where(np.isfinite(ends), ends, values[:, [0, 0, 1, 1]])  # no interval: the point
    efficient = [not any(ends[j, 1] < ends[i, 0] and ends[j, 2] > ends[i, 3] for j in range(len(ends)) if j != i)
                 for i in range(len(ends))]
    return pd.Series(efficient, index=points.index)


@register_plot(
    "time_to_accuracy_pareto", "Time to accuracy: speedup against accuracy given up", order=167,
    caption="Each case's speedup to the target against dense (y; estimated seconds, seeds paired) against its top-1 "
    "drop vs dense (x, percentage points, mean over seeds), each with its 95% interval; a case is ringed and named as "
    "Pareto-efficient unless another is better beyond the intervals on both axes (its whole drop interval lower and its "
    "whole speedup interval higher): a ring says no case is shown to beat it, not that it beats the others; cases that "
    "never reached the target are crosses below the others, named in the corner.",
)
def time_to_accuracy_pareto(derived: pd.DataFrame) -> Plot | None:
    rows = pooled_cases(derived)
    if rows is None or "time_to_target_speedup_vs_dense" not in rows or (rows["method"] == "dense").sum() == 0:
        return None
    rows = rows[rows["method"] != "dense"].assign(
        label=lambda f: f["method"] + "@" + f["density"].map(lambda d: f"{float(d):g}"), drop_pp=lambda f: f["top1_drop"] * 100,
        drop_low=lambda f: f["top1_drop_ci_low"].astype(float) * 100, drop_high=lambda f: f["top1_drop_ci_high"].astype(float) * 100)
    reached = rows[rows["time_to_target_speedup_vs_dense"].map(present) & rows["drop_pp"].map(present)]
    missed = rows[~rows.index.isin(reached.index)]
    if reached.empty:
        return None  # nothing to place: the table says which cases missed
    methods = method_colors(derived)
    colors = {label: methods[label.split("@")[0]] for label in rows["label"]}
    figure, ax = new_figure()
    speed = "time_to_target_speedup_vs_dense"
    front = pareto_front(reached, "drop_pp", speed, ("drop_low", "drop_high", f"{speed}_ci_low", f"{speed}_ci_high"))
    xs = [float(x) for x in rows["drop_pp"] if present(x)] or [0.0]
    middle = (min(xs) + max(xs)) / 2
    for i, r in reached.iterrows():
        x, y = r["drop_pp"], r["time_to_target_speedup_vs_dense"]
        ax.scatter(x, y, color=colors[r["label"]], s=40, zorder=3)
        xerr = [[x - r["drop_low"]], [r["drop_high"] - x]] if present(r["drop_low"]) and present(r["drop_high"]) else None
        lo, hi = r.get(f"{speed}_ci_low"), r.get(f"{speed}_ci_high")
        yerr = [[y - float(lo)], [float(hi) - y]] if present(lo) and present(hi) else None
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, color=colors[r["label"]], alpha=0.5, linewidth=1, capsize=2, zorder=2)
        if front.get(i, False):
            ax.scatter(x, y, facecolors="none", edgecolors="black", s=140, zorder=4)
            # Labels lean inwards, so none runs past the axes (and widens the figure).
            right = x > middle
            ax.annotate(r["label"], (x, y), textcoords="offset points", xytext=(-6 if right else 6, 6), fontsize=8,
                        ha="right" if right else "left")
    ax.axhline(1.0, color="0.6", linewidth=0.8)
    low = min([1.0, *reached["time_to_target_speedup_vs_dense"].astype(float)]) * 0.8
    for _, r in missed.iterrows():
        ax.scatter(float(r["drop_pp"]) if present(r["drop_pp"]) else 0.0, low, marker="x", color=colors[r["label"]], s=50, zorder=3)
    if not missed.empty:  # below the reached ones, named once inside the axes
        ax.text(0.02, 0.03, "x: not reached (" + ", ".join(missed["label"]) + ")", transform=ax.transAxes, fontsize=8, va="bottom", wrap=True)
    ax.set(xlabel="top-1 drop vs dense (pp)", ylabel="speedup to target vs dense (×)")
    legend_outside(ax, [ax.scatter([], [], color=colors[l]) for l in rows["label"]], list(rows["label"]))
    efficient = [reached.loc[i, "label"] for i in reached.index if front.get(i, False)]
    alt = "; ".join(f"{r['label']}: {r['time_to_target_speedup_vs_dense']:.2f}x at a drop of {r['drop_pp']:+.2f} pp"
                    for _, r in reached.iterrows())
    missing = f"; not reached: {', '.join(missed['label'])}" if not missed.empty else ""
    return Plot(figure, f"Speedup to target vs dense against top-1 drop: {alt}{missing}; Pareto-efficient: "
                f"{', '.join(efficient) or 'none'}.", "Time to accuracy: speedup against accuracy given up")


def profile_table(times: pd.DataFrame, taus: np.ndarray = TAUS) -> pd.DataFrame:
    """Performance profiles (Dolan and More; AlgoPerf's time-to-result form): `times` has one row
    per workload and one column per method (seconds to target, NaN for a miss). For each method
    and tau, the fraction of workloads whose time is within tau of that workload's best; a miss
    counts as infinitely slow. Columns: method, tau, fraction."""
    best = times.min(axis=1, skipna=True)
    ratios = times.div(best, axis=0).fillna(math.inf)
    rows = [{"method": m, "tau": float(t), "fraction": float((ratios[m] <= t + 1e-12).mean())} for m in times.columns for t in taus]
    return pd.DataFrame(rows)


def profile_fractions(times: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """`profile_table`'s fractions from an array of times (workloads x methods; NaN a miss), as
    methods x taus."""
    best = np.nanmin(np.where(np.isfinite(times), times, np.inf), axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isfinite(times), times / best, np.inf)
    return (ratios[:, :, None] <= taus[None, None, :] + 1e-12).mean(axis=0)


def profile_band(seed_times: dict[str, dict[str, list[float]]], taus: np.ndarray = TAUS, resamples: int = PROFILE_RESAMPLES,
                 level: float = PROFILE_LEVEL, seed: int = 0) -> pd.DataFrame:
    """The profiles' percentile band from resampling seeds: `seed_times[workload][label]` holds
    each seed's seconds to target (NaN: that seed missed). Each resample draws every case's seeds
    with replacement within its workload and takes their mean (a miss among them: the case missed
    there, as the pooled time says), then the profiles of those times; the band is the central
    `level` of the resampled fractions. Columns: method, tau, low, high."""
    names = list(seed_times)
    labels = list(dict.fromkeys(label for by_label in seed_times.values() for label in by_label))
    rng = np.random.default_rng(seed)
    fractions = np.empty((resamples, len(labels), len(taus)))
    for r in range(resamples):
        times = np.full((len(names), len(labels)), np.nan)
        for w, workload in enumerate(names):
            for m, label in enumerate(labels):
                values = np.asarray(seed_times[workload].get(label, []), dtype=float)
                if len(values):
                    drawn = rng.choice(values, size=len(values))
                    times[w, m] = drawn.mean() if np.isfinite(drawn).all() else np.nan
        fractions[r] = profile_fractions(times, taus)
    low, high = np.percentile(fractions, [50 * (1 - level), 50 * (1 + level)], axis=0)
    return pd.DataFrame([{"method": label, "tau": float(t), "low": float(low[m, i]), "high": float(high[m, i])}
                         for m, label in enumerate(labels) for i, t in enumerate(taus)])


def workloads(runs: Any) -> dict[str, str]:
    """Each run folder's workload, named by its first run: runs whose recorded setups (run.json's
    `setup`, what the suite hash is made of) are the same apart from the seed are one workload,
    its seeds spread over them (a suite run again on other seeds). A run without a recorded setup is
    a workload of its own."""
    found: dict[str, str] = {}
    named: list[tuple[dict[str, Any], str]] = []
    for run in dict.fromkeys(str(r) for r in runs):
        unseeded = setup_without_seed(RunFolder.open(run).meta)
        if unseeded is None:
            found[run] = run
            continue
        found[run] = next((first for other, first in named if other == unseeded), run)
        if found[run] == run:
            named.append((unseeded, run))
    return found


def workload_times(derived: pd.DataFrame) -> pd.DataFrame | None:
    """Seconds to target by workload (a sweep point of a workload, or a workload) and case label;
    None with fewer than two workloads. Runs of one workload (`workloads`: the same setup apart from
    the seed) are pooled over all their seeds first, as one run."""
    if "run" in derived:
        attrs = dict(derived.attrs)
        derived = derived.assign(run=derived["run"].astype(str).map(workloads(derived["run"])))
        derived.attrs.update(attrs)
    rows = pooled_cases(derived)
    if rows is None:
        return None
    workload = rows["run"].map(run_label).astype(str) if "run" in rows else pd.Series("", index=rows.index)
    points = frame_points(rows)
    workload = workload + points.map(lambda p: f" [{p}]" if p else "")
    labels = rows["method"] + "@" + rows["density"].map(lambda d: f"{float(d):g}")
    table = pd.DataFrame({"workload": workload, "label": labels, "t": rows["time_to_target_s"].astype(float)})
    wide = table.pivot_table(index="workload", columns="label", values="t", aggfunc="first", dropna=False)
    return wide if len(wide) >= 2 else None


def workload_seed_times(derived: pd.DataFrame) -> dict[str, dict[str, list[float]]]:
    """Each workload's cases' seconds to target seed by seed (NaN for a seed that missed or
    failed), keyed as `workload_times` keys them."""
    judged = derived[derived["target_reached"].map(lambda r: r is True or r is False)] if "target_reached" in derived else derived.iloc[0:0]
    if judged.empty or "time_to_target_s" not in judged:
        return {}
    runs = judged["run"].astype(str).map(workloads(judged["run"])) if "run" in judged else pd.Series("", index=judged.index)
    workload = runs.map(run_label).astype(str) + frame_points(judged).map(lambda p: f" [{p}]" if p else "")
    labels = judged["method"].astype(str) + "@" + judged["density"].map(lambda d: f"{float(d):g}")
    found: dict[str, dict[str, list[float]]] = {}
    for w, label, reached, seconds in zip(workload, labels, judged["target_reached"], judged["time_to_target_s"]):
        value = float(seconds) if reached is True and present(seconds) else math.nan
        found.setdefault(w, {}).setdefault(label, []).append(value)
    return found


@register_plot(
    "time_to_accuracy_profiles", "Time to accuracy: performance profiles", order=168,
    caption="For each case, the fraction of workloads (sweep points or suites; runs of one suite on other seeds are "
    "one workload, pooled over all its seeds) on which its estimated time to the "
    "target is within a factor tau of the fastest case's there; a workload where it never reached the target counts "
    f"as a miss at every tau (AlgoPerf's performance profiles). The band: each case's seeds resampled with "
    f"replacement within each workload, {PROFILE_RESAMPLES} times, its mean time to target taken again (a missed seed "
    f"drawn makes a miss), the central {PROFILE_LEVEL:.0%} of the resampled profiles; two cases whose bands overlap "
    "are not told apart by these seeds. Times are known only to within the evaluation period (the crossing is "
    "interpolated between evaluations), so ratios closer to 1 than a period's share of the time say nothing.",
)
def time_to_accuracy_profiles(derived: pd.DataFrame) -> Plot | None:
    times = workload_times(derived)
    if times is None or times.notna().sum().sum() == 0:
        return None
    profiles = profile_table(times)
    labels = list(times.columns)
    methods = method_colors(derived)
    colors = {label: methods.get(label.split("@")[0], "0.3") for label in labels}
    seeds = workload_seed_times(derived)
    band = profile_band(seeds) if seeds else None
    figure, ax = new_figure()
    for label in labels:
        curve = profiles[profiles["method"] == label]
        ax.step(curve["tau"], curve["fraction"], where="post", color=colors[label], label=label)
        if band is not None and label in set(band["method"]):
            spread = band[band["method"] == label]
            ax.fill_between(spread["tau"], spread["low"], spread["high"], step="post", color=colors[label], alpha=0.15, linewidth=0)
    ax.set(xlabel="tau (time to target / the workload's fastest)", ylabel="fraction of workloads", ylim=(-0.02, 1.02), xlim=(1, 4))
    legend_outside(ax)
    at_one = profiles[profiles["tau"] == 1.0]
    alt = "; ".join(f"{r['method']}: fastest on {r['fraction']:.0%}" for _, r in at_one.iterrows())
    banded = f" With {PROFILE_LEVEL:.0%} bands from {PROFILE_RESAMPLES} resamples of the seeds." if band is not None else ""
    return Plot(figure, f"Performance profiles over {len(times)} workloads: {alt}.{banded}", "Time to accuracy: performance profiles")


def target_headline(derived: pd.DataFrame) -> dict[str, Any] | None:
    """The fastest case to the target with its interval, or that none reached it; None without curves."""
    rows = pooled_cases(derived)
    if rows is None:
        return None
    timed = rows[rows["time_to_target_s"].map(present)] if "time_to_target_s" in rows else rows.iloc[0:0]
    target = next((str(b) for b in rows.get("target_basis", pd.Series(dtype=object)).dropna()), "")
    if timed.empty:
        return {"reached": False, "target": target}
    best = timed.loc[timed["time_to_target_s"].astype(float).idxmin()]
    return {
        "reached": True, "target": target, "method": str(best["method"]), "density": float(best["density"]),
        "seconds": float(best["time_to_target_s"]), "ci": _seconds(best), "seeds": int(best["seeds"]),
    }
