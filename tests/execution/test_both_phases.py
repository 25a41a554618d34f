"""`mode: both` in two phases (dstbench.suite.plan): the timing phase planned as `mode: speed`
plans it (each density's cases with dense in interleaved rounds), then every (case, seed) trained
once in a process of its own; a line per (case, seed) joining both (`merge_phases`); `--dry-run`
shows the phases; a resume after a kill in either phase re-times whole groups and trains only the
missing pairs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from dstbench.cli import main
from dstbench.execution.orchestrator import plan_run, run_suite
from dstbench.results.coverage import run_coverage
from dstbench.results.merge import TRAINING_FIELDS, merge_phases
from dstbench.results.record import CaseResult
from dstbench.suite.groups import base_key
from tests.execution.test_accuracy_track import digits_suite


def _suite_file(path: Path, **overrides: Any) -> Path:
    suite = digits_suite(mode="both", methods=["dense", "rigl", "set"], densities=[0.1, 0.5],
                         accuracy={"epochs": 1, "checkpoint_every": 0}, **overrides)
    suite.pop("seed", None)
    suite["seeds"] = [0, 1, 2]
    path.write_text(yaml.safe_dump(suite))
    return path


def test_the_timing_phase_is_planned_as_speed_mode_and_every_pair_trains_once(tmp_path: Path) -> None:
    plan = plan_run(_suite_file(tmp_path / "s.yaml"), out=tmp_path / "runs")
    # Seed 0 (the timed seed) in one interleaved group per density, dense in each.
    assert [(g.key, [c.method for c in g.cases]) for g in plan.groups] == [
        ("d=0.5 seed=0", ["dense", "rigl", "set"]), ("d=0.1 seed=0", ["dense", "rigl", "set"])]
    assert all(c.timed for g in plan.groups for c in g.cases)
    # Training: every (case, seed) once, dense once per seed (not once per group), none timed.
    assert [c.key for c in plan.training] == [f"{case} seed={s}" for s in (0, 1, 2)
                                              for case in ("dense@1", "rigl@0.5", "set@0.5", "rigl@0.1", "set@0.1")]
    assert not any(c.timed for c in plan.training) and plan.todo_training == plan.training
    # Without interleaving (as speed mode falls back): each timed case alone; with per_seed: every seed timed.
    alone = plan_run(_suite_file(tmp_path / "a.yaml", timing={"interleave": False}), out=tmp_path / "runs")
    assert [g.key for g in alone.groups] == ["dense@1 seed=0", "rigl@0.5 seed=0", "set@0.5 seed=0", "rigl@0.1 seed=0", "set@0.1 seed=0"]
    assert len(alone.training) == 15
    every = plan_run(_suite_file(tmp_path / "p.yaml", timing={"per_seed": True}), out=tmp_path / "runs")
    assert [g.key for g in every.groups] == [f"d={d} seed={s}" for s in (0, 1, 2) for d in (0.5, 0.1)]


def test_dry_run_shows_both_phases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_suite_file(tmp_path / "s.yaml")), "--out", str(tmp_path / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "timing phase: 2 group(s) in interleaved rounds" in out and "d=0.5 seed=0: dense, rigl, set" in out
    assert "training phase: 15 (case, seed) training(s), each in a process of its own (dense once per seed); 15 to train" in out
    assert "to time and train" in out and "to train" in out
    assert not (tmp_path / "runs").exists()


def test_the_first_seeds_lines_are_timed_together_and_hold_their_own_training(both_run: Path) -> None:
    lines = [json.loads(text) for text in (both_run / "results.jsonl").read_text().splitlines()]
    first = [line for line in lines if line["seed"] == 0]
    # One interleaved group: every first-seed case's samples carry its id, in the same rounds.
    groups = {g for line in first for g in line["segment_group"]}
    assert len(groups) == 1 and base_key(groups.pop()) == "d=0.5 seed=0"
    assert all(line["mode"] == "both" and line["segment_ms"] and line["curve"] for line in first)
    for line in lines:
        # The extras are the training run's: its steps and updates, not the short timed segments'.
        extras, last = line["method_extras"], line["curve"][-1]
        assert extras["steps_total"] == last["step"] == 3 * 44
        assert extras["topology_updates_total"] == last["topology_updates"]
    barter = next(line for line in first if line["method"] == "barter")
    assert len(barter["method_extras"]["topology_history"]) > barter["topology_updates"]  # training's, not the segments'
    assert run_coverage(both_run).complete


def _copy_without(both_run: Path, tmp_path: Path, keep: Any) -> Path:
    """A copy of the run whose results.jsonl keeps `keep(line)` (a line, edited, or None to drop it)."""
    copy = tmp_path / both_run.name
    shutil.copytree(both_run, copy)
    results = copy / "results.jsonl"
    lines = [keep(json.loads(text)) for text in results.read_text().splitlines()]
    results.write_text("".join(json.dumps(line) + "\n" for line in lines if line is not None))
    return copy


def _untrained(line: dict[str, Any]) -> dict[str, Any]:
    return {**line, **{name: None for name in ("top1", "top5", "epochs", "train_time_s", "curve")}}


def test_a_kill_in_the_training_phase_resumes_the_untrained_pairs_only(both_run: Path, tmp_path: Path) -> None:
    # Killed while training barter seed 0 (its timing line written) before rigl seed 1 had a line.
    copy = _copy_without(both_run, tmp_path, lambda line: _untrained(line) if (line["method"], line["seed"]) == ("barter", 0)
                         else None if (line["method"], line["seed"]) == ("rigl", 1) else line)
    assert run_coverage(copy).missing == ["barter@0.5 seed=0", "rigl@0.5 seed=1"]  # a timing line alone has not run
    plan = plan_run(copy / "suite.yaml", out=tmp_path, resume=str(copy))
    assert plan.todo_groups == []  # every group's timing is whole
    assert [c.key for c in plan.todo_training] == ["barter@0.5 seed=0", "rigl@0.5 seed=1"]


def test_a_kill_in_the_timing_phase_retimes_the_whole_group_and_trains_everything(both_run: Path, tmp_path: Path) -> None:
    # An interrupted group leaves none of its lines (one atomic rewrite per group): nothing at all here.
    copy = _copy_without(both_run, tmp_path, lambda line: None)
    plan = plan_run(copy / "suite.yaml", out=tmp_path, resume=str(copy))
    assert [g.key for g in plan.todo_groups] == ["d=0.5 seed=0"] and len(plan.todo_groups[0].cases) == 3
    assert len(plan.todo_training) == 6
    # Only dense's line lost: the group is timed again whole (never dense alone), its training kept.
    copy = _copy_without(both_run, tmp_path / "dense", lambda line: None if (line["method"], line["seed"]) == ("dense", 0) else line)
    plan = plan_run(copy / "suite.yaml", out=tmp_path, resume=str(copy))
    assert [(g.key, len(g.cases)) for g in plan.todo_groups] == [("d=0.5 seed=0", 3)]
    assert [c.key for c in plan.todo_training] == ["dense@1 seed=0"]


def test_the_phases_join_in_one_line() -> None:
    timing = CaseResult(suite="s", suite_hash="h", case_id="rigl@0.1", method="rigl", method_name="rigl", kind="masked",
                        density=0.1, params={}, mode="both", groups=["d=0.1#a"], segment_ms=[5.0, 6.0], density_achieved=0.11,
                        method_extras={"topology_history": [1]}, data_loading="synthetic", duration_s=2.0, warnings=["busy"])
    training = CaseResult(suite="s", suite_hash="h", case_id="rigl@0.1", method="rigl", method_name="rigl", kind="masked",
                          density=0.1, params={}, mode="accuracy", groups=["rigl@0.1#b"], top1=0.7, curve=[{"step": 10, "top1": 0.7}],
                          density_achieved=0.1, method_extras={"topology_history": [1, 2, 3]}, data_loading="digits",
                          duration_s=5.0, warnings=["busy", "late"])
    line = merge_phases(timing.to_dict(), training)
    assert (line.mode, line.groups, line.segment_ms) == ("both", ["d=0.1#a"], [5.0, 6.0])  # the timing's
    assert all(getattr(line, name) == getattr(training, name) for name in TRAINING_FIELDS)  # the training's
    assert (line.data_loading, line.duration_s, line.warnings) == ("speed: synthetic; accuracy: digits", 7.0, ["busy", "late"])
    again = merge_phases(timing, line)  # timed again after its training: the joined line is the training side
    assert again.data_loading == "speed: synthetic; accuracy: digits" and again.top1 == 0.7
    failed = merge_phases(timing, CaseResult(**{**training.__dict__, "status": "error", "error": "Traceback: boom"}))
    assert failed.status == "error" and failed.error == "in training: Traceback: boom" and failed.segment_ms == [5.0, 6.0]
    assert merge_phases(CaseResult(**{**timing.__dict__, "status": "oom"}), training).top1 is None  # a failed timing stays


@pytest.mark.slow
def test_a_resume_after_a_kill_in_either_phase_finishes_every_line(both_run: Path, tmp_path: Path) -> None:
    before = {(line["method"], line["seed"]): line for line in map(json.loads, (both_run / "results.jsonl").read_text().splitlines())}
    # Killed in the training phase: barter seed 0 timed but untrained, rigl seed 1 without a line.
    copy = _copy_without(both_run, tmp_path / "training", lambda line: _untrained(line) if (line["method"], line["seed"]) == ("barter", 0)
                         else None if (line["method"], line["seed"]) == ("rigl", 1) else line)
    run_suite(copy / "suite.yaml", out=tmp_path, resume=str(copy))
    after = {(line["method"], line["seed"]): line for line in map(json.loads, (copy / "results.jsonl").read_text().splitlines())}
    assert set(after) == set(before) and run_coverage(copy).complete
    assert after[("barter", 0)]["segment_ms"] == before[("barter", 0)]["segment_ms"]  # its timing kept, not redone
    assert after[("barter", 0)]["curve"] and after[("rigl", 1)]["curve"]
    assert after[("dense", 1)] == before[("dense", 1)]  # a finished pair untouched
    # Killed in the timing phase with dense's line lost: the group is timed again whole, the
    # trainings its members had are kept, dense trains.
    copy = _copy_without(both_run, tmp_path / "timing", lambda line: None if (line["method"], line["seed"]) == ("dense", 0) else line)
    run_suite(copy / "suite.yaml", out=tmp_path, resume=str(copy))
    after = {(line["method"], line["seed"]): line for line in map(json.loads, (copy / "results.jsonl").read_text().splitlines())}
    assert run_coverage(copy).complete
    for method in ("dense", "rigl", "barter"):
        assert after[(method, 0)]["groups"] != before[(method, 0)]["groups"]  # timed again, together
        assert len({base_key(g) for g in after[(method, 0)]["segment_group"]}) == 1
    assert after[("rigl", 0)]["curve"] == before[("rigl", 0)]["curve"] and after[("dense", 0)]["curve"]


@pytest.mark.slow
def test_a_sweep_over_the_mode_trains_its_accuracy_point_and_times_its_both_point(tmp_path: Path) -> None:
    suite = digits_suite(methods=["dense", "rigl"], accuracy={"epochs": 1, "checkpoint_every": 0},
                         timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2, "processes": 1})
    suite["sweep"] = {"mode": ["accuracy", "both"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    run_dir = run_suite(tmp_path / "s.yaml", out=tmp_path / "runs")
    lines = [json.loads(text) for text in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {(line["mode"], bool(line["curve"]), len(line["segment_ms"])) for line in lines} == {("accuracy", True, 0), ("both", True, 2)}
    assert len(lines) == 4
