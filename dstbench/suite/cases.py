"""A case: one method at one density (dense runs once, at 1.0) at one point of the suite's sweep,
and how cases are named.

Light on purpose (no schema, no torch): compare and export name cases without validating a suite.
A suite expands into its cases in `dstbench.suite.plan.expand_cases`; its sweep into points in
`dstbench.suite.sweep`. A case of a sweep names its point in its id, `rigl@0.1[embed_dim=192,num_heads=3]`
(`point_tag`); without a sweep ids are as they always were, `rigl@0.1`.

A suite with `seeds:` runs each case once per seed: the case id stays the same and the seed is a
field of its own (`Case.seed`, a line's `seed`). What tells such runs apart in a run folder, its
groups and its files is the case's *key*, `rigl@0.1 seed=1` (`CaseKey`); without `seeds:` the key
is the case id.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable


def density_text(density: float) -> str:
    """A density exactly as it is: the shortest text that reads back as the same float, without a
    trailing ".0" (0.1 -> "0.1", 1.0 -> "1", 0.5000001 -> "0.5000001"), so that distinct densities
    never share a case id (`:g` printed 0.5 and 0.5000001 both as "0.5")."""
    text = repr(float(density))
    return text[:-2] if text.endswith(".0") else text


# Characters a point's text may not hold: group ids split at "|" and "#" (`dstbench.suite.groups`),
# and the brackets delimit the point in a case id.
POINT_RESERVED = "|#[]"


def value_text(value: Any) -> str:
    """A swept value as a case id shows it: numbers as `density_text` writes them, booleans and null
    as YAML does, mappings and lists in flow style (`{mode:max-autotune}`), keys sorted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return density_text(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{value_text(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    return str(value)


def short_keys(keys: list[str]) -> dict[str, str]:
    """Each dotted key as a point names it: its last part where no other key ends the same way
    (`model.embed_dim` -> `embed_dim`), else the whole key."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: tail if last.count(tail) == 1 else key for key, tail in zip(keys, last)}


def point_tag(sweep: dict[str, Any] | None) -> str:
    """The text naming a sweep point, `embed_dim=192,num_heads=3` (keys in the sweep's order); ""
    for no point (a suite without a sweep, a line written before sweeps existed)."""
    if not sweep or not isinstance(sweep, dict):
        return ""
    names = short_keys([str(k) for k in sweep])
    return ",".join(f"{names[str(key)]}={value_text(value)}" for key, value in sweep.items())


def case_id(method: str, density: float, sweep: dict[str, Any] | None = None) -> str:
    """How a case is named everywhere (result lines, gates, reports): `label@density`, e.g. `rigl@0.1`,
    and at a sweep point `label@density[point]`, e.g. `rigl@0.1[embed_dim=192,num_heads=3]`."""
    tag = point_tag(sweep)
    return f"{method}@{density_text(density)}" + (f"[{tag}]" if tag else "")


def line_case_id(line: Any) -> str:
    """The case id of a result line (a mapping or a row) from its method, density and sweep point."""
    sweep = line.get("sweep")
    return case_id(str(line.get("method")), float(line.get("density") or 0.0), sweep if isinstance(sweep, dict) else None)


def seed_tag(seed: int | None) -> str:
    """How a key names a seed, " seed=1"; "" for a case of a suite without `seeds:`."""
    return "" if seed is None else f" seed={int(seed)}"


class CaseKey(str):
    """What tells a case's runs apart within a run folder: its case id, with its seed where the
    suite lists `seeds:` (`rigl@0.1 seed=1`; without `seeds:` the case id alone).

    A `str` whose text is the key's one written form, because that text is what run.json's
    `selected`, group ids, checkpoint and progress file names and frames hold; its parts are
    `case_id` and `seed`, and `parse` reads them back from the text. Across runs `compare` keys a
    line by a CaseKey beside its suite hash (`dstbench.gates.sides.SideKey`).
    """

    case_id: str
    seed: int | None

    def __new__(cls, case_id_: str, seed: int | None = None) -> "CaseKey":
        key = super().__new__(cls, str(case_id_) + seed_tag(seed))
        key.case_id = str(case_id_)
        key.seed = None if seed is None else int(seed)
        return key

    def __getnewargs__(self) -> tuple[str, int | None]:  # pickles (and copies) by its parts, not its text
        return (self.case_id, self.seed)

    def __repr__(self) -> str:
        return f"CaseKey({self.case_id!r}, {self.seed!r})"

    @classmethod
    def parse(cls, text: str) -> "CaseKey":
        """The key a text names (`str(key)` read back): `rigl@0.1 seed=1` -> ("rigl@0.1", 1)."""
        head, sep, tail = str(text).rpartition(SEED_SEPARATOR)
        if sep and tail.lstrip("-").isdigit():
            return cls(head, int(tail))
        return cls(str(text))

    def unseeded(self) -> "CaseKey":
        """The key without its seed: the case whatever seed it ran with."""
        return CaseKey(self.case_id)


SEED_SEPARATOR = " seed="


def line_key(line: Any, seeded: bool = True, unseeded_as: int | None = None) -> CaseKey:
    """The key of a result line (a mapping or a row): its case id, with its `seed` where `seeded`
    (a reader of a suite without `seeds:` passes False); a line without a seed (written before
    lines named theirs) counts as `unseeded_as`, its run's first seed."""
    seed = line.get("seed")
    seed = int(seed) if seed is not None else unseeded_as
    return CaseKey(str(line.get("case_id") or line_case_id(line)), seed if seeded else None)


def line_keys(lines: Iterable[Any], seeded: bool | None = None) -> list[CaseKey]:
    """Each line's key (`line_key`), in order: with its seed where `seeded`, by default where the
    lines hold more than one seed (a one-seed run's cases are named by their ids alone)."""
    lines = list(lines)
    if seeded is None:
        seeded = len({line.get("seed") for line in lines}) > 1
    return [line_key(line, seeded) for line in lines]


@dataclasses.dataclass(frozen=True)
class Case:
    method: str  # the label results are keyed by (the method's name unless the suite gives one)
    method_name: str  # the registered method
    kind: str
    density: float
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The sweep point the case runs at: each swept dotted key and its value; None without a sweep.
    sweep: dict[str, Any] | None = None
    # The seed this run of the case trains with where the suite lists `seeds:`; None: the suite's `seed`.
    seed: int | None = None
    # Whether it runs the speed segments (False: a later seed of a `mode: both` suite without
    # `timing.per_seed`, which trains for accuracy alone).
    timed: bool = True

    @property
    def case_id(self) -> str:
        return case_id(self.method, self.density, self.sweep)

    @property
    def key(self) -> CaseKey:
        """The case id, with the seed where the suite lists `seeds:`."""
        return CaseKey(self.case_id, self.seed)

    def run_seed(self, suite_seed: int) -> int:
        """The seed this case trains with: its own, else the suite's."""
        return suite_seed if self.seed is None else self.seed

    def mode(self, suite_mode: str) -> str:
        """What this case runs: the suite's mode, less the segments of an untimed seed."""
        return "accuracy" if not self.timed and suite_mode == "both" else suite_mode

    @property
    def point(self) -> str:
        """The point's text (`point_tag`); "" without a sweep."""
        return point_tag(self.sweep)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Case":
        return cls(**data)

    def to_record(self) -> dict[str, Any]:
        """The case as run.json's `cases` records it: its id, label, registered method, kind and
        density, and its sweep point and seed where it has them (its parameters are in suite.yaml)."""
        point = {"sweep": self.sweep} if self.sweep is not None else {}
        seed = {"seed": self.seed} if self.seed is not None else {}
        return {"case_id": self.case_id, "method": self.method, "method_name": self.method_name, "kind": self.kind,
                "density": self.density, **point, **seed}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> "Case":
        """A case from its run.json record (`to_record`; a record from before `method_name` was
        written names the label alone). Raises KeyError, TypeError or ValueError on a damaged one."""
        if not isinstance(data, dict):
            raise TypeError(f"a case record is a mapping, not {type(data).__name__}")
        sweep = data.get("sweep")
        return cls(
            str(data["method"]), str(data.get("method_name") or data["method"]), str(data["kind"]), float(data["density"]),
            sweep=sweep if isinstance(sweep, dict) else None, seed=int(data["seed"]) if data.get("seed") is not None else None,
        )
