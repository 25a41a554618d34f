"""The report's table of time to target across targets (`dstbench.results.target_sweep`): per
case, its time to each target with its rank there and its speedup to it against the reference,
and whether the order by time to target changes with the target."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dstbench.report.sections import Table, register_table
from dstbench.report.tables import ordered, run_label
from dstbench.results.target_sweep import sweep_of, target_sweep
from dstbench.util.text import DASH, present


def _time(r: Any) -> str:
    if not present(r.get("time_to_target_s")):
        return f"not reached ({float(r['target_reached']):.0%} of seeds)" if present(r.get("target_reached")) else DASH
    return f"{float(r['time_to_target_s']):.3g} s #{int(r['rank'])}"


def _speedup(r: Any) -> str:
    value = r.get("time_to_target_speedup")
    if not present(value):
        return DASH
    low, high = r.get("time_to_target_speedup_ci_low"), r.get("time_to_target_speedup_ci_high")
    interval = f" [{float(low):.2f}, {float(high):.2f}]" if present(low) and present(high) else ""
    return f"{float(value):.2f}x{interval}"


def order_changes(sweep: pd.DataFrame) -> str:
    """Whether the order of the cases that reached every target is the same at each, said in words."""
    reached = sweep.dropna(subset=["time_to_target_s"])
    targets = list(pd.unique(sweep["target"]))
    common = set.intersection(*(set(reached[reached["target"] == t]["case_id"]) for t in targets)) if targets else set()
    if len(common) < 2:
        return "fewer than two cases reached every target, so no order to compare"
    orders = {t: [c for c in reached[reached["target"] == t].sort_values("time_to_target_s")["case_id"] if c in common]
              for t in targets}
    distinct = list(dict.fromkeys(tuple(o) for o in orders.values()))
    if len(distinct) == 1:
        return f"the {len(common)} cases that reached every target keep one order by time to target: {', '.join(distinct[0])}"
    return "the order by time to target of the cases that reached every target changes: " + "; ".join(
        f"{t}: {', '.join(o)}" for t, o in orders.items())


@register_table(
    "target_sweep", "Time to accuracy across targets", order=32, terminal=False,
    caption="Each case timed to several top-1 targets from the same curves (no retraining): its mean time to each "
    "over its seeds with its rank there (#1 fastest; cases that missed share the last rank), and its speedup to it "
    "against the reference with the 95% interval, seeds paired.",
)
def target_sweep_table(derived: pd.DataFrame) -> Table | None:
    sweep = target_sweep(derived)
    if sweep.empty:
        return None
    targets = list(pd.unique(sweep["target"]))
    several = sweep["run"].nunique() > 1
    keys = ["run", "point", "case_id"]
    cases = ordered(sweep.drop_duplicates(keys).assign(method=lambda f: f["method"].astype(str)))
    by_case = {(str(r["run"]), str(r["point"]), str(r["case_id"]), str(r["target"])): r for _, r in sweep.iterrows()}
    body = []
    for _, case in cases.iterrows():
        key = (str(case["run"]), str(case["point"]), str(case["case_id"]))
        cells = [run_label(case["run"], sweep["run"].unique())] if several else []
        cells.append(str(case["case_id"]) + (f" [{case['point']}]" if case["point"] else ""))
        for target in targets:
            row = by_case.get((*key, target))
            cells += [_time(row), _speedup(row)] if row is not None else [DASH, DASH]
        body.append(cells)
    reference = derived.attrs.get("reference") or "the reference"
    sources = sorted({sweep_of(run)[1] for run in pd.unique(sweep["run"])})
    order = order_changes(sweep)
    values = "; ".join(f"{t} = top-1 {float(v):.4g}" for t, v in sweep.drop_duplicates("target")[["target", "target_top1"]].itertuples(index=False))
    headers = (["run"] if several else []) + ["case"] + [h for t in targets for h in (f"{t}: time", f"{t}: vs {reference}")]
    return Table(
        headers, body, align=(["left"] if several else []) + ["left"] + ["right"] * (2 * len(targets)),
        note=(f"Targets: {'; '.join(sources)} ({values}). Times are estimates: steps to the target at the case's measured "
              f"step and update times. {order[0].upper()}{order[1:]}."),
    )
