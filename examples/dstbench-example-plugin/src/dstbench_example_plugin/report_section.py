"""The report section of `set_constant`: how many weights its updates replaced in each case.

Registered at import (`dstbench` imports this module through the entry-point group
`dstbench.report_sections`); left out of a report with no `set_constant` case.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dstbench.report.sections import Table, register_table

METHOD = "set_constant"


def _extras(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@register_table(
    "set_constant_replacements", "Weights replaced by set_constant", order=600,
    caption="Topology updates of the constant-fraction SET method and the weights they replaced.",
)
def replacements_table(derived: pd.DataFrame) -> Table | None:
    if "method_name" not in derived or "method_extras" not in derived:
        return None
    rows = []
    for _, row in derived[derived["method_name"] == METHOD].iterrows():
        extras = _extras(row["method_extras"])
        if "weights_replaced" not in extras:
            continue  # a failed case: no extras
        updates, replaced = int(extras["updates_done"]), int(extras["weights_replaced"])
        active = extras.get("active_weights")
        per_update = replaced / updates / active if updates and active else math.nan
        rows.append([
            str(row["case_id"]), f"{float(row['density']):g}", str(updates), str(replaced),
            "—" if math.isnan(per_update) else f"{per_update:.1%}",
        ])
    if not rows:
        return None
    return Table(
        headers=["case", "density", "updates", "weights replaced", "per update, of active"],
        rows=rows,
        align=["left", "right", "right", "right", "right"],
        note="Counted by the method in the process that wrote the case's result line, over every step it trained.",
    )
