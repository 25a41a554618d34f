"""A suite's sweep: `sweep:` maps dotted suite keys to lists of values, and the suite runs at every
point, all in one run folder.

    sweep:
      model.embed_dim: [192, 384, 768]
      model.num_heads: [3, 6, 12]
    sweep_mode: zip          # product (default): every combination; zip: the i-th value of each list

A point is the suite with each swept key set to the point's value (`point_data`): it is validated
as a suite of its own (`SuiteConfig` does it for every point before anything runs and keeps them,
`SuiteConfig.points`), its cases are the suite's methods at the suite's densities, named with the
point (`dstbench.suite.cases.point_tag`: `rigl@0.1[embed_dim=192,num_heads=3]`), its interleaving
groups hold its own cases only (`dstbench.suite.groups`), and its result lines carry its values in
`sweep` and its own suite hash (what `compare` pairs cases by).

What a sweep may not change (`FIXED_KEYS`): what the cases are (methods, densities, reference),
what judges them (expect), how they are launched (launcher, plugins) and the suite's own name;
and every point must measure a different setup (points that differ only in how samples are drawn,
`timing.interleave` say, would share a suite hash and so their cases could not be told apart).

Pure data here (no schema, no torch), so the schema's validators can use it.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from dstbench.suite.cases import POINT_RESERVED, point_tag

MODES = ("product", "zip")
# Top-level suite keys a sweep may not set: what the cases are and how they are judged and launched.
FIXED_KEYS = ("name", "description", "sweep", "sweep_mode", "methods", "densities", "reference", "expect", "plugins", "launcher")


def sweep_values(sweep: dict[str, list[Any]], mode: str = "product") -> list[dict[str, Any]]:
    """The points of a sweep, in order, each a mapping of every swept key to its value: the
    cartesian product of the lists (the last key varies fastest), or with `zip` their i-th values
    together. Empty without a sweep."""
    if not sweep:
        return []
    keys = list(sweep)
    combos = zip(*sweep.values()) if mode == "zip" else itertools.product(*sweep.values())
    return [dict(zip(keys, combo)) for combo in combos]


def sweep_problems(sweep: dict[str, Any], mode: str) -> list[str]:
    """Why a sweep's shape is unusable (before any point is built): a key that is not dotted suite
    text or names a fixed key, a value that is not a non-empty list, zipped lists of unequal length."""
    problems = []
    for key, values in sweep.items():
        parts = str(key).split(".")
        if any(not part for part in parts):
            problems.append(f"{key!r}: not a dotted suite key such as model.embed_dim")
        elif parts[0] in FIXED_KEYS:
            problems.append(f"{key}: a sweep may not set {parts[0]} (fixed keys: {', '.join(FIXED_KEYS)})")
        if not isinstance(values, list) or not values:
            problems.append(f"{key}: needs a non-empty list of values")
        elif any(a == b and type(a) is type(b) for a, b in itertools.combinations(values, 2)):
            problems.append(f"{key}: a value is listed twice")
    lengths = {len(v) for v in sweep.values() if isinstance(v, list)}
    if mode == "zip" and len(lengths) > 1:
        listed = ", ".join(f"{k} {len(v)}" for k, v in sweep.items() if isinstance(v, list))
        problems.append(f"sweep_mode zip pairs lists of equal length; these have {listed}")
    return problems


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `model.embed_dim` in a suite mapping, creating mappings on the way (a value that is not
    a mapping on the way is replaced: validation then reports what the point made of it)."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = copy.deepcopy(value)


def point_data(suite_data: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The suite mapping of one point: `suite_data` without its sweep, each swept key set."""
    data = {k: copy.deepcopy(v) for k, v in suite_data.items() if k not in ("sweep", "sweep_mode")}
    for key, value in values.items():
        set_dotted(data, key, value)
    return data


def tag_problems(points: list[dict[str, Any]]) -> list[str]:
    """Points whose names would clash or break a case id: two with the same text (1 and 1.0), or a
    value whose text holds one of `POINT_RESERVED`."""
    problems, seen = [], set()
    for values in points:
        tag = point_tag(values)
        if any(ch in tag for ch in POINT_RESERVED):
            problems.append(f"point {tag}: a value's text holds one of {' '.join(POINT_RESERVED)}, which case ids reserve")
        elif tag in seen:
            problems.append(f"point {tag}: listed twice (values that read the same, e.g. 1 and 1.0)")
        seen.add(tag)
    return problems
