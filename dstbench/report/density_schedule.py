"""How a gradual method's density moved over the run: GMP prunes from dense to its target on a
schedule (`method_extras.density_by_update`: the step of each pruning and the density after it), so
the density a case is named by is where it ends, not where it trained. One row per such case."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dstbench.util.text import DASH
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import ordered

SHOWN_UPDATES = 8  # the first ones and the last ones beyond it, with a count between


def schedule_text(updates: Any) -> str:
    """'step 0: 1.000, step 25: 0.213, step 50: 0.100' (long schedules shortened in the middle)."""
    points = [(int(step), float(density)) for step, density in updates if isinstance(density, (int, float))]
    texts = [f"step {step}: {density:.3f}" for step, density in points]
    if len(texts) > SHOWN_UPDATES:
        half = SHOWN_UPDATES // 2
        texts = texts[:half] + [f"... {len(texts) - 2 * half} more ..."] + texts[-half:]
    return ", ".join(texts)


@register_table(
    "density_schedule_table", "Density over the run", order=47,
    caption="Methods whose density changes on a schedule (GMP): the density after each of their updates.",
)
def density_schedule_table(derived: pd.DataFrame) -> Table | None:
    if "method_extras" not in derived:
        return None
    rows = []
    for _, r in ordered(derived).iterrows():
        extras = r.get("method_extras")
        updates = extras.get("density_by_update") if isinstance(extras, dict) else None
        if not isinstance(updates, list) or not updates:
            continue
        achieved = r.get("density_achieved")
        rows.append([
            str(r["method"]), f"{float(r['density']):g}",
            f"{float(achieved):.3f}" if isinstance(achieved, (int, float)) else DASH,
            str(len(updates)), schedule_text(updates),
        ])
    if not rows:
        return None
    return Table(
        headers=["method", "density", "achieved", "updates", "density after each update"],
        rows=rows,
        align=["left", "right", "right", "right", "left"],
        note="A gradual method trains dense-sized until it has pruned: its timed segments ran at the densities "
        "between these steps (the segments' steps are in the Speed table's settings), and `achieved` is the "
        "density after the last timed segment.",
    )
