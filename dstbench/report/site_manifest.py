"""What a published site holds that `dstbench publish` wrote: `SITE/.dstbench-site.json`.

publish merges runs into a site and never deletes or replaces a file it did not write. The
manifest lists the site pages it wrote and, per run folder under `SITE/runs/`, where the run came
from and the files it copied there. A run published again from the same folder replaces only those
files; a run from elsewhere with the same name gets a suffix; a run folder under `SITE/runs/` that
is not in the manifest (put there by hand, or by someone else) makes publish refuse the site.

A site published before the manifest existed is adopted when its pages carry dstbench's
`<meta name="generator">`: those pages and the run folders whose page does are taken as its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from dstbench.results.run_folder import RunFolder
from dstbench.util.files import is_run_folder, is_within, read_regular_text, write_atomic

MANIFEST_FILE = ".dstbench-site.json"
SITE_PAGES = ("index.html", "history.html", ".nojekyll")
GENERATOR_MARK = '<meta name="generator" content="dstbench'


class SiteError(Exception):
    """A site folder publish may not write into (exit code 2); the message says why."""


@dataclasses.dataclass
class PublishedRun:
    source: str  # the run folder it was copied from, resolved
    files: list[str]  # paths relative to SITE/runs/NAME that publish wrote


@dataclasses.dataclass
class SiteManifest:
    pages: list[str] = dataclasses.field(default_factory=list)
    runs: dict[str, PublishedRun] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        runs = {name: dataclasses.asdict(run) for name, run in sorted(self.runs.items())}
        return json.dumps({"format": 1, "pages": sorted(self.pages), "runs": runs}, indent=2) + "\n"

    def save(self, site: Path) -> None:
        write_atomic(site / MANIFEST_FILE, self.to_json())

    def name_for(self, source: Path, runs_root: Path, taken: set[str], base: str) -> str:
        """The folder name of `source` in the site: the one it was published under before, else
        `base`, or `base-2`, `-3`, ... when the name is taken (by another run, or by anything on
        disk publish did not write)."""
        real = os.path.realpath(source)
        for name, run in self.runs.items():
            if name not in taken and (run.source == real or not run.source and same_run(runs_root / name, source)):
                return name
        suffix, name = 1, base
        while name in self.runs or name in taken or os.path.lexists(runs_root / name):
            suffix += 1
            name = f"{base}-{suffix}"
        return name


def _run_identity(folder: Path) -> tuple[str, ...] | None:
    """(run id, start time, suite hash) from run.json; None without a start time to tell it by."""
    meta = RunFolder.open(folder).meta
    if "created" not in meta:
        return None
    return tuple(str(meta.get(key) or "") for key in ("run_id", "created", "suite_hash"))


def same_run(published: Path, source: Path) -> bool:
    """Whether an adopted site folder (no recorded source) holds the run at `source`: the same
    run id, start time and suite hash in both run.json files."""
    identity = _run_identity(published)
    return identity is not None and identity == _run_identity(source)


def _generated(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return GENERATOR_MARK in handle.read(4096)
    except OSError:
        return False


def _regular_files(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
    )


def _adopt(site: Path) -> SiteManifest:
    """The manifest of a site published before manifests: the pages and run folders dstbench made."""
    manifest = SiteManifest()
    manifest.pages = [page for page in SITE_PAGES if (site / page).is_file() and (page == ".nojekyll" or _generated(site / page))]
    for folder in sorted((site / "runs").glob("*/")) if (site / "runs").is_dir() else []:
        if not folder.is_symlink() and _generated(folder / "index.html"):
            manifest.runs[folder.name] = PublishedRun("", _regular_files(folder))
    return manifest


def _inside(name: str, parts: int | None = None) -> bool:
    """Whether a name from the manifest stays inside its folder: relative, no `..`, no empty or `.`
    part (and at most `parts` parts). The manifest is input: a served site's folder is often shared."""
    pieces = name.replace("\\", "/").split("/")
    return (bool(name) and not os.path.isabs(name) and all(p not in ("", ".", "..") for p in pieces)
            and (parts is None or len(pieces) <= parts))


def _parse(path: Path) -> SiteManifest:
    try:
        data = json.loads(read_regular_text(path))  # a FIFO there is refused, not waited on
        pages = [str(p) for p in data["pages"]]
        runs = {str(name): PublishedRun(str(run["source"]), [str(f) for f in run["files"]]) for name, run in data["runs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise SiteError(f"{path}: unreadable site manifest ({type(exc).__name__}: {exc}); restore it or publish to a new folder") from None
    outside = [p for p in pages if p not in SITE_PAGES] + [f"runs/{n}" for n in runs if not _inside(n, parts=1)]
    outside += [f"runs/{n}/{f}" for n, run in runs.items() for f in run.files if not _inside(f)]
    if outside:
        raise SiteError(f"{path}: the site manifest names files outside the site or its pages ({', '.join(outside[:3])}); "
                        "publish never deletes them: restore the manifest or publish to a new folder")
    return SiteManifest(pages, runs)


def load_manifest(site: Path) -> SiteManifest:
    """The site's manifest (adopted for an older dstbench site; empty for a new folder), checked:
    `SiteError` when the site holds a page or a run folder publish did not write."""
    path = site / MANIFEST_FILE
    manifest = _parse(path) if path.exists() else _adopt(site)
    foreign_pages = [p for p in SITE_PAGES if os.path.lexists(site / p) and p not in manifest.pages]
    if foreign_pages:
        raise SiteError(
            f"--site: {site} holds {', '.join(foreign_pages)} that dstbench publish did not write; "
            "publish into an empty folder or a site publish made"
        )
    runs_root = site / "runs"
    if os.path.islink(runs_root):
        raise SiteError(f"--site: {runs_root} is a symbolic link; publish never writes through one")
    folders = sorted(runs_root.iterdir()) if runs_root.is_dir() else []
    foreign_runs = [
        str(folder) for folder in folders
        if folder.name not in manifest.runs and is_run_folder(folder)
    ]
    if foreign_runs:
        raise SiteError(
            f"--site: {site} holds run folders dstbench publish did not put there ({', '.join(foreign_runs[:5])}); "
            "move them out, or publish to another folder"
        )
    return manifest


def remove_published(folder: Path, run: PublishedRun | None) -> None:
    """Delete the files publish wrote into `folder` before (before it copies a run there again);
    nothing else in the folder is touched, and nothing outside it (a name whose resolved path leaves
    the folder, through `..` or a link on the way, is skipped)."""
    for name in run.files if run is not None else []:
        path = folder / name
        if _inside(name) and is_within(path, folder) and path.is_file() and not path.is_symlink():
            path.unlink()
