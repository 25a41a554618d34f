"""What the sparse executions of the masked methods (every `execution` but `masked`: csr,
semi_structured, condensed) ran, read from `method_extras` of their result lines: the precision the
masked linears' products ran in (`kernel_precision`: csr runs its CSR products in fp32 whatever the
suite's precision) and, for 2:4 (`semi_structured`), how much of
the topology exchange its updates asked for was carried out by the transposable 2:4 projection
(`exchange_requested`, `exchange_achieved`, `exchange_as_proposed`, means over the updates, and
`exchange_updates`, one entry per update; `dstbench.dst.masked.semi_structured`), and what it
changed unasked: removals of weights the method's update kept (their mean share of the removals,
and the mean share of those above the layer's median |w|) and turn-ons nobody asked for (summed
over the updates).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dstbench.util.text import DASH, percent
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import ordered

DENSE_KERNELS = "masked"  # the execution on dense kernels; every other one is a sparse execution


def exchange_row(extras: Any) -> dict[str, Any]:
    """The table's fields from one line's `method_extras` (absent ones as None)."""
    extras = extras if isinstance(extras, dict) else {}
    updates = extras.get("exchange_updates")
    updates = updates if isinstance(updates, list) else None
    turn_ons = [u.get("unrequested_turn_ons") for u in updates or [] if isinstance(u, dict)]
    return {
        "kernel_precision": extras.get("kernel_precision"),
        "flops_basis": extras.get("flops_basis"),
        "updates": len(updates) if updates is not None else None,
        **{key: extras.get(f"exchange_{key}") for key in (
            "requested", "achieved", "as_proposed", "unrequested_removal_share", "unrequested_above_median")},
        # Summed over the updates that counted them (a line from before they were counted has none).
        "unrequested_turn_ons": sum(turn_ons) if turn_ons and all(isinstance(t, int) for t in turn_ons) else None,
    }


def _fraction(value: Any) -> str:
    return percent(value) if isinstance(value, (int, float)) else DASH


@register_table(
    "sparse_execution_table", "Sparse executions", order=46,
    caption="The masked methods that ran on sparse kernels: the precision their products ran in and, for 2:4, "
    "how much of each update's exchange took place.",
)
def sparse_execution_table(derived: pd.DataFrame) -> Table | None:
    if "execution" not in derived or "method_extras" not in derived:
        return None
    rows = []
    for _, r in ordered(derived).iterrows():
        if not isinstance(r.get("execution"), str) or r.get("execution") == DENSE_KERNELS:
            continue
        row = exchange_row(r.get("method_extras"))
        rows.append([
            str(r["method"]), f"{float(r['density']):g}", str(r["execution"]),
            row["kernel_precision"] or DASH, row["flops_basis"] or DASH,
            DASH if row["updates"] is None else str(row["updates"]),
            _fraction(row["requested"]), _fraction(row["achieved"]), _fraction(row["as_proposed"]),
            _fraction(row["unrequested_removal_share"]), _fraction(row["unrequested_above_median"]),
            DASH if row["unrequested_turn_ons"] is None else f"{row['unrequested_turn_ons']:,}",
        ])
    if not rows:
        return None
    return Table(
        headers=["method", "density", "execution", "products in", "FLOPs counted", "updates",
                 "exchange asked", "exchange done", "done as asked", "removals unasked", "of them above median |w|",
                 "turn-ons unasked"],
        rows=rows,
        align=["left", "right", "left", "left", "left"] + ["right"] * 7,
        note="'products in': the dtype the masked linears' products ran in (csr: fp32 under any autocast). "
        "The exchange columns are 2:4's, means over its updates, as fractions of the active weights: what "
        "the method's update asked to replace, what the transposable 2:4 projection replaced, and how much "
        "of that replaced exactly what was asked. 'removals unasked': of the weights the projection turned off, "
        "the share the method's update had kept (mean over the updates), and of those the share above the "
        "layer's median |w| of active weights; 'turn-ons unasked': positions the projection turned on that the "
        "update had not, summed over the updates.",
    )
