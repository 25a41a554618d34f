"""The power study of `dstbench compare` (issue 90): how often the gate calls a planted CPU-burning
slowdown of SET a regression, unchanged or inconclusive, without and with `--decide`, and how often
it calls an A/A pair or a +5% slowdown (inside the 10% band) a regression.

    python scripts/studies/power.py run --out reports/studies/power/runs --trials 10   # resumable
    python scripts/studies/power.py analyse reports/studies/power/runs --json reports/studies/power/study.json \
        --readme reports/studies/power/README.md

`run` times `reports/studies/power/suite.yaml`: first `--baselines` baseline runs, each given
`--baseline-sets` more process sets (`dstbench run --resume --more-processes`: a baseline must be
narrower than what the gate should see); then, trial by trial, one current run per condition (A/A:
the suite as is; +5/10/15/25%: SET replaced by `planted_burn_set` under SET's label, burning that
share of its segment time), each against baseline `trial mod --baselines`. Each current run is
copied and the copy given `dstbench compare BASE COPY --decide` twice: at the default budget (as
long as the run's own timing took), then with twice that more (3x in all). `trials.jsonl` records
each trial (its runs, and how many process-set additions the first `--decide` made). A trial whose
line is in `trials.jsonl` is not run again: stop and start again freely.

`analyse` recomputes every verdict from the run folders with today's `compare`: without `--decide`
(the current run as timed), at 1x (the copy with only the first `--decide`'s sets) and at 3x (the
copy whole). Measure on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "reports" / "studies" / "power" / "suite.yaml"
PLANTED = "set@0.5"
CONDITIONS = {"aa": 0.0, "plus5": 0.05, "plus10": 0.10, "plus15": 0.15, "plus25": 0.25}
LABELS = {"aa": "A/A", "plus5": "+5%", "plus10": "+10%", "plus15": "+15%", "plus25": "+25%"}
STATES = ("plain", "decide_1x", "decide_3x")


def planted_suite(directory: Path, slowdown: float) -> Path:
    """The suite with SET replaced by the burning slowdown under SET's label (the suite itself at 0)."""
    if slowdown == 0:
        return SUITE
    suite = yaml.safe_load(SUITE.read_text())
    methods = []
    for spec in suite["methods"]:
        if isinstance(spec, dict) and spec.get("name") == "set":
            spec = {"name": "planted_burn_set", "label": "set", "params": {**spec.get("params", {}), "slowdown": slowdown}}
        methods.append(spec)
    suite["methods"], suite["plugins"] = methods, ["planted_burn"]
    path = directory / f"power_plus{round(slowdown * 100)}.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def _dstbench(*args: str) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts" / "studies"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.call(["dstbench", *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _new_run(suite: Path, out: Path) -> Path:
    before = set(out.glob("*/")) if out.is_dir() else set()
    code = _dstbench("run", str(suite), "--out", str(out))
    made = sorted(set(out.glob("*/")) - before)
    if len(made) != 1:
        raise SystemExit(f"dstbench run {suite} made {len(made)} run folders (exit {code})")
    return made[0]


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    baselines_dir = out / "baselines"
    baselines = sorted(baselines_dir.glob("power-*/")) if baselines_dir.is_dir() else []
    while len(baselines) < args.baselines:
        base = _new_run(SUITE, baselines_dir)
        _dstbench("run", str(SUITE), "--resume", str(base), "--more-processes", str(args.baseline_sets), "--out", str(baselines_dir))
        baselines.append(base)
        print(f"baseline {base.name}", flush=True)
    records = out / "trials.jsonl"
    done = {(r["trial"], r["condition"]) for r in _read(records)}
    with tempfile.TemporaryDirectory() as tmp:
        suites = {name: planted_suite(Path(tmp), share) for name, share in CONDITIONS.items()}
        for trial in range(args.trials):
            for condition in CONDITIONS:
                if (trial, condition) in done:
                    continue
                base = baselines[trial % len(baselines)]
                started = time.perf_counter()
                current = _new_run(suites[condition], out / condition)
                copy = out / f"{condition}-decided" / current.name
                shutil.copytree(current, copy)
                _dstbench("compare", str(base), str(copy), "--decide")
                first = len(json.loads((copy / "run.json").read_text()).get("added_process_sets") or [])
                wall = json.loads((copy / "run.json").read_text()).get("timing_wall_s")
                if wall:
                    _dstbench("compare", str(base), str(copy), "--decide", "--decide-budget-s", str(2 * float(wall)))
                record = {"trial": trial, "condition": condition, "baseline": _rel(base, out), "current": _rel(current, out),
                          "decided": _rel(copy, out), "first_decide_additions": first,
                          "wall_s": round(time.perf_counter() - started, 1)}
                with records.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                print(f"trial {trial} {condition}: {record['wall_s']} s", flush=True)


def _rel(path: Path, root: Path) -> str:
    return str(path.resolve().relative_to(root.resolve()))


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def verdicts(root: Path, record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The planted case's verdict and every case's regressions in each state of one trial."""
    from dstbench.gates.compare import compare_runs
    from dstbench.gates.sides import load_side
    from dstbench.results.merge import strip_group
    from dstbench.suite.groups import base_key

    base = load_side(root / record["baseline"])
    decided = root / record["decided"]
    meta = json.loads((decided / "run.json").read_text())
    entries = meta.get("added_process_sets") or []
    later = {base_key(g) for e in entries[record["first_decide_additions"]:] for g in e["groups"]}
    one_x = load_side(decided)
    for key, line in list(one_x.cases.items()):
        for group in later:
            line = strip_group(line, group) or line
        one_x.cases[key] = line
    sides = {"plain": load_side(root / record["current"]), "decide_1x": one_x, "decide_3x": load_side(decided)}
    out = {}
    for state, side in sides.items():
        comparison = compare_runs(base, side)
        planted = next(c for c in comparison.cases if c.case == PLANTED).time
        assert planted is not None
        line = next(x for k, x in side.cases.items() if k[1] == "set")
        units = set(zip(line.get("segment_group") or [], line.get("segment_process") or []))  # (group, set) pairs
        out[state] = {
            "verdict": planted.verdict, "ratio": round(planted.ratio, 4), "ci": [round(planted.ci_low, 4), round(planted.ci_high, 4)],
            "regressed": [c.case for c in comparison.cases if c.time is not None and c.time.verdict == "regression"],
            "sets": len(units),
        }
    return out


def binomial(count: int, total: int) -> list[float]:
    """The Clopper-Pearson 95% interval of a share."""
    from scipy.stats import beta

    low = 0.0 if count == 0 else float(beta.ppf(0.025, count, total - count + 1))
    high = 1.0 if count == total else float(beta.ppf(0.975, count + 1, total - count))
    return [round(low, 3), round(high, 3)]


def set_ratios(root: Path) -> dict[str, Any]:
    """SET / dense per process set (the median of its rounds' ratios), in each baseline's own two
    sets and its added ones, and in the A/A runs' sets: where the A/A false alarms come from."""
    import math
    import statistics

    from dstbench.results.intervals import paired_units

    def per_set(run: Path) -> dict[int, float]:
        lines = {x["method"]: x for x in map(json.loads, (run / "results.jsonl").read_text().splitlines())}
        units = paired_units(lines["dense"], lines["set"]).units  # log(dense / set) by (group, set)
        return {process: math.exp(-statistics.median(v)) for (_, process), v in units.items()}

    own, added = [], []
    for base in sorted((root / "baselines").glob("power-*/")):
        ratios = per_set(base)
        own += [r for p, r in ratios.items() if p < 2]
        added += [r for p, r in ratios.items() if p >= 2]
    aa = [r for run in sorted((root / "aa").glob("power-*/")) for r in per_set(run).values()]
    def summary(values: list[float]) -> dict[str, Any]:
        return {"sets": len(values), "median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}
    return {"baselines_own_sets": summary(own), "baselines_added_sets": summary(added), "aa_runs_sets": summary(aa)}


def study_figures(root: Path) -> dict[str, Any]:
    records = _read(root / "trials.jsonl")
    per: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in STATES} for c in CONDITIONS}
    for record in records:
        for state, figures in verdicts(root, record).items():
            per[record["condition"]][state].append(figures)
    table: dict[str, Any] = {}
    for condition, states in per.items():
        table[condition] = {}
        for state, trials in states.items():
            total = len(trials)
            counts = {v: sum(t["verdict"] == v for t in trials) for v in ("regression", "unchanged", "inconclusive", "improvement")}
            table[condition][state] = {
                "trials": total, **counts,
                **{f"{v}_ci95": binomial(n, total) for v, n in counts.items() if total and v != "improvement"},
                "any_case_regressed": sum(bool(t["regressed"]) for t in trials),
                "median_sets": sorted(t["sets"] for t in trials)[total // 2] if total else None,
            }
    walls = [r["wall_s"] for r in records]
    return {"trials": len(records), "baselines": len({r["baseline"] for r in records}), "table": table,
            "wall_s_total": round(sum(walls), 1), "set_over_dense": set_ratios(root)}


def readme(study: dict[str, Any]) -> str:
    """The README's generated part: one row per (condition, state)."""
    rows = ["| condition | gate | trials | regression [95% CI] | unchanged [95% CI] | inconclusive | any case called regression | median process sets of SET |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    names = {"plain": "compare", "decide_1x": "--decide, 1x budget (default)", "decide_3x": "--decide, 3x budget"}
    for condition, states in study["table"].items():
        for state, f in states.items():
            if not f["trials"]:
                continue
            rows.append(
                f"| {LABELS[condition]} | {names[state]} | {f['trials']} | {f['regression']} [{f['regression_ci95'][0]:.2f}, "
                f"{f['regression_ci95'][1]:.2f}] | {f['unchanged']} [{f['unchanged_ci95'][0]:.2f}, {f['unchanged_ci95'][1]:.2f}] | "
                f"{f['inconclusive']} | {f['any_case_regressed']} | {f['median_sets']} |")
    return "\n".join(rows) + "\n"


def analyse(args: argparse.Namespace) -> None:
    study = study_figures(Path(args.folder))
    table = readme(study)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(study, indent=2) + "\n")
    if args.readme:
        path = Path(args.readme)
        text = path.read_text()
        start, end = "<!-- GENERATED: power table -->\n", "<!-- END GENERATED -->"
        head, rest = text.split(start, 1)
        path.write_text(head + start + table + end + rest.split(end, 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("--out", required=True)
    runner.add_argument("--trials", type=int, default=10)
    runner.add_argument("--baselines", type=int, default=4)
    runner.add_argument("--baseline-sets", type=int, default=6, help="process sets added to each baseline's 2")
    analyser = commands.add_parser("analyse")
    analyser.add_argument("folder")
    analyser.add_argument("--json")
    analyser.add_argument("--readme")
    args = parser.parse_args()
    (run if args.command == "run" else analyse)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
