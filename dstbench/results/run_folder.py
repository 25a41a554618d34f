"""A run folder read back: `RunFolder` reads its run.json, its suite and its result lines, and
derives its frame once per reference (`dstbench.results.derive`), so a command that prints a
summary and writes a report from one run computes its figures once; `choose_reference` picks the
reference every command compares against, the same way. The files at the lowest level, and the
writer's lock: `dstbench.results.run_files`.

Nothing here imports torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pandas as pd

from dstbench.results.derive import derive, load_frame
from dstbench.results.record import ResultsRead, iter_results, read_results
from dstbench.results.replicates import stored_seed
from dstbench.results.run_files import load_run_meta, recorded_target, run_reference, stored_suite, update_run_meta
from dstbench.util.files import RESULTS_FILE, RUN_FILE, SUITE_FILE

if TYPE_CHECKING:
    from dstbench.suite.schema import SuiteConfig

_OPEN: dict[tuple[str, tuple[tuple[int, int], ...]], "RunFolder"] = {}


def choose_reference(frame: pd.DataFrame, run_dirs: Iterable[str | Path], requested: str | None) -> tuple[str | None, str]:
    """The reference to compare against and, when none can be used, why: `requested` where it is
    among the methods, else the runs' suite's `reference:`, else dense (said on stderr, never
    silent: a damaged suite.yaml must not change what the figures are relative to)."""
    run_dirs = [str(d) for d in run_dirs]
    methods = list(pd.unique(frame["method"]))
    if requested:
        return (requested, "") if requested in methods else (None, f"--reference {requested!r} is not among the methods ({', '.join(map(str, methods))})")
    found = [r for r in (run_reference(d) for d in run_dirs) if r]
    if found and found[0] in methods:
        if len(set(found)) > 1:
            print(f"runs name different references ({', '.join(sorted(set(found)))}); comparing against {found[0]}", file=sys.stderr)
        return found[0], ""
    fallback = "dense" if "dense" in methods else str(methods[0])
    unread = [str(Path(d) / SUITE_FILE) for d in run_dirs if (Path(d) / SUITE_FILE).exists() and run_reference(d) is None]
    if unread or found:
        why = f"no reference could be read from {', '.join(unread)}" if unread else f"the suite's reference {found[0]!r} has no line"
        print(f"{why}; comparing against {fallback} (--reference chooses another)", file=sys.stderr)
    return fallback, ""


_UNREAD = object()
OPEN_LIMIT = 8  # readers `RunFolder.open` keeps, the least recently opened dropped first


def _stamp(path: Path) -> tuple[tuple[int, int], ...]:
    """Size and modification time of the folder's files (zeros for a missing one)."""
    stamps = []
    for name in (RESULTS_FILE, RUN_FILE, SUITE_FILE):
        try:
            stat = (path / name).stat()
            stamps.append((stat.st_size, stat.st_mtime_ns))
        except OSError:
            stamps.append((0, 0))
    return tuple(stamps)


class RunFolder:
    """One run folder, read back: `meta` (run.json, typed), `suite_data()` (its suite.yaml as plain
    data) and `suite()` (validated), `lines()` (through the one rule for result lines), `loaded()`
    (one row per line, as `load_frame`) and `frame(reference)` (derived). Each is read or computed
    once per instance; `RunFolder.open(path)` shares one instance per folder while its files are
    unchanged, so the parts of a command (a summary, its expectations, a report) read it once."""

    @classmethod
    def open(cls, path: str | Path) -> "RunFolder":
        """The folder's reader, shared within this process while its files stay as they are (their
        size and modification time): a command that summarises a run, judges its expectations and
        writes its report reads and derives it once. A folder that changed gets a new reader."""
        key = (str(Path(path).absolute()), _stamp(Path(path)))
        folder = _OPEN.pop(key, None) or cls(path)
        _OPEN[key] = folder  # most recent last
        while len(_OPEN) > OPEN_LIMIT:
            _OPEN.pop(next(iter(_OPEN)))
        return folder

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._meta: dict[str, Any] | None = None
        self._lines: list[dict[str, Any]] | None = None
        self._loaded: pd.DataFrame | None = None
        self._derived: dict[str, pd.DataFrame] = {}
        self._target: object = _UNREAD
        self._suite: "SuiteConfig | None" = None

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def meta(self) -> dict[str, Any]:
        """run.json, typed (`load_run_meta`): {} when missing or unreadable."""
        if self._meta is None:
            self._meta = load_run_meta(self.path)
        return self._meta

    def checked_meta(self) -> dict[str, Any]:
        """run.json as `meta`, but a missing, unreadable or damaged one is a `RunDirError` (a gate
        that judges the run must not judge it without its record)."""
        self._meta = load_run_meta(self.path, required=True)
        return self._meta

    def results_read(self, hashes: tuple[str, ...] = ()) -> ResultsRead:
        """Every line sorted into usable ones and what was left out, and why
        (`dstbench.results.record.read_results`; `hashes` for a folder without run.json)."""
        return read_results(self.path, hashes)

    def update_meta(self, change: Callable[[dict[str, Any]], None], *, required: bool = True) -> dict[str, Any]:
        """run.json edited by `change` and written back (`dstbench.results.run_files.update_run_meta`,
        the one way it changes: hold the folder's `RunLock`)."""
        self._meta = update_run_meta(self.path, change, required=required)
        return self._meta

    def suite_data(self) -> dict[str, Any]:
        """suite.yaml as plain data, unvalidated (no torch, no data); {} when unreadable."""
        return stored_suite(self.path)

    def first_seed(self) -> int | None:
        """The seed the stored suite names first (what a line written before lines named their
        seed ran with); None when unreadable."""
        return stored_seed(self.path)

    def target_top1(self) -> float | None:
        """The suite's `accuracy.target_top1` as validated (`run_files.recorded_target`), read once."""
        if self._target is _UNREAD:
            self._target = recorded_target(self.path)
        return self._target  # type: ignore[return-value]

    def suite(self) -> "SuiteConfig":
        """The suite as the run recorded it, validated (`dstbench.suite.loading.load_suite`; its
        plugins imported where they are found), read once (a suite is frozen)."""
        from dstbench.suite.loading import load_suite

        if self._suite is None:
            self._suite = load_suite(self.path / SUITE_FILE)
        return self._suite

    @property
    def reference(self) -> str | None:
        """The `reference:` of the suite the run was made from."""
        return run_reference(self.path)

    def lines(self) -> list[dict[str, Any]]:
        """The result lines as `dstbench.results.record.iter_results` reads them."""
        if self._lines is None:
            self._lines = list(iter_results(self.path))
        return self._lines

    def loaded(self) -> pd.DataFrame:
        """One row per line (`dstbench.results.derive.load_frame`), before anything is derived."""
        if self._loaded is None:
            self._loaded = load_frame([self.path])
        return self._loaded

    def choose_reference(self, requested: str | None = None) -> tuple[str | None, str]:
        return choose_reference(self.loaded(), [self.path], requested)

    def frame(self, reference: str | None = None) -> pd.DataFrame:
        """The derived frame against `reference` (default: the suite's, as `choose_reference`
        picks it), computed once per reference; empty without lines. `ValueError` when a requested
        reference is not among the methods."""
        loaded = self.loaded()
        if loaded.empty:
            return loaded
        chosen, problem = self.choose_reference(reference)
        if chosen is None:
            raise ValueError(problem)
        return self.derived(chosen)

    def derived(self, reference: str) -> pd.DataFrame:
        """The lines derived against exactly `reference` (an expectation's `vs`, whatever the run's
        reference), computed once per reference. Read it, never change it: it is shared."""
        if reference not in self._derived:
            self._derived[reference] = derive(self.loaded(), reference, {str(self.path): self.target_top1()})
        return self._derived[reference]


def derived_frame(folders: list[RunFolder], reference: str | None = None) -> pd.DataFrame:
    """The derived frame of one run (its `RunFolder.frame`) or of several side by side (their lines
    loaded together, one reference chosen over them); `ValueError` as `RunFolder.frame`."""
    if len(folders) == 1:
        return folders[0].frame(reference)
    loaded = load_frame([f.path for f in folders])
    if loaded.empty:
        return loaded
    chosen, problem = choose_reference(loaded, [f.path for f in folders], reference)
    if chosen is None:
        raise ValueError(problem)
    return derive(loaded, chosen, {str(f.path): f.target_top1() for f in folders})
