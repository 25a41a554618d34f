"""What masking costs a step: masked RigL's training step against dense's on the smoke model, in
paired rounds (one process, the two steps alternating, each pair in the other order from the one
before, so that drifting load and cache order fall on both alike).

The goal (issue 12): RigL's step at most 1.03x dense's. The figure gated is the median of the
per-pair ratios (rigl / dense within each pair); the ratio of the two medians is recorded beside it.
On a shared machine step times are bimodal (other processes come and go), and the two medians can
fall in different modes: measured here under load, ratios of medians of 0.98 to 1.47 in four runs
of the same code, while the per-pair medians stayed within 1.012 to 1.020. Both go to
`benchmark.extra_info`. Gate: only a deliberate timing run asserts the goal, i.e. with
`--benchmark-enable` outside quick mode:

    python -m pytest tests/benchmarks/test_masked_overhead.py --benchmark-enable --benchmark-only

The plain test run (benchmarks disabled: one pair) and CI's quick mode (a few pairs on a shared
machine) record the figures and assert only that both methods trained.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

import dstbench
from tests.benchmarks.conftest import OPTIMIZER, QUICK, TOTAL_STEPS, smoke_batch, smoke_vit

GOAL = 1.03
PAIRS, WARMUP_STEPS = (4, 1) if QUICK else (40, 3)


def _steady_method(name: str, density: float) -> dstbench.Method:
    method = dstbench.create_method(name, smoke_vit(), density=density, total_steps=TOTAL_STEPS, optimizer=OPTIMIZER)
    method.update_due = lambda step: False  # type: ignore[method-assign]  # ordinary steps only
    return method


def test_masked_rigl_step_against_dense(benchmark: Any) -> None:
    dense, rigl = _steady_method("dense", 1.0), _steady_method("rigl", 0.1)
    inputs, targets = smoke_batch(dense.model)
    for method in (dense, rigl):
        for _ in range(WARMUP_STEPS):
            method.train_step(inputs, targets)
    times: dict[str, list[float]] = {"dense": [], "rigl": []}
    losses: list[torch.Tensor] = []

    def pair() -> None:
        order = (dense, rigl) if len(times["dense"]) % 2 == 0 else (rigl, dense)
        for method in order:
            start = time.perf_counter()
            losses.append(method.train_step(inputs, targets))
            times[method.name].append((time.perf_counter() - start) * 1e3)

    benchmark.group = "masked step overhead"
    benchmark.pedantic(pair, rounds=PAIRS, warmup_rounds=0, iterations=1)
    pairs = len(times["rigl"])
    ratio_of_medians = statistics.median(times["rigl"]) / statistics.median(times["dense"])
    median_pair_ratio = statistics.median(r / d for r, d in zip(times["rigl"], times["dense"]))
    gated = not QUICK and not benchmark.disabled
    benchmark.extra_info.update(
        pairs=pairs, dense_median_ms=statistics.median(times["dense"]), rigl_median_ms=statistics.median(times["rigl"]),
        ratio_of_medians=ratio_of_medians, median_pair_ratio=median_pair_ratio, goal=GOAL, gated=gated,
        rigl_density=0.1, threads=torch.get_num_threads(),
    )
    assert pairs >= 1 and all(torch.isfinite(loss) for loss in losses)
    assert dense.step == rigl.step == WARMUP_STEPS + pairs
    if gated:
        assert median_pair_ratio <= GOAL, (
            f"masked rigl's step is {median_pair_ratio:.3f}x dense's (median of {pairs} pair ratios; goal "
            f"<= {GOAL}); ratio of the medians {ratio_of_medians:.3f}"
        )
