"""What the ranks of the 2-process tests run (forked by `torch.multiprocessing.start_processes`).

`spawn_ranks(scenarios, tmp)` starts `world` gloo processes on the CPU; each runs every scenario
and saves what it saw to `rank<r>.pt`, which the tests compare across ranks and against one
process. One start for all scenarios: starting a process that imports torch is the costly part.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dstbench
from dstbench.execution.accuracy_track import measure_accuracy
from dstbench.suite.cases import Case
from dstbench.dst.compact.compact_vit import compact_blocks
from dstbench.execution.case_session import base_result
from dstbench.dst.masked.masked_method import MaskedMethod
from dstbench.suite.loading import parse_suite
from tests.conftest import SGD, micro_batches, micro_suite, micro_vit

ADAM = {"name": "adamw", "lr": 1e-2, "weight_decay": 0.05}
# Updates at steps 3, 6, 9 of 12 (t_end: step 10, exclusive); the fraction is large enough to move units.
UPDATE = {"delta_t": 3, "t_end": 10}
METHODS: dict[str, tuple[str, float, dict[str, Any]]] = {
    "set": ("set", 0.5, {**UPDATE, "drop_fraction": 0.5}),
    "rigl": ("rigl", 0.5, {**UPDATE, "drop_fraction": 0.5}),
    "mest": ("mest", 0.5, {**UPDATE, "drop_fraction": 0.5, "ems": True}),
    "chase": ("chase", 0.4, {**UPDATE, "death_rate": 0.1, "channel_sparsity": 0.5}),
    "barter": ("barter", 0.5, {**UPDATE, "drop_fraction": 0.5}),
    # 1 head over 2 blocks: block 1 holds no head, so DDP must leave its attention branch alone.
    "barter_empty": ("barter", 0.125, {**UPDATE, "drop_fraction": 0.5}),
}
TOTAL_STEPS = 12
BATCH = 4  # per rank


def build(key: str, optimizer: dict[str, Any], seed: int = 0, total_steps: int = TOTAL_STEPS) -> dstbench.Method:
    name, density, params = METHODS[key]
    return dstbench.create_method(
        name, micro_vit(0), density=density, total_steps=total_steps, optimizer=optimizer, seed=seed, **params
    )


def topology(method: dstbench.Method) -> dict[str, Any]:
    """What must be the same on every rank: masks (and Chase's channels), or BARTER's units."""
    if isinstance(method, MaskedMethod):
        out: dict[str, Any] = {f"mask:{n}": m.clone() for n, m in method.masks().items()}
        for group in getattr(getattr(method, "channels", None), "groups", []):
            out[f"keep:{group.producer}"] = group.keep.clone()
        return out
    return {
        f"block{i}": (list(b.attn.slots), list(b.mlp.slots)) for i, b in enumerate(compact_blocks(method.model))
    }


def snapshot(method: dstbench.Method) -> dict[str, Any]:
    state = method.optimizer.state
    params = dict(method.model.named_parameters())
    ddp = method.forward_module
    return {
        "topology": topology(method),
        "params": {n: p.detach().clone() for n, p in params.items()},
        "optimizer": {n: {k: v.clone() for k, v in state[p].items() if torch.is_tensor(v)} for n, p in params.items() if p in state},
        "updates": method.topology_updates,
        "detail": dict(method.topology_detail_ms),
        # The live objects: the optimizer steps the model's Parameters, the wrapper syncs them.
        "optimizer_is_live": {id(p) for g in method.optimizer.param_groups for p in g["params"]}
        == {id(p) for p in method.model.parameters()},
        "wrapper_is_live": getattr(ddp, "module", None) is method.model
        and {id(p) for p in ddp.parameters() if not getattr(p, "_ddp_ignored", False)}
        == {id(p) for n, p in params.items() if n not in method.ddp_ignored_parameters()},
        "ignored": sorted(method.ddp_ignored_parameters()),
        # BARTER's importance accumulated since the last update (the statistic its next plan uses).
        "importance": {k: v.clone() for k, v in method.method_buffers().items() if "importance" in k},
        "draws": torch.rand(8, generator=method.generator),
    }


def half_batches(rank: int, world: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank `rank`'s slice of the same `steps` batches of world x BATCH images."""
    stream = micro_batches(batch_size=world * BATCH, seed=11)
    out = []
    for _ in range(steps):
        x, y = next(stream)
        out.append((x[rank * BATCH : (rank + 1) * BATCH], y[rank * BATCH : (rank + 1) * BATCH]))
    return out


def scenario_identity(rank: int, world: int, tmp: Path) -> dict[str, Any]:
    """Every method trained on this rank's own data, through several updates."""
    results = {}
    for key in METHODS:
        method = build(key, ADAM)
        method.train_segment(micro_batches(BATCH, seed=100 + rank), TOTAL_STEPS)
        results[key] = snapshot(method)
    return results


def scenario_missseeded(rank: int, world: int, tmp: Path) -> dict[str, Any]:
    """SET and BARTER whose generators are seeded differently on rank 1: rank 0's decisions rule."""
    results = {}
    for key in ("set", "barter"):
        method = build(key, ADAM, seed=rank * 1000)
        method.train_segment(micro_batches(BATCH, seed=100 + rank), TOTAL_STEPS)
        results[key] = snapshot(method)
    return results


def scenario_split_batch(rank: int, world: int, tmp: Path) -> dict[str, Any]:
    """Each rank trains on its half of the same large batches (SGD, updates at steps 3 and 6)."""
    results = {}
    for key in METHODS:
        method = build(key, SGD)
        method.train_segment(half_batches(rank, world, 7), 7)
        results[key] = snapshot(method)
    return results


# Digits at 8x8 through 4x4 patches: a few milliseconds per step.
DIGITS_MODEL = {"name": "vit_tiny_patch16_224", "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 10,
                "embed_dim": 32, "depth": 2, "num_heads": 4}
ACCURACY_SUITE = micro_suite(
    mode="accuracy", model=DIGITS_MODEL, batch_size=64, optimizer=ADAM,
    data={"name": "digits", "num_workers": 0, "augment": {"flip": False}},
    accuracy={"epochs": 2, "warmup_epochs": 1, "eval_every": 1, "checkpoint_every": 1, "keep_checkpoint": True},
)
ACCURACY_CASE = Case("set", "set", "masked", 0.5, {"delta_t": 5})


def scenario_accuracy(rank: int, world: int, tmp: Path) -> dict[str, Any]:
    """An accuracy case on real data: each rank trains on its shard and evaluates its share."""
    suite = parse_suite(ACCURACY_SUITE)
    result = base_result(suite, ACCURACY_CASE)
    method = measure_accuracy(suite, ACCURACY_CASE, torch.device("cpu"), result, tmp / "accuracy", lambda *a: None)
    return {"curve": result.curve, "steps": method.step, "model": method.model.state_dict(), **snapshot(method)}


SCENARIOS: dict[str, Callable[[int, int, Path], dict[str, Any]]] = {
    "identity": scenario_identity,
    "missseeded": scenario_missseeded,
    "split_batch": scenario_split_batch,
    "accuracy": scenario_accuracy,
}


def _rank_main(rank: int, world: int, tmp: str, scenarios: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world)
    try:
        out = {name: SCENARIOS[name](rank, world, Path(tmp)) for name in scenarios}
        torch.save(out, Path(tmp) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def spawn_ranks(scenarios: list[str], tmp: Path, world: int = 2) -> list[dict[str, Any]]:
    """Run `scenarios` on `world` gloo ranks; every rank's results, rank by rank."""
    # Inherited by the children before torch starts there: one thread each on a shared CPU.
    if "accuracy" in scenarios:
        # scikit-learn's import (the digits loader) takes seconds: once here, before the fork.
        from dstbench.data.packaged import load_digits_splits

        load_digits_splits()
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        # Forked: the ranks inherit torch, timm and dstbench already imported (spawning would
        # import them again in each, which costs more than every scenario together). Safe here:
        # each rank runs on one intra-op thread, so no OpenMP pool crosses the fork.
        mp.start_processes(_rank_main, args=(world, str(tmp), scenarios), nprocs=world, join=True, start_method="fork")
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = before
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(world)]
