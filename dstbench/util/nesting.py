"""How deep a value read from a file may nest. A run folder's JSON and a suite's YAML are a few
levels deep; a hand-made or hostile file of thousands of levels makes every recursive reader
(json, PyYAML's composer, pydantic, pandas, `json.dumps` on a rewrite) raise RecursionError, a
traceback instead of a line naming the file. Readers refuse past `MAX_NESTING`."""

from __future__ import annotations

from typing import Any

MAX_NESTING = 64  # levels of lists and mappings; dstbench writes at most about 6


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """Levels of lists and dicts in `value` (a scalar is 0), counted without recursion and
    stopping once past `limit` (returns limit + 1 then)."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, (list, dict)) else []
    while stack:  # a structure that contains itself (a YAML alias loop) ends here too: it grows deeper
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return limit + 1
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))
    return deepest


def too_deep(value: Any, limit: int = MAX_NESTING) -> str | None:
    """"nested deeper than 64 levels" when `value` is, else None."""
    return f"nested deeper than {limit} levels" if nesting_depth(value, limit) > limit else None
