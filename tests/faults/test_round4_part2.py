"""Reliability round 4, part 2 (issue 89): training that diverged is never "ok", and readers refuse
values that cannot be. One regression test per probe; the docs' Faults table lists them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.report.tables import run_label
from dstbench.results.divergence import divergence
from dstbench.results.record import read_results
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite
from tests.gates.synthetic import line, write_run


# -- 1. diverged training ---------------------------------------------------------------------------
def test_divergence_names_the_step_where_training_left_the_rails() -> None:
    healthy = [{"step": 128, "train_loss": 2.1, "top1": 0.3}, {"step": 256, "train_loss": 1.4, "top1": 0.5}]
    assert divergence(1.3, healthy, start_loss=math.log(10)) is None
    nan = healthy + [{"step": 384, "train_loss": math.nan, "top1": 0.1}]
    assert divergence(None, nan) == "training diverged by step 384: train_loss is nan"
    grown = healthy + [{"step": 384, "train_loss": 350.0, "top1": 0.1}]
    assert "by step 384" in divergence(None, grown) and "100x" in divergence(None, grown)
    assert "by step 384" in divergence(None, grown, start_loss=math.log(10))
    assert "last timed segment's loss is inf" in divergence(math.inf)
    assert "over 100x the loss at the start" in divergence(1.3e8, None, start_loss=math.log(10))
    assert divergence(200.0, None) is None  # without a start, only a non-finite loss says so
    learnt = [{"step": 128, "train_loss": 0.004, "top1": 0.99}, {"step": 256, "train_loss": 0.6, "top1": 0.97}]
    assert divergence(None, learnt, start_loss=math.log(10)) is None  # 150x a near-zero loss is a bump, not divergence


@pytest.mark.slow
def test_a_suite_whose_loss_explodes_fails_every_case(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(methods=["dense", "rigl"], optimizer={"name": "adamw", "lr": 1e3, "weight_decay": 0.0})))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 1
    [run_dir] = list((tmp_path / "runs").iterdir())
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [x["status"] for x in lines] == ["diverged", "diverged"] and all("training diverged" in x["error"] for x in lines)
    assert main(["check", str(run_dir)]) == 1


def test_a_diverged_seed_is_left_out_of_top1_and_counted_failed(tmp_path: Path) -> None:
    import dstbench

    suite = micro_suite(methods=["rigl"], densities=[0.5], seeds=[0, 1, 2], mode="accuracy")
    lines = [line("rigl", 0.5, seed=s, mode="accuracy", top1=t) for s, t in ((0, 0.61), (1, 0.63))]
    lines.append(line("rigl", 0.5, seed=2, mode="accuracy", status="diverged", top1=0.1))
    run = dstbench.load_run(write_run(tmp_path / "run", lines, suite=suite)).frame()
    row = run.iloc[0]
    assert row["status"] == "diverged" and row["seeds"] == 2 and row["failed_seeds"] == [2]
    assert 0.0 <= row["top1_ci_low"] <= row["top1"] <= row["top1_ci_high"] <= 1.0
    assert row["top1"] == pytest.approx(0.62)


# -- 2. values that cannot be -------------------------------------------------------------------------
@pytest.mark.parametrize("edit, reason", [
    ({"top1": 7.5}, "top1 7.5 outside [0, 1]"),
    ({"top1": -0.1}, "top1 -0.1 outside [0, 1]"),
    ({"state_bytes": -4_000_000}, "state_bytes -4000000 is not a byte count"),
    ({"seed": 7}, "seed 7 is not among the run's seeds (0, 1)"),
])
def test_a_line_with_an_impossible_value_is_left_out_and_check_fails(
    edit: dict, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    timing = {"warmup_steps": 2, "segment_steps": 3, "segments": 3, "per_seed": True}
    suite = micro_suite(methods=["rigl"], densities=[0.5], seeds=[0, 1], timing=timing)
    lines = [line("rigl", 0.5, seed=s, mode="speed", top1=0.6) for s in (0, 1)]
    run = write_run(tmp_path / "run", [lines[0], {**lines[1], **edit}], suite=suite)
    if "seed" in edit:  # run.json plans seeds 0 and 1 (write_run records the lines' own cases)
        meta = json.loads((run / "run.json").read_text())
        meta["cases"] = [{**meta["cases"][0], "seed": s, "case_id": "rigl@0.5"} for s in (0, 1)]
        meta["selected"] = ["rigl@0.5 seed=0", "rigl@0.5 seed=1"]
        (run / "run.json").write_text(json.dumps(meta))
    assert [s.split(" (", 1)[1][:-1] for s in read_results(run).skipped] == [reason]
    assert main(["check", str(run)]) == 1
    assert reason in capsys.readouterr().err


def test_two_runs_of_one_folder_name_are_told_apart() -> None:
    runs = ["/ci/nightly/run1", "/ci/weekly/run1", "/ci/weekly/run2"]
    assert [run_label(r, runs) for r in runs] == ["nightly/run1", "weekly/run1", "run2"]
    assert run_label("/a/run1") == "run1"


# -- 3. seeds of the wrong type -------------------------------------------------------------------------
@pytest.mark.parametrize("seeds", [[True, 2], ["1", 2], [1.0, 2]])
def test_seeds_must_be_integers(seeds: list) -> None:
    with pytest.raises(SuiteError, match=r"seeds\.0: Input should be a valid integer"):
        parse_suite(micro_suite(seeds=seeds, mode="accuracy"), "s.yaml")


# -- 4. one line, never a traceback ----------------------------------------------------------------------
DEEP = "[" * 5000 + "]" * 5000  # beyond any recursive reader


def test_nesting_past_the_limit_is_refused_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "a" / "run1", [line("dense", 1.0), line("rigl", 0.5)])
    (run / "run.json").write_text('{"x": ' + DEEP + "}")
    assert main(["compare", str(run), str(run)]) == 2
    assert "run.json: unreadable (nested too deeply)" in capsys.readouterr().err
    other = write_run(tmp_path / "b" / "run1", [line("dense", 1.0), {**line("rigl", 0.5), "method_extras": json.loads("[" * 100 + "]" * 100)}])
    assert main(["check", str(other)]) == 1
    assert "nested deeper than 64 levels" in capsys.readouterr().err
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite()) + "description: " + "[" * 3000 + "]" * 3000 + "\n")
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 2
    assert "suite.yaml: not valid YAML: nested too deeply" in capsys.readouterr().err
    site = tmp_path / "site"
    site.mkdir()
    (site / ".dstbench-site.json").write_text(DEEP)
    assert main(["publish", str(run), "--site", str(site)]) == 2


@pytest.mark.parametrize("value, fragment", [
    ("&a [*a]", "refers to the node that contains it"),
    ("[" * 200 + "]" * 200, "nested deeper than 64 levels"),
])
def test_a_set_value_that_loops_or_nests_too_deep_is_refused(value: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite()))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs"), "--set", f"description={value}"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err) < 1000


def test_a_damaged_sibling_folder_does_not_break_a_bare_resume(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite()))
    sibling = tmp_path / "runs" / "other"
    sibling.mkdir(parents=True)
    (sibling / "run.json").write_text('{"suite": "micro", "x": ' + DEEP + "}")
    (sibling / "suite.yaml").write_text("name: micro\n")
    assert main(["run", str(suite), "--out", str(tmp_path / "runs"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_the_cpu_allocators_refusal_is_oom_with_the_bytes_asked() -> None:
    import torch

    from dstbench.execution.case_session import is_out_of_memory, memory_asked

    try:
        torch.empty(10**13)  # 40 TB
    except RuntimeError as exc:
        assert is_out_of_memory(exc) and memory_asked(exc) == "asked for 40000.0 GB (40,000,000,000,000 bytes)"
    else:  # pragma: no cover - a machine with 40 TB
        pytest.skip("the allocation succeeded")
    assert is_out_of_memory(MemoryError()) and not is_out_of_memory(RuntimeError("shape mismatch"))
