"""Shared setup of the pytest-benchmark benchmarks of dstbench's hot operations.

The model is the CPU smoke suite's (read from `suites/cpu_smoke.yaml`, so the benchmarks follow
the suite), the batch its batch size of synthetic images. Rounds: `DSTBENCH_BENCH_QUICK=1` (CI)
runs a few, otherwise enough for stable medians. Benchmarks record time, they do not assert on it:
pytest-benchmark keeps it (`--benchmark-json`, `--benchmark-compare`); the assertions check that the
operation did its work. One exception, a ratio within one process rather than a time:
`test_masked_overhead.py` asserts its goal in a timing run outside quick mode (its docstring).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from dstbench.models.timm_models import create_vit

SMOKE_SUITE = Path(__file__).resolve().parents[2] / "suites" / "cpu_smoke.yaml"
QUICK = os.environ.get("DSTBENCH_BENCH_QUICK", "") not in ("", "0")
ROUNDS, WARMUP_ROUNDS = (3, 1) if QUICK else (10, 2)
OPTIMIZER = {"name": "adamw", "lr": 1e-3, "weight_decay": 0.05}
TOTAL_STEPS = 1000


def smoke_spec() -> dict[str, Any]:
    suite = yaml.safe_load(SMOKE_SUITE.read_text())
    return {"model": dict(suite["model"]), "batch_size": int(suite["batch_size"])}


def smoke_vit(seed: int = 0) -> torch.nn.Module:
    spec = smoke_spec()["model"]
    spec.pop("checkpoint", None)
    torch.manual_seed(seed)
    return create_vit(spec.pop("name"), **spec)


def smoke_batch(model: torch.nn.Module, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batch = smoke_spec()["batch_size"]
    size = model.patch_embed.img_size
    images = torch.randn(batch, 3, *size, generator=generator)
    return images, torch.randint(0, model.num_classes, (batch,), generator=generator)


def pedantic(benchmark: Any, target: Any, **kwargs: Any) -> Any:
    """`benchmark.pedantic` with this module's rounds; one call per round."""
    return benchmark.pedantic(target, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1, **kwargs)


@pytest.fixture
def vit() -> torch.nn.Module:
    return smoke_vit()
