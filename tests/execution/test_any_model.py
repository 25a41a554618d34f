"""Masked DST on timm models other than ViTs, run end to end: resnet18 with every masked method
(`suites/cpu_resnet18.yaml`), rigl, srigl and chase on a ConvNeXt, and on a small CNN the accuracy
track, torch.compile and a checkpoint; FLOPs, state and activation bytes measured on convolutions."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import dstbench
from dstbench.results.derive import derive, load_frame
from dstbench.suite.loading import read_yaml
from tests.conftest import micro_suite
from tests.execution.test_accuracy_track import digits_suite

REPO = Path(__file__).resolve().parents[2]
RESNET = {"name": "resnet18", "num_classes": 7, "input_size": [3, 32, 32]}
SMALL_CNN = {"name": "test_resnet", "num_classes": 10, "in_chans": 1, "input_size": [1, 8, 8]}  # timm's test model


def run(tmp_path: Path, suite: dict[str, Any]) -> Path:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    return dstbench.run_suite(tmp_path / "s.yaml", out=tmp_path / "runs", progress=False).path


@pytest.mark.slow
def test_resnet18_runs_every_masked_method_that_prunes_convolutions(tmp_path: Path) -> None:
    suite = read_yaml(REPO / "suites" / "cpu_resnet18.yaml")  # as committed, with fewer segments
    assert suite["model"] == RESNET
    suite.update(threads=1, launcher={"name": "inprocess"}, timing={**suite["timing"], "segments": 3})
    frame = derive(load_frame([run(tmp_path, suite)]), "dense").set_index("case_id")
    assert list(frame.index) == ["dense@1", "static@0.1", "set@0.1", "rigl@0.1", "mest@0.1", "gmp@0.1", "srigl@0.1", "chase@0.1",
                                 "small_dense_scaled@0.1"]
    assert (frame["status"] == "ok").all(), frame["error"].dropna().tolist()
    sparse = frame.drop(index="dense@1")
    assert ((sparse["density_achieved"] - 0.1).abs() <= 0.01).all(), sparse["density_achieved"].to_dict()
    assert (frame["flops_per_step"] > 0).all() and (frame["state_bytes"] > 0).all() and (frame["activation_bytes"] > 0).all()
    # Masked execution runs dense kernels over zero-filled convolutions: no fewer FLOPs than dense;
    # the RigL paper's Small-Dense is a narrower resnet18, with far fewer.
    assert sparse.drop(index="small_dense_scaled@0.1")["flop_limit"].tolist() == pytest.approx([1.0] * 7)
    assert frame.loc["small_dense_scaled@0.1", "flop_limit"] > 3
    assert frame.loc["rigl@0.1", "topology_updates"] > 0 and frame.loc["chase@0.1", "topology_updates"] > 0
    assert frame.loc["chase@0.1", "method_extras"]["channel_sparsity"]["channel"] > 0
    # Each masked case's prunable weights: the 19 convolutions of the default.
    assert frame.loc["rigl@0.1", "method_extras"]["prunable_weights"] == 11_157_504


@pytest.mark.slow
def test_rigl_srigl_and_chase_run_on_a_convnext(tmp_path: Path) -> None:
    methods = [{"name": name, "params": {"delta_t": 2}} for name in ("rigl", "srigl")] + [
        {"name": "chase", "params": {"delta_t": 2, "death_rate": 0.0}}]
    suite = micro_suite(model={"name": "convnext_atto", "num_classes": 7, "input_size": [3, 32, 32]},
                        methods=methods, densities=[0.1], reference="rigl",
                        timing={"warmup_steps": 2, "segment_steps": 2, "segments": 2, "total_steps": 20})
    lines = load_frame([run(tmp_path, suite)]).to_dict("records")
    assert [line["case_id"] for line in lines] == ["rigl@0.1", "srigl@0.1", "chase@0.1"]
    for line in lines:
        assert line["status"] == "ok" and abs(line["density_achieved"] - 0.1) <= 0.01 and line["topology_updates"] > 0, line["case_id"]


def test_a_small_cnn_trains_in_accuracy_mode(tmp_path: Path) -> None:
    suite = digits_suite(model=SMALL_CNN, methods=[{"name": "rigl", "params": {"delta_t": 3}}], densities=[0.1],
                         accuracy={"epochs": 1, "checkpoint_every": 0})
    [line] = load_frame([run(tmp_path, suite)]).to_dict("records")
    assert line["status"] == "ok", line.get("error")
    assert 0 <= line["top1"] <= 1 and line["curve"][-1]["step"] == line["method_extras"]["steps_total"]
    assert abs(line["density_achieved"] - 0.1) <= 0.01 and line["method_extras"]["topology_updates_total"] > 0


def test_a_small_cnn_trains_under_torch_compile(tmp_path: Path) -> None:
    suite = micro_suite(model=SMALL_CNN, methods=[{"name": "rigl", "params": {"delta_t": 2}}], densities=[0.1], reference="rigl",
                        compile={"backend": "eager"}, timing={"warmup_steps": 2, "segment_steps": 2, "segments": 2, "total_steps": 20})
    [line] = load_frame([run(tmp_path, suite)]).to_dict("records")
    assert line["status"] == "ok", line.get("error")
    assert line["compile"]["backend"] == "eager" and math.isfinite(line["compile_s"])
    assert line["state_bytes"] > 0 and line["activation_bytes"] > 0 and line["flops_per_step"] > 0


def test_a_cnn_checkpoint_loads_with_its_classifier_reinitialised(tmp_path: Path) -> None:
    import torch

    from dstbench.dst.checkpoint import load_pretrained
    from dstbench.models.timm_models import create_model

    source = create_model("test_resnet", num_classes=10)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    model = create_model("test_resnet", num_classes=7)
    loaded = load_pretrained(model, tmp_path / "w.pt")
    assert loaded["reinitialised"] == ["fc.bias", "fc.weight"]  # another class count: the classifier starts afresh
    assert torch.equal(model.state_dict()["conv1.0.weight"], source.state_dict()["conv1.0.weight"])
