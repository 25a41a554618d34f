"""What a gate can judge: the built-in metrics (`dstbench.suite.schema_sections.METRICS`), then every
registered tracker's numeric field (`ResultField.gateable`), a plugin's once its module is imported.
`expect:` and `compare --metric` take either; the suite layer, below the trackers, checks only the
name's form, so the name is checked here (`unknown_metrics`) before a run starts and when a gate
reads it.
"""

from __future__ import annotations

from typing import Any

from dstbench.measure.trackers.base import ResultField
from dstbench.measure.trackers.registry import registered_trackers
from dstbench.suite.schema_sections import METRICS


def declared_metric(name: str) -> ResultField | None:
    """The registered trackers' numeric field `name` (`ResultField.gateable`), else None."""
    return next((spec for tracker in registered_trackers() for spec in tracker.fields
                 if spec.name == name and spec.gateable), None)


def gate_metrics() -> tuple[str, ...]:
    """What `expect:` can gate: the built-in metrics, then every registered tracker's numeric field."""
    fields = [spec.name for tracker in registered_trackers() for spec in tracker.fields if spec.gateable]
    return (*METRICS, *(name for name in fields if name not in METRICS))


def unknown_metrics(expect: list[Any]) -> list[str]:
    """The metrics of `expect` that are neither built in nor a registered tracker's numeric field."""
    known = set(gate_metrics())
    return list(dict.fromkeys(exp.metric for exp in expect if exp.metric not in known))


def unknown_text(names: list[str], where: str = "expect") -> str:
    """Why `names` cannot be gated: for `expect:` (which also takes the built-in metrics) or another option."""
    builtin = f"not a built-in metric ({', '.join(METRICS)}), nor " if where == "expect" else "not "
    return (f"{where}: unknown metric{'s' if len(names) > 1 else ''} {', '.join(names)}: {builtin}a numeric field of a "
            "registered tracker (is the plugin that declares it listed in the suite's `plugins:` and importable?)")
