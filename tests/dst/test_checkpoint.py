"""Pretrained weights in (fine-tuning) and training state out and back (case checkpoints)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dstbench.dst import checkpoint as ckpt
import dstbench.methods as catalog
from tests.conftest import ADAMW, micro_batches, micro_vit


def _same_weights(a: torch.nn.Module, b: torch.nn.Module, skip: str = "^$") -> None:
    import re

    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        if not re.match(skip, key):
            assert torch.equal(sa[key], sb[key]), key


@pytest.mark.parametrize("wrap", ["plain", "timm", "ddp"])
def test_pretrained_state_dicts_load_in_every_wrapping(tmp_path: Path, wrap: str) -> None:
    source, target = micro_vit(seed=1), micro_vit(seed=2)
    state = source.state_dict()
    if wrap == "timm":
        state = {"epoch": 3, "arch": "vit", "state_dict": state, "optimizer": {"state": {}}}
    elif wrap == "ddp":
        state = {"model": {f"module.{k}": v for k, v in state.items()}}
    torch.save(state, tmp_path / "w.pth")
    info = ckpt.load_pretrained(target, tmp_path / "w.pth")
    _same_weights(source, target)
    assert info["reinitialised"] == [] and info["loaded"] == len(source.state_dict())


def test_safetensors_files_load(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    source, target = micro_vit(seed=1), micro_vit(seed=2)
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, tmp_path / "model.safetensors")
    ckpt.load_pretrained(target, tmp_path / "model.safetensors")
    _same_weights(source, target)


def test_other_class_count_and_resolution_are_adapted(tmp_path: Path) -> None:
    source = micro_vit(seed=1, num_classes=1000, img_size=64)  # 8x8 grid of patches
    target = micro_vit(seed=2, num_classes=10)  # 4x4 grid, 10 classes
    head_before = target.head.weight.clone()
    torch.save(source.state_dict(), tmp_path / "w.pth")
    info = ckpt.load_pretrained(target, tmp_path / "w.pth")
    assert info["reinitialised"] == ["head.bias", "head.weight"]
    assert torch.equal(target.head.weight, head_before)  # left at its initial values
    assert torch.equal(target.blocks[1].mlp.fc2.weight, source.blocks[1].mlp.fc2.weight)
    assert target.pos_embed.shape == (1, 17, 64)  # resampled from 65 tokens


def test_weights_of_another_architecture_are_refused(tmp_path: Path) -> None:
    torch.save(micro_vit(depth=3).state_dict(), tmp_path / "deep.pth")
    with pytest.raises(ValueError, match="unexpected: blocks.2"):
        ckpt.load_pretrained(micro_vit(), tmp_path / "deep.pth")
    torch.save(micro_vit(embed_dim=32, num_heads=2).state_dict(), tmp_path / "narrow.pth")
    with pytest.raises(ValueError, match="shapes differ"):
        ckpt.load_pretrained(micro_vit(), tmp_path / "narrow.pth")
    torch.save({"epoch": 1}, tmp_path / "empty.pth")
    with pytest.raises(ValueError, match="no state dict"):
        ckpt.load_pretrained(micro_vit(), tmp_path / "empty.pth")


def test_rng_state_survives_a_weights_only_round_trip(tmp_path: Path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    ckpt.save_atomic({"rng": ckpt.rng_state()}, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), np.random.randn(), torch.rand(3))
    ckpt.set_rng_state(ckpt.load_checkpoint(tmp_path / "rng.pt")["rng"])
    again = (random.random(), np.random.rand(), np.random.randn(), torch.rand(3))
    assert expected[:3] == again[:3] and torch.equal(expected[3], again[3])
    assert [p.name for p in tmp_path.iterdir()] == ["rng.pt"]  # no temporary file left behind


def _method(name: str, seed: int = 0, **params: Any):  # type: ignore[no-untyped-def]
    kind = catalog.method_info(name).kind
    return catalog.create_method(
        name, micro_vit(seed=seed), density=1.0 if kind == "dense" else 0.5, total_steps=40, optimizer=ADAMW, seed=seed, **params
    )


def _topology(method) -> Any:  # type: ignore[no-untyped-def]
    if hasattr(method, "topology"):
        return method.topology()
    if hasattr(method, "masks"):
        return {k: v.clone() for k, v in method.masks().items()}
    return None


def _same_topology(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return a == b


ROUND_TRIP = [("dense", {}), ("rigl", {"delta_t": 4}), ("barter", {"delta_t": 4, "drop_fraction": 0.5})]


@pytest.mark.parametrize("name, params", ROUND_TRIP, ids=[n for n, _ in ROUND_TRIP])
def test_method_checkpoint_round_trip_continues_identically(tmp_path: Path, name: str, params: dict) -> None:
    if name not in catalog.list_methods():
        pytest.fail(f"method {name} is not registered")
    original = _method(name, **params)
    initial = _topology(original)
    original.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(original.optimizer, lambda s: 1.0 / (1 + s))
    original.train_segment(micro_batches(seed=5), 10)
    if name == "barter":  # the saved model must have compact shapes a fresh one does not
        assert not _same_topology(initial, _topology(original))
    ckpt.save_atomic({"method_state": original.state_dict()}, tmp_path / "case.pt")
    restored = _method(name, seed=7, **params)  # other weights, generator and topology until loaded
    restored.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(restored.optimizer, lambda s: 1.0 / (1 + s))
    restored.load_state_dict(ckpt.load_checkpoint(tmp_path / "case.pt")["method_state"])
    assert _same_topology(_topology(original), _topology(restored))
    _same_weights(original.model, restored.model)
    # Both continue on the same batches through more topology updates: still identical.
    for method in (original, restored):
        method.train_segment(micro_batches(seed=9), 10)
    assert restored.step == original.step == 20
    assert restored.topology_updates == original.topology_updates
    assert _same_topology(_topology(original), _topology(restored))
    _same_weights(original.model, restored.model)
    assert restored.optimizer.param_groups[0]["lr"] == original.optimizer.param_groups[0]["lr"]


def test_a_case_checkpoint_can_start_a_fine_tuning_run(tmp_path: Path) -> None:
    method = _method("dense")
    ckpt.save_atomic({"format": ckpt.CASE_FORMAT, "epoch": 2, "method_state": method.state_dict()}, tmp_path / "c.pt")
    fresh = micro_vit(seed=3)
    ckpt.load_pretrained(fresh, tmp_path / "c.pt")
    _same_weights(method.model, fresh)
    assert ckpt.case_checkpoint_path(tmp_path, "rigl@0.5").name == "rigl@0.5.pt"
