"""`launcher: {name: subprocess}` (the default): the keys of the subprocess launcher (`launcher`)
and of its `parallel` form (`parallel`).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt


class SubprocessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no inf or nan seconds
    summary: ClassVar[str] = "a fresh process per case"

    name: Literal["subprocess"] = "subprocess"
    timeout_s: PositiveFloat = 3600.0  # each case's own active time (dstbench.execution.launchers.subprocess.launcher)
    # This many cases at once on this host, each on its own GPU or its own share of the cores
    # (dstbench.execution.launchers.subprocess.parallel; which suites may, in `SuiteConfig._parallel_fits_device`).
    parallel: PositiveInt = 1

    @property
    def launcher_name(self) -> str:
        """The registered launcher that runs this config (`dstbench.execution.launchers.base`):
        `parallel` places groups in slots of its own, one case process per slot."""
        return "parallel" if self.parallel > 1 else self.name

    @property
    def case_launcher(self) -> str:
        """How a case's own process starts: a process of its own."""
        return self.name
