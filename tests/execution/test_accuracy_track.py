"""Accuracy mode: schedule, evaluation, the result fields, resume equality, and `mode: both`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import dstbench.methods as catalog
from dstbench.execution.accuracy_track import WarmupCosine, evaluate, measure_accuracy
from dstbench.suite.cases import Case
from dstbench.dst.checkpoint import case_checkpoint_path
from dstbench.results.record import load_results
from dstbench.execution.orchestrator import run_suite
from dstbench.execution.case_session import base_result
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite

CPU = torch.device("cpu")
# Digits at their native 8x8 through 4x4 patches: 4 tokens, a few milliseconds per step.
DIGITS_MODEL = {"name": "vit_tiny_patch16_224", "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 10,
                "embed_dim": 32, "depth": 2, "num_heads": 4}


def digits_suite(**overrides: Any) -> dict[str, Any]:
    accuracy = {"epochs": 3, "warmup_epochs": 1, "eval_every": 2, "checkpoint_every": 1, **overrides.pop("accuracy", {})}
    settings: dict[str, Any] = {
        "mode": "accuracy", "model": DIGITS_MODEL, "batch_size": 128, "accuracy": accuracy,
        "data": {"name": "digits", "num_workers": 0, "augment": {"flip": False}},
        "optimizer": {"name": "adamw", "lr": 0.005, "weight_decay": 0.05},
    }
    return micro_suite(**{**settings, **overrides})


def case_of(name: str, density: float = 0.5, **params: Any) -> Case:
    kind = catalog.method_info(name).kind
    return Case(name, name, kind, 1.0 if kind == "dense" else density, params)


def test_warmup_then_cosine_to_the_floor() -> None:
    schedule = WarmupCosine(warmup=4, total=14, floor=0.01)
    assert [schedule(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert schedule(4) == 1.0 and math.isclose(schedule(9), 0.505)
    assert math.isclose(schedule(14), 0.01) and math.isclose(schedule(100), 0.01)
    assert WarmupCosine(0, 10, 0.0)(0) == 1.0


class FixedLogits(torch.nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.logits[inputs[:, 0].long()]


def test_evaluate_counts_top1_and_top5() -> None:
    logits = torch.tensor([[9.0, 8, 7, 6, 5, 4, 0], [0.0, 1, 2, 3, 4, 5, 6], [0.0, 9, 0, 0, 0, 0, 0]])
    batches = [(torch.tensor([[0.0], [1.0]]), torch.tensor([4, 0])), (torch.tensor([[2.0]]), torch.tensor([1]))]
    point = evaluate(FixedLogits(logits), batches, CPU, "fp32", num_classes=7)
    assert point["top1"] == pytest.approx(1 / 3) and point["top5"] == pytest.approx(2 / 3)
    assert evaluate(FixedLogits(logits[:, :5]), batches, CPU, "fp32", num_classes=5)["top5"] is None


def test_accuracy_case_fills_the_result(tmp_path: Path) -> None:
    suite = parse_suite(digits_suite(accuracy={"checkpoint_every": 0}))
    case = case_of("dense")
    result = base_result(suite, case)
    stages: list[tuple[str, int, int]] = []
    method = measure_accuracy(suite, case, CPU, result, tmp_path, lambda *p: stages.append(p))
    assert stages == [("epoch", 1, 3), ("epoch", 2, 3), ("epoch", 3, 3)]
    assert [point["epoch"] for point in result.curve] == [2, 3]  # every 2 epochs and the last
    assert result.curve[-1]["step"] == method.step == 3 * (1437 // 128)
    assert result.top1 == result.curve[-1]["top1"] and 0.0 <= result.top1 <= result.top5 <= 1.0
    assert result.top1 > 0.2  # three short epochs already beat chance (0.1) on digits
    assert result.epochs == 3 and result.train_time_s > 0 and result.density_achieved == 1.0
    assert "digits (1437 train / 360 test images)" in result.data_loading
    assert result.curve[-1]["lr"] == pytest.approx(suite.accuracy.min_lr)
    assert not (tmp_path / "checkpoints").exists()


def _state(method) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    state = method.state_dict()
    return {"model": state["model"], "extra": state["extra"], "step": state["step"],
            "updates": state["topology_updates"], "optimizer": state["optimizer"]["state"]}


def _assert_equal(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            _assert_equal(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


class Interrupted(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rigl", "barter"])
def test_resumed_case_ends_like_an_uninterrupted_one(tmp_path: Path, name: str) -> None:
    if name not in catalog.list_methods():
        pytest.fail(f"method {name} is not registered")
    suite = parse_suite(digits_suite(accuracy={"keep_checkpoint": True}))
    case = case_of(name, delta_t=4, drop_fraction=0.5)  # updates at steps 4, 8, ..., 24 of 33

    straight_result = base_result(suite, case)
    straight = measure_accuracy(suite, case, CPU, straight_result, tmp_path / "straight", lambda *p: None)
    assert straight.topology_updates >= 4

    def stop_after_first_epoch(stage: str, done: int, total: int) -> None:
        if done == 1:
            raise Interrupted

    with pytest.raises(Interrupted):
        measure_accuracy(suite, case, CPU, base_result(suite, case), tmp_path / "resumed", stop_after_first_epoch)
    assert case_checkpoint_path(tmp_path / "resumed", case.case_id).exists()
    epochs_run: list[int] = []
    resumed_result = base_result(suite, case)
    resumed = measure_accuracy(
        suite, case, CPU, resumed_result, tmp_path / "resumed", lambda s, d, t: epochs_run.append(d), resume=True
    )
    assert epochs_run == [2, 3]  # continued, not restarted
    _assert_equal(_state(straight), _state(resumed))
    assert [{k: v for k, v in p.items() if k != "train_time_s"} for p in straight_result.curve] == [
        {k: v for k, v in p.items() if k != "train_time_s"} for p in resumed_result.curve
    ]
    assert resumed_result.top1 == straight_result.top1


def test_a_checkpoint_of_another_setup_is_not_resumed(tmp_path: Path) -> None:
    suite = parse_suite(digits_suite(accuracy={"epochs": 1, "keep_checkpoint": True}))
    case = case_of("dense")
    measure_accuracy(suite, case, CPU, base_result(suite, case), tmp_path, lambda *p: None)
    other = parse_suite(digits_suite(accuracy={"epochs": 1, "keep_checkpoint": True}, seed=1))
    with pytest.raises(ValueError, match="from another setup"):
        measure_accuracy(other, case, CPU, base_result(other, case), tmp_path, lambda *p: None, resume=True)


@pytest.mark.slow
def test_both_modes_from_one_suite_and_resume_through_the_cli_path(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(digits_suite(mode="both", methods=["dense"], accuracy={"epochs": 1, "keep_checkpoint": True})))
    run_dir = run_suite(path, out=tmp_path / "runs")
    [first] = load_results(run_dir)
    assert first.status == "ok", first.error
    assert first.median_ms is not None and len(first.segment_ms) == 3  # speed segments
    assert first.top1 is not None and first.epochs == 1  # and accuracy, on the same line
    # The speed segments read digits too (a real dataset in a speed suite comes through the loader).
    assert first.data_loading.startswith("digits (1437 train / 360 test images), DataLoader (in-process)")
    assert first.method_extras["steps_total"] == 1437 // 128  # the extras are the training run's (its phase)
    # Drop the result line as if the run had died after the case's last checkpoint: --resume
    # takes the case from that checkpoint instead of training it again.
    (run_dir / "results.jsonl").write_text("")
    run_suite(path, out=tmp_path / "runs", resume=True)
    [again] = load_results(run_dir)
    assert again.train_time_s == first.train_time_s and again.top1 == first.top1
    assert json.loads((run_dir / "run.json").read_text())["suite"] == "micro"
