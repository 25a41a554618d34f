"""DDP inside the methods, on 2 gloo processes: one topology on every rank, and two ranks with
batch b equal to one process with batch 2b.

The ranks run once per test module (`ranks`): starting processes that import torch is what costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dstbench.util import distributed
from dstbench.execution.accuracy_track import evaluate
from dstbench.dst.checkpoint import case_checkpoint_path, load_checkpoint
from dstbench.inputs.loaders import build_datasets, eval_loader
from dstbench.suite.loading import parse_suite
from dstbench.models.timm_models import create_vit, input_shape
from tests.conftest import SGD, micro_batches
from tests.dst.distributed_workers import (
    ACCURACY_CASE, ACCURACY_SUITE, ADAM, BATCH, METHODS, TOTAL_STEPS, build, snapshot, spawn_ranks,
)

WORLD = 2


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ranks")


@pytest.fixture(scope="module")
def ranks(tmp: Path) -> list[dict[str, Any]]:
    return spawn_ranks(["identity", "missseeded", "split_batch", "accuracy"], tmp, WORLD)


pytestmark = pytest.mark.usefixtures("one_thread")


def assert_same(a: Any, b: Any, where: str, **tolerance: float) -> None:
    """Equal nested dicts/lists of tensors: bitwise, or within `tolerance` (torch.testing)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}", **tolerance)
    elif torch.is_tensor(a):
        if tolerance:
            torch.testing.assert_close(a, b, msg=lambda m: f"{where}: {m}", **tolerance)
        else:
            assert torch.equal(a, b), where
    else:
        assert a == b, where


@pytest.mark.slow
@pytest.mark.parametrize("key", list(METHODS))
def test_every_rank_holds_the_same_topology_parameters_and_state(ranks: list[dict[str, Any]], key: str) -> None:
    first, second = (r["identity"][key] for r in ranks)
    # Several updates happened and changed the topology (each rank trained on its own data).
    assert first["updates"] == second["updates"] == 3
    assert not _same_topology(first["topology"], snapshot(build(key, ADAM))["topology"])
    assert_same(first["topology"], second["topology"], key)
    assert_same(first["params"], second["params"], key)
    assert_same(first["optimizer"], second["optimizer"], key)
    assert torch.equal(first["draws"], second["draws"])  # the generators are still in step
    for rank in ranks:
        assert rank["identity"][key]["optimizer_is_live"] and rank["identity"][key]["wrapper_is_live"]


def _same_topology(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)


@pytest.mark.slow
def test_barter_rebuilds_the_wrapper_around_resized_parameters(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        barter, masked = rank["identity"]["barter"], rank["identity"]["set"]
        assert "ddp_rebuild" in barter["detail"]  # timed as part of the updates
        assert "ddp_rebuild" not in masked["detail"]  # a masked update keeps every Parameter
        # Density 0.125 leaves block 1 without a head: its attention branch is left out of DDP.
        assert {n for n in rank["identity"]["barter_empty"]["ignored"] if n.startswith("blocks.1.")} == {
            "blocks.1.norm1.weight", "blocks.1.norm1.bias", "blocks.1.attn.qkv.weight", "blocks.1.attn.qkv.bias",
            "blocks.1.attn.proj.weight",
        }


@pytest.mark.slow
@pytest.mark.parametrize("key", ["set", "barter"])
def test_rank_zero_decides_even_when_a_rank_is_seeded_differently(ranks: list[dict[str, Any]], key: str) -> None:
    first, second = (r["missseeded"][key] for r in ranks)
    assert_same(first["topology"], second["topology"], key)
    assert_same(first["params"], second["params"], key)
    assert torch.equal(first["draws"], second["draws"])


@pytest.mark.slow
@pytest.mark.parametrize("key", list(METHODS))
def test_two_ranks_with_batch_b_match_one_process_with_batch_2b(ranks: list[dict[str, Any]], key: str) -> None:
    method = build(key, SGD)
    stream = micro_batches(batch_size=WORLD * BATCH, seed=11)
    method.train_segment(stream, 7)  # updates at steps 3 and 6, as on the ranks
    single = snapshot(method)
    for rank in ranks:
        result = rank["split_batch"][key]
        assert result["updates"] == single["updates"] == 2
        assert_same(result["topology"], single["topology"], key)
        assert_same(result["params"], single["params"], key, atol=1e-5, rtol=1e-4)
        assert_same(result["optimizer"], single["optimizer"], key, atol=1e-5, rtol=1e-4)
        # BARTER's scores are the global batch's (from the averaged gradients), not a sum of the
        # ranks' own absolute scores, which would rank the units differently.
        assert_same(result["importance"], single["importance"], key, atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_an_accuracy_case_trains_on_shards_and_evaluates_the_whole_test_split(ranks: list[dict[str, Any]], tmp: Path) -> None:
    first, second = (r["accuracy"] for r in ranks)
    suite = parse_suite(ACCURACY_SUITE)
    model = create_vit(suite.model.name, **suite.model.kwargs)
    data = build_datasets(suite.data, input_shape(model))
    # Each rank's epoch is its half of the training split, in full batches of 64.
    assert first["steps"] == second["steps"] == 2 * ((len(data.train) // WORLD) // 64)
    assert_same(first["topology"], second["topology"], "accuracy")
    assert_same(first["model"], second["model"], "accuracy")
    # Every rank reports the accuracy of the whole test split: one process evaluating all of it
    # with the trained weights counts the same.
    for a, b in zip(first["curve"], second["curve"], strict=True):
        # train_loss is the mean over ranks; only train_time_s is each rank's own.
        assert {k: v for k, v in a.items() if k != "train_time_s"} == {k: v for k, v in b.items() if k != "train_time_s"}
    model.load_state_dict(first["model"])
    whole = evaluate(model, eval_loader(data.test, 256, 0), torch.device("cpu"), "fp32", data.num_classes)
    assert first["curve"][-1]["top1"] == whole["top1"]
    assert first["curve"][-1]["test_loss"] == pytest.approx(whole["test_loss"], rel=1e-5)
    # Rank 0 wrote the checkpoint, with each rank's own RNG states to resume from.
    saved = load_checkpoint(case_checkpoint_path(tmp / "accuracy", ACCURACY_CASE.case_id))
    assert len(saved["rng_ranks"]) == WORLD
    assert not torch.equal(saved["rng_ranks"][0]["torch"], saved["rng_ranks"][1]["torch"])


def test_plain_process_helpers_move_nothing() -> None:
    tensor = torch.arange(4.0)
    generator = torch.Generator().manual_seed(3)
    assert not distributed.is_distributed() and distributed.rank() == 0 and distributed.world_size() == 1
    assert distributed.broadcast_(tensor) is tensor and torch.equal(tensor, torch.arange(4.0))
    distributed.broadcast_generator_(generator)
    assert torch.equal(torch.rand(3, generator=generator), torch.rand(3, generator=torch.Generator().manual_seed(3)))
    assert distributed.rank_seed(5, 0) == 5 and distributed.rank_seed(5, 1) not in (5, distributed.rank_seed(5, 2))
    method = build("barter", SGD, total_steps=TOTAL_STEPS)
    assert method.forward_module is method.model and not method.distributed
