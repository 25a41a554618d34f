"""Where a result row belongs when a figure pairs it with another: its sweep point and, in a run of
several seeds, its seed (a case is compared with its reference, dense and small_dense of the same
point and seed), and the seed a run folder's suite names first (what a line written before lines
named their seed ran with). Pure pandas and YAML: readers of any layer above use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dstbench.results.run_files import stored_suite
from dstbench.suite.cases import point_tag, seed_tag


def point_of(row: pd.Series | dict[str, Any]) -> str:
    """The sweep point a row ran at, as case ids name it (`embed_dim=192,num_heads=3`); "" without one."""
    sweep = row.get("sweep")
    return point_tag(sweep) if isinstance(sweep, dict) else ""


def frame_points(frame: pd.DataFrame) -> pd.Series:
    """Each row's sweep point (`point_of`), aligned with `frame`."""
    if "sweep" not in frame:
        return pd.Series("", index=frame.index, dtype=object)
    return pd.Series([point_tag(s) if isinstance(s, dict) else "" for s in frame["sweep"]], index=frame.index, dtype=object)


def _seeded(frame: pd.DataFrame) -> bool:
    return "seed" in frame and frame["seed"].dropna().nunique() > 1


def frame_replicates(frame: pd.DataFrame) -> pd.Series:
    """Each row's sweep point and, where `frame` holds several seeds, its seed (`rigl`'s
    `embed_dim=192 seed=1`): what a figure pairs a case within (its reference, dense, small_dense
    are looked for at the same point and seed), aligned with `frame`."""
    points = frame_points(frame)
    if not _seeded(frame):
        return points
    return points + pd.Series([seed_tag(int(s)) if pd.notna(s) else "" for s in frame["seed"]], index=frame.index, dtype=object)


def same_point(frame: pd.DataFrame, row: pd.Series | dict[str, Any]) -> pd.DataFrame:
    """The rows of `frame` at `row`'s sweep point and seed (`frame_replicates`): where a figure
    pairs a case with another (its reference, dense, small_dense), the other is looked for there."""
    replicates = frame_replicates(frame)
    if not len(frame) or replicates.nunique() <= 1:
        return frame
    seed = row.get("seed")
    own = point_of(row) + (seed_tag(int(seed)) if _seeded(frame) and seed is not None and pd.notna(seed) else "")
    return frame[replicates == own]


def stored_seed(run_dir: str | Path) -> int | None:
    """The seed a run folder's suite names first (`seeds`' first, else `seed`), read without
    validation; None when its suite.yaml is unreadable."""
    suite = stored_suite(run_dir)
    seeds, seed = suite.get("seeds"), suite.get("seed")
    if isinstance(seeds, list) and seeds and isinstance(seeds[0], int):
        return seeds[0]
    return seed if isinstance(seed, int) else None
