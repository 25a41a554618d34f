"""`dstbench report` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dstbench.cli import main


def test_prints_the_tables_without_html(synthetic_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(synthetic_run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fastest vs rigl: 2.50x (barter at density 0.1, 95% CI [")
    assert "cases: 5 of 7 ok, 2 failed" in out
    for title in ("Speed\n", "Memory\n", "Failed cases\n"):
        assert title in out
    assert "torch.OutOfMemoryError: CUDA out of memory" in out
    assert "Environment" not in out  # page-only tables stay off the terminal


def test_writes_html_and_markdown(report_html: Path, synthetic_run: Path, tmp_path: Path) -> None:
    # report_html ran `dstbench report RUN --html FILE`: the headline on stdout, not the tables.
    out = (report_html.parent / "stdout.txt").read_text(encoding="utf-8")
    assert out.startswith("fastest vs rigl: 2.50x") and "Speed\n" not in out
    assert report_html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    markdown = tmp_path / "out" / "report.md"
    assert main(["report", str(synthetic_run), "--markdown", str(markdown)]) == 0
    assert "| barter   | 0.1       | 0.100      | ok" in markdown.read_text(encoding="utf-8")


def test_reference_option(synthetic_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(synthetic_run), "--reference", "dense"]) == 0
    assert "fastest vs dense: 5.00x (barter at density 0.1" in capsys.readouterr().out
    assert main(["report", str(synthetic_run), "--reference", "nope"]) == 2
    assert "--reference 'nope' is not among the methods" in capsys.readouterr().err


def test_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no results.jsonl in" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.jsonl").write_text("")
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no result lines" in capsys.readouterr().err


def test_contended_cases_are_named_in_banner_table_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.report.conftest import synthetic_lines, write_run

    lines = synthetic_lines()
    for line in lines:
        if line.case_id == "barter@0.5":
            line.noise = {"cpu_share": [0.4, 0.5, 0.97, 0.45, 0.99], "starved_segments": 3, "contended": True}
            line.warnings = ["contended: 3 of 5 segments starved (starved: cpu_share < 0.85)"]
    run_dir = write_run(tmp_path, "contended", lines)
    markdown = tmp_path / "report.md"
    assert main(["report", str(run_dir), "--markdown", str(markdown)]) == 0
    text = markdown.read_text(encoding="utf-8")
    banner = text[: text.index("**Fastest")]
    assert "> - barter@0.5: contended: 3 of 5 segments starved" in banner
    assert "| contended" in text  # the speed table's flags column
    out = capsys.readouterr().out
    assert "WARNING barter@0.5: contended: 3 of 5" in out



def test_a_run_where_nothing_beats_the_reference_never_headlines_a_speedup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.conftest import micro_suite
    from tests.gates.synthetic import BASE_MS, line, scaled, write_run

    suite = micro_suite(methods=["rigl", "barter"], densities=[0.1], reference="rigl")
    run = write_run(tmp_path / "run", [line("rigl", 0.1), line("barter", 0.1, segment_ms=scaled(BASE_MS, 1.35), kind="compact")], suite)
    assert main(["report", str(run), "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no method faster than rigl; closest 0.74x (barter at density 0.1") and "fastest" not in out
    markdown = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "**No method faster than rigl:** closest 0.74×" in markdown and "Fastest" not in markdown
    assert ">No method faster than rigl</div>" in (tmp_path / "r.html").read_text(encoding="utf-8")
