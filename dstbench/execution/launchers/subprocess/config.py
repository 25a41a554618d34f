"""`launcher: {name: subprocess}` (the default): the keys of the subprocess launcher (`launcher`)
and of its `parallel` form (`parallel`).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt


class SubprocessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no inf or nan seconds
    summary: ClassVar[str] = "a fresh process per case"

    name: Literal["subprocess"] = Field("subprocess", description="each case in a fresh process of its own (the default launcher)")
    timeout_s: PositiveFloat = Field(3600.0, description=(  # dstbench.execution.launchers.subprocess.launcher
        "seconds of a case's own active time (start, warm-up, its segments, finish; not its waits for the others)"))
    # dstbench.execution.launchers.subprocess.parallel; which suites may, in `SuiteConfig._parallel_fits_device`.
    parallel: PositiveInt = Field(1, description=(
        "groups run at once on this host, each on its own GPU and its own share of the cores"))

    @property
    def launcher_name(self) -> str:
        """The registered launcher that runs this config (`dstbench.execution.launchers.base`):
        `parallel` places groups in slots of its own, one case process per slot."""
        return "parallel" if self.parallel > 1 else self.name

    @property
    def case_launcher(self) -> str:
        """How a case's own process starts: a process of its own."""
        return self.name
