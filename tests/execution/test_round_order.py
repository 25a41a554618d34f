"""The order a group's cases take in each interleaved round: what each `timing.round_order` balances."""

from __future__ import annotations

from collections import Counter

import pytest

from dstbench.execution.rounds import round_order, williams_rows


@pytest.mark.parametrize("cases", [2, 3, 4, 5, 6, 7])
def test_the_williams_order_balances_carry_over_and_position(cases: int) -> None:
    block = cases if cases % 2 == 0 else 2 * cases
    rows = [round_order(cases, r, "williams", seed=0) for r in range(block)]
    assert rows == williams_rows(cases) and all(sorted(row) == list(range(cases)) for row in rows)
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(cases - 1))
    pairs = [(a, b) for a in range(cases) for b in range(cases) if a != b]
    assert {follows[p] for p in pairs} == {1 if cases % 2 == 0 else 2}  # every case after every other, equally
    positions = Counter((row[i], i) for row in rows for i in range(cases))
    assert len({positions[(c, i)] for c in range(cases) for i in range(cases)}) == 1  # every place, equally
    assert round_order(cases, block, "williams", seed=0) == rows[0]  # the next block repeats the design


def test_rotation_balances_positions_but_not_who_follows_whom() -> None:
    rows = [round_order(3, r, "rotate", seed=0) for r in range(3)]
    assert rows == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(2))
    assert follows[(0, 1)] == 2 and follows[(1, 0)] == 0  # 1 always after 0
    assert round_order(3, 5, "fixed", seed=0) == [0, 1, 2]
    assert sorted(round_order(5, 1, "shuffle", seed=7)) == list(range(5))
    assert round_order(1, 3, "williams", seed=0) == [0] and round_order(0, 0, "williams", seed=0) == []
