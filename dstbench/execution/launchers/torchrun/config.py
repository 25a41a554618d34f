"""`launcher: {name: torchrun}`: the keys of the torchrun launcher (`launcher`): a case's ranks on
this node (and on `nnodes` nodes in all, each node running the same suite).

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from dstbench.execution.launchers.config import LauncherConfigBase, register_config


@register_config
class TorchrunConfig(LauncherConfigBase):
    summary: ClassVar[str] = "a case's ranks under torchrun"
    order: ClassVar[int] = 2

    name: Literal["torchrun"] = Field("torchrun", description="each case's ranks under torchrun, the model in DistributedDataParallel")
    timeout_s: PositiveFloat = Field(3600.0, description="seconds a case's torchrun may take")
    nproc_per_node: PositiveInt = Field(1, description="ranks on each node (one GPU each on CUDA)")
    nnodes: PositiveInt = Field(1, description="nodes in all; every node runs the same `dstbench run`")
    # The environment overrides these three, so one suite file serves every node.
    node_rank: int = Field(0, ge=0, description="this node's rank (DSTBENCH_NODE_RANK overrides it)")
    master_addr: str = Field("127.0.0.1", description="where every node's torchrun meets (DSTBENCH_MASTER_ADDR overrides it)")
    master_port: int = Field(29500, ge=1, le=65535, description="the port they meet at (DSTBENCH_MASTER_PORT overrides it)")

    @property
    def distributed(self) -> bool:
        return True
