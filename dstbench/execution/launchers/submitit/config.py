"""`launcher: {name: submitit}`: the keys of the submitit launcher (`launcher`): each case a
cluster job; Slurm's own names where it has one.

A leaf module (pydantic only): the suite schema reads it (`dstbench.execution.launchers.config`),
so it sits in the schema's layer and imports nothing above it.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Union

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from dstbench.execution.launchers.config import LauncherConfigBase, register_config


@register_config
class SubmititConfig(LauncherConfigBase):
    summary: ClassVar[str] = "a cluster job per case"
    order: ClassVar[int] = 3

    name: Literal["submitit"] = Field("submitit", description="each case a cluster job, submitted as one job array (dstbench[cluster])")
    timeout_s: PositiveFloat = Field(3600.0, description="seconds a case may take inside its job")
    # A case with several ranks runs them under torchrun on its job's node (one node per job).
    nproc_per_node: PositiveInt = Field(1, description="ranks of each case, under torchrun on the job's node")
    cluster: Literal["slurm", "local"] = Field("slurm", description="slurm, or local: the same jobs on this machine (submitit's local executor)")
    partition: str | None = Field(None, description="sbatch --partition")
    account: str | None = Field(None, description="sbatch --account")
    qos: str | None = Field(None, description="sbatch --qos")
    constraint: str | None = Field(None, description="sbatch --constraint, e.g. one GPU model for every job")
    gpus_per_node: int = Field(0, ge=0, description="sbatch --gpus-per-node")
    cpus_per_task: PositiveInt | None = Field(None, description="sbatch --cpus-per-task: data workers + the training thread")
    mem_gb: PositiveFloat | None = Field(None, description="sbatch --mem, in GB")
    timeout_min: PositiveFloat | None = Field(None, description="the job's time limit (--time); default: timeout_s rounded up to minutes, + 2")
    array_parallelism: PositiveInt | None = Field(None, description="jobs running at once (default: Slurm's limit; local: 1)")
    sbatch: dict[str, Union[str, int, bool]] = Field({}, description="more sbatch options, e.g. {exclusive: true, mail-type: END}")
    setup: list[str] = Field([], description="shell lines the job runs first (module load, source a venv)")

    @model_validator(mode="after")
    def _ranks_fit_gpus(self) -> "SubmititConfig":
        if self.gpus_per_node and self.nproc_per_node > self.gpus_per_node:
            raise ValueError(f"nproc_per_node: {self.nproc_per_node} ranks need as many GPUs; gpus_per_node is {self.gpus_per_node}")
        return self

    @property
    def distributed(self) -> bool:
        """A case with several ranks runs them under torchrun on its job's node."""
        return self.nproc_per_node > 1

    def describe(self) -> list[str]:
        """'slurm, job limit 62 min, partition gpu'."""
        return [self.cluster, f"job limit {self.job_minutes:g} min"] + [
            f"{k} {getattr(self, k)}" for k in ("partition", "account", "gpus_per_node") if getattr(self, k)]

    @property
    def job_minutes(self) -> float:
        """A job's time limit in minutes: `timeout_min`, else the case's `timeout_s` plus 2
        minutes for the job's start and Slurm's warning signal (which ends the case as `timeout`)."""
        return self.timeout_min if self.timeout_min is not None else math.ceil(self.timeout_s / 60) + 2
