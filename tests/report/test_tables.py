"""Core table sections and their tabulate rendering."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dstbench.results.derive import derive, load_frame
from dstbench.report.sections import Rendered
from dstbench.report.tables import (
    accuracy_table, failed_table, memory_table, render_table, render_text, speed_table, summary_table,
)
from tests.report.conftest import MIB, ok_line, synthetic_lines, write_run


@pytest.fixture
def derived(synthetic_run: Path) -> pd.DataFrame:
    return derive(load_frame([synthetic_run]), "rigl")


def _cells(table, method: str, density: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    for row in table.rows:
        if row[table.headers.index("method")] == method and row[table.headers.index("density")] == density:
            return dict(zip(table.headers, row))
    raise AssertionError(f"no row {method}@{density}")


def test_speed_table_shows_measured_and_derived_figures(derived: pd.DataFrame) -> None:
    table = speed_table(derived)
    barter = _cells(table, "barter", "0.1")
    assert barter["median ms"] == "40.0" and barter["IQR ms"] == "2.0"
    assert barter["images/s"] == f"{32 * 20 / 0.040:.1f}"
    assert barter["speedup vs rigl [95% CI]"].startswith("2.50× [")
    assert (barter["FLOP limit"], barter["of limit"], barter["topology share"]) == ("5.00×", "50.0%", "5.0%")
    # Failed cases stay in the table, marked as such.
    assert _cells(table, "set", "0.1")["status"] == "oom"
    assert table.row_classes.count("failed") == 2


def test_memory_table_labels_its_basis(derived: pd.DataFrame) -> None:
    barter = _cells(memory_table(derived), "barter", "0.1")
    assert barter["basis"] == "state + activation bytes"
    assert barter["memory MiB"] == "16.0" and barter["reduction vs rigl"] == "84.6%"
    assert (barter["state MiB"], barter["activation MiB"]) == ("4.0", "12.0")


def test_failed_cases_are_listed_with_their_reason(derived: pd.DataFrame) -> None:
    rows = {row[0]: row for row in failed_table(derived).rows}
    assert rows["set@0.1"][1:3] == ["oom", "torch.OutOfMemoryError: CUDA out of memory"]
    assert rows["chase@0.5"][1:3] == ["error", "ValueError: density went negative"]


def test_optional_tables_are_absent_without_their_data(tmp_path: Path, derived: pd.DataFrame) -> None:
    assert accuracy_table(derived) is None
    ok_only = derive(load_frame([write_run(tmp_path, "ok", [l for l in synthetic_lines() if l.status == "ok"])]), "rigl")
    assert failed_table(ok_only) is None


def test_accuracy_table_in_percent_with_the_drop_against_dense_as_the_gate_takes_it(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        line.top1 = {"dense": 0.82, "rigl": 0.80, "barter": 0.77}.get(line.method)
    derived = derive(load_frame([write_run(tmp_path, "acc", lines)]), "rigl")
    table = accuracy_table(derived)
    barter = _cells(table, "barter", "0.1")
    # Against dense, whatever the report's reference (rigl): what the top1_drop expectation compares with.
    assert barter["top-1 [95% CI]"] == "77.0%" and barter["top-1 drop vs dense [95% CI]"] == "+5.00 pp"
    assert barter["seeds"] == "1 seed"
    assert _cells(table, "rigl", "0.1")["top-1 drop vs dense [95% CI]"] == "+2.00 pp"
    assert "test split" in table.note and "Validation" not in table.note
    # Without dense in the run: against the reference.
    no_dense = derive(load_frame([write_run(tmp_path, "acc2", [x for x in lines if x.method != "dense"])]), "rigl")
    assert _cells(accuracy_table(no_dense), "barter", "0.1")["top-1 drop vs rigl [95% CI]"] == "+3.00 pp"


def test_accuracy_table_pools_seeds_with_intervals_and_pairs_the_drop_by_seed(tmp_path: Path) -> None:
    """A hand-made run over seeds 0 and 1: dense 0.80 / 0.90, barter 0.76 / 0.84. Paired, the drops are
    4 and 6 points: mean 5, 95% t-interval 5 +- 12.706 x 1 = [-7.71, +17.71]. Against one dense line
    for both seeds (the last, 0.90) they would be 14 and 6; the interval of the difference of the
    means (unpaired) would be wider."""
    lines = []
    for seed, dense, barter in ((0, 0.80, 0.76), (1, 0.90, 0.84)):
        for line in (ok_line("seeded", "dense", "dense", 1.0, [10.0] * 6, 100, MIB, MIB, 0.0),
                     ok_line("seeded", "barter", "compact", 0.1, [4.0] * 6, 10, MIB, MIB, 0.0)):
            line.seed, line.top1 = seed, dense if line.method == "dense" else barter
            lines.append(line)
    suite = {"name": "seeded", "reference": "dense", "methods": ["dense", "barter"], "seeds": [0, 1]}
    derived = derive(load_frame([write_run(tmp_path, "seeded", lines, suite=suite)]), "dense")
    table = accuracy_table(derived)
    assert [row[table.headers.index("method")] for row in table.rows] == ["dense", "barter"]  # a row per case
    barter = _cells(table, "barter", "0.1")
    assert barter["seeds"] == "2 seeds"
    assert barter["top-1 [95% CI]"] == "80.0% [29.2, 100.0]"  # 0.80 +- 12.706 * 0.0566 / 1.414, cut at 100%
    assert barter["top-1 drop vs dense [95% CI]"] == "+5.00 pp [-7.71, +17.71]"
    assert "paired by seed" in table.note
    # The speed table keeps a row per (case, seed), its seed named.
    speed = speed_table(derived)
    assert "seed" in speed.headers and len(speed.rows) == 4


def test_several_runs_add_a_run_column(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, name, synthetic_lines()) for name in ("first", "second")]
    table = speed_table(derive(load_frame(runs), "rigl"))
    assert table.headers[0] == "run"
    assert {row[0] for row in table.rows} == {"first", "second"}


def test_text_rendering(derived: pd.DataFrame) -> None:
    markdown = render_table(speed_table(derived), "github")
    assert markdown.splitlines()[0].startswith("| method")
    text = render_text([Rendered("speed", "Speed", "table", table=speed_table(derived)), Rendered("x", "Broken", "table", error="ValueError: no")])
    assert text.startswith("Speed\n") and "Broken: could not be built (ValueError: no)" in text
    # The end-of-run table of `dstbench run` keeps working.
    summary = summary_table(derived, "rigl")
    assert "speedup vs rigl" in summary and "2.50×" in summary


def test_an_execution_column_appears_when_a_masked_method_ran_sparse(tmp_path: Path, derived: pd.DataFrame) -> None:
    assert "execution" not in speed_table(derived).headers  # masked only: nothing to tell apart
    lines = synthetic_lines()
    for line in lines:
        line.execution = "masked" if line.kind == "masked" else None
    lines.append(ok_line("synthetic", "rigl_csr", "masked", 0.1, [90.0, 92.0, 88.0, 91.0, 89.0], 3_000_000_000,
                         12 * MIB, 60 * MIB, 30.0, execution="csr"))
    derived = derive(load_frame([write_run(tmp_path, "csr", lines)]), "rigl")
    for table in (speed_table(derived), memory_table(derived)):
        assert table.headers[:2] == ["method", "execution"]
        cells = {(row[0], row[2]): row[1] for row in table.rows}
        assert cells[("rigl_csr", "0.1")] == "csr" and cells[("rigl", "0.1")] == "masked"
        assert cells[("barter", "0.1")] == "compact" and cells[("dense", "1")] == "dense"
    assert _cells(memory_table(derived), "rigl_csr", "0.1")["state MiB"] == "12.0"


def test_the_density_a_case_ran_at_is_shown_and_flagged_when_off_target(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        if line.case_id == "rigl@0.1":
            line.density_achieved = 0.83  # a gradual pruner still pruning at the timed segments
    derived = derive(load_frame([write_run(tmp_path, "off-target", lines)]), "rigl")
    assert list(derived.set_index("case_id")["density_off_target"].loc[["rigl@0.1", "barter@0.1"]]) == [True, False]
    for table in (speed_table(derived), memory_table(derived)):
        rigl, barter = _cells(table, "rigl", "0.1"), _cells(table, "barter", "0.1")
        assert rigl["achieved"] == "0.830 off target" and barter["achieved"] == "0.100"
    speed = speed_table(derived)
    assert "density off target" in _cells(speed, "rigl", "0.1")["flags"]
    assert "density off target" not in _cells(speed, "barter", "0.1")["flags"]
