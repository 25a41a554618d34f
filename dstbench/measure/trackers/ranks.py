"""Where a distributed case ran: its world size, and each rank's own figures beside the case's.

A rank's line says its world size and, in `env`, its rank, local rank and host; `merge_ranks`
(dstbench.results.merge) makes the case's line, listing in `ranks` every rank's value of each field
declared `per_rank`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dstbench.measure.trackers.base import LATEST, CaseContext, GroupRule, Joining, RankRule, Ranks, ResultField, Tracker
from dstbench.measure.trackers.registry import register_tracker


def _world_size(values: list[Any], ranks: Ranks) -> int:
    return ranks.world_size


def _rank_entries(values: list[Any], ranks: Ranks) -> list[dict[str, Any]]:
    return [
        {"rank": line.env.get("rank", i), "local_rank": line.env.get("local_rank"), "host": line.env.get("host"),
         **{name: getattr(line, name) for name in ranks.per_rank}}
        for i, line in enumerate(ranks.lines)
    ]


def _join_entries(old: Any, new: Any, joining: Joining) -> Any:
    """A case's rank entries from two jobs (process sets): each rank's samples from both, so the
    case's slowest-rank-per-segment samples stay those of its ranks, and its peaks the larger; the
    rest from the latest."""
    if not old or not new or len(old) != len(new):
        return new or old
    merged = []
    for before, after in zip(old, new):
        entry = dict(after)
        if isinstance(before.get("segment_ms"), list) and isinstance(after.get("segment_ms"), list):
            entry["segment_ms"] = before["segment_ms"] + after["segment_ms"]
            samples = sorted(x for x in entry["segment_ms"] if isinstance(x, (int, float)))
            if samples and "median_ms" in entry:
                entry["median_ms"] = float(np.median(samples))
        for key, value in before.items():  # peaks (bytes) are the larger job's, as the line's are
            if key.endswith("_bytes") and isinstance(value, int) and isinstance(entry.get(key), int):
                entry[key] = max(value, entry[key])
        merged.append(entry)
    return merged


WORLD_SIZE = RankRule("the job's world size", _world_size)
RANK_ENTRIES = RankRule("each rank's own figures", _rank_entries)
ENTRIES_OF_GROUPS = GroupRule("each rank's samples from every job, the rest from the latest", _join_entries)


@register_tracker("ranks")
class RankPlacement(Tracker):
    """This rank's place in a distributed job; `write` records it in the rank's line. Built for
    every case of a distributed job (timed or not); it runs around no work."""

    untimed_cases = True
    fields = (
        ResultField("world_size", int, LATEST, WORLD_SIZE, "processes the case ran on", default=1, unit="processes", report=False),
        ResultField("ranks", list[dict[str, Any]] | None, ENTRIES_OF_GROUPS, RANK_ENTRIES,
                    "each rank's rank, local rank, host and per-rank figures", default=None),
    )

    def __init__(self, world_size: int, rank: int, local_rank: int, host: str) -> None:
        self.world_size, self.rank, self.local_rank, self.host = world_size, rank, local_rank, host

    @classmethod
    def for_case(cls, context: CaseContext) -> "RankPlacement | None":
        import socket

        from dstbench.util import distributed  # torch: imported only in a case's process

        if not distributed.is_distributed():
            return None
        return cls(distributed.world_size(), distributed.rank(), distributed.local_rank(), socket.gethostname())

    def write(self, line: Any) -> None:
        line.world_size = self.world_size
        line.env.update(rank=self.rank, local_rank=self.local_rank, host=self.host)
