"""Runs of a suite with `seeds:`: one line per (case, seed), `--resume` by seed, the frame pooled over
seeds, speedups within a seed, and `check`, `compare` and `export` keeping every seed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import dstbench
from dstbench.execution.orchestrator import run_suite
from dstbench.gates.compare import compare_runs
from dstbench.gates.comparison_text import render
from dstbench.gates.sides import load_side
from dstbench.gates.export import export_run
from dstbench.gates.run_verdict import failed_case_list
from dstbench.results.coverage import run_coverage
from dstbench.results.derive import load_frame
from dstbench.results.record import iter_results
from tests.execution.test_accuracy_track import digits_suite


def write(path: Path, suite: dict[str, Any], seeds: list[int] | None) -> Path:
    suite = dict(suite)
    if seeds is not None:
        suite.pop("seed", None)
        suite["seeds"] = seeds
    path.write_text(yaml.safe_dump(suite))
    return path


def lines_of(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in (run_dir / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def both_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense and RigL on digits over seeds 0 and 1, `mode: both`: the first seed timed and trained,
    the second trained only."""
    tmp = tmp_path_factory.mktemp("seeds")
    suite = digits_suite(mode="both", methods=["dense", "rigl"], accuracy={"epochs": 2, "checkpoint_every": 0})
    return run_suite(write(tmp / "suite.yaml", suite, [0, 1]), out=tmp / "runs")


def test_every_case_runs_once_per_seed_with_its_own_training(both_run: Path) -> None:
    lines = lines_of(both_run)
    assert [(line["case_id"], line["seed"], line["status"]) for line in lines] == [
        ("dense@1", 0, "ok"), ("rigl@0.5", 0, "ok"), ("dense@1", 1, "ok"), ("rigl@0.5", 1, "ok"),
    ]
    assert len({line["suite_hash"] for line in lines}) == 1  # one suite: the seeds are not in its hash
    # Each seed starts from its own weights and data order.
    dense = [line for line in lines if line["method"] == "dense"]
    assert dense[0]["curve"] != dense[1]["curve"]
    # The second seed trains for accuracy alone: no segments, its line says so.
    assert [bool(line["segment_ms"]) for line in lines] == [True, True, False, False]
    assert [line["mode"] for line in lines] == ["both", "both", "accuracy", "accuracy"]
    # An accuracy line records the density it trained at, so `density_achieved` gates every seed.
    assert [round(line["density_achieved"], 2) for line in lines] == [1.0, 0.5, 1.0, 0.5]
    assert json.loads((both_run / "run.json").read_text())["selected"] == [
        "dense@1 seed=0", "rigl@0.5 seed=0", "dense@1 seed=1", "rigl@0.5 seed=1"]
    assert run_coverage(both_run).complete


def test_the_frame_pools_seeds_with_an_interval(both_run: Path) -> None:
    run = dstbench.load_run(both_run)
    per_seed = run.frame(per_seed=True).set_index(["case_id", "seed"])
    assert len(per_seed) == 4
    frame = run.frame().set_index("case_id")
    assert list(frame.index) == ["dense@1", "rigl@0.5"] and "seed" not in frame
    for case in frame.index:
        row, own = frame.loc[case], per_seed.loc[case, "top1"]
        assert row["seeds"] == 2 and row["failed_seeds"] == [] and row["status"] == "ok"
        assert row["top1"] == pytest.approx(own.mean())
        assert row["top1_std"] == pytest.approx(own.std(ddof=1))
        assert row["top1_ci_low"] <= row["top1"] <= row["top1_ci_high"]
        # Student-t with one degree of freedom: 12.71 standard errors each side.
        assert row["top1_ci_high"] - row["top1"] == pytest.approx(12.706 * own.std(ddof=1) / math.sqrt(2), rel=1e-3)
    drops = per_seed.loc["dense@1", "top1"] - per_seed.loc["rigl@0.5", "top1"]  # paired by seed
    rigl = frame.loc["rigl@0.5"]
    assert rigl["top1_drop"] == pytest.approx(drops.mean()) and rigl["top1_drop_seeds"] == 2
    assert rigl["top1_drop_ci_low"] <= rigl["top1_drop"] <= rigl["top1_drop_ci_high"]
    assert math.isnan(frame.loc["dense@1", "top1_drop"])
    # Speed comes from the timed seed, paired with its own seed's dense.
    assert math.isfinite(rigl["speedup"]) and math.isfinite(rigl["median_ms"])
    assert per_seed.loc[("rigl@0.5", 0), "speedup"] == pytest.approx(rigl["speedup"])
    assert math.isnan(per_seed.loc[("rigl@0.5", 1), "speedup"])


def test_one_seed_gives_an_estimate_without_an_interval(tmp_path: Path) -> None:
    suite = digits_suite(methods=["dense"], accuracy={"epochs": 1, "checkpoint_every": 0})
    row = dstbench.load_run(run_suite(write(tmp_path / "s.yaml", suite, None), out=tmp_path)).frame().iloc[0]
    assert row["seeds"] == 1 and math.isfinite(row["top1"])
    assert math.isnan(row["top1_ci_low"]) and math.isnan(row["top1_ci_high"]) and math.isnan(row["top1_std"])


def test_a_finished_one_seed_run_gets_more_seeds_on_resume(tmp_path: Path) -> None:
    suite = digits_suite(methods=["dense", "rigl"], accuracy={"epochs": 1, "checkpoint_every": 0})
    path = write(tmp_path / "s.yaml", suite, None)
    run_dir = run_suite(path, out=tmp_path / "runs")
    before = (run_dir / "results.jsonl").read_text()
    assert [line["seed"] for line in lines_of(run_dir)] == [0, 0]
    curves_before = dstbench.load_run(run_dir).curves()
    write(path, suite, [0, 1])
    assert run_suite(path, out=tmp_path / "runs", resume=True) == run_dir
    after = (run_dir / "results.jsonl").read_text()
    assert after.startswith(before)  # the seed-0 lines untouched
    curves = dstbench.load_run(run_dir).curves()  # every seed's evaluations, seed 0's as they were
    assert set(curves["seed"]) == {0, 1} and len(curves) == 2 * len(curves_before)
    pd.testing.assert_frame_equal(curves[curves["seed"] == 0].reset_index(drop=True), curves_before)
    assert [(line["case_id"], line["seed"]) for line in lines_of(run_dir)] == [
        ("dense@1", 0), ("rigl@0.5", 0), ("dense@1", 1), ("rigl@0.5", 1)]
    assert json.loads((run_dir / "run.json").read_text())["resumes"]
    assert "seeds:\n- 0\n- 1" in (run_dir / "suite.yaml").read_text()
    coverage = run_coverage(run_dir)  # what the one-seed run selected (by case id) counts as seed 0's
    assert coverage.complete and coverage.selected == ["dense@1 seed=0", "rigl@0.5 seed=0", "dense@1 seed=1", "rigl@0.5 seed=1"]
    # Once more: nothing left to run.
    run_suite(path, out=tmp_path / "runs", resume=True)
    assert (run_dir / "results.jsonl").read_text() == after


def test_a_run_stopped_between_seeds_resumes_the_missing_seed_only(tmp_path: Path) -> None:
    suite = digits_suite(methods=["dense", "rigl"], accuracy={"epochs": 1, "checkpoint_every": 0})
    path = write(tmp_path / "s.yaml", suite, [0, 1])
    run_dir = run_suite(path, out=tmp_path / "runs")
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    # What a kill after the first seed leaves (each line is written as its case ends: tests/faults).
    (run_dir / "results.jsonl").write_text("\n".join(lines[:3]) + "\n")
    assert run_coverage(run_dir).missing == ["rigl@0.5 seed=1"]
    run_suite(path, out=tmp_path / "runs", resume=True)
    again = (run_dir / "results.jsonl").read_text().splitlines()
    assert again[:3] == lines[:3] and len(again) == 4
    assert (json.loads(again[3])["case_id"], json.loads(again[3])["seed"]) == ("rigl@0.5", 1)


def test_speed_mode_times_every_seed_with_per_seed_in_groups_of_one_seed(tmp_path: Path) -> None:
    from tests.conftest import micro_suite

    suite = micro_suite(methods=["dense", "rigl"], timing={"warmup_steps": 2, "segment_steps": 3, "segments": 3, "per_seed": True})
    run_dir = run_suite(write(tmp_path / "s.yaml", suite, [0, 1]), out=tmp_path)
    lines = list(iter_results(run_dir))
    assert sorted((line["case_id"], line["seed"]) for line in lines) == [
        ("dense@1", 0), ("dense@1", 1), ("rigl@0.5", 0), ("rigl@0.5", 1)]
    assert all(line["segment_ms"] for line in lines)
    for line in lines:  # each seed timed in its own group, which names it
        assert all(group.startswith(f"d=0.5 seed={line['seed']}#") for group in line["groups"])
    frame = dstbench.load_run(run_dir).frame(per_seed=True)
    assert frame["speedup"].notna().all()


def test_check_compare_and_export_keep_every_seed(both_run: Path) -> None:
    frame = load_frame([both_run])
    failing = frame.assign(status=["ok", "ok", "ok", "error"])
    assert failed_case_list(failing) == (["rigl@0.5 seed=1 (error)"], 4)
    assert dstbench.load_run(both_run).check().passed
    comparison = compare_runs(load_side(both_run), load_side(both_run))
    assert [case.case for case in comparison.cases] == ["dense@1 seed=0", "rigl@0.5 seed=0", "dense@1 seed=1", "rigl@0.5 seed=1"]
    assert not comparison.regressed
    # Top-1 per case over its seeds, paired by seed: a run against itself changes by nothing.
    assert [(t.case, t.basis, t.change, t.verdict) for t in comparison.top1] == [
        ("dense@1", "paired by seed (n=2)", 0.0, "unchanged"), ("rigl@0.5", "paired by seed (n=2)", 0.0, "unchanged")]
    text = render(comparison)
    assert "top-1 (mean over each run's seeds)" in text and "top-1 of 2 cases: 0 regressed" in text
    document, skipped = export_run(both_run)
    assert [b["param"] for b in document["benchmarks"]] == ["dense@1 seed=0", "rigl@0.5 seed=0"]
    assert skipped == ["dense@1 seed=1 (ok)", "rigl@0.5 seed=1 (ok)"]  # trained only: no segments to export


def test_top1_expectations_gate_the_mean_over_seeds_and_print_its_interval(both_run: Path) -> None:
    from dstbench.results.expectations import evaluate
    from dstbench.suite.schema_sections import Expectation

    frame = load_frame([both_run])
    pooled = dstbench.load_run(both_run).frame().set_index("case_id")
    top1, drop = pooled.loc["rigl@0.5", "top1"], pooled.loc["rigl@0.5", "top1_drop"]
    expect = [
        Expectation(metric="top1", method="rigl", min=round(top1, 6) - 1e-6),  # the mean passes ...
        Expectation(metric="top1", method="rigl", min=round(top1, 6) + 1e-6),  # ... and fails just above it
        Expectation(metric="top1_drop", method="rigl", max=1.0),
    ]
    passed, failed, gated_drop = evaluate(expect, "dense", frame, run_coverage(both_run))
    assert (passed.case, passed.passed, passed.value) == ("rigl@0.5", True, pytest.approx(top1))
    assert not failed.passed and failed.value == pytest.approx(top1)
    low, high = pooled.loc["rigl@0.5", "top1_ci_low"], pooled.loc["rigl@0.5", "top1_ci_high"]
    assert passed.message.endswith(f"(mean of 2 seeds, 95% CI [{low:.4g}, {high:.4g}])")
    assert gated_drop.value == pytest.approx(drop) and "mean of 2 seeds" in gated_drop.message
    # A seed that failed fails the case's gate, naming the seed.
    broken = frame.assign(status=["ok", "ok", "ok", "error"])
    assert evaluate(expect[:1], "dense", broken)[0].message == "case status is error (seed 1)"


def test_check_counts_case_and_seed_pairs(both_run: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / both_run.name
    shutil.copytree(both_run, copy)
    lines = (copy / "results.jsonl").read_text().splitlines()
    (copy / "results.jsonl").write_text("\n".join(lines[:3]) + "\n")  # rigl@0.5 at seed 1 never finished
    verdict = dstbench.load_run(copy).check()
    assert not verdict.passed and verdict.coverage.missing == ["rigl@0.5 seed=1"]
    assert "3 of 4 cases (1 not run: rigl@0.5 seed=1)" in verdict.coverage.summary()


def test_the_report_pools_each_case_over_its_seeds(both_run: Path) -> None:
    text = dstbench.load_run(both_run).report()
    accuracy = text[text.index("Accuracy"):]
    rows = {line.split()[0]: line for line in accuracy.splitlines() if line.startswith(("dense ", "rigl "))}
    assert set(rows) == {"dense", "rigl"} and all("2 seeds" in row for row in rows.values())
    pooled = dstbench.load_run(both_run).frame().set_index("case_id").loc["rigl@0.5"]
    assert f"{pooled['top1'] * 100:.1f}% [{pooled['top1_ci_low'] * 100:.1f}, {pooled['top1_ci_high'] * 100:.1f}]" in rows["rigl"]
    assert f"{pooled['top1_drop'] * 100:+.2f} pp [" in rows["rigl"]
