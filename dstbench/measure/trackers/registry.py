"""The tracker registry: trackers register where they are defined, as methods do.

    @register_tracker("cpu_threads")
    class CpuThreads(Tracker): ...

The built-in trackers register when `dstbench.measure.trackers` is imported; a plugin's (a suite's
`plugins:` module, or any module imported before the run) when its module is. `registered_trackers`
gives them in the order the case session runs them: registration order, moved where a tracker's
`after` says it must follow another. The line class (`dstbench.results.record.line_type`) takes
every registered tracker's fields.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from dstbench.measure.trackers.base import PHASES, Tracker

T = TypeVar("T", bound=type[Tracker])

_REGISTRY: dict[str, type[Tracker]] = {}
# The last order computed, by the registered classes it was computed for: every result line read
# asks for it (`dstbench.results.record.line_type`).
_ORDERED: dict[str, tuple[type[Tracker], ...]] = {}


def register_tracker(name: str) -> Callable[[T], T]:
    """Class decorator that registers a `Tracker` subclass under `name`. Refuses a name taken by
    another class, an unknown phase in `runs`, a field another tracker declares, and a field with no
    default (a line of a case the tracker did not run in still has it)."""

    def decorator(cls: T) -> T:
        previous = _REGISTRY.get(name)
        if previous is not None and previous.__qualname__ != cls.__qualname__:
            raise ValueError(f"tracker {name!r} is already registered by {previous.__module__}")
        unknown = sorted(set(cls.runs) - set(PHASES))
        if unknown:
            raise ValueError(f"tracker {name!r}: unknown phase(s) {', '.join(unknown)} in runs (phases: {', '.join(PHASES)})")
        taken = {spec.name: other for other_name, other in _REGISTRY.items() if other_name != name for spec in other.fields}
        for spec in cls.fields:
            if spec.name in taken:
                raise ValueError(f"tracker {name!r}: field {spec.name!r} is already declared by tracker {taken[spec.name].name!r}")
            if not spec.has_default:
                raise ValueError(f"tracker {name!r}: field {spec.name!r} needs a default (default= or default_factory=)")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def registered_trackers() -> tuple[type[Tracker], ...]:
    """Every registered tracker, each after those its `after` names (registration order otherwise).
    Raises ValueError for an `after` naming no registered tracker, or a cycle."""
    key = tuple(_REGISTRY.values())
    if _ORDERED.get("key") == key:
        return _ORDERED["order"]
    pending = list(key)
    for cls in pending:
        missing = [name for name in cls.after if name not in _REGISTRY]
        if missing:
            raise ValueError(f"tracker {cls.name!r} must follow unregistered tracker(s): {', '.join(missing)}")
    ordered: list[type[Tracker]] = []
    placed: set[str] = set()
    while pending:
        ready = next((cls for cls in pending if set(cls.after) <= placed), None)
        if ready is None:
            raise ValueError(f"trackers that follow each other in a cycle: {', '.join(cls.name for cls in pending)}")
        ordered.append(ready)
        placed.add(ready.name)
        pending.remove(ready)
    _ORDERED.update(key=key, order=tuple(ordered))
    return _ORDERED["order"]


def tracker_class(name: str) -> type[Tracker]:
    """The tracker registered under `name` (KeyError names those there are)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no tracker {name!r} (registered: {', '.join(_REGISTRY)})") from None
