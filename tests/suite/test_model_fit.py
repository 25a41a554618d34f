"""A suite on any timm model (dstbench.suite.model_fit and the `model` keys): what validation
refuses before anything runs, which `prunable` wins and what `--dry-run` lists. That every
committed ViT suite keeps its hash: tests/suite/test_seeds.py (`SUITE_HASHES`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import dstbench.methods as catalog
from dstbench.cli import main
from dstbench.models.timm_models import create_model
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import SGD, micro_suite

RESNET = {"name": "resnet18", "num_classes": 7, "input_size": [3, 32, 32]}


def resnet_suite(methods: list[Any], **overrides: Any) -> dict[str, Any]:
    return micro_suite(**{"model": dict(RESNET), "methods": methods, "densities": [0.1], "optimizer": SGD, **overrides})


def refused(suite: dict[str, Any]) -> str:
    with pytest.raises(SuiteError) as raised:
        parse_suite(suite)
    return str(raised.value)


def test_methods_that_cannot_train_the_model_are_refused_naming_method_and_model() -> None:
    message = refused(resnet_suite(["dense", "barter"]))
    assert "methods.1: barter cannot train 'resnet18' (ResNet)" in message and "VisionTransformer" in message
    assert "small_dense cannot train 'resnet18' (ResNet)" in refused(resnet_suite(["small_dense"]))
    parse_suite(resnet_suite(["srigl", "chase"]))  # a filter's inputs are its fan-in; a block's inner channels go whole
    efficientnet = refused(micro_suite(model={"name": "efficientnet_b0", "num_classes": 7, "input_size": [3, 32, 32]}, methods=["chase"]))
    assert "chase cannot train 'efficientnet_b0' (EfficientNet): chase removes the channels of timm Attention, Mlp and ResNet blocks" in efficientnet
    csr = refused(resnet_suite([{"name": "rigl", "params": {"execution": "csr"}}]))
    assert "execution csr computes linear (2-D) weights only; layer1.0.conv1.weight and 18 more of the ResNet are convolutions" in csr
    assert "fuse_norms: fuses the LayerNorm and Linear pairs of ViT blocks, which 'resnet18' (ResNet) does not have" in refused(
        resnet_suite(["dense"], fuse_norms=True))
    nothing = refused(resnet_suite([{"name": "rigl", "params": {"prunable": r"blocks\..*"}}]))
    assert "no parameter of the ResNet matches prunable 'blocks\\\\..*'" in nothing
    parse_suite(micro_suite(model={"name": "swin_tiny_patch4_window7_224", "num_classes": 7}, methods=["chase"], densities=[0.1]))  # its Mlps


def test_condensed_execution_is_refused_off_constant_fan_in_and_on_convolutions() -> None:
    parse_suite(micro_suite(methods=[{"name": "srigl", "params": {"execution": "condensed"}}]))
    rigl = refused(micro_suite(methods=[{"name": "rigl", "params": {"execution": "condensed"}}]))
    assert "execution condensed stores the same fan-in in every live neuron" in rigl
    conv = refused(resnet_suite([{"name": "srigl", "params": {"execution": "condensed"}}]))
    assert "execution condensed computes linear (2-D) weights only" in conv


def test_model_keys_are_checked_naming_the_key() -> None:
    assert "model: cannot build 'resnet_17'" in refused(micro_suite(model={"name": "resnet_17"}))
    vit = refused(micro_suite(model={"name": "vit_tiny_patch16_224", "input_size": [3, 32, 32]}))
    assert "model: input_size [3, 32, 32], but 'vit_tiny_patch16_224' (a VisionTransformer) takes [3, 224, 224]" in vit
    assert "model.prunable: not a valid regular expression" in refused(resnet_suite(["rigl"], model=RESNET | {"prunable": "("}))
    assert "input_size" in refused(resnet_suite(["rigl"], model=RESNET | {"input_size": [3, 32]}))


def test_a_refused_suite_exits_2_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(resnet_suite(["dense", "barter"])))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "runs")]) == 2
    assert "barter cannot train 'resnet18'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_dry_run_lists_the_pruned_weights_with_shapes_and_budgets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(resnet_suite(["dense", "rigl", "set"])))
    assert main(["run", str(tmp_path / "s.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "pruned by rigl, set: 19 weights of resnet18, 11,157,504 in all" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.endswith((".weight",)) or ".weight " in line}
    assert rows["layer1.0.conv1.weight"][0] == "64x64x3x3" and "conv1.weight" not in rows and "fc.weight" not in rows
    assert rows["layer2.0.downsample.0.weight"] == ["128x64x1x1", "8,192"]  # ERK makes a 1x1 shortcut dense


def test_a_methods_prunable_beats_the_models_which_beats_the_default() -> None:
    def masked(model_prunable: str | None, **params: Any) -> set[str]:
        model = create_model("resnet18", num_classes=7)
        method = catalog.create_method("rigl", model, density=0.5, total_steps=10, optimizer=SGD, model_prunable=model_prunable, **params)
        return set(method.prunable())

    default = masked(None)
    assert len(default) == 19 and "conv1.weight" not in default
    assert masked(r"layer4\..*conv\d\.weight") == {f"layer4.{b}.conv{c}.weight" for b in (0, 1) for c in (1, 2)}
    assert masked(r"layer4\..*conv\d\.weight", prunable=r"fc\.weight") == {"fc.weight"}
    # A dense method's density counts the same weights.
    dense = catalog.create_method("dense", create_model("resnet18", num_classes=7), density=1.0, total_steps=10, optimizer=SGD)
    assert set(dense.prunable()) == default and dense.density() == pytest.approx(1.0, abs=1e-6)  # counted from nonzeros


def test_a_method_for_linear_weights_alone_is_refused_on_convolutions() -> None:
    from dstbench.dst.masked.masked_method import MaskedMethod

    class RowsOnly(MaskedMethod):
        name = "rows_only"
        conv_weights = False

    resnet = create_model("resnet18", device="meta", num_classes=7)
    problem = RowsOnly.model_problem(resnet, {}, None)
    assert problem == ("rows_only does not prune convolution weights yet (layer1.0.conv1.weight and 18 more of the ResNet); "
                       "name linear weights alone with prunable")
    assert RowsOnly.model_problem(resnet, {"prunable": r"fc\.weight"}, None) is None


def test_dry_run_shows_each_compact_methods_initial_layout_as_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import dstbench
    from dstbench.suite.model_fit import compact_layouts

    raw = micro_suite(methods=["dense", "barter", {"name": "small_dense", "label": "uniform", "params": {"layout": "uniform"}}],
                      densities=[0.3, 0.1])
    suite = parse_suite(raw, "s.yaml")
    layouts = {(label, density): (heads, hidden, share) for label, density, heads, hidden, share in compact_layouts(suite)}
    assert set(layouts) == {("barter", 0.3), ("barter", 0.1), ("uniform", 0.3), ("uniform", 0.1)}
    for (label, density), (heads, hidden, share) in layouts.items():
        name = "barter" if label == "barter" else "small_dense"
        params = {"layout": "uniform"} if label == "uniform" else {}
        model = create_model(suite.model.name, **suite.model.kwargs)
        method = dstbench.create_method(name, model, density=density, total_steps=10, optimizer=SGD, **params)
        built = method.result_extras().get("layout") or {"heads": [t["heads"] for t in method.topology()],
                                                          "hidden": [t["hidden"] for t in method.topology()]}
        assert (built["heads"], built["hidden"]) == (heads, hidden), (label, density)
        assert method.density() == pytest.approx(share, abs=1e-9)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "compact methods' initial layouts" in out and f"{layouts[('barter', 0.1)][2]:.4f}" in out
