"""Phase labels for the profiler, shared by the harness and every method.

`phase(name)` is a `torch.profiler.record_function` while a profiler is recording and costs nothing
otherwise, so the timed segments carry no profiler overhead.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

PREFIX = "dstbench::"
DATA = "data"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER_STEP = "optimizer_step"
MASKING = "masking"
TOPOLOGY_UPDATE = "topology_update"
# Sub-phases of a topology update, recorded by the methods through `Method.update_phase`.
SCORING = "topology_update/scoring"
PRUNE_GROW = "topology_update/prune_grow"
RESIZE = "topology_update/resize"
STATE_REMAP = "topology_update/state_remap"
DDP_REBUILD = "topology_update/ddp_rebuild"  # distributed only: a new wrapper around resized parameters

STEP_PHASES = (DATA, FORWARD, BACKWARD, MASKING, OPTIMIZER_STEP, TOPOLOGY_UPDATE)
UPDATE_PHASES = (SCORING, PRUNE_GROW, RESIZE, STATE_REMAP)  # DDP_REBUILD, when present, is listed after
ALL_PHASES = STEP_PHASES + UPDATE_PHASES


def profiler_active() -> bool:
    return torch._C._autograd._profiler_enabled()


def phase(name: str) -> AbstractContextManager:
    if profiler_active():
        return torch.profiler.record_function(PREFIX + name)
    return nullcontext()
