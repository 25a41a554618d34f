"""Sweeps (`sweep:` in a suite, dstbench.suite.sweep): points, their validation, case ids and groups,
and a sweep run end to end: one run folder, lines naming their point, every figure within its point,
`--dry-run`, `--resume`, `check`, `compare` and `export` per point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.gates.compare import compare_runs
from dstbench.gates.sides import load_side
from dstbench.results.derive import derive, load_frame
from dstbench.results.record import iter_results, read_results
from dstbench.suite.cases import case_id, point_tag, value_text
from dstbench.suite.groups import plan_groups
from dstbench.suite.loading import SuiteError, parse_suite
from dstbench.suite.plan import expand_cases, point_suite, timing_groups
from dstbench.suite.sweep import point_data, sweep_values
from tests.conftest import MICRO_MODEL, micro_suite

WIDTHS = {"model.embed_dim": [32, 64], "model.num_heads": [2, 4]}


def test_case_ids_name_their_point_and_stay_as_they_were_without_one() -> None:
    assert case_id("rigl", 0.1) == "rigl@0.1" and case_id("dense", 1.0, None) == "dense@1"
    sweep = {"model.embed_dim": 192, "model.num_heads": 3}
    assert case_id("rigl", 0.1, sweep) == "rigl@0.1[embed_dim=192,num_heads=3]"
    # A last part two keys share names neither alone; values as a suite would spell them.
    assert point_tag({"model.depth": 2, "profile.depth": 3}) == "model.depth=2,profile.depth=3"
    assert point_tag({"compile": {"mode": "max-autotune", "backend": "inductor"}}) == "compile={backend:inductor,mode:max-autotune}"
    assert [value_text(v) for v in (True, None, 0.5, 2.0, "bf16")] == ["true", "null", "0.5", "2", "bf16"]


def test_product_and_zip_points_in_order() -> None:
    sweep = {"a": [1, 2], "b": ["x", "y"]}
    assert sweep_values(sweep) == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    assert sweep_values(sweep, "zip") == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert sweep_values({}) == []
    data = point_data({"name": "s", "sweep": sweep, "sweep_mode": "zip", "model": {"depth": 2}}, {"model.embed_dim": 8})
    assert data == {"name": "s", "model": {"depth": 2, "embed_dim": 8}}


def test_every_point_is_validated_as_a_suite_of_its_own() -> None:
    suite = parse_suite(micro_suite(sweep=WIDTHS, sweep_mode="zip"))
    assert [values for values, _ in suite.points] == [
        {"model.embed_dim": 32, "model.num_heads": 2}, {"model.embed_dim": 64, "model.num_heads": 4},
    ]
    first = suite.points[0][1]
    assert first.model.kwargs["embed_dim"] == 32 and not first.sweep
    # A point's hash is that of the plain suite it is: a plain run at these settings compares with it.
    plain = parse_suite(micro_suite(model={**MICRO_MODEL, "embed_dim": 64, "num_heads": 4}))
    assert suite.points[1][1].setup_hash() == plain.setup_hash() != suite.setup_hash()
    # A suite without a sweep or compile hashes as before they existed.
    assert not {"sweep", "sweep_mode", "compile"} & set(plain.setup_settings())

    with pytest.raises(SuiteError, match=r"point embed_dim=66,num_heads=4: model: cannot build 'vit_tiny_patch16_224'"):
        parse_suite(micro_suite(sweep={"model.embed_dim": [64, 66], "model.num_heads": [4]}))
    with pytest.raises(SuiteError, match="zip pairs lists of equal length"):
        parse_suite(micro_suite(sweep={"model.embed_dim": [32, 64], "model.num_heads": [4]}, sweep_mode="zip"))
    with pytest.raises(SuiteError, match="a sweep may not set densities"):
        parse_suite(micro_suite(sweep={"densities": [[0.1], [0.5]]}))
    with pytest.raises(SuiteError, match="batch_size: needs a non-empty list"):
        parse_suite(micro_suite(sweep={"batch_size": []}))
    with pytest.raises(SuiteError, match="measure the same setup"):
        parse_suite(micro_suite(sweep={"timing.interleave": [True, False]}))
    with pytest.raises(SuiteError, match="listed twice"):
        parse_suite(micro_suite(sweep={"batch_size": [8, 8.0]}))


def test_cases_per_point_and_groups_within_a_point() -> None:
    suite = parse_suite(micro_suite(methods=["dense", "rigl", "barter"], densities=[0.5, 0.25], sweep=WIDTHS, sweep_mode="zip"))
    cases = expand_cases(suite)
    assert len(cases) == 2 * 5 and len({c.case_id for c in cases}) == 10
    assert cases[0].case_id == "dense@1[embed_dim=32,num_heads=2]" and cases[5].point == "embed_dim=64,num_heads=4"
    assert point_suite(suite, cases[5]).model.kwargs["embed_dim"] == 64
    groups = timing_groups(suite, cases, can_interleave=True)
    assert [g.key for g in groups] == [
        "d=0.5[embed_dim=32,num_heads=2]", "d=0.25[embed_dim=32,num_heads=2]",
        "d=0.5[embed_dim=64,num_heads=4]", "d=0.25[embed_dim=64,num_heads=4]",
    ]
    for group in groups:
        assert len({c.point for c in group.cases}) == 1 and group.cases[0].method == "dense"
    # Without a sweep, the groups (and their keys) are as they were.
    plain = expand_cases(parse_suite(micro_suite(methods=["dense", "rigl"], densities=[0.5])))
    assert [g.key for g in plan_groups(plain, "dense", interleave=True)] == ["d=0.5"]


def _write(tmp_path: Path, **overrides: object) -> Path:
    suite = micro_suite(
        methods=["dense", "rigl"], densities=[0.5], sweep=WIDTHS, sweep_mode="zip",
        timing={"warmup_steps": 1, "segment_steps": 2, "segments": 2, "processes": 1}, **overrides,
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_dry_run_lists_the_cases_of_each_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_write(tmp_path)), "--dry-run", "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "sweep (zip) over model.embed_dim, model.num_heads: 2 points" in out
    assert "point embed_dim=32,num_heads=2: model vit_tiny_patch16_224 (embed_dim 32" in out
    assert "rigl@0.5[embed_dim=64,num_heads=4]" in out and "4 of 4 selected cases would run" in out
    assert not (tmp_path / "runs").exists()


def test_a_sweep_runs_into_one_folder_and_is_read_per_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path)
    out = tmp_path / "runs"
    assert main(["run", str(path), "--out", str(out)]) == 0
    run = next(out.iterdir())
    suite = parse_suite(yaml.safe_load(path.read_text()))
    lines = {line["case_id"]: line for line in iter_results(run)}
    assert set(lines) == {c.case_id for c in expand_cases(suite)}
    for (values, point), tag in zip(suite.points, ("embed_dim=32,num_heads=2", "embed_dim=64,num_heads=4")):
        for method in ("dense@1", "rigl@0.5"):
            line = lines[f"{method}[{tag}]"]
            assert line["status"] == "ok" and line["sweep"] == values and line["suite_hash"] == point.setup_hash()
            assert all(g.startswith(("d=0.5[" + tag + "]#")) for g in line["groups"])
    meta = json.loads((run / "run.json").read_text())
    assert meta["point_hashes"] == [p.setup_hash() for _, p in suite.points] and meta["suite_hash"] == suite.setup_hash()
    assert len(meta["cases"]) == 4 and meta["cases"][0]["sweep"] == {"model.embed_dim": 32, "model.num_heads": 2}

    # Every figure within its point: the same as deriving each point's lines alone.
    frame = load_frame([run])
    derived = derive(frame, "dense")
    for point in ("embed_dim=32,num_heads=2", "embed_dim=64,num_heads=4"):
        alone = derive(frame[frame["point"] == point], "dense")
        mine = derived[derived["point"] == point]
        assert mine["speedup"].tolist() == pytest.approx(alone["speedup"].tolist())
        assert mine.loc[mine["method"] == "dense", "speedup"].tolist() == [1.0]
        assert mine["memory_reduction"].tolist() == pytest.approx(alone["memory_reduction"].tolist())

    # check: complete, every case named with its point; the speed table has a point column.
    capsys.readouterr()
    assert main(["check", str(run)]) == 0
    captured = capsys.readouterr()
    assert "incomplete" not in captured.err and "point" in captured.out.splitlines()[0]
    # compare pairs each case with the same point's case only.
    comparison = compare_runs(load_side(run), load_side(run))
    assert sorted(c.case for c in comparison.cases) == sorted(lines)
    # export: one benchmark per case, named with its point.
    assert main(["export", str(run), "--pytest-benchmark", str(tmp_path / "bench.json")]) == 0
    names = {b["name"] for b in json.loads((tmp_path / "bench.json").read_text())["benchmarks"]}
    assert names == {f"micro[{case}]" for case in lines}

    # --resume times again only the group a lost line belonged to, at its own point.
    results = run / "results.jsonl"
    kept = [raw for raw in results.read_text().splitlines() if "rigl@0.5[embed_dim=64" not in raw]
    results.write_text("\n".join(kept) + "\n")
    capsys.readouterr()
    assert main(["run", str(path), "--resume", str(run), "--dry-run"]) == 0
    listing = capsys.readouterr().out
    assert "2 of 4 selected cases would run" in listing
    assert main(["run", str(path), "--resume", str(run)]) == 0
    assert {line["case_id"] for line in iter_results(run)} == set(lines)
    # A line of no point of the run is still another suite's.
    foreign = dict(lines["dense@1[embed_dim=32,num_heads=2]"], suite_hash="ffffffffffffffff", case_id="dense@1[x=1]")
    with open(results, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(foreign) + "\n")
    assert len(read_results(run).foreign) == 1
