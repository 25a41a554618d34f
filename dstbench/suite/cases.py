"""A case: one method at one density (dense runs once, at 1.0), and how cases are named.

Light on purpose (no schema, no torch): compare and export name cases without validating a suite.
A suite expands into its cases in `dstbench.suite.plan.expand_cases`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


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
