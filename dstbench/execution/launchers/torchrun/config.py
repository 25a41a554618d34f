"""`launcher: {name: torchrun}`: the keys of the torchrun launcher (`launcher`): a case's ranks on
this node (and on `nnodes` nodes in all, each node running the same suite).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt


class TorchrunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no inf or nan seconds
    summary: ClassVar[str] = "a case's ranks under torchrun"

    name: Literal["torchrun"] = "torchrun"
    timeout_s: PositiveFloat = 3600.0
    nproc_per_node: PositiveInt = 1
    nnodes: PositiveInt = 1
    # DSTBENCH_NODE_RANK, DSTBENCH_MASTER_ADDR and DSTBENCH_MASTER_PORT override these three, so one
    # suite file serves every node.
    node_rank: int = Field(0, ge=0)
    master_addr: str = "127.0.0.1"
    master_port: int = Field(29500, ge=1, le=65535)

    @property
    def launcher_name(self) -> str:
        """The registered launcher that runs this config (`dstbench.execution.launchers.base`)."""
        return self.name

    @property
    def case_launcher(self) -> str:
        """How a case's own processes start: under torchrun."""
        return self.name
