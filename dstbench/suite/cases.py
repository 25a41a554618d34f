"""A suite expands into cases: one per (method, density); dense runs once, at 1.0."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dstbench.dst import registry

if TYPE_CHECKING:  # importing config builds a model on first import: keep `case_id` light for compare
    from dstbench.suite.schema import SuiteConfig


def density_text(density: float) -> str:
    """A density exactly as it is: the shortest text that reads back as the same float, without a
    trailing ".0" (0.1 -> "0.1", 1.0 -> "1", 0.5000001 -> "0.5000001"), so that distinct densities
    never share a case id (`:g` printed 0.5 and 0.5000001 both as "0.5")."""
    text = repr(float(density))
    return text[:-2] if text.endswith(".0") else text


def case_id(method: str, density: float) -> str:
    """How a case is named everywhere (result lines, gates, reports): `label@density`, e.g. `rigl@0.1`."""
    return f"{method}@{density_text(density)}"


@dataclasses.dataclass(frozen=True)
class Case:
    method: str  # the label results are keyed by (the method's name unless the suite gives one)
    method_name: str  # the registered method
    kind: str
    density: float
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def case_id(self) -> str:
        return case_id(self.method, self.density)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Case":
        return cls(**data)


def expand_cases(suite: SuiteConfig, only: list[str] | None = None, densities: list[float] | None = None) -> list[Case]:
    """Cases in run order: density by density, methods in suite order within each.

    `only` keeps the listed method labels; `densities` keeps the listed densities (dense is kept
    whenever it is selected, since it has no density of its own).
    """
    cases: list[Case] = []
    for spec in suite.methods:
        if only and spec.key not in only:
            continue
        info = registry.method_info(spec.name)
        wanted = suite.method_densities(spec)  # dense: 1.0; else the method's own or the suite's
        for density in wanted:
            if densities and info.kind != "dense" and density not in densities:
                continue
            cases.append(Case(spec.key, spec.name, info.kind, density, dict(spec.params)))
    # Dense first, then by descending density, so a long run has its baselines early.
    return sorted(cases, key=lambda c: (c.kind != "dense", -c.density))
