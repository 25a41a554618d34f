"""Tables of derived results, rendered with tabulate (terminal or Markdown)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from tabulate import tabulate

MIB = 2**20


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, fmt)


def _mib(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value) / MIB:.1f}"


def _pct(value: Any) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * 100:.1f}%"


def summary_rows(derived: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for _, r in derived.sort_values(["density", "method"], ascending=[False, True]).iterrows():
        speedup = _num(r.get("speedup"), ".2f")
        if speedup != "—" and not math.isnan(r.get("speedup_ci_low", math.nan)):
            speedup += f" [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]"
        rows.append(
            {
                "method": r["method"],
                "density": f"{r['density']:g}",
                "status": r["status"],
                "median ms": _num(r.get("median_ms"), ".1f"),
                "images/s": _num(r.get("images_per_s"), ".1f"),
                "peak MiB": _mib(r.get("peak_memory_bytes")),
                "state MiB": _mib(r.get("state_bytes")),
                "activation MiB": _mib(r.get("activation_bytes")),
                "speedup": speedup,
                "memory reduction": _pct(r.get("memory_reduction")),
            }
        )
    return rows


def summary_table(derived: pd.DataFrame, reference: str, fmt: str = "simple") -> str:
    """One row per case, speedup and memory reduction against `reference`. `fmt`: a tabulate
    format ("simple" for terminals, "github" for Markdown)."""
    rows = summary_rows(derived)
    if not rows:
        return "(no results)"
    headers = [f"speedup vs {reference}" if key == "speedup" else key for key in rows[0]]
    return tabulate([list(row.values()) for row in rows], headers=headers, tablefmt=fmt, disable_numparse=True)
