"""The hand-over study (docs/concepts/interleaving.md#hand-over): does an interleaved case wait on
the run queue more than the same case timed alone, and does parking the previous case's threads
(`timing.hand_over: parked`, the default) close the gap without slowing the timed segments?

    python scripts/studies/hand_over.py run --out reports/studies/hand_over/runs --repeats 3
    python scripts/studies/hand_over.py cost --out reports/studies/hand_over/runs/cost.json
    python scripts/studies/hand_over.py analyse reports/studies/hand_over/runs --json reports/studies/hand_over/study.json

`run` times `reports/studies/hand_over/suite.yaml` (dense and RigL at 0.5 on a small ViT, one
process set, short segments) under three conditions, one after another in each repeat: `alone`
(`timing.interleave: false`: each case whole, one after the other), `immediate` (interleaved, the
next case's segment starts as soon as the previous one's ends) and `parked` (interleaved, the
default hand-over). Run folders go to OUT/<condition>/. `cost` times the wait's own cost apart
from interleaving: one case alone in this process, its segments alternately started straight on
and after a hand-over wait. Measure on a quiet machine: nothing else running. `analyse` recomputes
every figure of the study's README from the run folders and cost.json.
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


ARMS = ("hot", "parked", "woken")


def cost(args: argparse.Namespace) -> None:
    """What a segment pays for starting with its threads parked, apart from interleaving: one case
    alone in this process, each segment started straight on (`hot`: its threads still spin, as
    alone), after a hand-over wait (`parked`: as interleaved, where the other cases ran meanwhile)
    or after the wait and a wake-up op (`woken`), the arms in a Williams order; writes each
    segment's ms per arm."""
    import torch

    from dstbench.execution.case_session import CaseSession, CaseTask, SegmentTag
    from dstbench.execution.rounds import williams_rows
    from dstbench.measure.hand_over import HandOver
    from dstbench.suite.loading import load_suite
    from dstbench.suite.plan import expand_cases

    suite = load_suite(Path(args.suite), {"timing.segments": args.blocks * 3 * len(ARMS)})
    case = next(c for c in expand_cases(suite) if c.method == args.method)
    session = CaseSession(CaseTask(suite.model_dump(mode="json"), str(args.suite), case.to_dict(), "."))
    order = [ARMS[i] for _ in range(args.blocks) for row in williams_rows(len(ARMS)) for i in row]
    arms: dict[str, list[float]] = {arm: [] for arm in ARMS}
    buffer = torch.empty(1 << 18)  # 1 MiB of float32
    try:
        session.open()
        session.segment(SegmentTag(settle=True))
        for index, arm in enumerate(order):
            if arm != "hot":
                HandOver(True).wait()
            if arm == "woken":
                buffer.fill_(0.0)  # one parallel op on the whole team (past torch's grain size): wakes the workers
            arms[arm].append(round(session.segment(SegmentTag(round=index))["ms"], 3))
    finally:
        session.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"case": case.case_id, "threads": session.threads, **arms}, indent=1) + "\n")
    print(f"{case.case_id}: median segment " + ", ".join(f"{np.median(v):.2f} ms {k}" for k, v in arms.items()))


def cost_figures(path: Path) -> dict[str, Any]:
    """Median ms per arm, and per arm the median over Williams blocks (6 rows: each arm 6 times) of
    the block's arm / hot time ratio, with the median's order-statistic 95% interval."""
    from scipy.stats import binom

    data = json.loads(path.read_text())
    per_block = 2 * len(ARMS)  # a Williams block's rows hold each arm this often
    blocks = len(data["hot"]) // per_block
    figures: dict[str, Any] = {"case": data["case"], "threads": data["threads"], "segments": sum(len(data[a]) for a in ARMS)}
    low = int(binom.ppf(0.025, blocks, 0.5))
    for arm in ARMS:
        figures[f"{arm}_ms"] = round(float(np.median(data[arm])), 2)
        if arm == "hot":
            continue
        ratios = sorted(sum(data[arm][b * per_block:(b + 1) * per_block]) / sum(data["hot"][b * per_block:(b + 1) * per_block])
                        for b in range(blocks))
        figures[f"{arm}_vs_hot"] = round(float(np.median(ratios)), 4)
        figures[f"{arm}_vs_hot_ci95"] = [round(ratios[max(low - 1, 0)], 4), round(ratios[min(blocks - low, blocks - 1)], 4)]
    return figures


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


def study_figures(root: Path) -> dict[str, Any]:
    """Every figure of the study from the run folders under `root` (what study.json holds)."""
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
    if (root / "cost.json").is_file():
        study["cost"] = cost_figures(root / "cost.json")
    walls = {name: study[name]["wall_s"] for name in CONDITIONS if name in study}
    hand = study.get("parked", {}).get("cases", {})
    if hand and walls.get("parked"):
        total = float(np.median([sum(v["hand_over_total_s"][i] for v in hand.values()) for i in range(len(walls["parked"]))]))
        study["hand_over_s_per_run"] = round(total, 3)
        study["hand_over_share_of_wall"] = round(total / float(np.median(walls["parked"])), 4)
    return study


def analyse(args: argparse.Namespace) -> None:
    study = study_figures(Path(args.folder))
    verdicts = study["versus_alone"]
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
    if "cost" in study:
        figures = study["cost"]
        print(f"a segment started with parked threads, {figures['case']} alone ({figures['segments']} segments): "
              f"hot {figures['hot_ms']:.2f} ms; " + "; ".join(
                  f"{arm} {figures[arm + '_ms']:.2f} ms, {figures[arm + '_vs_hot']:.3f}x hot "
                  f"[{figures[arm + '_vs_hot_ci95'][0]:.3f}, {figures[arm + '_vs_hot_ci95'][1]:.3f}]" for arm in ARMS[1:]))
    if "hand_over_share_of_wall" in study:
        print(f"hand-over waits per parked run: {study['hand_over_s_per_run']:.3f} s of a median "
              f"{np.median(study['parked']['wall_s']):.1f} s wall ({study['hand_over_share_of_wall']:.1%})")
    if args.json:
        Path(args.json).write_text(json.dumps(study, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("--out", required=True)
    runner.add_argument("--repeats", type=int, default=3)
    runner.add_argument("--suite", default=str(SUITE))
    coster = commands.add_parser("cost")
    coster.add_argument("--out", required=True, help="a JSON file (the study keeps it as runs/cost.json)")
    coster.add_argument("--blocks", type=int, default=20, help="Williams blocks of 18 segments (each arm 6 times)")
    coster.add_argument("--method", default="dense")
    coster.add_argument("--suite", default=str(SUITE))
    analyser = commands.add_parser("analyse")
    analyser.add_argument("folder")
    analyser.add_argument("--json")
    args = parser.parse_args()
    {"run": run, "cost": cost, "analyse": analyse}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
