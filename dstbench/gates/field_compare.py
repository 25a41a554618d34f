"""`dstbench compare --metric NAME`: a registered tracker's numeric field judged per case between
two runs, in the direction its declaration says is better (`ResultField.better`).

A case is its (suite hash, method, density, point) with its ok lines at every seed on each side; a
line's value is what the field's declaration shows (`ResultField.shown`: energy as joules per
step). The change is relative: current / baseline - 1.

- **Exact** fields (`ResultField.exact`: byte counts, FLOPs, update counts, which do not jitter) are
  judged as memory is: changed when the means differ by more than `--memory-threshold` percent, with
  no test.
- **Sampled** fields (everything else: a resident peak, a loss, joules) by the rule time and top-1
  use (`dstbench.gates.time_rule`) over the seeds, in the band +/-`--time-threshold` percent of the
  baseline's mean: each seed's value divided by that mean, the change paired by seed where both
  sides have the same seeds (else Welch's), a regression or an improvement only when significantly
  beyond the band (one-sided t-test against its edge, Holm over the cases), unchanged only when its
  (1 - 2 alpha) interval lies inside it, else inconclusive. One seed on a side is inconclusive:
  nothing estimates the spread.

A field declared without a better direction is "changed" rather than a regression or an
improvement, and fails nothing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from dstbench.gates.sides import CompareInputError, values_by_seed
from dstbench.gates.top1_compare import beyond_p, change_stats, interval, setups_differ_in_seed_only
from dstbench.measure.trackers.base import ResultField
from dstbench.results.gate_metrics import declared_metric, unknown_text
from dstbench.results.intervals import holm


@dataclasses.dataclass
class FieldVerdict:
    """One case's change of one field (means over each side's seeds; `change` relative)."""

    metric: str
    case: str
    method: str
    density: float
    baseline: float
    current: float
    change: float  # current / baseline - 1 (sampled and paired: the mean of the per-seed changes)
    ci_low: float  # its (1 - 2 alpha) interval (sampled fields; NaN for exact ones or one seed)
    ci_high: float
    basis: str  # "exact", "paired by seed (n=3)", "unpaired (3 vs 2 seeds)", "one seed"
    verdict: str  # "regression", "improvement", "unchanged", "changed" or "inconclusive"
    note: str = ""
    unit: str = ""


def field_value(spec: ResultField) -> Callable[[dict[str, Any]], float | None]:
    """A line's numeric value of `spec` as shown (None where it has none)."""
    def value(line: dict[str, Any]) -> float | None:
        shown = spec.shown(line.get(spec.name))
        return float(shown) if isinstance(shown, (int, float)) and not isinstance(shown, bool) and math.isfinite(shown) else None

    return value


def _import_plugins(*sides: Any) -> None:
    """Import the runs' suites' plugins (where this Python finds them): their trackers declare fields."""
    from dstbench.results.run_folder import RunFolder

    for side in sides:
        try:
            RunFolder.open(side.path).suite()
        except Exception:  # noqa: BLE001 - the name is then unknown, and said so
            pass


def _direction(spec: ResultField, change: float) -> str:
    """What a change beyond the band is, by the field's declared better direction."""
    if spec.better is None:
        return "changed"
    worse = change > 0 if spec.better == "lower" else change < 0
    return "regression" if worse else "improvement"


def _sampled_verdict(spec: ResultField, change: float, low: float, high: float, p: float, threshold: float, alpha: float) -> tuple[str, str]:
    limit = threshold / 100.0
    level = f"{(1 - 2 * alpha) * 100:g}%"
    if not math.isfinite(low):
        return "inconclusive", "one seed on a side: its spread cannot be estimated; run more seeds"
    if p < alpha:
        return _direction(spec, change), f"significantly beyond +/-{threshold:g}% (one-sided p {p:.3g}, Holm over the cases)"
    if -limit - 1e-12 <= low and high <= limit + 1e-12:
        return "unchanged", f"its {level} interval lies within +/-{threshold:g}% (equivalence, TOST)"
    return "inconclusive", f"its {level} interval reaches past +/-{threshold:g}%: more seeds, or a wider band, would decide it"


def compare_field(baseline: Any, current: Any, name: str, *, time_threshold: float, memory_threshold: float,
                  alpha: float) -> list[FieldVerdict]:
    """The verdicts of field `name` for every case both sides have (in the baseline's order).
    `CompareInputError` for a name that is no registered tracker's numeric field."""
    spec = declared_metric(name)
    if spec is None:
        _import_plugins(baseline, current)
        spec = declared_metric(name)
    if spec is None:
        raise CompareInputError(unknown_text([name], "--metric"))
    seedless = setups_differ_in_seed_only(baseline, current)
    (base, names), (cur, _) = values_by_seed(baseline, field_value(spec), seedless), values_by_seed(current, field_value(spec), seedless)
    pairs = [(key, base[key], cur[key]) for key in base if key in cur]
    unit = spec.shown_unit or ""
    if spec.exact:
        verdicts = []
        for key, b, c in pairs:
            before, after = float(np.mean(list(b.values()))), float(np.mean(list(c.values())))
            change = 0.0 if before == after else (after - before) / abs(before) if before else math.inf
            verdict = _direction(spec, change) if abs(change) * 100.0 > memory_threshold else "unchanged"
            verdicts.append(FieldVerdict(name, *names[key], before, after, change, math.nan, math.nan, "exact", verdict,
                                         f"exact: changed beyond +/-{memory_threshold:g}% counts", unit))
        return verdicts
    stats = []
    for key, b, c in pairs:
        scale = abs(float(np.mean(list(b.values())))) or 1.0  # the change relative to the baseline's mean
        stats.append(change_stats({s: v / scale for s, v in b.items()}, {s: v / scale for s, v in c.items()}))
    judged = [i for i, (_, se, _, _) in enumerate(stats) if math.isfinite(se)]
    adjusted = dict(zip(judged, holm([beyond_p(stats[i][0], stats[i][1], stats[i][2], time_threshold) for i in judged])))
    verdicts = []
    for i, (key, b, c) in enumerate(pairs):
        change, se, df, paired = stats[i]
        low, high = interval(change, se, df, 1 - 2 * alpha)
        verdict, note = _sampled_verdict(spec, change, low, high, adjusted.get(i, 1.0), time_threshold, alpha)
        if not math.isfinite(low):
            basis = "one seed"
        else:
            basis = f"paired by seed (n={len(c)})" if paired else f"unpaired ({len(b)} vs {len(c)} seeds)"
        verdicts.append(FieldVerdict(name, *names[key], float(np.mean(list(b.values()))), float(np.mean(list(c.values()))),
                                     change, low, high, basis, verdict, note, unit))
    return verdicts
