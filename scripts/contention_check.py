"""Does a busy neighbour move the headline, and if it does, is it flagged? (issue 19's benchmark)

Runs a suite twice, as is ("quiet") and with a busy loop (`python -c 'while True: pass'`) pinned
to one core for the whole run ("loaded"), then prints the speedup of one method against another at
one density side by side, each case's median time and contention flag, and a verdict: the speedup
stayed within --tolerance of the quiet figure, or every case whose time moved by more than that is
flagged contended. Writes `summary.json` and `summary.md` into --out.

    python scripts/contention_check.py                                   # cpu_smoke, barter vs rigl at 0.1
    python scripts/contention_check.py --only rigl barter --density 0.1 --segments 4   # a quick try

Run it on an otherwise quiet machine: "quiet" is only as quiet as the machine. Not a test: it
measures, and takes two runs' time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's dstbench, not an installed one

from dstbench.results.derive import derive, load_frame  # noqa: E402


def busy_loop(core: int) -> subprocess.Popen:
    """A process that spins on `core` until killed."""
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )


def run(suite: Path, out: Path, extra: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    code = subprocess.call([sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out), *extra], cwd=ROOT)
    [run_dir] = [p for p in out.iterdir() if p not in before and p.is_dir()]
    print(f"{run_dir}: exit {code}", file=sys.stderr)
    return run_dir


def figures(run_dir: Path, method: str, vs: str, density: float) -> dict[str, Any]:
    derived = derive(load_frame([run_dir]), vs)
    cases = {}
    for _, row in derived.iterrows():
        noise = row.get("noise") if isinstance(row.get("noise"), dict) else {}

        def median(key: str) -> float | None:
            values = sorted(v for v in noise.get(key) or [] if v is not None)
            return values[len(values) // 2] if values else None

        cases[row["case_id"]] = {
            "status": row["status"],
            "median_ms": None if row.get("median_ms") != row.get("median_ms") else row.get("median_ms"),
            "contended": bool(noise.get("contended")),
            "starved_segments": noise.get("starved_segments"),
            "median_cpu_share": median("cpu_share"),
            "median_wait_share": median("wait_share"),
        }
    rows = derived[(derived["method"] == method) & (abs(derived["density"].astype(float) - density) < 1e-9)]
    speed = None
    if len(rows):
        r = rows.iloc[0]
        speed = {k: (None if r.get(k) != r.get(k) else float(r[k])) for k in ("speedup", "speedup_ci_low", "speedup_ci_high")}
        speed["basis"] = r.get("speedup_basis")
    return {"run": str(run_dir), "speedup": speed, "cases": cases}


def verdict(quiet: dict[str, Any], loaded: dict[str, Any], tolerance: float) -> dict[str, Any]:
    q, l = (quiet["speedup"] or {}).get("speedup"), (loaded["speedup"] or {}).get("speedup")
    change = (l / q - 1) if q and l else None
    affected = []
    for case, figs in loaded["cases"].items():
        base = quiet["cases"].get(case, {}).get("median_ms")
        if base and figs["median_ms"] and abs(figs["median_ms"] / base - 1) > tolerance:
            affected.append(case)
    unflagged = [c for c in affected if not loaded["cases"][c]["contended"]]
    within = change is not None and abs(change) <= tolerance
    return {
        "speedup_change": change, "within_tolerance": within, "affected": affected, "affected_unflagged": unflagged,
        "passed": within or (bool(affected) and not unflagged),
    }


def markdown(summary: dict[str, Any]) -> str:
    s = summary["settings"]
    lines = [f"# Contention check: {s['method']} vs {s['vs']} at density {s['density']:g}", "",
             f"Suite `{s['suite']}`; loaded = a busy loop pinned to core {s['busy_core']} for the whole run.", ""]
    for name in ("quiet", "loaded"):
        sp = summary[name]["speedup"] or {}
        ci = f" [{sp['speedup_ci_low']:.2f}, {sp['speedup_ci_high']:.2f}]" if sp.get("speedup_ci_low") is not None else ""
        value = f"{sp['speedup']:.2f}x{ci} ({sp.get('basis')})" if sp.get("speedup") is not None else "—"
        lines.append(f"- {name}: speedup {value}; run `{summary[name]['run']}`")
    lines += ["", "| case | quiet ms | contended | loaded ms | median cpu_share | median wait_share | contended |",
              "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for case, figs in summary["loaded"]["cases"].items():
        base = summary["quiet"]["cases"].get(case, {})
        fmt = lambda v, f: "—" if v is None else format(v, f)  # noqa: E731
        lines.append(f"| {case} | {fmt(base.get('median_ms'), '.1f')} | {'yes' if base.get('contended') else 'no'} | "
                     f"{fmt(figs['median_ms'], '.1f')} | {fmt(figs['median_cpu_share'], '.2f')} | "
                     f"{fmt(figs['median_wait_share'], '.2f')} | {'yes' if figs['contended'] else 'no'} |")
    v = summary["verdict"]
    change = "—" if v["speedup_change"] is None else f"{v['speedup_change'] * 100:+.1f}%"
    if any(c.get("contended") for c in summary["quiet"]["cases"].values()):
        lines += ["", "The quiet run has contended cases: the machine was not quiet; run it again."]
    lines += ["", f"Speedup change {change}; cases moved by more than {s['tolerance']:.0%}: "
              f"{', '.join(v['affected']) or 'none'}; of those not flagged: {', '.join(v['affected_unflagged']) or 'none'}.",
              f"**{'PASS' if v['passed'] else 'FAIL'}**", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/cpu_smoke.yaml")
    parser.add_argument("--out", default="runs/contention")
    parser.add_argument("--method", default="barter")
    parser.add_argument("--vs", default="rigl")
    parser.add_argument("--at", type=float, default=0.1, help="density of the headline pair")
    parser.add_argument("--busy-core", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=0.2)
    parser.add_argument("--only", nargs="+", help="passed to dstbench run")
    parser.add_argument("--density", nargs="+", help="passed to dstbench run")
    parser.add_argument("--segments", type=int, help="override timing.segments (a shorter try)")
    parser.add_argument("--segment-steps", type=int, help="override timing.segment_steps")
    parser.add_argument("--skip-quiet", metavar="RUN_DIR", help="reuse a quiet run folder")
    args = parser.parse_args()

    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    suite = (ROOT / args.suite).resolve()
    if args.segments or args.segment_steps:
        data = yaml.safe_load(suite.read_text())
        timing = dict(data.get("timing") or {})
        timing.update({k: v for k, v in (("segments", args.segments), ("segment_steps", args.segment_steps)) if v})
        suite = out / "suite.yaml"
        suite.write_text(yaml.safe_dump({**data, "timing": timing}, sort_keys=False))
    extra = (["--only", *args.only] if args.only else []) + (["--density", *args.density] if args.density else [])

    quiet_dir = Path(args.skip_quiet) if args.skip_quiet else run(suite, out / "quiet", extra)
    spinner = busy_loop(args.busy_core)
    try:
        loaded_dir = run(suite, out / "loaded", extra)
    finally:
        spinner.kill()
        spinner.wait()
    quiet = figures(quiet_dir, args.method, args.vs, args.at)
    loaded = figures(loaded_dir, args.method, args.vs, args.at)
    summary = {
        "settings": {"suite": args.suite, "method": args.method, "vs": args.vs, "density": args.at,
                     "busy_core": args.busy_core, "tolerance": args.tolerance},
        "quiet": quiet, "loaded": loaded, "verdict": verdict(quiet, loaded, args.tolerance),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (out / "summary.md").write_text(text)
    print(text)
    return 0 if summary["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
