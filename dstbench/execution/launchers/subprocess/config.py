"""`launcher: {name: subprocess}` (the default): the keys of the subprocess launcher (`launcher`)
and of its `parallel` form (`parallel`).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from dstbench.execution.launchers.config import LauncherConfigBase, register_config

# Why a CPU suite whose groups are interleaved may not run groups side by side.
PARALLEL_CPU_INTERLEAVED = (
    "launcher.parallel: interleaved speed groups would run side by side on one CPU, sharing its memory bandwidth "
    "and caches, so their rounds would not compare cases under the same conditions; use parallel: 1, or "
    "timing.interleave: false (times taken side by side, each line warned), or mode: accuracy"
)


@register_config
class SubprocessConfig(LauncherConfigBase):
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

    def describe(self) -> list[str]:
        return super().describe() + ([f"{self.parallel} cases at once"] if self.parallel > 1 else [])

    def suite_problem(self, suite: Any) -> str | None:
        """`parallel` runs cases side by side, each on its own GPU or its own share of the cores.
        On one CPU they still share its memory bandwidth and caches, so interleaved groups, whose
        rounds exist to compare cases under the same conditions, may not run side by side there;
        `device: auto` is checked once the device is known (`parallel.py`)."""
        if self.parallel == 1:
            return None
        if suite.device == "mps":
            return "launcher.parallel: mps is one device; cases cannot run side by side on their own devices"
        if suite.device == "cpu" and suite.mode in ("speed", "both") and suite.timing.interleave:
            return PARALLEL_CPU_INTERLEAVED
        return None
