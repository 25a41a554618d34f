"""Nothing lost, nothing mixed (issue 28): outputs never land on a run's own files, publish never
deletes what it did not write, a run folder holds one suite, files are never written through a
symbolic link, damage is named and recovered from, hostile input is refused before anything runs.
Each test is one of the defects found; the docs' Faults table lists them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.execution.orchestrator import resolve_run_dir, resume_command, write_run_files
from dstbench.results.record import CaseResult, append_result, iter_results, read_results
from dstbench.results.run_files import RunDirError, RunLock, load_run_meta
from dstbench.suite.loading import load_suite
from dstbench.util.files import LOCK_FILE
from tests.conftest import micro_suite
from tests.gates.synthetic import SUITE_HASH, line, write_run
from tests.execution.launchers.fault_methods import PLUGIN


def synthetic_run(path: Path) -> Path:
    return write_run(path, [line("dense", 1.0), line("rigl", 0.5)])


def suite_file(tmp_path: Path, **overrides) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides), sort_keys=False))
    return path


def stored_run(tmp_path: Path, **overrides) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """A run folder as `dstbench run` starts it (suite.yaml, run.json), without its cases."""
    path = suite_file(tmp_path, **overrides)
    run_dir = tmp_path / "runs" / "micro-1"
    run_dir.mkdir(parents=True)
    write_run_files(run_dir, load_suite(path), path)
    return path, run_dir


# -- 1. outputs never overwrite an input -------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["export", "{run}", "--pytest-benchmark", "{run}/results.jsonl"],
        ["report", "{run}", "--html", "{run}/results.jsonl"],
        ["report", "{run}", "--markdown", "{run}/suite.yaml"],
        ["report", "{run}", "--html", "{run}/report.html"],
        ["compare", "{run}", "{other}", "--markdown", "{run}/results.jsonl"],
        ["compare", "{run}", "{other}", "--markdown", "{other}/notes/compare.md"],
        ["publish", "{run}", "--site", "{run}/site"],
    ],
)
def test_an_output_inside_an_input_run_folder_is_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run, other = synthetic_run(tmp_path / "ow"), synthetic_run(tmp_path / "other")
    before = {p: p.read_bytes() for folder in (run, other) for p in folder.iterdir()}
    argv = [part.format(run=run, other=other) for part in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "inside the input run folder" in err and len(err.strip().splitlines()) == 1
    assert {p: p.read_bytes() for folder in (run, other) for p in folder.iterdir()} == before


def test_run_outputs_inside_a_run_folder_are_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path, run_dir = stored_run(tmp_path)
    results = run_dir / "results.jsonl"
    results.write_text("")
    assert main(["run", str(path), "--resume", str(run_dir), "--markdown", str(results)]) == 2
    assert "inside the input run folder" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(run_dir)]) == 2  # a run folder never holds another
    assert "inside the run folder" in capsys.readouterr().err
    assert sorted(p.name for p in run_dir.iterdir()) == ["results.jsonl", "run.json", "suite.yaml"]


# -- 2. publish never deletes or replaces what it did not write -----------------------------------
def test_publish_refuses_a_site_holding_a_run_folder_it_did_not_publish(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    site = tmp_path / "site"
    mine = synthetic_run(site / "runs" / "nightly")
    before = (mine / "results.jsonl").read_bytes()
    assert main(["publish", str(synthetic_run(tmp_path / "other" / "nightly")), "--site", str(site)]) == 2
    assert "did not put there" in capsys.readouterr().err
    assert (mine / "results.jsonl").read_bytes() == before and not (site / "index.html").exists()


@pytest.mark.slow
def test_publish_keeps_unrelated_files_and_gives_clashing_names_a_suffix(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "runs" / "run1").mkdir(parents=True)
    (site / "runs" / "run1" / "notes.txt").write_text("mine")  # not a run folder: left alone
    a, b = synthetic_run(tmp_path / "pubA" / "run1"), synthetic_run(tmp_path / "pubB" / "run1")
    assert main(["publish", str(a), "--site", str(site)]) == 0
    assert main(["publish", str(b), "--site", str(site)]) == 0
    assert main(["publish", str(a), "--site", str(site)]) == 0  # the same run again: its own copy replaced
    assert (site / "runs" / "run1" / "notes.txt").read_text() == "mine"
    manifest = json.loads((site / ".dstbench-site.json").read_text())
    assert sorted(manifest["runs"]) == ["run1-2", "run1-3"]
    assert manifest["runs"]["run1-2"]["source"] == os.path.realpath(a)
    assert manifest["runs"]["run1-3"]["source"] == os.path.realpath(b)
    assert not (site / "runs" / "run1-4").exists()


def test_publish_refuses_a_users_index_html(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<h1>my page</h1>")
    assert main(["publish", str(synthetic_run(tmp_path / "r")), "--site", str(site)]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (site / "index.html").read_text() == "<h1>my page</h1>" and not (site / "runs").exists()


@pytest.mark.slow
def test_publish_adopts_a_site_an_older_dstbench_made(tmp_path: Path) -> None:
    site = tmp_path / "site"
    run, other = synthetic_run(tmp_path / "r"), synthetic_run(tmp_path / "s")
    for folder in (run, other):  # told apart by their run ids, as `dstbench run` writes them
        meta = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({**meta, "run_id": folder.name}))
    assert main(["publish", str(run), "--site", str(site)]) == 0
    (site / ".dstbench-site.json").unlink()  # as published before manifests existed
    assert main(["publish", str(other), "--site", str(site)]) == 0
    assert main(["publish", str(run), "--site", str(site)]) == 0  # recognised by its run.json
    assert sorted(json.loads((site / ".dstbench-site.json").read_text())["runs"]) == ["r", "s"]


def test_publish_copies_no_file_through_a_symbolic_link(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    lines = [line("dense", 1.0), {**line("rigl", 0.5), "profile": {"trace": "trace.json"}}]
    run = write_run(tmp_path / "run", lines)
    (run / "trace.json").symlink_to(secret)
    assert main(["publish", str(run), "--site", str(tmp_path / "site")]) == 0
    assert not (tmp_path / "site" / "runs" / "run" / "trace.json").exists()
    assert "not a regular file inside the run folder" in capsys.readouterr().err


# -- 3. one suite per run folder ---------------------------------------------------------------
def test_resume_with_an_edited_stored_suite_is_refused_naming_the_keys(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _, run_dir = stored_run(tmp_path)
    stored = run_dir / "suite.yaml"
    data = yaml.safe_load(stored.read_text())
    data["model"]["depth"] += 1
    stored.write_text(yaml.safe_dump(data))
    assert main(["run", str(stored), "--resume", str(run_dir), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "suite hash" in err and "model.depth" in err and "start a new run" in err


def test_readers_leave_out_lines_of_another_suite_and_check_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0), line("rigl", 0.5), line("rigl", 0.1, suite_hash="ffffffffffffffff")])
    with pytest.warns(UserWarning, match="another suite"):
        assert [x["case_id"] for x in iter_results(run)] == ["dense@1", "rigl@0.5"]
    assert read_results(run).foreign == ["3 (rigl@0.1, ffffffffffffffff)"]
    assert main(["check", str(run), "--allow-incomplete"]) == 1
    assert "another suite" in capsys.readouterr().err


def test_check_fails_an_incomplete_run_unless_allowed(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0)])
    meta = json.loads((run / "run.json").read_text())
    meta.update(cases=[{"method": "dense", "kind": "dense", "density": 1.0}, {"method": "rigl", "kind": "masked", "density": 0.5}],
                selected=["dense@1", "rigl@0.5"])
    (run / "run.json").write_text(json.dumps(meta))
    assert main(["check", str(run)]) == 1
    assert main(["check", str(run), "--allow-incomplete"]) == 0


@pytest.mark.slow
def test_adding_a_method_on_resume_times_each_group_once(tmp_path: Path) -> None:
    path = suite_file(tmp_path, methods=["dense", "static"], densities=[0.1, 0.5])
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    path.write_text(yaml.safe_dump(micro_suite(methods=["dense", "static", "set"], densities=[0.1, 0.5])))
    assert main(["run", str(path), "--resume", str(run_dir)]) == 0
    segments = micro_suite()["timing"]["segments"]
    for result in iter_results(run_dir):
        bases = [g.split("#")[0] for g in result["groups"]]
        assert len(bases) == len(set(bases)), result["case_id"]  # never one density's group twice
        assert len(result["segment_ms"]) == segments * len(bases), result["case_id"]


# -- 4. never through a symbolic link --------------------------------------------------------------
def test_a_lock_that_is_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    run = synthetic_run(tmp_path / "run")
    (run / LOCK_FILE).symlink_to(target)
    with pytest.raises(RunDirError, match="symbolic link"):
        RunLock(run).acquire()
    assert target.read_text() == "keep me"


def test_results_are_never_appended_through_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        append_result(run, CaseResult("s", SUITE_HASH, "dense@1", "dense", "dense", "dense", 1.0, {}))
    assert target.read_text() == ""


# -- 5. damage --------------------------------------------------------------------------------------
def test_a_truncated_checkpoint_is_named(tmp_path: Path) -> None:
    import torch

    from dstbench.dst.checkpoint import CheckpointDamaged, load_checkpoint

    path = tmp_path / "rigl@0.1.pt"
    torch.save({"epoch": 1, "weights": torch.zeros(1000)}, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointDamaged, match="rigl@0.1.pt: damaged checkpoint"):
        load_checkpoint(path)


def _truncate(checkpoint: Path) -> None:
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])  # a kill mid-copy, a full disk


def _fifo(checkpoint: Path) -> None:
    checkpoint.unlink()
    os.mkfifo(checkpoint)  # opened without blocking and refused (issue 88), never waited on


@pytest.mark.timeout(300)
@pytest.mark.parametrize("damage, reason", [
    (_truncate, "damaged checkpoint"),
    pytest.param(_fifo, "not a regular file", marks=pytest.mark.slow),
], ids=["truncated", "fifo"])
def test_resume_past_a_damaged_checkpoint_trains_the_case_afresh(damage, reason: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from dstbench.results.record import load_results
    from tests.execution.test_accuracy_track import digits_suite

    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(digits_suite(methods=["dense"], accuracy={"epochs": 1, "keep_checkpoint": True})))
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    [checkpoint] = list((run_dir / "checkpoints").iterdir())
    damage(checkpoint)
    (run_dir / "results.jsonl").write_text("")  # as if the run had died after it
    assert main(["run", str(path), "--resume", str(run_dir)]) == 0
    [again] = load_results(run_dir)
    assert again.status == "ok" and again.epochs == 1
    assert any(f"{checkpoint}: " in w and reason in w and "trained afresh" in w for w in again.warnings)


@pytest.mark.slow
def test_retry_failed_times_the_failed_cases_again(tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    flag.write_text("")
    methods = ["dense", {"name": "fault_flaky", "params": {"fail_file": str(flag)}}]
    path = suite_file(tmp_path, plugins=[PLUGIN], methods=methods)
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 1
    [run_dir] = list((tmp_path / "runs").iterdir())
    flag.unlink()
    assert main(["run", str(path), "--resume", str(run_dir)]) == 1  # a plain resume keeps the failure
    assert main(["run", str(path), "--resume", str(run_dir), "--retry-failed"]) == 0
    assert {x["case_id"]: x["status"] for x in iter_results(run_dir)} == {"dense@1": "ok", "fault_flaky@0.5": "ok"}


@pytest.mark.parametrize("damage", ['{"selected": 7}', '{"created": null, "suite_hash": 5}', "{not json"])
def test_a_damaged_run_json_is_refused_on_resume_and_never_rewritten(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path, run_dir = stored_run(tmp_path)
    (run_dir / "run.json").write_text(damage)
    assert main(["run", str(path), "--resume", str(run_dir)]) == 2
    assert "run.json" in capsys.readouterr().err
    assert (run_dir / "run.json").read_text() == damage
    assert load_run_meta(run_dir).get("selected") is None  # typed: a wrong field is left out, no TypeError


def test_resume_records_its_overrides_and_the_stop_message_replays_them(tmp_path: Path) -> None:
    path, run_dir = stored_run(tmp_path)
    suite = load_suite(path, {"description": "second try"})
    resolve_run_dir(tmp_path / "runs", suite, path, str(run_dir), {"description": "second try"}, RunLock())
    meta = load_run_meta(run_dir)
    assert meta["overrides"] == {"description": "second try"} and meta["resumes"][0]["overrides"] == meta["overrides"]
    command = resume_command(path, run_dir, meta["overrides"])
    assert command.endswith("--set 'description=\"second try\"'")


# -- 6. validation before anything runs --------------------------------------------------------
def test_duplicate_yaml_keys_are_refused_naming_both_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = suite_file(tmp_path)
    path.write_text(path.read_text() + "batch_size: 16\n")
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'batch_size' appears twice" in err and "lines" in err


@pytest.mark.parametrize("where", ["name", "label"])
def test_names_too_long_for_a_file_name_are_refused(where: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    long = "x" * 300
    path = suite_file(tmp_path, name=long) if where == "name" else suite_file(tmp_path, methods=[{"name": "dense", "label": long}])
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert "at most 100 characters" in capsys.readouterr().err and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("launcher", [{"name": "submitit", "timeout_s": float("inf")}, {"name": "subprocess", "timeout_s": float("nan")}])
def test_infinite_or_nan_seconds_are_refused(launcher: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", str(suite_file(tmp_path, launcher=launcher)), "--dry-run"]) == 2
    assert "finite number" in capsys.readouterr().err


def test_a_huge_set_error_is_clipped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", str(suite_file(tmp_path)), "--set", "x" * 90_000, "--dry-run"]) == 2
    assert len(capsys.readouterr().err) < 5000


# -- 7. the rest -----------------------------------------------------------------------------------------
def test_markdown_reports_escape_names(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0), line("<script>alert(1)</script>", 0.5)])
    assert main(["report", str(run), "--markdown", str(tmp_path / "r.md")]) == 0
    assert main(["compare", str(run), str(run), "--markdown", str(tmp_path / "c.md")]) in (0, 1)
    for name in ("r.md", "c.md"):
        text = (tmp_path / name).read_text()
        assert "<script>" not in text and "&lt;script&gt;" in text, name


def test_an_oom_kill_reads_oom_with_its_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from dstbench.execution.launchers import oom_kills

    monkeypatch.setattr(oom_kills, "oom_kill_count", lambda: 8)
    assert "oom_kill 7 -> 8" in oom_kills.oom_kill_evidence(-signal.SIGKILL, 7)
    assert oom_kills.oom_kill_evidence(-signal.SIGKILL, 8) is None  # a plain kill -9
    assert oom_kills.oom_kill_evidence(-signal.SIGSEGV, 7) is None
