"""The power study of `dstbench compare` (issue 90): how often the gate calls a planted CPU-burning
slowdown of SET a regression, unchanged or inconclusive, without and with `--decide`, and how often
it calls an A/A pair or a +5% slowdown (inside the 10% band) a regression.

    python scripts/studies/power.py run --out reports/studies/power/runs --trials 10   # resumable
    python scripts/studies/power.py analyse reports/studies/power/runs --json reports/studies/power/study.json \
        --readme reports/studies/power/README.md

`run` times `reports/studies/power/suite.yaml`: first `--baselines` baseline runs, each timed in
`--sittings` sittings (its own run, then `--sitting-sets` more process sets per sitting with
`dstbench run --resume --more-processes`, round-robin, a baseline's sittings at least
`--sitting-gap-s` apart: each a session, `dstbench.results.sessions`, so `compare` sees the spread
between sessions); then, trial by trial, one current run per condition (A/A:
the suite as is; +5/10/15/25%: SET replaced by `planted_burn_set` under SET's label, burning that
share of its segment time), each against baseline `trial mod --baselines`. Each current run is
copied and the copy given `dstbench compare BASE COPY --decide` twice: at the default budget (as
long as the run's own timing took), then with twice that more (3x in all). `trials.jsonl` records
each trial (its runs, and how many process-set additions the first `--decide` made). A trial whose
line is in `trials.jsonl` is not run again: stop and start again freely.

`analyse` recomputes every verdict from the run folders with today's `compare`: without `--decide`
(the current run as timed), at 1x (the copy with only the first `--decide`'s sets) and at 3x (the
copy whole); and where the spread between sessions shows (`session_figures`). Measure on a quiet
machine: nothing else running.
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


def _timing_end(run_dir: Path) -> float:
    """When the run's last timed segment ended (Unix seconds)."""
    ends = [start + ms / 1000.0 for line in _read(run_dir / "results.jsonl")
            for start, ms in zip(line.get("segment_start_s") or [], line.get("segment_ms") or [])]
    return max(ends, default=0.0)


def build_baselines(out: Path, count: int, sittings: int, sets: int, gap_s: float) -> list[Path]:
    """`count` baselines, each timed in `sittings` sittings (its own run, then `sets` more process sets
    per sitting), round-robin, a baseline's sittings at least `gap_s` apart: each its own session."""
    baselines = sorted(out.glob("power-*/")) if out.is_dir() else []
    while len(baselines) < count:
        baselines.append(_new_run(SUITE, out))
        print(f"baseline {baselines[-1].name}: sitting 1", flush=True)
    for sitting in range(2, sittings + 1):
        for base in baselines:
            meta = json.loads((base / "run.json").read_text())
            if len(meta.get("added_process_sets") or []) >= sitting - 1:
                continue
            time.sleep(max(0.0, _timing_end(base) + gap_s - time.time()))
            _dstbench("run", str(SUITE), "--resume", str(base), "--more-processes", str(sets), "--out", str(out))
            print(f"baseline {base.name}: sitting {sitting}", flush=True)
    return baselines


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if args.baselines_from:  # another study's baselines, as they are
        baselines = sorted(Path(args.baselines_from).glob("power-*/"))
    else:
        baselines = build_baselines(out / "baselines", args.baselines, args.sittings, args.sitting_sets, args.sitting_gap_s)
    threshold = ["--time-threshold", f"{args.threshold:g}"]
    conditions = args.conditions.split(",") if args.conditions else list(CONDITIONS)
    records = out / "trials.jsonl"
    done = {(r["trial"], r["condition"]) for r in _read(records)}
    with tempfile.TemporaryDirectory() as tmp:
        suites = {name: planted_suite(Path(tmp), CONDITIONS[name]) for name in conditions}
        for trial in range(args.trials):
            for condition in conditions:
                if (trial, condition) in done:
                    continue
                base = baselines[trial % len(baselines)]
                started = time.perf_counter()
                current = _new_run(suites[condition], out / condition)
                copy = out / f"{condition}-decided" / current.name
                shutil.copytree(current, copy)
                _dstbench("compare", str(base), str(copy), "--decide", *threshold)
                first = len(json.loads((copy / "run.json").read_text()).get("added_process_sets") or [])
                wall = json.loads((copy / "run.json").read_text()).get("timing_wall_s")
                if wall:
                    _dstbench("compare", str(base), str(copy), "--decide", "--decide-budget-s", str(2 * float(wall)), *threshold)
                record = {"trial": trial, "condition": condition, "baseline": _rel(base, out), "current": _rel(current, out),
                          "decided": _rel(copy, out), "first_decide_additions": first, "threshold": args.threshold,
                          "wall_s": round(time.perf_counter() - started, 1)}
                with records.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                print(f"trial {trial} {condition}: {record['wall_s']} s", flush=True)


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(path.resolve(), root.resolve())


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
        comparison = compare_runs(base, side, time_threshold=float(record.get("threshold", 10.0)))
        planted = next(c for c in comparison.cases if c.case == PLANTED).time
        assert planted is not None
        line = next(x for x in side.cases.values() if x.get("method") == "set")
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


def _set_logs(line_of: dict[str, Any], method: str) -> dict[int, float]:
    """log(method / dense) per process set of a run (the median of its rounds' ratios)."""
    import statistics

    from dstbench.results.intervals import paired_units

    units = paired_units(line_of["dense"], line_of[method]).units  # log(dense / method) by (group, set)
    return {process: -statistics.median(v) for (_, process), v in units.items() if v}


def _lines(run: Path) -> dict[str, Any]:
    return {x["method"]: x for x in _read(run / "results.jsonl")}


def session_figures(root: Path) -> dict[str, Any]:
    """Where the spread between sessions shows, on the ratio of a case to dense (logs):

    - `runs`: the plain current runs (two process sets each, timed minutes apart): the sd of a run's
      own offset beyond what its sets' spread predicts (one-way random effects), RigL in every
      condition (it is never planted) and SET in the A/A runs;
    - `added_right_after`: in the `--decide` copies, the sets added right after a run against its
      own two: their mean difference (as a ratio), its sd and count;
    - `gate`: what `compare` estimates from each baseline's sittings (`dstbench.results.sessions`)."""
    import math
    import statistics

    from dstbench.gates.sides import load_side
    from dstbench.gates.time_compare import spreads

    def random_effects(groups: list[list[float]]) -> dict[str, Any]:
        n = [len(g) for g in groups]
        within = sum((x - statistics.mean(g)) ** 2 for g in groups for x in g) / (sum(n) - len(groups))
        means, grand = [statistics.mean(g) for g in groups], statistics.mean(x for g in groups for x in g)
        between = sum(k * (m - grand) ** 2 for k, m in zip(n, means)) / (len(groups) - 1)
        return {"runs": len(groups), "sd_sets": round(math.sqrt(within), 4),
                "sd_run": round(math.sqrt(max(0.0, (between - within) / statistics.mean(n))), 4)}

    records = _read(root / "trials.jsonl")
    runs: dict[str, list[list[float]]] = {"rigl": [], "set": []}
    added: dict[str, list[float]] = {"rigl": [], "set": []}
    for record in records:
        for method in ("rigl", "set") if record["condition"] == "aa" else ("rigl",):
            own = _set_logs(_lines(root / record["current"]), method)
            if len(own) >= 2:
                runs[method].append(list(own.values()))
            lines = _lines(root / record["decided"])
            logs = _set_logs(lines, method) if method in lines else {}
            later = [v for p, v in logs.items() if p >= 2]
            if later and len(own) >= 2:
                added[method].append(statistics.mean(later) - statistics.mean(own.values()))
    gate = []
    for base in sorted((root / "baselines").glob("power-*/")):
        side = load_side(base)
        pooled = spreads([side], "relative")[1]
        gate.append({"baseline": base.name, "sd": round(math.sqrt(pooled.variance), 4), "df": pooled.df})
    return {
        "runs": {m: random_effects(g) for m, g in runs.items() if len(g) >= 2},
        "added_right_after": {m: {"runs": len(d), "ratio": round(math.exp(statistics.mean(d)), 3),
                                  "sd": round(statistics.stdev(d), 3)} for m, d in added.items() if len(d) >= 2},
        "gate": gate,
    }


def table_figures(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each condition's verdicts in each state (the trials of `root`, at the band they were run
    at), and the trial records."""
    records = _read(root / "trials.jsonl")
    conditions = [c for c in CONDITIONS if any(r["condition"] == c for r in records)]
    per: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in STATES} for c in conditions}
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
    return table, records


def study_figures(root: Path, narrow: Path | None = None) -> dict[str, Any]:
    """The study's figures: its table and where the spread between sessions shows; with `narrow`,
    the trials run there at a narrower band against the same baselines (`run --baselines-from`)."""
    table, records = table_figures(root)
    study = {"trials": len(records), "baselines": len({r["baseline"] for r in records}), "table": table,
             "wall_s_total": round(sum(r["wall_s"] for r in records), 1), "sessions": session_figures(root)}
    if narrow is not None:
        narrow_table, narrow_records = table_figures(narrow)
        study["narrow"] = {"threshold": narrow_records[0]["threshold"], "trials": len(narrow_records), "table": narrow_table,
                           "wall_s_total": round(sum(r["wall_s"] for r in narrow_records), 1)}
    return study


def readme(study: dict[str, Any]) -> str:
    """The README's generated part: one row per (band, condition, state), then the sessions table."""
    rows = ["| band | condition | gate | trials | regression [95% CI] | unchanged [95% CI] | inconclusive | any case called regression | median process sets of SET |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    names = {"plain": "compare", "decide_1x": "--decide, 1x budget (default)", "decide_3x": "--decide, 3x budget"}
    bands = [(10.0, study["table"])] + ([(study["narrow"]["threshold"], study["narrow"]["table"])] if "narrow" in study else [])
    for threshold, table in bands:
        rows += _table_rows(threshold, table, names)
    rows += _session_rows(study["sessions"])
    return "\n".join(rows) + "\n"


def _table_rows(threshold: float, table: dict[str, Any], names: dict[str, str]) -> list[str]:
    rows = []
    for condition, states in table.items():
        for state, f in states.items():
            if not f["trials"]:
                continue
            rows.append(
                f"| +/-{threshold:g}% | {LABELS[condition]} | {names[state]} | {f['trials']} | {f['regression']} [{f['regression_ci95'][0]:.2f}, "
                f"{f['regression_ci95'][1]:.2f}] | {f['unchanged']} [{f['unchanged_ci95'][0]:.2f}, {f['unchanged_ci95'][1]:.2f}] | "
                f"{f['inconclusive']} | {f['any_case_regressed']} | {f['median_sets']} |")
    return rows


def _session_rows(sessions: dict[str, Any]) -> list[str]:
    rows = ["", "| where | case over dense | runs | what it shows |", "| --- | --- | --- | --- |"]
    for method, f in sessions["runs"].items():
        rows.append(f"| the plain current runs (2 sets each, minutes apart) | {method.upper() if method == 'set' else 'RigL'} | "
                    f"{f['runs']} | a run's own offset sd {f['sd_run']:.4f} (logs) beyond its sets' spread (sd {f['sd_sets']:.4f} per set) |")
    for method, f in sessions["added_right_after"].items():
        rows.append(f"| sets added right after a run (`--decide`) | {method.upper() if method == 'set' else 'RigL'} | {f['runs']} | "
                    f"added over own {f['ratio']:.3f} (sd {f['sd']:.3f}) |")
    gate = sessions["gate"]
    rows.append(f"| `compare`'s estimate from each baseline's sittings | SET, RigL | {len(gate)} | sd "
                + ", ".join(f"{g['sd']:.4f} ({g['df']} df)" for g in gate) + " |")
    return rows


def analyse(args: argparse.Namespace) -> None:
    study = study_figures(Path(args.folder), Path(args.narrow) if args.narrow else None)
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
    runner.add_argument("--sittings", type=int, default=5, help="sessions each baseline is timed in (its own run the first)")
    runner.add_argument("--sitting-sets", type=int, default=2, help="process sets added in each later sitting")
    runner.add_argument("--sitting-gap-s", type=float, default=90.0, help="least time between a baseline's sittings")
    runner.add_argument("--baselines-from", help="use the baselines in this folder (another study's) instead")
    runner.add_argument("--threshold", type=float, default=10.0, help="compare's --time-threshold (the band, percent)")
    runner.add_argument("--conditions", help="a comma-separated subset of " + ",".join(CONDITIONS))
    analyser = commands.add_parser("analyse")
    analyser.add_argument("folder")
    analyser.add_argument("--narrow", help="the trials run at a narrower band against the same baselines")
    analyser.add_argument("--json")
    analyser.add_argument("--readme")
    args = parser.parse_args()
    (run if args.command == "run" else analyse)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
