"""What every launcher's process builds a case from: the task, the device, the method.

Below the case session, the accuracy track and the profiler (each imports this module, none imports
another), so none of them has to import the others lazily to build a method.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable

import numpy as np
import torch

from dstbench.util import distributed

import dstbench.methods as catalog
from dstbench.suite.cases import Case
from dstbench.suite.schema import SuiteConfig
from dstbench.dst.method_base import Method
from dstbench.results.record import CaseResult, line_type
from dstbench.suite.loading import parse_suite
from dstbench.models.timm_models import create_model

# progress(stage, done, total): stage is "warmup", "segment", "epoch" or "profile".
Progress = Callable[[str, int, int], None]


@dataclasses.dataclass
class CaseTask:
    """What a launcher hands to the process that runs a case (plain data, so it pickles)."""

    suite: dict[str, Any]  # the validated suite, `model_dump(mode="json")`
    suite_path: str
    case: dict[str, Any]
    run_dir: str
    resume: bool = False  # continue an accuracy case from its last checkpoint
    # Which share of the rounds this process times (dstbench.execution.rounds): its process set,
    # its first round and how many (None: every round), and whether it also runs the case's
    # accuracy track and profile (the last set does).
    process: int = 0
    first_round: int = 0
    rounds: int | None = None
    extras: bool = True
    # The phase of a `mode: both` run this task belongs to (dstbench.suite.plan): "timing" runs the
    # segments (and the profile) without the accuracy track, "training" the accuracy track alone;
    # "" every part the case's mode has (speed and accuracy runs).
    phase: str = ""


def resolve_device(name: str) -> torch.device:
    """The suite's device for this process. Under torchrun a CUDA rank gets `cuda:LOCAL_RANK`
    (its own GPU on its node), and `auto` never picks MPS, which DDP cannot use."""
    if distributed.is_distributed():
        if name == "mps":
            raise RuntimeError("distributed cases run on CUDA (NCCL) or the CPU (gloo), not on mps")
        if name in ("cuda", "auto") and torch.cuda.is_available():
            return torch.device("cuda", distributed.local_rank())
        if name == "cuda":
            raise RuntimeError("the suite asks for device cuda, but torch sees no CUDA device")
        return torch.device("cpu")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the suite asks for device cuda, but torch sees no CUDA device")
    if name == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("the suite asks for device mps, but it is not available")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_method(suite: SuiteConfig, case: Case, device: torch.device, total_steps: int, **harness: Any) -> Method:
    """A fresh model (same initial weights for every method of a suite at one seed) wrapped by the
    case's method; the seed is the case's (one of the suite's `seeds`), else the suite's."""
    seed = case.run_seed(suite.seed)
    seed_everything(seed)
    model = create_model(suite.model.name, device=device, **suite.model.kwargs)
    if suite.model.checkpoint:
        from dstbench.dst.checkpoint import load_pretrained

        load_pretrained(model, suite.model.checkpoint)
    method = catalog.create_method(
        case.method_name,
        model,
        density=case.density,
        total_steps=total_steps,
        optimizer=suite.optimizer.model_dump(),
        precision=suite.precision,
        fuse_norms=suite.fuse_norms,
        seed=seed,
        model_prunable=suite.model.prunable,
        model_name=suite.model.name,
        model_kwargs=suite.model.kwargs,
        **harness,
        **case.params,
    )
    rank = distributed.rank()
    if rank > 0:
        # Every rank built the same model from the same seed; from here on each draws its own
        # randomness (dropout, host-side augmentation), as the halves of one large batch would.
        seed_everything(distributed.rank_seed(seed, rank))
    return method


def base_result(suite: SuiteConfig, case: Case) -> CaseResult:
    return line_type()(  # with a plugin's tracker fields when the suite's plugins registered some
        suite=suite.name,
        suite_hash=suite.setup_hash(),
        case_id=case.case_id,
        method=case.method,
        method_name=case.method_name,
        kind=case.kind,
        density=case.density,
        params=dict(case.params),
        sweep=dict(case.sweep) if case.sweep is not None else None,
        seed=case.run_seed(suite.seed),
        compile=suite.compile.options() if suite.compile.enabled else None,
        precision=suite.precision,
        fuse_norms=suite.fuse_norms,
        batch_size=suite.batch_size,
        mode=case.mode(suite.mode),
        execution=case.params.get("execution", "masked") if case.kind == "masked" else None,
    )


def failed_result(task: CaseTask, status: str, error: str) -> CaseResult:
    suite = parse_suite(task.suite, task.suite_path)
    result = base_result(suite, Case.from_dict(task.case))
    result.status = status
    result.error = error
    result.device = suite.device
    return result
