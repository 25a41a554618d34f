"""The hand-over study (docs/concepts/interleaving.md#hand-over): does an interleaved case wait on
the run queue more than the same case timed alone, and does parking the previous case's threads
(`timing.hand_over: parked`, the default) close the gap without slowing the timed segments?

    python scripts/studies/hand_over.py run --out reports/studies/hand_over/runs --repeats 3
    python scripts/studies/hand_over.py analyse reports/studies/hand_over/runs --json reports/studies/hand_over/study.json

`run` times `reports/studies/hand_over/suite.yaml` (dense and RigL at 0.5 on a small ViT, one
process set, short segments) under three conditions, one after another in each repeat: `alone`
(`timing.interleave: false`: each case whole, one after the other), `immediate` (interleaved, the
next case's segment starts as soon as the previous one's ends) and `parked` (interleaved, the
default hand-over). Run folders go to OUT/<condition>/. Measure on a quiet machine: nothing else
running. `analyse` recomputes every figure of the study's README from those run folders.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "reports" / "studies" / "hand_over" / "suite.yaml"
CONDITIONS = {
    "alone": ["timing.interleave=false"],
    "immediate": ['timing.hand_over="immediate"'],
    "parked": [],
}
WAIT_GOAL = 0.03  # issue 77: an interleaved case's p90 wait within this of the case alone


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    for repeat in range(args.repeats):
        for condition, settings in CONDITIONS.items():
            folder = out / condition
            folder.mkdir(parents=True, exist_ok=True)
            sets = [part for item in settings for part in ("--set", item)]
            started = time.perf_counter()
            code = subprocess.call(["dstbench", "run", str(args.suite), "--out", str(folder), *sets], cwd=ROOT,
                                   stdout=subprocess.DEVNULL)
            wall = round(time.perf_counter() - started, 1)
            with (folder / "walls.jsonl").open("a") as handle:
                handle.write(json.dumps({"repeat": repeat, "wall_s": wall, "exit": code}) + "\n")
            print(f"repeat {repeat} {condition}: exit {code}, {wall} s", flush=True)


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def _values(values: list[Any] | None) -> list[float]:
    return [float(v) for v in values or [] if v is not None]


def condition_figures(folder: Path) -> dict[str, Any]:
    """Per case (method@density): each run's p90 and median `wait_share`, median segment ms and
    hand-over ms; the runs' walls."""
    cases: dict[str, dict[str, list[float]]] = {}
    runs = sorted(p for p in folder.iterdir() if (p / "results.jsonl").is_file())
    for run_dir in runs:
        for line in _lines(run_dir):
            if line.get("status") != "ok":
                continue
            noise = line.get("noise") or {}
            waits, hand_over = _values(noise.get("wait_share")), _values(noise.get("hand_over_ms"))
            figures = cases.setdefault(f"{line['method']}@{line['density']:g}", {
                "wait_p90": [], "wait_p50": [], "segment_ms": [], "hand_over_ms": [], "hand_over_total_s": []})
            figures["wait_p90"].append(round(float(np.percentile(waits, 90)), 4))
            figures["wait_p50"].append(round(float(np.median(waits)), 4))
            figures["segment_ms"].append(round(float(np.median(line["segment_ms"])), 2))
            if hand_over:
                figures["hand_over_ms"].append(round(float(np.median(hand_over)), 2))
                figures["hand_over_total_s"].append(round(sum(hand_over) / 1e3, 3))
    walls = []
    if (folder / "walls.jsonl").is_file():
        walls = [json.loads(line)["wall_s"] for line in (folder / "walls.jsonl").read_text().splitlines() if line.strip()]
    return {"runs": len(runs), "wall_s": walls, "cases": cases}


def analyse(args: argparse.Namespace) -> None:
    root = Path(args.folder)
    study: dict[str, Any] = {name: condition_figures(root / name) for name in CONDITIONS if (root / name).is_dir()}
    alone = study.get("alone", {}).get("cases", {})
    verdicts = {}
    for name in ("immediate", "parked"):
        for case, figures in study.get(name, {}).get("cases", {}).items():
            if case not in alone:
                continue
            gap = float(np.median(figures["wait_p90"])) - float(np.median(alone[case]["wait_p90"]))
            ratio = float(np.median(figures["segment_ms"])) / float(np.median(alone[case]["segment_ms"]))
            verdicts[f"{name} {case}"] = {
                "wait_p90_gap": round(gap, 4), "within_goal": gap <= WAIT_GOAL, "segment_ms_vs_alone": round(ratio, 3),
            }
    study["versus_alone"] = verdicts
    print("| condition | case | runs | wait_share p90 (median over runs) | p90 per run | median segment ms | hand-over ms (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in CONDITIONS:
        for case, figures in study.get(name, {}).get("cases", {}).items():
            hand = f"{np.median(figures['hand_over_ms']):.1f}" if figures["hand_over_ms"] else "—"
            print(f"| {name} | {case} | {len(figures['wait_p90'])} | {np.median(figures['wait_p90']):.4f} | "
                  f"{', '.join(f'{w:.3f}' for w in figures['wait_p90'])} | {np.median(figures['segment_ms']):.1f} | {hand} |")
    print()
    for key, verdict in verdicts.items():
        print(f"{key}: p90 wait {verdict['wait_p90_gap']:+.4f} vs alone ({'within' if verdict['within_goal'] else 'beyond'} "
              f"{WAIT_GOAL}), segment time {verdict['segment_ms_vs_alone']:.3f}x alone's")
    if args.json:
        Path(args.json).write_text(json.dumps(study, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("--out", required=True)
    runner.add_argument("--repeats", type=int, default=3)
    runner.add_argument("--suite", default=str(SUITE))
    analyser = commands.add_parser("analyse")
    analyser.add_argument("folder")
    analyser.add_argument("--json")
    args = parser.parse_args()
    (run if args.command == "run" else analyse)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
