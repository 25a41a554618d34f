"""dstbench from Python: run a suite, load a run, check it, report it, compare two runs.

    import dstbench

    run = dstbench.run_suite("suites/cpu_smoke.yaml", out="runs", only=["dense", "barter"], densities=[0.1])
    frame = run.frame()                    # one row per case: speedup and its interval, memory, flags
    verdict = run.check()                  # expectations, failed cases, completeness: verdict.passed
    run.report(html="report.html")         # the HTML report `dstbench report --html` writes
    comparison = dstbench.compare("reports/baselines/cpu_smoke", run.path, memory_only=True)
    assert comparison.passed, comparison.text()

Each function does what the command of the same name does, without printing (except `run_suite`'s
progress on stderr, as `dstbench run`; `progress=False` silences it), and raises instead of
returning an exit code: `RunFailed` when every case of a run failed (it measured nothing),
`dstbench.suite.loading.SuiteError` for an unusable suite or selection,
`dstbench.results.run_files.RunDirError` for a folder that is not a run,
`dstbench.gates.compare.CompareInputError` for runs that cannot be compared.
Reading a run (`load_run`, `frame`, `check`, `report`, `compare`) never imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dstbench.api.comparison import Comparison
from dstbench.api.run import Run, RunFailed, failed_cases

if TYPE_CHECKING:
    from dstbench.suite.schema import SuiteConfig

__all__ = ["Comparison", "Run", "RunFailed", "compare", "load_run", "load_suite", "run_suite"]


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> "SuiteConfig":
    """A suite file validated as `dstbench run` validates it (its `plugins:` imported), with
    `overrides` applied first (dotted keys, as `--set`: `{"model.depth": 2}`)."""
    from dstbench.suite.loading import load_suite as _load_suite

    return _load_suite(path, overrides)


def run_suite(
    suite: str | Path,
    out: str | Path = "runs",
    *,
    overrides: dict[str, Any] | None = None,
    only: list[str] | None = None,
    densities: list[float] | None = None,
    device: str | None = None,
    resume: bool | str | Path | None = None,
    retry_failed: bool = False,
    allow_other_machine: bool = False,
    raise_on_failure: bool = True,
    progress: bool = True,
) -> Run:
    """Run a suite file into a new run folder under `out` (as `dstbench run`) and return the run.

    `overrides` set suite keys before validation (`--set`), `only` selects method labels, `densities`
    densities, `device` overrides the suite's; `resume` continues a run folder (True: the newest run of
    this suite under `out`); a run folder holding lines timed on another machine (host, CPU model,
    device, torch) is refused unless `allow_other_machine`, which times their groups again here. An
    unusable suite or selection raises `SuiteError` before anything is written. A run whose every case failed measured nothing: it raises `RunFailed` (naming each case
    and the line of its error the terminal shows) unless `raise_on_failure=False`. Some cases
    failed: the run is returned and a warning names them (`Run.check()` does not pass); failed
    expectations do not raise. Progress goes to stderr, as `dstbench run` prints it
    (`progress=False`: none); nothing goes to stdout.
    """
    import warnings

    from rich.console import Console

    from dstbench.execution.orchestrator import run_suite as _run_suite
    from dstbench.suite.cases import line_keys

    console = None if progress else Console(stderr=True, quiet=True)
    run_dir = _run_suite(
        suite, out=out, overrides=overrides, only=only, densities=densities, device=device,
        resume=str(resume) if isinstance(resume, Path) else resume, retry_failed=retry_failed, console=console,
        allow_other_machine=allow_other_machine,
    )
    run = Run(Path(run_dir))
    lines = run.lines()
    failed = failed_cases(lines)
    if raise_on_failure and len(failed) == len(set(line_keys(lines))):
        raise RunFailed(run, failed)
    if failed:
        listed = "; ".join(f"{case_id} ({why})" for case_id, why in failed.items())
        warnings.warn(f"{len(failed)} case(s) of the run in {run.path} failed: {listed}", stacklevel=2)
    return run


def load_run(path: str | Path) -> Run:
    """A run folder (one with a `results.jsonl`); `RunDirError` when it is not one. A run still
    being written (another process holds its lock) is read, with a warning that says so."""
    import warnings

    from dstbench.results.run_files import require_results, still_being_written

    (run_dir,) = require_results([path])
    writing = still_being_written(run_dir)
    if writing:
        warnings.warn(f"{writing}: what it holds may still change", stacklevel=2)
    return Run(run_dir)


def compare(
    baseline: str | Path | Run,
    current: str | Path | Run,
    *,
    time_threshold: float = 10.0,
    memory_threshold: float = 1.0,
    alpha: float = 0.05,
    memory_only: bool = False,
    time_basis: str = "auto",
    strict: bool = False,
    top1_threshold: float = 1.0,
    allow_missing: bool = False,
    accept_machine_shift: bool = False,
    allow_protocol_change: bool = False,
    metrics: tuple[str, ...] | list[str] = (),
) -> Comparison:
    """Gate `current` against `baseline` as `dstbench compare` does (same options, same verdicts):
    time changes significantly beyond +/-`time_threshold` percent at family-wise `alpha` (unchanged
    only when the change's interval lies inside that band), memory changes beyond `memory_threshold`
    percent, top-1 changes significantly beyond +/-`top1_threshold` points (the same rule, over seeds).
    A baseline case missing from `current` fails unless `allow_missing`; dense slower on its own
    times with every case alike (a machine shift) fails unless `accept_machine_shift`; runs timed
    under different protocols raise `CompareInputError` unless `allow_protocol_change` (every time
    verdict then inconclusive). `metrics`: registered trackers' numeric fields judged besides, per case
    in their declared direction (`dstbench.gates.field_compare`). `strict`: a different environment,
    or an inconclusive case, does not pass."""
    from dstbench.gates.compare import compare_runs
    from dstbench.gates.sides import CompareInputError, check_thresholds, load_side

    check_thresholds(time_threshold, memory_threshold, top1_threshold, alpha)
    if time_basis not in ("auto", "relative", "absolute"):
        raise CompareInputError(f"time_basis must be auto, relative or absolute, not {time_basis!r}")
    sides = [load_side(side.path if isinstance(side, Run) else side) for side in (baseline, current)]
    result = compare_runs(
        *sides, time_threshold=time_threshold, memory_threshold=memory_threshold, alpha=alpha,
        memory_only=memory_only, time_basis=time_basis, top1_threshold=top1_threshold, allow_missing=allow_missing,
        accept_machine_shift=accept_machine_shift, allow_protocol_change=allow_protocol_change, metrics=tuple(metrics),
    )
    return Comparison(result, strict=strict)
