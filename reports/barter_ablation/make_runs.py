"""Run `suites/barter_ablation.yaml` once per seed, each into its own run folder.

    python reports/barter_ablation/make_runs.py                  # seeds 0 1 2 into reports/barter_ablation/runs/
    python reports/barter_ablation/make_runs.py --seeds 3 4      # more seeds next to them

The suite's `seed:` is overridden through `dstbench.run.run_suite(overrides={"seed": s})`; the run
folders then differ only in their seed, which is what `dstbench report` and `make_readme.py` pool.
On a shared CPU set `OMP_WAIT_POLICY=PASSIVE` (see the README's Accuracy section).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main(argv: list[str] | None = None) -> int:
    from dstbench.run import run_suite

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--suite", type=Path, default=ROOT / "suites" / "barter_ablation.yaml")
    parser.add_argument("--out", type=Path, default=HERE / "runs")
    args = parser.parse_args(argv)
    for seed in args.seeds:
        run_dir = run_suite(args.suite, out=args.out, overrides={"seed": seed})
        print(f"seed {seed}: {run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
