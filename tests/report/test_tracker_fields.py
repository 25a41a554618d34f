"""The report's table of tracker figures: the fields no other table shows, formatted by their
declared units, energy as joules per step or "not measured", a field that opts out left out."""

from __future__ import annotations

from pathlib import Path

from dstbench.measure.trackers.base import LATEST, RANK0, ResultField
from dstbench.report.tracker_fields import cell, header, reported_fields, tracker_fields_table
from dstbench.results.run_folder import RunFolder

SMOKE = Path(__file__).resolve().parents[2] / "reports" / "baselines" / "cpu_smoke"


def test_the_committed_smoke_run_shows_what_no_other_table_does() -> None:
    table = tracker_fields_table(RunFolder.open(SMOKE).frame(None))
    assert table is not None
    shown = table.headers[table.headers.index("status") + 1:]
    assert shown[:2] == ["rss_peak_bytes (MiB)", "flops_per_step (GFLOP)"] and shown[-1] == "energy (J/step)"
    # Shown elsewhere, or a setting: opted out in their declarations.
    assert not {"median_ms (ms)", "state_bytes (MiB)", "top1 (%)", "segment_steps (steps)"} & set(table.headers)
    assert {row[-1] for row in table.rows} == {"not measured"}  # a CPU without readable RAPL counters
    assert "energy: joules of the timed segments" in table.note and "shown as J/step" in table.note
    names = [spec.name for spec in reported_fields()]
    assert "reserved_memory_bytes" in names and "reserved_memory_bytes (MiB)" not in table.headers  # no case has one


def test_cells_follow_the_declared_unit() -> None:
    def field(unit: str | None) -> ResultField:
        return ResultField("x", float | None, LATEST, RANK0, "x", default=None, unit=unit)

    assert (cell(field("bytes"), 3 * 2**20), header(field("bytes"))) == ("3.0", "x (MiB)")
    assert (cell(field("FLOPs"), 2.5e9), header(field("FLOPs"))) == ("2.5", "x (GFLOP)")
    assert cell(field("threads"), 4) == "4" and header(field("threads")) == "x (threads)"
    assert cell(field(None), None) == "—" and header(field(None)) == "x"
