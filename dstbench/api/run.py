"""`Run`: one run folder, read from Python (`dstbench.load_run`, `dstbench.run_suite`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from dstbench.gates.run_verdict import RunVerdict
    from dstbench.results.run_folder import RunFolder
    from dstbench.suite.schema import SuiteConfig

# What `Run.frame()` shows by default, in this order, before the trackers' fields (`frame_columns`;
# `all_columns=True`: every line field and derived figure). Columns a run lacks (no accuracy, no
# sweep) are left out.
FRAME_COLUMNS = (
    "case_id", "method", "method_name", "kind", "execution", "density", "density_achieved", "density_off_target",
    "sweep", "seed", "seeds", "failed_seeds", "status", "error", "median_ms", "iqr_ms", "ms_per_step", "images_per_s", "reference", "speedup",
    "speedup_ci_low", "speedup_ci_high", "speedup_covers", "speedup_vs_dense", "speedup_vs_dense_ci_low",
    "speedup_vs_dense_ci_high", "flop_limit", "flop_fraction", "shape_limit", "memory_basis", "memory_bytes",
    "memory_reduction", "state_bytes", "state_ratio", "activation_bytes", "activation_ratio", "peak_memory_bytes",
    "topology_share", "top1", "top1_ci_low", "top1_ci_high", "top1_std", "top1_drop", "top1_drop_ci_low",
    "top1_drop_ci_high", "top1_drop_seeds", "target_top1", "target_basis", "target_reached", "target_seeds", "steps_to_target",
    "eval_period_steps", "updates_to_target", "time_to_target_s", "time_to_target_ci_low", "time_to_target_ci_high",
    "time_to_target_covers", "time_to_target_basis",
    "time_to_target_speedup", "time_to_target_speedup_ci_low", "time_to_target_speedup_ci_high", "time_to_target_speedup_basis",
    "time_to_target_speedup_vs_dense", "time_to_target_speedup_vs_dense_ci_low", "time_to_target_speedup_vs_dense_ci_high",
    "train_time_to_target_s", "noise_level", "contended", "implausible", "run",
)


def frame_columns() -> tuple[str, ...]:
    """`FRAME_COLUMNS`, then every registered tracker's field that fits a cell (a number, a string,
    a flag: `ResultField.scalar`) and is not among them, in the trackers' order: a new tracker's
    figures reach the frame from its own module."""
    from dstbench.measure.trackers.registry import registered_trackers

    listed = set(FRAME_COLUMNS)
    added = [spec.name for tracker in registered_trackers() for spec in tracker.fields if spec.scalar and spec.name not in listed]
    return (*FRAME_COLUMNS, *added)


# `Run.curves()`: the case, then each evaluation's own fields as the curve names them.
CURVE_COLUMNS = ("case_id", "method", "density", "seed", "epoch", "step", "top1", "top5", "test_loss", "train_loss", "lr",
                 "curve_density", "train_time_s", "topology_updates")
SEGMENT_FIELDS = ("segment_ms", "segment_group", "segment_round", "segment_process", "segment_slot", "segment_start_s")
NOISE_SERIES = ("cpu_share", "wait_share", "steal_share", "involuntary_switches", "hand_over_ms")


def failed_cases(lines: list[dict[str, Any]]) -> dict[str, str]:
    """The cases whose latest line is not `ok` (by case id, and by seed where the lines hold several),
    each as "status: error", the error's line that the terminal shows (a traceback's last: the
    exception and its message)."""
    from dstbench.util.text import clip, last_line

    from dstbench.suite.cases import line_keys

    latest = dict(zip(line_keys(lines), lines))  # each seed of a case is its own
    return {
        str(case_id): f"{line.get('status')}: {clip(last_line(line.get('error'), 'no error recorded'), 300)}"
        for case_id, line in latest.items()
        if line.get("status") != "ok"
    }


class RunFailed(RuntimeError):
    """`run_suite` measured nothing: every case of the run failed. `.run` is the run folder (its
    lines keep each error whole), `.failed` each case's status and the line of its error the
    terminal shows."""

    def __init__(self, run: "Run", failed: dict[str, str]) -> None:
        self.run = run
        self.failed = failed
        listed = "; ".join(f"{case_id} ({why})" for case_id, why in failed.items()) or "no case wrote a line"
        super().__init__(f"every case of the run in {run.path} failed: {listed}")


@dataclasses.dataclass(frozen=True)
class Run:
    """A run folder: its result lines as frames, its verdict, its reports. Reading never imports torch."""

    path: Path

    @property
    def meta(self) -> dict[str, Any]:
        """The folder's run.json (what was asked for, the suite hash, interruptions, resumes)."""
        return self.folder().meta

    @property
    def suite(self) -> "SuiteConfig":
        """The suite as the run recorded it (`suite.yaml` in the folder, overrides applied)."""
        return self.folder().suite()

    def folder(self) -> "RunFolder":
        """The folder's reader (`dstbench.results.run_folder.RunFolder.open`: shared while its files
        are unchanged, so each call sees what the folder holds now and reads it once)."""
        from dstbench.results.run_folder import RunFolder

        return RunFolder.open(self.path)

    def lines(self) -> list[dict[str, Any]]:
        """The result lines as written (a later line of the same case replaces an earlier one in
        frames and reports, not here)."""
        return list(self.folder().lines())

    def frame(self, reference: str | None = None, *, all_columns: bool = False, per_seed: bool = False) -> "pd.DataFrame":
        """One row per case: its status, times, speedup against `reference` (default: the suite's)
        and against dense with their 95% intervals, memory and its reduction, the limits, the
        flags (`contended`, `implausible`, `density_off_target`), and top-1 over the seeds the
        case ran with (`seeds:`): `seeds` (ok lines pooled), `top1` (their mean), `top1_ci_low`,
        `top1_ci_high` (95% Student-t interval; NaN with one seed), `top1_std`, and `top1_drop`
        (dense's top-1 minus the case's, paired by seed) with its interval; a case is `ok` when
        every seed is (`failed_seeds`); its other figures are its first seed's
        (`dstbench.results.pooling.pool_seeds`). Then every registered tracker's field that fits a
        cell (`frame_columns`; a plugin's once its module is imported: the suite's `plugins:` are,
        where this Python finds them), a row pooled over seeds showing each as its field declares
        (`ResultField.over_seeds`). `per_seed=True`: one row per (case, seed), each figure that
        seed's own, as `dstbench report` computes them (speedups against the same seed's
        reference)."""
        from dstbench.results.pooling import pool_seeds

        folder = self.folder()
        try:
            folder.suite()  # imports the run's plugins, so their trackers' fields are columns
        except Exception:  # noqa: BLE001 - a suite this version cannot read still has its lines
            pass
        derived = folder.frame(reference)
        if derived.empty:
            return derived
        derived = derived.reset_index(drop=True)
        if not per_seed:
            derived = pool_seeds(derived).drop(columns=["seed"], errors="ignore")  # a row is every seed's
        if all_columns:
            return derived
        return derived[[c for c in frame_columns() if c in derived.columns]]

    def ranking(self, density: float, *, alpha: float = 0.05, point: str | None = None) -> "pd.DataFrame":
        """The cases at `density` (and dense) ordered by mean top-1 over their seeds, with a compact
        letter display (`letters`): two cases share a letter exactly when their top-1 difference,
        paired by seed, is not significant (paired t-test, Holm over every pair at that density,
        family-wise `alpha`). `.attrs["pairs"]` lists each pair's difference, 95% interval, p and
        adjusted p (`dstbench.results.ranking`). A run with a sweep ranks one `point` (its text,
        as case ids show it)."""
        from dstbench.results.ranking import rank_cases
        from dstbench.results.replicates import frame_points

        per_seed = self.frame(per_seed=True, all_columns=True)
        if per_seed.empty or "top1" not in per_seed:
            raise ValueError(f"{self.path}: no top-1 to rank (a speed run)")
        points = frame_points(per_seed)
        found = sorted(set(points))
        if point is None and len(found) > 1:
            raise ValueError(f"{self.path} has sweep points {found}: name one (point=...)")
        if point is not None and point not in found:
            raise ValueError(f"{self.path} has no sweep point {point!r} (it has {found})")
        chosen = per_seed[points == (found[0] if point is None else point)]
        return rank_cases(chosen, density, alpha)

    def paired(self, case_a: str, case_b: str, *, level: float = 0.95) -> "pd.DataFrame":
        """`case_a` minus `case_b` (case ids, `rigl@0.1`), paired by seed over the seeds both
        trained, ok: one row per figure (`top1`, `steps_to_target`, `time_to_target_s`) with
        `difference`, its `level` Student-t interval, the two-sided paired t-test's `p` and the
        `seeds` it rests on; the same test `ranking` makes (`dstbench.results.ranking.paired_test`).
        Seconds to target are each seed's steps and updates priced at its case's step time: the
        interval holds the seeds' spread, not the timing's (`frame()`'s speedups to target hold both).
        A seed where either case missed the target is left out of that figure's pairs (`seeds`)."""
        import math

        import pandas as pd

        from dstbench.results.ranking import paired_test

        per_seed = self.frame(per_seed=True, all_columns=True)
        ok = per_seed[per_seed["status"] == "ok"]
        missing = [c for c in (case_a, case_b) if c not in set(ok["case_id"])]
        if missing:
            raise ValueError(f"{self.path}: no ok line of {', '.join(missing)} (cases: {', '.join(sorted(set(per_seed['case_id'])))})")
        rows = []
        for figure in ("top1", "steps_to_target", "time_to_target_s"):
            if figure not in ok:
                continue
            values = [{r.get("seed"): float(r[figure]) for _, r in ok[ok["case_id"] == c].iterrows()
                       if isinstance(r[figure], (int, float)) and math.isfinite(r[figure])} for c in (case_a, case_b)]
            rows.append({"figure": figure, **paired_test(values[0], values[1], level)})
        return pd.DataFrame(rows, columns=["figure", "seeds", "difference", "ci_low", "ci_high", "p"])

    def segments(self) -> "pd.DataFrame":
        """One row per timed segment: `case_id`, `method`, `density`, `seed`, the segment's `ms`, `group`,
        `round`, `process` (which process set timed it), `slot` (its place in the round's order),
        `start_s`, and the noise the segment saw (`cpu_share`, `wait_share`, `steal_share`,
        `involuntary_switches`) and its hand-over wait after it (`hand_over_ms`) where recorded."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        frame = self.folder().loaded()
        for line in ([] if frame.empty else frame.to_dict("records")):
            times = line.get("segment_ms") if isinstance(line.get("segment_ms"), list) else []
            noise = line.get("noise") if isinstance(line.get("noise"), dict) else {}
            for i, ms in enumerate(times):
                row: dict[str, Any] = {"case_id": line["case_id"], "method": line["method"], "density": line["density"],
                                       "seed": line.get("seed"), "segment": i, "ms": ms}
                for field in SEGMENT_FIELDS[1:]:
                    values = line.get(field)
                    row[field.removeprefix("segment_")] = values[i] if isinstance(values, list) and i < len(values) else None
                for series in NOISE_SERIES:
                    values = noise.get(series)
                    row[series] = values[i] if isinstance(values, list) and i < len(values) else None
                rows.append(row)
        columns = ["case_id", "method", "density", "seed", "segment", "ms", "group", "round", "process", "slot", "start_s", *NOISE_SERIES]
        return pd.DataFrame(rows, columns=columns)

    def curves(self) -> "pd.DataFrame":
        """One row per test evaluation of every case and seed (each line's `curve`): `case_id`,
        `method`, `density` (the case's), `seed`, then the evaluation's `epoch`, `step`, `top1`,
        `top5`, `test_loss`, `train_loss`, `lr`, `curve_density` (the model's density when it was
        evaluated: the curve's `density`), `train_time_s` (training seconds so far) and
        `topology_updates` (updates so far; NaN in curves written before they were recorded)."""
        import pandas as pd

        frame = self.folder().loaded()
        rows: list[dict[str, Any]] = []
        for line in ([] if frame.empty else frame.to_dict("records")):
            for point in line.get("curve") if isinstance(line.get("curve"), list) else []:
                if isinstance(point, dict):
                    own = {("curve_density" if k == "density" else k): v for k, v in point.items()}
                    rows.append({"case_id": line["case_id"], "method": line["method"], "density": line["density"],
                                 "seed": line.get("seed"), **own})
        return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))

    def survival(self, by: str = "steps", reference: str | None = None) -> "pd.DataFrame":
        """Per case, the share of its seeds that have reached the top-1 target by each training step
        (`by="steps"`) or estimated training second (`by="seconds"`): a step function, one row per
        point (`case_id`, `method`, `density`, `point`, `x`, `reached`, `seeds`; a seed that failed
        or never reached the target keeps its case below 1: `dstbench.results.survival`)."""
        from dstbench.results.survival import survival_curves

        return survival_curves(self.folder().frame(reference), by)

    def target_sweep(self, reference: str | None = None) -> "pd.DataFrame":
        """Every case timed to each target of the suite's `accuracy.target_sweep` (default: 0.5, 1,
        2 and 5 points below dense's mean final top-1) from the same curves: one row per (target,
        case) with its time to target and speedup to it over its seeds, and its `rank` by time
        there (`dstbench.results.target_sweep`)."""
        from dstbench.results.target_sweep import target_sweep

        return target_sweep(self.folder().frame(reference))

    def check(self, *, allow_incomplete: bool = False) -> "RunVerdict":
        """The verdict `dstbench check` prints: `.passed`, `.exit_code`, `.expectations` (each with
        its verdict and message), `.failed_cases`, `.coverage`, `.foreign_lines`."""
        from dstbench.gates.run_verdict import judge_run

        return judge_run(self.path, allow_incomplete=allow_incomplete)

    def report(
        self, html: str | Path | None = None, markdown: str | Path | None = None, *, reference: str | None = None
    ) -> str:
        """Write the HTML and/or Markdown report (as `dstbench report --html/--markdown`) and return
        the text report: the headline and the tables `dstbench report` prints. An output inside a
        run folder is refused (`ValueError`): reports never write over a run."""
        from dstbench.report.headline import headline_text
        from dstbench.report.html import write_markdown_report, write_report
        from dstbench.report.sections import render_sections
        from dstbench.report.tables import render_text
        from dstbench.util.files import output_file_problem

        runs = [str(self.path)]
        problems = [output_file_problem(str(p), o, runs) for o, p in (("html", html), ("markdown", markdown)) if p]
        if any(problems):
            raise ValueError("; ".join(p for p in problems if p))
        derived = self.folder().frame(reference)
        if html:
            write_report(derived, runs, html)
        if markdown:
            write_markdown_report(derived, runs, markdown)
        return headline_text(derived) + "\n\n" + render_text(render_sections(derived, images=False, terminal_only=True))
