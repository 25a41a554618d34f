"""The interval and gate study (docs/concepts/interleaving.md): do the speedup intervals of
`suites/cpu_smoke.yaml` hold across re-runs, does `dstbench compare` stay quiet between runs of one
commit (A/A), and does it catch a planted slowdown (power)?

    python scripts/studies/intervals.py run --out study/after --runs 4
    python scripts/studies/intervals.py run --out study/before --runs 4 --before
    python scripts/studies/intervals.py run --out study/after-loaded --runs 4 --neighbour
    python scripts/studies/intervals.py run --out study/planted --runs 3 --planted
    python scripts/studies/intervals.py run --out study/gate --runs 4 --suite suites/cpu_gate.yaml
    python scripts/studies/intervals.py run --out study/gate-planted --runs 3 --planted --suite suites/cpu_gate.yaml
    python scripts/studies/intervals.py analyse study --json reports/studies/intervals/study.json

The committed study: `analyse reports/studies/intervals/runs` (README there).

`--before` runs with the sampling of dstbench 0.2 (one process per case, no settling segment,
fixed round order) and `analyse` judges those runs with 0.2's interval (the order-statistic
interval of the median of paired ratios); the other runs with today's defaults and intervals.
`--neighbour` keeps one busy-looping process beside each run (one of two cores). `--planted`
swaps SET for `planted_slow_set` (scripts/studies/planted_slowdown.py: SET, 15% slower per
segment) under SET's label. `--suite` times another suite (the gating suite `cpu_gate.yaml`: its
runs go to gate/ and gate-planted/, analysed for A/A and power like after/ and planted/). Measure
on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "cpu_smoke.yaml"
BEFORE = ["timing.processes=1", "timing.settle_segments=0", "timing.round_order=\"fixed\""]
PLANTED_LABEL = "set"


def planted_suite(directory: Path, source: Path = SUITE) -> Path:
    """The suite with SET replaced by the planted slowdown under SET's label."""
    suite = yaml.safe_load(source.read_text())
    methods = []
    for spec in suite["methods"]:
        name = spec if isinstance(spec, str) else spec.get("name")
        if name == PLANTED_LABEL:
            params = dict(spec.get("params") or {}) if isinstance(spec, dict) else {}
            spec = {"name": "planted_slow_set", "label": PLANTED_LABEL, "params": {**params, "slowdown": 0.15}}
        methods.append(spec)
    suite["methods"] = methods
    suite["plugins"] = ["planted_slowdown"]
    path = directory / f"{source.stem}_planted.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts" / "studies"), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(args.suite).resolve()
        suite = planted_suite(Path(tmp), source) if args.planted else source
        sets = [part for item in (BEFORE if args.before else []) for part in ("--set", item)]
        for index in range(args.runs):
            neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.neighbour else None
            started = time.perf_counter()
            try:
                code = subprocess.call(["dstbench", "run", str(suite), "--out", str(out), *sets], env=env, cwd=ROOT)
            finally:
                if neighbour is not None:
                    neighbour.kill()
                    neighbour.wait()
            wall = time.perf_counter() - started
            print(f"run {index + 1}/{args.runs}: exit {code}, {wall:.0f} s", flush=True)
            with open(out / "walls.jsonl", "a") as handle:
                handle.write(json.dumps({"index": index, "exit": code, "wall_s": round(wall, 1)}) + "\n")


# -- analysis ---------------------------------------------------------------------------------------


def runs_in(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("*/run.json"))


def figures(run_dir: Path, old_interval: bool) -> dict[tuple[str, str, float], dict[str, Any]]:
    """Every speedup figure of a run: (figure, method, density) -> value, interval, contended."""
    from dstbench.results.derive import derive, load_frame
    from dstbench.results.speedup import median_ci, reference_row
    from dstbench.suite.loading import load_suite

    reference = load_suite(run_dir / "suite.yaml").reference
    frame = load_frame([run_dir])
    derived = derive(frame, reference)
    out = {}
    for index, row in derived.iterrows():
        if row["status"] != "ok":
            continue
        for figure, against in (("speedup", reference), ("speedup_vs_dense", "dense")):
            ref = reference_row(frame, against, float(row["density"]), row.get("run"))
            if ref is None or ref.name == index or not np.isfinite(row.get(figure, np.nan)):
                continue
            if old_interval:  # dstbench 0.2: median of the paired ratios, order-statistic interval
                ratios = old_paired_ratios(ref, frame.loc[index])
                if not ratios:
                    continue
                value, (low, high) = float(np.median(ratios)), median_ci(ratios)
            else:
                value, low, high = row[figure], row[f"{figure}_ci_low"], row[f"{figure}_ci_high"]
            out[(figure, row["method"], float(row["density"]))] = {
                "value": float(value), "low": float(low), "high": float(high), "contended": bool(row["contended"]),
            }
    return out


def old_paired_ratios(reference: Any, method: Any) -> list[float]:
    """reference_ms / method_ms of every (group, round) both timed, starved ones included (0.2)."""
    from dstbench.results.intervals import paired_units

    return [float(np.exp(v)) for v in paired_units(reference, method, drop_starved=False).values]


def rerun_figures(folder: Path, old_interval: bool) -> dict[str, Any]:
    """Fraction of run pairs whose intervals overlap, and of point estimates inside the other run's
    interval, over every figure; figures with a contended side counted apart."""
    runs = [figures(r, old_interval) for r in runs_in(folder)]
    overlap = inside = pairs = ordered = 0
    flagged = 0
    widths = []
    for a, b in itertools.combinations(range(len(runs)), 2):
        for key in sorted(set(runs[a]) & set(runs[b])):
            x, y = runs[a][key], runs[b][key]
            if not all(np.isfinite([x["low"], x["high"], y["low"], y["high"]])):
                continue
            if x["contended"] or y["contended"]:
                flagged += 1
                continue
            pairs += 1
            overlap += max(x["low"], y["low"]) <= min(x["high"], y["high"])
            inside += (y["low"] <= x["value"] <= y["high"]) + (x["low"] <= y["value"] <= x["high"])
            ordered += 2
    for run in runs:
        widths += [f["high"] / f["low"] - 1 for f in run.values() if np.isfinite(f["low"]) and f["low"] > 0]
    return {
        "runs": len(runs), "figures_per_run": int(np.median([len(r) for r in runs])) if runs else 0,
        "pairs": pairs, "overlap": overlap / pairs if pairs else None,
        "inside": inside / ordered if ordered else None, "flagged_pairs": flagged,
        "median_relative_width": float(np.median(widths)) if widths else None,
    }


def warmup_figures(folder: Path) -> dict[str, Any]:
    """How slow the first timed round of each process set is, and the settling segment, each as a
    share of the case's median segment (median over cases)."""
    from dstbench.results.record import iter_results

    first, settle = [], []
    for run_dir in runs_in(folder):
        for line in iter_results(run_dir):
            ms, rounds, groups = line.get("segment_ms") or [], line.get("segment_round") or [], line.get("segment_group") or []
            if line.get("status") != "ok" or len(ms) < 3 or not (len(ms) == len(rounds) == len(groups)):
                continue
            median = float(np.median(ms))
            processes = line.get("segment_process") or [0] * len(ms)
            starts: dict[tuple[str, int], int] = {}
            for i, (g, p, r) in enumerate(zip(groups, processes, rounds)):
                if (g, p) not in starts or r < rounds[starts[(g, p)]]:
                    starts[(g, p)] = i
            first += [ms[i] / median for i in starts.values()]
            settle += [s / median for s in line.get("settle_ms") or []]
    return {
        "first_round_vs_median": float(np.median(first)) if first else None,
        "first_round_p90": float(np.percentile(first, 90)) if first else None,
        "settle_vs_median": float(np.median(settle)) if settle else None,
    }


def compare_pairs(baselines: list[Path], currents: list[Path], same: bool, threshold: float = 10.0) -> list[dict[str, Any]]:
    from dstbench.gates.compare import compare_runs
    from dstbench.gates.sides import load_side

    out = []
    for base, cur in itertools.product(baselines, currents):
        if same and base == cur:
            continue
        comparison = compare_runs(load_side(base), load_side(cur), time_threshold=threshold)
        verdicts = {c.case: c.time.verdict for c in comparison.cases if c.time is not None}
        out.append({
            "baseline": base.name, "current": cur.name,
            "regressions": sorted(c for c, v in verdicts.items() if v == "regression"),
            "improvements": sorted(c for c, v in verdicts.items() if v == "improvement"),
            "inconclusive": sorted(c for c, v in verdicts.items() if v == "inconclusive"),
            "unchanged": sorted(c for c, v in verdicts.items() if v == "unchanged"),
            "gated": len(verdicts),
        })
    return out


def walls(folder: Path) -> list[float]:
    path = folder / "walls.jsonl"
    return [json.loads(line)["wall_s"] for line in path.read_text().splitlines()] if path.exists() else []


def planted_cases(run_dir: Path) -> set[str]:
    """The cases a planted run slowed: those whose parameters hold the planted `slowdown`."""
    from dstbench.results.record import iter_results

    return {
        f"{line['method']}@{line['density']:g}" for line in iter_results(run_dir)
        if "slowdown" in (line.get("params") or {})
    }


def gate_figures(root: Path, quiet: str, planted: str, prefix: str, threshold: float = 10.0) -> dict[str, Any]:
    """A/A between the quiet runs of `root/quiet`; power: each run of `root/planted` against a
    different quiet run; `dstbench compare` at its defaults but `--time-threshold threshold`."""
    out: dict[str, Any] = {}
    after = runs_in(root / quiet)
    if len(after) >= 2:
        pairs = compare_pairs(after, after, same=True, threshold=threshold)
        out[f"{prefix}aa"] = {
            "pairs": len(pairs), "time_threshold": threshold,
            "false": sum(bool(p["regressions"] or p["improvements"]) for p in pairs),
            "inconclusive": sum(len(p["inconclusive"]) for p in pairs), "unchanged": sum(len(p["unchanged"]) for p in pairs),
            "gated": sum(p["gated"] for p in pairs), "detail": pairs,
        }
    if (root / planted).is_dir() and after:
        runs = runs_in(root / planted)
        trials = [compare_pairs([after[i % len(after)]], [p], same=False, threshold=threshold)[0] for i, p in enumerate(runs)]
        slowed = planted_cases(runs[0]) if runs else set()
        out[f"{prefix}power"] = {
            "trials": len(trials), "slowdown": 0.15, "time_threshold": threshold, "planted_cases": sorted(slowed),
            "caught": sum(slowed <= set(t["regressions"]) for t in trials),
            "only_planted": sum(set(t["regressions"]) <= slowed and not t["improvements"] for t in trials),
            "detail": trials,
        }
    if (root / quiet).is_dir() and quiet != "after":
        out[quiet] = {**rerun_figures(root / quiet, False), "wall_s": walls(root / quiet)}
    return out


def analyse(args: argparse.Namespace) -> None:
    root = Path(args.study)
    study: dict[str, Any] = {"machine": os.uname().nodename, "cpus": os.cpu_count()}
    for name, old in (("before", True), ("after", False), ("before-loaded", True), ("after-loaded", False)):
        if (root / name).is_dir():
            study[name] = {**rerun_figures(root / name, old), **warmup_figures(root / name), "wall_s": walls(root / name)}
    for prefix, (quiet, planted) in (("", ("after", "planted")), ("gate_", ("gate", "gate-planted"))):
        study.update(gate_figures(root, quiet, planted, prefix))
    # The gating suite at a 5% band too: a planted 15% lies 5% beyond a 10% band, 10% beyond a 5% one.
    study.update(gate_figures(root, "gate", "gate-planted", "gate5_", threshold=5.0))
    text = json.dumps(study, indent=2) + "\n"
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run a suite (default cpu_smoke) several times into one folder")
    p.add_argument("--out", required=True)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--before", action="store_true", help="dstbench 0.2's sampling: one process, no settle, fixed order")
    p.add_argument("--neighbour", action="store_true", help="one busy-looping process beside each run")
    p.add_argument("--planted", action="store_true", help="SET replaced by a 15%% slower SET under its label")
    p.add_argument("--suite", default=str(SUITE), help="the suite to run (default: suites/cpu_smoke.yaml)")
    p.set_defaults(func=run)
    p = commands.add_parser("analyse", help="re-run, A/A and power figures from the study's folders")
    p.add_argument("study", help="the folder holding before/, after/, before-loaded/, after-loaded/, planted/")
    p.add_argument("--json", help="write the figures here too")
    p.set_defaults(func=analyse)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
