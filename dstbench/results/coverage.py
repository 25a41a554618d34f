"""Which of a run's cases have a result line: the suite's cases, those the run was asked for
(`--only`, `--density`), and those of them that never finished (an interrupted run).

`dstbench run` records the suite's expanded cases and the selection in `run.json` (`cases`,
`selected`); a run folder from before that is read from its stored `suite.yaml` instead, with the
kinds its result lines name (a method without a line is looked up in the registry). Nothing here
imports torch unless that fallback needs the registry.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from dstbench.suite.cases import Case, CaseKey, line_case_id
from dstbench.suite.groups import trained_line
from dstbench.results.record import iter_results
from dstbench.results.run_files import load_run_meta, stored_suite, update_run_meta


@dataclasses.dataclass
class Coverage:
    """The cases of one run folder. `planned` is every case of the suite, in run order."""

    planned: list[Case]
    # Case keys (`Case.key`: the case id, with its seed where the suite lists `seeds:`).
    selected: list[CaseKey]  # those the run was asked for (every planned one without a selection)
    present: list[CaseKey]  # those with a result line
    # Whether run.json records the selection; a run folder from before it cannot tell a case left
    # out by `--only` from one an interruption never reached.
    recorded: bool = True

    @property
    def missing(self) -> list[str]:
        """Asked for, but without a result line: the run did not finish."""
        done = set(self.present)
        return [c for c in self.selected if c not in done]

    @property
    def unselected(self) -> list[str]:
        """In the suite but left out by `--only` / `--density` (and never run)."""
        chosen, done = set(self.selected), set(self.present)
        return [p.key for p in self.planned if p.key not in chosen and p.key not in done]

    @property
    def complete(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        """'2 of 3 cases (1 not run: barter@0.5)', or '11 of 11 cases'; the suite's size when a
        selection left cases out."""
        ran = len([c for c in self.selected if c in set(self.present)])
        text = f"{ran} of {len(self.selected)} cases"
        if self.missing:
            shown = ", ".join(self.missing[:5]) + (", ..." if len(self.missing) > 5 else "")
            text += f" ({len(self.missing)} not run: {shown})"
        if self.unselected:
            text += f"; {len(self.unselected)} more in the suite, not selected"
        return text


def record_cases(run_dir: str | Path, planned: Iterable[Case], selected: Iterable[str], **fields: Any) -> None:
    """Write the suite's cases and the selection into `run.json` (with any other `fields`). A run
    resumed with another selection keeps what it was asked for before, too. A damaged run.json is
    a `RunDirError`, never rewritten with its other fields lost."""
    planned = list(planned)

    def record(meta: dict[str, Any]) -> None:
        before = [c for c in meta.get("selected") or [] if isinstance(c, str)]
        meta["cases"] = [p.to_record() for p in planned]
        meta["selected"] = list(dict.fromkeys([*before, *selected]))
        meta.update(fields)

    update_run_meta(run_dir, record)


def _from_meta(meta: dict[str, Any]) -> list[Case] | None:
    cases = meta.get("cases")
    if not isinstance(cases, list):
        return None
    try:
        return [Case.from_record(c) for c in cases]
    except (KeyError, TypeError, ValueError):
        return None


def _from_suite(run_dir: Path, lines: list[dict[str, Any]]) -> list[Case] | None:
    """The cases of the stored suite, for run folders whose run.json predates `cases`."""
    suite = stored_suite(run_dir)  # {} when unreadable
    try:
        methods = [m if isinstance(m, dict) else {"name": m} for m in suite["methods"]]
        densities = [float(d) for d in suite["densities"]]
    except (KeyError, TypeError, ValueError):
        return None
    kinds = {str(line.get("method")): str(line.get("kind")) for line in lines}
    planned = []
    for spec in methods:
        label = str(spec.get("label") or spec.get("name"))
        kind = kinds.get(label) or _registered_kind(str(spec.get("name")))
        for density in [1.0] if kind == "dense" else densities:
            planned.append(Case(label, str(spec.get("name")), kind, density))
    return sorted(planned, key=lambda c: (c.kind != "dense", -c.density))


def _registered_kind(name: str) -> str:
    try:
        from dstbench.methods import method_info

        return method_info(name).kind
    except Exception:  # noqa: BLE001 - a plugin that is not installed here: assume a sparse method
        return "masked"


def run_coverage(run_dir: str | Path) -> Coverage | None:
    """The cases of a run folder; None when neither run.json nor suite.yaml says what they were."""
    run_dir = Path(run_dir)
    # A `mode: both` line from the timing phase alone has not run yet: its training is missing.
    lines = [line for line in iter_results(run_dir) if line.get("mode") != "both" or trained_line(line)]
    meta = load_run_meta(run_dir)
    planned = _from_meta(meta) or _from_suite(run_dir, lines)
    if planned is None:
        return None
    # Named from method, density and sweep point, as the planned cases are (what a line's case_id is
    # made of), and with seeds by seed: a line without one counts as the first seed's (a one-seed run).
    seeds = [p.seed for p in planned if p.seed is not None]
    if seeds:
        present = list(dict.fromkeys(
            CaseKey(line_case_id(line), int(line["seed"]) if line.get("seed") is not None else seeds[0]) for line in lines
        ))
    else:
        present = list(dict.fromkeys(CaseKey(line_case_id(line)) for line in lines))
    selected = meta.get("selected")
    if isinstance(selected, list):
        selected = [CaseKey.parse(c) for c in selected]
        if seeds:
            # Selected by a one-seed run before `seeds:` were added: by case id, the first seed's.
            ids = {p.case_id for p in planned}
            selected = list(dict.fromkeys(CaseKey(c, seeds[0]) if c in ids else c for c in selected))
        return Coverage(planned, selected, present)
    # No record of a selection: count the whole suite as asked for.
    return Coverage(planned, [p.key for p in planned], present, recorded=False)
