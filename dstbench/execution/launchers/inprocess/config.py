"""`launcher: {name: inprocess}`: the keys of the in-process launcher (`launcher`).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat

from dstbench.execution.launchers.config import LauncherConfigBase, register_config


@register_config
class InProcessConfig(LauncherConfigBase):
    summary: ClassVar[str] = "cases in the calling process"
    order: ClassVar[int] = 1

    name: Literal["inprocess"] = Field("inprocess", description=(
        "every case in the calling process (tests, debugging); allocator and RSS peaks and energy are left unmeasured"))
    # Accepted so that a suite switches to inprocess to debug (`--set launcher.name=inprocess`)
    # without editing its timeout.
    timeout_s: PositiveFloat = Field(3600.0, description="accepted, not enforced: a case in this process cannot be stopped")

