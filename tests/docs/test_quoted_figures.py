"""Every figure the README and the docs quote from a committed run is that run's: recomputed here
from the run folder (the smoke run's headline, its table rows for rigl, small_dense and barter,
BARTER's share of small_dense's speed, how long the run took; the scaling study's speedups)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import dstbench
from dstbench.report.expectations import counts, run_verdicts
from dstbench.results.derive import derive, headline, load_frame

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reports" / "baselines" / "cpu_smoke"
SCALING = ROOT / "reports" / "scaling_cpu" / "runs" / "scaling_cpu-20261204-110101"
MIB = 2**20


def flat(path: str) -> str:
    """A page's text with Markdown quote markers dropped and whitespace collapsed: wrapping is free."""
    text = (ROOT / path).read_text(encoding="utf-8")
    return re.sub(r"\s+", " ", re.sub(r"(?m)^> ?", "", text))


@pytest.fixture(scope="module")
def smoke() -> pd.DataFrame:
    return dstbench.load_run(SMOKE).frame(all_columns=True).set_index("case_id")


def test_the_smoke_headline_is_the_committed_runs() -> None:
    derived = derive(load_frame([SMOKE]), "rigl")
    h = headline(derived)
    s, m = h["speedup"], h["memory"]
    tally = counts(run_verdicts(derived))
    assert s["faster"] and tally["FAIL"] == 0
    quoted = (
        f"**Fastest vs rigl: {s['value']:.2f}x** ({s['method']} at density {s['density']:g}, 95% CI [{s['ci_low']:.2f}, "
        f"{s['ci_high']:.2f}], {s['basis']}); **vs dense: {s['vs_dense']['value']:.2f}x** (95% CI [{s['vs_dense']['ci_low']:.2f}, "
        f"{s['vs_dense']['ci_high']:.2f}]) · **Best memory reduction vs rigl: {m['value'] * 100:.1f}%** ({m['method']} at density "
        f"{m['density']:g}, {m['basis']}) · {h['cases'] - h['failed']} of {h['cases']} cases ok · {tally['PASS']} of {tally['PASS']} "
        "expectations passed"
    )
    for page in ("README.md", "docs/index.md", "docs/results.md"):
        assert quoted in flat(page), page


def test_the_smoke_table_rows_are_the_committed_runs(smoke: pd.DataFrame) -> None:
    def row(case: str, label: str, shape: bool) -> str:
        r = smoke.loc[case]
        speed = f"{r['speedup']:.2f}x [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]"
        limits = f"{r['flop_limit']:.2f}x | " + (f"{r['shape_limit']:.2f}x" if shape else "—")
        return f"| {label} | {r['ms_per_step']:.1f} | {speed} | {limits} | {r['state_bytes'] / MIB:.1f} | {r['activation_bytes'] / MIB:.1f} |"

    rows = [row("small_dense@0.5", "small_dense @ 0.5", True), row("barter@0.5", "barter @ 0.5", True),
            row("small_dense@0.1", "small_dense @ 0.1 (BARTER's layout)", True), row("barter@0.1", "barter @ 0.1", True),
            row("rigl_csr@0.1", "rigl_csr @ 0.1 (CSR matmuls)", False)]
    for page in ("README.md", "docs/results.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        for quoted in rows:
            assert quoted in text, (page, quoted)


def test_barter_against_small_dense_and_the_runs_duration_are_the_committed_runs(smoke: pd.DataFrame) -> None:
    share = {d: smoke.loc[f"barter@{d}", "shape_fraction"] * 100 for d in (0.1, 0.5)}
    quoted = f"{share[0.1]:.1f}% (density 0.1) and {share[0.5]:.1f}% (0.5) of the speed of `small_dense`"
    for page in ("README.md", "docs/results.md"):
        assert quoted in flat(page), page
    # From the run's start to its last case's end: what the run folder records.
    created = dt.datetime.fromisoformat(json.loads((SMOKE / "run.json").read_text())["created"])
    lines = [json.loads(line) for line in (SMOKE / "results.jsonl").read_text().splitlines()]
    end = max(dt.datetime.fromisoformat(x["started_at"]) + dt.timedelta(seconds=x["duration_s"]) for x in lines)
    seconds = round((end - created).total_seconds())
    took = f"{seconds // 60} min {seconds % 60} s"
    for page in ("README.md", "docs/index.md", "docs/results.md", "docs/getting-started.md", "suites/cpu_smoke.yaml"):
        assert took in flat(page), page


def test_the_scaling_speedups_are_the_committed_runs() -> None:
    frame = dstbench.load_run(SCALING).frame(all_columns=True)
    barter = frame[(frame["method"] == "barter") & (frame["density"] == 0.1)]
    speedups = ", ".join(f"{v:.2f}x" for v in barter["speedup"][:-1]) + f" and {barter['speedup'].iloc[-1]:.2f}x"
    shares = ", ".join(f"{v * 100:.0f}%" for v in barter["flop_fraction"][:-1]) + f" and {barter['flop_fraction'].iloc[-1] * 100:.0f}%"
    quoted = f"BARTER vs RigL is {speedups} ({shares} of the FLOP limit"
    assert quoted in flat("README.md")


def test_the_ranking_workloads_trial_figures_are_the_committed_trials() -> None:
    trials = ROOT / "reports" / "cpu_accuracy" / "trials"

    def top1s(folder: str, method: str) -> str:
        frame = dstbench.load_run(trials / folder).frame(per_seed=True)
        rows = frame[frame["method"] == method].sort_values("seed")
        return ", ".join(f"{v:.3f}" for v in rows["top1"])

    teacher = (top1s("trial_f1-20261206-221402", "dense"), top1s("trial_f1-20261206-221402", "rigl"))
    assert teacher == ("0.658, 0.667, 0.668", "0.586, 0.588, 0.586")
    mnist = (top1s("trial_mnist_aug-20261206-221757", "dense"), top1s("trial_mnist_aug-20261206-221757", "rigl"))
    assert mnist == ("0.304, 0.427", "0.742, 0.750")
    guide = flat("docs/guides/accuracy.md")
    assert f"| 1,536 | {teacher[0]} | {teacher[1]} |" in guide
    assert f"| 1,500 | {mnist[0]} | {mnist[1]} |" in guide
    readme = flat("reports/cpu_accuracy/trials/README.md")
    assert f"| {teacher[0]} | {teacher[1]} |" in readme and f"| {mnist[0]} | {mnist[1]} |" in readme
    assert top1s("cpu_accuracy-20261206-222130", "dense") == "0.658"
    suite = flat("suites/cpu_accuracy.yaml")
    assert f"dense {teacher[0].replace(', 0.668', ' and 0.668')}" in suite.replace("# ", "")


CONDENSED = ROOT / "reports" / "cpu_condensed" / "runs" / "cpu_condensed-20261207-184126"


def test_the_condensed_srigl_rows_are_the_committed_runs() -> None:
    frame = dstbench.load_run(CONDENSED).frame(all_columns=True).set_index("case_id")

    def row(density: float) -> str:
        masked, condensed = frame.loc[f"srigl@{density:g}"], frame.loc[f"srigl_condensed@{density:g}"]
        state = condensed["state_bytes"] / masked["state_bytes"]
        return (
            f"| {density:g} | {masked['ms_per_step']:.2f} / {condensed['ms_per_step']:.2f} | "
            f"{condensed['speedup']:.2f}x [{condensed['speedup_ci_low']:.2f}, {condensed['speedup_ci_high']:.2f}] | "
            f"{condensed['flop_limit']:.2f}x ({condensed['speedup'] / condensed['flop_limit'] * 100:.1f}%) | "
            f"{masked['state_bytes'] / MIB:.1f} / {condensed['state_bytes'] / MIB:.1f} ({state:.2f}x) | "
            f"{masked['activation_bytes'] / MIB:.1f} / {condensed['activation_bytes'] / MIB:.1f} |"
        )

    for page in ("docs/methods/srigl.md", "reports/cpu_condensed/README.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        for density in (0.5, 0.1):
            assert row(density) in text, (page, row(density))
    masked, condensed = frame.loc["srigl@0.1"], frame.loc["srigl_condensed@0.1"]
    quoted = (f"SRigL trained in its condensed layout is {condensed['speedup']:.2f}x as fast as masked SRigL at 0.1 on this CPU, "
              f"with {condensed['state_bytes'] / masked['state_bytes']:.2f}x its state")
    assert quoted in flat("README.md")
