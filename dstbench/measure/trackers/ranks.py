"""Where a distributed case ran: its world size, and each rank's own figures beside the case's.

A rank's line says its world size and, in `env`, its rank, local rank and host; `merge_ranks`
(dstbench.results.merge) makes the case's line, listing in `ranks` every rank's value of each field
declared `per_rank`.
"""

from __future__ import annotations

from typing import Any

from dstbench.measure.trackers.base import LATEST, RankRule, Ranks, ResultField, Tracker


def _world_size(values: list[Any], ranks: Ranks) -> int:
    return ranks.world_size


def _rank_entries(values: list[Any], ranks: Ranks) -> list[dict[str, Any]]:
    return [
        {"rank": line.env.get("rank", i), "local_rank": line.env.get("local_rank"), "host": line.env.get("host"),
         **{name: getattr(line, name) for name in ranks.per_rank}}
        for i, line in enumerate(ranks.lines)
    ]


WORLD_SIZE = RankRule("the job's world size", _world_size)
RANK_ENTRIES = RankRule("each rank's own figures", _rank_entries)


class RankPlacement(Tracker):
    """This rank's place in a distributed job; `write` records it in the rank's line."""

    fields = (
        ResultField("world_size", int, LATEST, WORLD_SIZE, "processes the case ran on", default=1),
        ResultField("ranks", list[dict[str, Any]] | None, LATEST, RANK_ENTRIES,
                    "each rank's rank, local rank, host and per-rank figures", default=None),
    )

    def __init__(self, world_size: int, rank: int, local_rank: int, host: str) -> None:
        self.world_size, self.rank, self.local_rank, self.host = world_size, rank, local_rank, host

    def write(self, line: Any) -> None:
        line.world_size = self.world_size
        line.env.update(rank=self.rank, local_rank=self.local_rank, host=self.host)
