"""The launcher contract: what the orchestrator (`dstbench.execution.orchestrator`) and the rounds
(`dstbench.execution.rounds`) call on a launcher, and the registry of launchers by name.

A launcher says what it can do in two class attributes, so no caller probes for a method:

- every launcher has `run(task, progress)`: one case alone, start to end;
- `interleaves`: it also has `open(task, progress)`, a live case (`CaseProcess`) that the rounds
  start, time one segment per round beside the other cases of its group, and finish (`inprocess`,
  `subprocess`). One that does not (`torchrun`) has each case of a group run whole, in turn;
- `places_groups`: it also has `run_groups(...)`, placing the groups itself (several at once, or
  as cluster jobs) and yielding each as it ends, in the order they end (`parallel`, `submitit`);
  the others have their groups timed one after another by the rounds;
- `preflight(suite)`: what forbids the run on this host, found before anything is written;
  nothing, unless the launcher says otherwise.

A subclass whose attributes and methods disagree is refused when its class is defined.
`register_launcher(name)` files a launcher class under the name a config's `launcher_name` gives
(`dstbench.execution.launchers.<name>.config`); `dstbench.execution.launchers.factory` imports
every launcher module, so each has registered itself, and builds the one a suite names.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Iterator, Protocol, TypeVar

from dstbench.execution.case_session import SegmentTag
from dstbench.execution.case_setup import CaseTask, Progress
from dstbench.results.record import CaseResult
from dstbench.suite.cases import Case
from dstbench.suite.groups import Group
from dstbench.suite.schema import SuiteConfig


class CaseProcess(Protocol):
    """A live case as an interleaving launcher's `open` hands it out."""

    pid: int | None
    ready: dict[str, Any] | None  # what the case said once warmed up: device_type, segments, memory
    failed: CaseResult | None  # set once the case failed; it then takes no more commands

    def start(self) -> None: ...
    def segment(self, tag: SegmentTag) -> dict[str, Any] | None: ...
    def finish(self) -> CaseResult: ...
    def close(self) -> None: ...


@dataclasses.dataclass
class GroupRun:
    """A group that was timed: its id and its members' results, in the group's order."""

    group: Group
    group_id: str
    results: list[CaseResult]


class Launcher(ABC):
    """Where a suite's cases run (see the module docstring)."""

    name: ClassVar[str] = ""  # set by `register_launcher`
    interleaves: ClassVar[bool] = False  # has `open`
    places_groups: ClassVar[bool] = False  # has `run_groups`

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for flag, method in (("interleaves", "open"), ("places_groups", "run_groups")):
            declared, defined = getattr(cls, flag), getattr(cls, method) is not getattr(Launcher, method)
            if declared != defined:
                has = "does not define" if declared else "defines"
                raise TypeError(f"{cls.__name__}: {flag} is {declared}, but it {has} {method}")

    @classmethod
    def from_config(cls, config: Any) -> "Launcher":
        """The launcher for a suite's `launcher:` config: the config model of this launcher's
        folder (`dstbench.execution.launchers.<name>.config`). By default `cls(config)`."""
        return cls(config)  # type: ignore[call-arg]

    @abstractmethod
    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        """One case alone, start to end."""

    def open(self, task: CaseTask, progress: Progress) -> CaseProcess:
        """A live case for the rounds to interleave; only where `interleaves`."""
        raise NotImplementedError(f"{type(self).__name__} does not interleave cases")

    def run_groups(
        self, groups: list[Group], tasks: dict[str, CaseTask], progress_for: Callable[[Case], Progress], reference: str
    ) -> Iterator[GroupRun]:
        """The groups, placed by the launcher, each yielded as it ends; only where `places_groups`."""
        raise NotImplementedError(f"{type(self).__name__} does not place groups itself")

    def preflight(self, suite: SuiteConfig) -> list[tuple[str, str]]:
        """(key, message) for each thing that forbids the run on this host; empty when it may run."""
        return []


LAUNCHERS: dict[str, type[Launcher]] = {}
L = TypeVar("L", bound=type[Launcher])


def register_launcher(name: str) -> Callable[[L], L]:
    """A class decorator: file the launcher under `name` (a config's `launcher_name`)."""

    def register(cls: L) -> L:
        if name in LAUNCHERS and LAUNCHERS[name] is not cls:
            raise ValueError(f"launcher {name!r} is registered already ({LAUNCHERS[name].__name__})")
        cls.name = name
        LAUNCHERS[name] = cls
        return cls

    return register


def launcher_class(name: str) -> type[Launcher]:
    """The launcher class registered under `name`."""
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise KeyError(f"no launcher {name!r} (registered: {', '.join(sorted(LAUNCHERS))})") from None
