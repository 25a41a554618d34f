"""`Comparison`: two runs judged against each other (`dstbench.compare`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from dstbench.gates.compare import Comparison as GateComparison

FRAME_COLUMNS = (
    "case_id", "method", "density", "seed", "metric", "baseline", "current", "change", "ci_low", "ci_high", "p_value",
    "basis", "verdict", "note",
)


class Comparison:
    """The verdicts of `dstbench compare`: `.passed` (exit code 0), `.frame()` (one row per case and
    metric), `.text()` / `.markdown()` (the report the command prints / writes), `.result` (the
    underlying `dstbench.gates.compare.Comparison`)."""

    def __init__(self, result: "GateComparison", *, strict: bool = False) -> None:
        self.result = result
        self.strict = strict

    def __repr__(self) -> str:
        return (f"Comparison({self.result.baseline.path} -> {self.result.current.path}: "
                f"{'passed' if self.passed else 'failed'}, {len(self.result.regressed)} regressed)")

    @property
    def exit_code(self) -> int:
        from dstbench.gates.compare import exit_code

        return exit_code(self.result, self.strict)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def only_baseline(self) -> list[str]:
        """Cases the baseline has and the current run lacks."""
        return [_case(key, self.result) for key in self.result.only_baseline]

    @property
    def missing(self) -> list[str]:
        """Baseline cases the current run lacks that fail the gate ([] under allow_missing)."""
        return [_case(key, self.result) for key in self.result.missing]

    @property
    def shifts(self) -> list[str]:
        """A line for each dense that moved beyond the band: a shift every case shares, or dense alone."""
        return [shift.text() for shift in self.result.shifts]

    @property
    def only_current(self) -> list[str]:
        return [_case(key, self.result) for key in self.result.only_current]

    @property
    def env_differences(self) -> list[str]:
        return list(self.result.env_differences)

    def text(self) -> str:
        from dstbench.gates.comparison_text import render

        return render(self.result, strict=self.strict)

    def markdown(self) -> str:
        from dstbench.gates.comparison_text import render

        return render(self.result, strict=self.strict, markdown=True)

    def frame(self) -> "pd.DataFrame":
        """One row per case and metric: `status` (ok or not on each side), `time` (median segment
        ms, the change current/baseline - 1 with its interval, the Holm-adjusted p-value) and each
        memory metric (bytes, exact change); `top1` per trained case over its seeds (`seed` empty: the
        mean top-1 of each side, the change in fraction with its 95% interval, `basis` what it rests
        on: paired by seed, unpaired, one seed); each tracker field asked for (`metrics`) per case the
        same way, its change relative (`dstbench.gates.field_compare`). `verdict`: regression, improvement, unchanged,
        inconclusive or (dense, under --accept-machine-shift) shift accepted. A time row's interval
        is at 1 - alpha, its `p_value` the Holm-adjusted test against the band's edge, and `basis`
        "absolute (reference)" for the dense that relative gating is relative to."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        for case in self.result.cases:
            line = self.result.baseline.cases[case.key]
            base = {"case_id": case.case, "method": str(line.get("method")), "density": round(float(line.get("density") or 0.0), 6),
                    "seed": case.key.case.seed}
            status_verdict = (
                "regression" if case.baseline_status == "ok" != case.current_status
                else "improvement" if case.current_status == "ok" != case.baseline_status else "unchanged"
            )
            rows.append({**base, "metric": "status", "baseline": case.baseline_status, "current": case.current_status,
                         "verdict": status_verdict})
            if case.time is not None:
                t = case.time
                rows.append({
                    **base, "metric": "time", "baseline": t.baseline_ms, "current": t.current_ms, "change": t.ratio - 1,
                    "ci_low": _minus_one(t.ci_low), "ci_high": _minus_one(t.ci_high), "p_value": t.p_value,
                    "basis": t.basis + (" (reference)" if t.reference else ""), "verdict": t.verdict, "note": "; ".join(x for x in (t.why, t.note) if x),
                })
            for m in case.memory:
                rows.append({**base, "metric": m.metric, "baseline": m.baseline, "current": m.current, "change": m.change,
                             "basis": "exact", "verdict": m.verdict})
        for t in self.result.top1:
            rows.append({
                "case_id": t.case, "method": t.method, "density": t.density, "seed": None, "metric": "top1",
                "baseline": t.baseline, "current": t.current, "change": t.change, "ci_low": t.ci_low, "ci_high": t.ci_high,
                "basis": t.basis, "verdict": t.verdict, "note": t.note,
            })
        for v in self.result.fields:  # tracker fields asked for (`metrics`): relative change
            rows.append({
                "case_id": v.case, "method": v.method, "density": v.density, "seed": None, "metric": v.metric,
                "baseline": v.baseline, "current": v.current, "change": v.change, "ci_low": v.ci_low, "ci_high": v.ci_high,
                "basis": v.basis, "verdict": v.verdict, "note": v.note,
            })
        return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def _minus_one(value: float) -> float:
    return value - 1 if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def _case(key: tuple[str, str, float, int | None], result: Any) -> str:
    """A case one run lacks, as `case` names the compared ones (with its seed where the runs hold several)."""
    from dstbench.gates.sides import key_text, several_seeds

    return key_text(key, seeded=several_seeds(result.baseline, result.current))
