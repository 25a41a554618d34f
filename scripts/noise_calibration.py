"""The figures behind the contention rule (docs/concepts/measurement.md): one case's per-segment
`cpu_share` and `wait_share` on idle cores and with a busy loop pinned to one core.

    python scripts/noise_calibration.py                       # rigl@0.1 and barter@0.1, 2 threads
    OMP_WAIT_POLICY=PASSIVE python scripts/noise_calibration.py --methods barter
    python scripts/noise_calibration.py --threads 1 --methods barter

Each case runs in this process (no launcher), idle first, then with the busy loop. Run it when
nothing else runs: "idle" is only as idle as the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's dstbench, not an installed one

from dstbench.suite.plan import expand_cases  # noqa: E402
from dstbench.execution.case_session import CaseTask, run_case  # noqa: E402
from dstbench.suite.loading import parse_suite  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/cpu_smoke.yaml")
    parser.add_argument("--methods", nargs="+", default=["rigl", "barter"])
    parser.add_argument("--density", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--segments", type=int, default=6)
    parser.add_argument("--segment-steps", type=int, default=6)
    parser.add_argument("--busy-core", type=int, default=0)
    args = parser.parse_args()

    data = yaml.safe_load((ROOT / args.suite).read_text())
    data["threads"] = args.threads
    data["timing"] = {**data.get("timing", {}), "segments": args.segments, "segment_steps": args.segment_steps}
    suite = parse_suite(data, args.suite)
    cases = {c.method: c for c in expand_cases(suite) if c.kind == "dense" or abs(c.density - args.density) < 1e-9}
    print(f"threads {args.threads}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, {args.segments} x {args.segment_steps} steps")
    for method in args.methods:
        task = CaseTask(suite.model_dump(mode="json"), args.suite, cases[method].to_dict(), str(ROOT))
        for load in ("idle", "busy"):
            spinner = None
            if load == "busy":
                core = args.busy_core
                spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core}))
                time.sleep(0.5)
            try:
                result = run_case(task)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            noise = result.noise or {}
            print(f"{cases[method].case_id} {load}: ms {[round(x) for x in result.segment_ms]}")
            print(f"  cpu_share  {noise.get('cpu_share')}\n  wait_share {noise.get('wait_share')}\n"
                  f"  load {noise.get('loadavg_start')} -> {noise.get('loadavg_end')}, contended {noise.get('contended')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
