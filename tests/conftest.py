"""Shared fixtures: micro ViTs (embed 64, depth 2: a few ms per step) and micro suites."""

from __future__ import annotations

import os

# Before torch loads OpenMP: spinning worker threads starve each other when the test processes share
# two cores (measured 20x slower steps). The tests time nothing, so passive waiting's cost on a quiet
# machine does not matter here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Runs in tests write no collect_env.txt (seconds of pip and lscpu per run); tests/measure/test_environment.py
# writes one on purpose.
os.environ.setdefault("DSTBENCH_COLLECT_ENV", "0")

import copy
from typing import Any, Iterator

import pytest
import torch

from dstbench.models.timm_models import create_vit

MICRO_MODEL: dict[str, Any] = {
    "name": "vit_tiny_patch16_224",
    "img_size": 32,
    "patch_size": 8,
    "num_classes": 10,
    "embed_dim": 64,
    "depth": 2,
    "num_heads": 4,
}


def micro_vit(seed: int = 0, **overrides: Any) -> torch.nn.Module:
    torch.manual_seed(seed)
    spec = {**MICRO_MODEL, **overrides}
    name = spec.pop("name")
    return create_vit(name, **spec)


def micro_batches(batch_size: int = 8, num_classes: int = 10, seed: int = 0, img_size: int = 32) -> Iterator:
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield (
            torch.randn(batch_size, 3, img_size, img_size, generator=generator),
            torch.randint(0, num_classes, (batch_size,), generator=generator),
        )


def micro_suite(**overrides: Any) -> dict[str, Any]:
    """A suite dict that runs in about a second per case, in-process by default."""
    suite: dict[str, Any] = {
        "name": "micro",
        "device": "cpu",
        "model": dict(MICRO_MODEL),
        "batch_size": 8,
        # One intra-op thread per case (see `one_thread`); the default would be every core.
        "threads": 1,
        "timing": {"warmup_steps": 2, "segment_steps": 3, "segments": 3},
        "methods": ["dense"],
        "densities": [0.5],
        "launcher": {"name": "inprocess"},
    }
    suite.update(copy.deepcopy(overrides))
    return suite


ADAMW = {"name": "adamw", "lr": 1e-3, "weight_decay": 0.05}
SGD = {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0}


@pytest.fixture
def vit() -> torch.nn.Module:
    return micro_vit()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run on one intra-op thread, then restore: micro models gain nothing from a second one, and
    on a shared 2-core machine two OpenMP threads per process thrash (measured: steps 20x slower).
    Directories of micro-model tests use it for every test (their conftest.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def both_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A digits run in `mode: both` (the steps-to-target tests' suite): dense, RigL and BARTER at 0.5
    over seeds 0 and 1, three epochs of 44 steps, updates every 10 steps in both tracks (the timed
    segments hold some), two process sets of three rounds; target top-1 0.3. Shared by the
    time-to-target and report tests: made once per session (about 10 s)."""
    import yaml

    import dstbench
    from tests.execution.test_accuracy_track import digits_suite

    tmp = tmp_path_factory.mktemp("both")
    suite = digits_suite(
        methods=["dense", {"name": "rigl", "params": {"delta_t": 10}}, {"name": "barter", "params": {"delta_t": 10}}],
        batch_size=32, mode="both", timing={"warmup_steps": 2, "segment_steps": 5, "segments": 6, "total_steps": 132, "processes": 2},
        accuracy={"epochs": 3, "eval_every": 1, "checkpoint_every": 0, "target_top1": 0.3},
        expect=[{"metric": "time_to_target_speedup", "method": "barter", "vs": "rigl", "min": 0.01},
                {"metric": "time_to_target", "method": "barter", "max": 1000.0, "bound": "ci_high"}],
    )
    suite["seeds"] = [0, 1]
    (tmp / "s.yaml").write_text(yaml.safe_dump(suite))
    return dstbench.run_suite(tmp / "s.yaml", out=tmp / "runs", progress=False).path
