"""Exact byte counters, checked against sizes computed by hand for a tiny ViT."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import dstbench
from dstbench.measure.trackers import ActivationCounter, AllocatorPeak, RssPeak, training_state_bytes
from dstbench.measure.trackers.memory import current_rss_bytes, unique_bytes
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit

E, DEPTH, PATCH, IMG, CLASSES = 8, 1, 8, 16, 3


def hand_counted_parameters() -> int:
    """Every parameter of timm's ViT, written out from its architecture."""
    tokens = (IMG // PATCH) ** 2 + 1
    patch_embed = E * 3 * PATCH * PATCH + E
    tokens_and_position = E + tokens * E
    block = (2 * E) + (3 * E * E + 3 * E) + (E * E + E) + (2 * E) + (4 * E * E + 4 * E) + (4 * E * E + E)
    head = 2 * E + E * CLASSES + CLASSES
    return patch_embed + tokens_and_position + DEPTH * block + head


def tiny():  # type: ignore[no-untyped-def]
    return micro_vit(img_size=IMG, patch_size=PATCH, embed_dim=E, depth=DEPTH, num_heads=2, num_classes=CLASSES)


def test_state_bytes_match_hand_computed_sizes_adamw() -> None:
    method = dstbench.create_method("dense", tiny(), density=1.0, total_steps=5, optimizer=ADAMW)
    method.train_segment(micro_batches(batch_size=2, num_classes=CLASSES, img_size=IMG), 1)
    n_params, n_tensors = hand_counted_parameters(), len(list(method.model.parameters()))
    parts = training_state_bytes(method)
    assert parts["parameters"] == 4 * n_params
    assert parts["gradients"] == 4 * n_params
    # exp_avg and exp_avg_sq per element, plus one float32 `step` scalar per parameter tensor.
    assert parts["optimizer_state"] == 2 * 4 * n_params + 4 * n_tensors
    assert parts["method_buffers"] == 0
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")


def test_state_bytes_sgd_momentum_and_before_first_step() -> None:
    method = dstbench.create_method("dense", tiny(), density=1.0, total_steps=5, optimizer=SGD)
    assert training_state_bytes(method)["optimizer_state"] == 0  # buffers appear at the first step
    method.train_segment(micro_batches(batch_size=2, num_classes=CLASSES, img_size=IMG), 1)
    assert training_state_bytes(method)["optimizer_state"] == 4 * hand_counted_parameters()


def test_activation_counter_counts_saved_tensors_once_without_parameters() -> None:
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    with ActivationCounter(linear) as counter:
        hidden = F.relu(linear(x))  # linear saves x (80 B) and its weight (a parameter); relu its output (60 B)
        (hidden * hidden).sum()  # mul saves `hidden` twice: one storage, already counted
    assert counter.total == 5 * 4 * 4 + 5 * 3 * 4


def test_activation_counter_on_a_model_grows_with_batch() -> None:
    model = tiny()
    sizes = []
    for batch in (2, 4):
        with ActivationCounter(model) as counter:
            model(torch.randn(batch, 3, IMG, IMG)).sum().backward()
        sizes.append(counter.total)
    assert sizes[0] > 0 and sizes[1] == 2 * sizes[0]


def test_unique_bytes_counts_views_once() -> None:
    base = torch.zeros(10, 10)
    assert unique_bytes([base, base[2:], base.t()]) == 400
    assert unique_bytes([base], exclude={(str(base.device), base.untyped_storage().data_ptr())}) == 0


def test_allocator_peak_is_none_off_cuda() -> None:
    with AllocatorPeak(torch.device("cpu")) as peak:
        torch.ones(1000)
    assert peak.peak_bytes is None and peak.reserved_bytes is None


def test_rss_peak_sees_a_transient_allocation() -> None:
    import mmap

    baseline = current_rss_bytes()
    with RssPeak(baseline) as rss:
        # 64 MiB of fresh pages, each touched: a malloc'd block could reuse memory an earlier test
        # in this process freed but kept resident, and then add nothing to the RSS.
        block = mmap.mmap(-1, 64 * 2**20)
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        block.close()
    assert rss.growth_bytes is not None and rss.growth_bytes >= 60 * 2**20
