"""The report's "Time to accuracy" sections (dstbench.report.time_to_accuracy): the Pareto set and
the performance profiles on hand-made numbers, and the sections and headline line of a digits run
in `mode: both`, alone and beside a second workload."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dstbench

from dstbench.cli import main
from dstbench.report.time_to_accuracy import (
    estimated_curves, pareto_front, profile_table, target_headline, time_to_accuracy_table, workload_times, workloads,
)
from dstbench.results.derive import derive, load_frame


def test_the_pareto_set_is_every_case_nothing_beats_on_both_counts() -> None:
    points = pd.DataFrame({"drop": [0.0, 1.0, 2.0, 1.5, 3.0, 1.0], "speedup": [1.0, 2.0, 3.0, 1.5, 2.5, 2.0]},
                          index=list("abcdef"))
    front = pareto_front(points, "drop", "speedup")
    # d is beaten by b (less drop, faster), e by c; b and f tie, so neither dominates the other.
    assert front[front].index.tolist() == ["a", "b", "c", "f"]


def test_with_intervals_only_a_case_better_beyond_them_on_both_axes_dominates() -> None:
    # b beats a on both counts as points, but its intervals overlap a's on the speedup: a stays;
    # c is better than a beyond both intervals: a goes. d has no interval: its point stands for it.
    points = pd.DataFrame({
        "drop": [9.2, 7.5, 3.3, 20.0], "drop_low": [6.9, 6.2, 2.2, math.nan], "drop_high": [11.5, 8.7, 4.3, math.nan],
        "speedup": [1.02, 1.10, 2.02, 0.5], "speedup_low": [0.80, 0.90, 1.45, math.nan], "speedup_high": [1.31, 1.30, 2.82, math.nan],
    }, index=list("abcd"))
    assert pareto_front(points.loc[["a", "b"]], "drop", "speedup")[lambda f: f].index.tolist() == ["b"]  # points alone
    front = pareto_front(points.loc[["a", "b"]], "drop", "speedup", ("drop_low", "drop_high", "speedup_low", "speedup_high"))
    assert front.tolist() == [True, True]
    front = pareto_front(points, "drop", "speedup", ("drop_low", "drop_high", "speedup_low", "speedup_high"))
    assert front[front].index.tolist() == ["c"]  # c is beyond a's, b's and d's intervals on both axes


def test_a_profile_reads_the_share_of_workloads_within_tau_of_the_best() -> None:
    times = pd.DataFrame({"fast": [1.0, 2.0, 3.0, 4.0], "twice": [2.0, 4.0, 6.0, 8.0], "mixed": [1.0, 8.0, math.nan, 4.0]},
                         index=["w1", "w2", "w3", "w4"])
    profiles = profile_table(times, taus=np.array([1.0, 1.5, 2.0, 4.0])).set_index(["method", "tau"])["fraction"]
    assert profiles["fast"].tolist() == [1.0, 1.0, 1.0, 1.0]  # the best everywhere: 1.0 from tau = 1
    assert profiles["twice"].tolist() == [0.0, 0.0, 1.0, 1.0]
    # Best on w1 and w4 (ties count), 4x the best on w2, a miss on w3 (never within any tau).
    assert profiles["mixed"].tolist() == [0.5, 0.5, 0.5, 0.75]


def test_a_digits_run_renders_the_section_and_the_headline_names_the_fastest(both_run: Path, tmp_path: Path) -> None:
    derived = derive(load_frame([both_run]), "dense")
    table = time_to_accuracy_table(derived)
    assert table is not None and table.headers[:2] == ["case", "top-1 [95% CI]"]
    assert "time to target s" in table.headers and table.headers[-2:] == ["reached", "accuracy-run s"]
    rows = {r[0]: dict(zip(table.headers, r)) for r in table.rows}
    # "k of 2" as the run's own seeds reached it (a count of seeded training, never pinned).
    per_seed = dstbench.load_run(both_run).frame(per_seed=True).set_index("case_id")
    for case, row in rows.items():
        assert row["reached"] == f"{int(per_seed.loc[[case], 'target_reached'].astype(bool).sum())} of 2", case
    assert "(2 seeds)" in rows["barter@0.5"]["top-1 [95% CI]"]
    curves = estimated_curves(derived)
    assert set(curves["case"]) == {"dense@1", "rigl@0.5", "barter@0.5"} and (curves["seconds"] > 0).all()
    head = target_headline(derived)
    assert head["reached"] and head["seconds"] == min(v for v in dstbench.load_run(both_run).frame()["time_to_target_s"] if math.isfinite(v))
    html, markdown = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", str(both_run), "--html", str(html), "--markdown", str(markdown)]) == 0
    page = html.read_text(encoding="utf-8")
    for title in ("Time to accuracy", "Time to accuracy: top-1 against estimated seconds", "Time to accuracy: speedup against accuracy given up"):
        assert f">{title}<" in page, title
    assert "performance profiles" not in page  # one workload
    assert "Fastest to target" in markdown.read_text(encoding="utf-8")


def _copy_with_setup(both_run: Path, folder: Path, **changes: Any) -> Path:
    """A copy of the run whose run.json records a setup with `changes`."""
    shutil.copytree(both_run, folder)
    meta = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**meta, "setup": {**meta["setup"], **changes}}))
    return folder


def test_runs_of_one_suite_on_other_seeds_are_one_workload(both_run: Path, tmp_path: Path) -> None:
    other = _copy_with_setup(both_run, tmp_path / "other-seeds", seed=7)  # the same setup apart from its seed
    assert workloads([both_run, other]) == {str(both_run): str(both_run), str(other): str(both_run)}
    assert workload_times(derive(load_frame([both_run, other]), "dense")) is None  # one workload: no profile
    changed = _copy_with_setup(both_run, tmp_path / "other-batch", batch_size=64)
    assert workloads([both_run, changed])[str(changed)] == str(changed)


def test_two_workloads_add_the_performance_profiles(both_run: Path, tmp_path: Path) -> None:
    other = _copy_with_setup(both_run, tmp_path / "other-run", batch_size=64)  # another workload
    times = workload_times(derive(load_frame([both_run, other]), "dense"))
    assert times is not None and len(times) == 2 and set(times.columns) == {"dense@1", "rigl@0.5", "barter@0.5"}
    html = tmp_path / "r.html"
    assert main(["report", str(both_run), str(other), "--html", str(html)]) == 0
    assert ">Time to accuracy: performance profiles<" in html.read_text(encoding="utf-8")


def test_the_headline_says_when_no_case_reached_the_target(both_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "unreached"
    shutil.copytree(both_run, run)
    suite = (run / "suite.yaml").read_text()
    (run / "suite.yaml").write_text(suite.replace("target_top1: 0.3", "target_top1: 0.999"))
    head = target_headline(derive(load_frame([run]), "dense"))
    assert head == {"reached": False, "target": "top-1 0.999 (the suite's accuracy.target_top1)"}


def test_the_profiles_band_comes_from_resampling_seeds() -> None:
    from dstbench.report.time_to_accuracy import profile_band, profile_fractions

    taus = np.array([1.0, 1.5, 2.0])
    # profile_fractions agrees with profile_table: workloads x methods, NaN a miss.
    times = np.array([[10.0, 20.0], [30.0, np.nan]])
    assert profile_fractions(times, taus).tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.5]]
    # a is always faster (10 vs 30 s, every seed); b and c trade places seed by seed (overlap).
    seeds = {"w1": {"a": [10.0, 10.5, 9.5], "b": [30.0, 40.0, 20.0], "c": [35.0, 25.0, 30.0]},
             "w2": {"a": [10.0, 11.0, 9.0], "b": [30.0, 20.0, 40.0], "c": [25.0, 35.0, 30.0]}}
    band = profile_band(seeds, taus, resamples=200).set_index(["method", "tau"])
    assert band.loc[("a", 1.0), "low"] == band.loc[("a", 1.0), "high"] == 1.0  # fastest in every resample
    assert band.loc[("b", 2.0), "low"] < band.loc[("b", 2.0), "high"]  # seed noise shows as a band
    assert band.loc[("b", 2.0), "low"] <= band.loc[("c", 2.0), "high"] and band.loc[("c", 2.0), "low"] <= band.loc[("b", 2.0), "high"]
    missing = profile_band({"w1": {"a": [10.0, math.nan]}}, taus, resamples=200).set_index(["method", "tau"])
    assert missing.loc[("a", 1.0), "low"] == 0.0 and missing.loc[("a", 1.0), "high"] == 1.0  # a missed seed may be drawn
