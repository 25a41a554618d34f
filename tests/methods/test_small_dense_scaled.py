"""small_dense `layout: scaled`, the RigL paper's Small-Dense: every width narrowed by one
multiplier on ViTs and timm CNNs, its prunable count at the density, the runs, and the refusals."""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

import pytest
import torch

import dstbench
from dstbench.execution.case_session import CaseTask, run_case
from dstbench.models.scaled_widths import prunable_numel, scaled_widths
from dstbench.models.timm_models import create_model
from dstbench.suite.loading import SuiteError, parse_suite
from dstbench.suite.plan import expand_cases
from tests.conftest import ADAMW, SGD, micro_suite

MICRO = {k: v for k, v in micro_suite()["model"].items() if k != "name"}
VIT_SMALL = {"img_size": 32, "patch_size": 4, "num_classes": 100}
MODELS = [
    ("vit_small_patch16_224", VIT_SMALL),  # ViT-Small: 6 heads of 64, FFN 1536
    ("vit_small_patch16_224", {**VIT_SMALL, "embed_dim": 192, "num_heads": 3}),  # l40_vit's narrowest width
    ("vit_small_patch16_224", {**VIT_SMALL, "embed_dim": 768, "num_heads": 12}),  # and its widest
    (micro_suite()["model"]["name"], MICRO),  # the micro ViT: 4 heads of 16
    ("resnet18", {"num_classes": 7}),
    ("convnext_atto", {"num_classes": 7}),
]


@pytest.mark.parametrize("name, kwargs", MODELS, ids=["vit-small", "vit-192", "vit-768", "micro-vit", "resnet18", "convnext-atto"])
@pytest.mark.parametrize("density", [0.1, 0.3, 0.5, 0.7])
def test_the_narrowed_model_holds_the_density_within_0_02(name: str, kwargs: dict[str, Any], density: float) -> None:
    plan = scaled_widths(name, kwargs, density)
    narrowed, full = create_model(name, device="meta", **plan.kwargs), create_model(name, device="meta", **kwargs)
    assert plan.prunable == prunable_numel(narrowed) and plan.full_prunable == prunable_numel(full)
    assert abs(plan.density - density) <= 0.02
    # Every width narrowed, none widened; one multiplier's rounding apart.
    if "embed_dim" in plan.widths:
        assert narrowed.embed_dim == plan.widths["embed_dim"] == plan.widths["num_heads"] * plan.widths["head_dim"]
        assert plan.widths["head_dim"] == full.embed_dim // full.blocks[0].attn.num_heads  # the head dimension kept
        assert narrowed.blocks[0].mlp.fc1.out_features == plan.widths["mlp_hidden"] <= full.blocks[0].mlp.fc1.out_features
    else:
        widths = plan.widths.get("channels") or plan.widths["dims"]
        stages = [int(i["num_chs"]) for i in full.feature_info if str(i["module"]).startswith(("layer", "stages"))]
        expansion = int(getattr(type(getattr(full, "layer1", [None])[0]), "expansion", 1))
        assert all(abs(w - s // expansion * plan.multiplier) <= 0.5 for w, s in zip(widths, stages))


def test_the_resnet_keeps_its_stem_input_and_classes_and_its_residual_paths_fit() -> None:
    plan = scaled_widths("resnet18", {"num_classes": 7}, 0.1)
    model = create_model("resnet18", **plan.kwargs)
    assert model.conv1.in_channels == 3 and model.get_classifier().out_features == 7
    # timm's basic stem stays 64 wide; the first block projects it to its width (counted as prunable).
    assert model.conv1.out_channels == 64 and model.layer1[0].downsample[0].out_channels == plan.widths["channels"][0]
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    deep = scaled_widths("resnet18d", {"num_classes": 7}, 0.25)  # a deep stem narrows with stem_width
    assert deep.widths["stem_width"] == round(32 * deep.multiplier) and abs(deep.density - 0.25) <= 0.02


def _case(suite: Any, case_id: str) -> Any:
    [case] = [c for c in expand_cases(suite) if c.case_id == case_id]
    return run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), tempfile.mkdtemp()))


def test_a_scaled_micro_vit_trains_at_its_density_beside_the_other_layouts() -> None:
    methods = [{"name": "small_dense", "label": "scaled", "params": {"layout": "scaled"}},
               {"name": "small_dense", "label": "uniform", "params": {"layout": "uniform"}}]
    suite = parse_suite(micro_suite(methods=methods, densities=[0.5]))
    scaled, uniform = _case(suite, "scaled@0.5"), _case(suite, "uniform@0.5")
    assert scaled.status == uniform.status == "ok"
    assert abs(scaled.density_achieved - 0.5) <= 0.01
    assert scaled.method_extras["layout_rule"] == "scaled" and scaled.method_extras["scaled_widths"]["embed_dim"] < 64
    assert scaled.state_bytes < uniform.state_bytes  # the embedding, norms and head narrow too


def test_a_micro_cnn_runs_scaled_where_the_vit_layouts_are_refused() -> None:
    resnet = {"name": "resnet18", "num_classes": 7, "input_size": [3, 16, 16]}
    suite = parse_suite(micro_suite(model=resnet, optimizer=SGD, densities=[0.1], batch_size=4,
                                    methods=[{"name": "small_dense", "params": {"layout": "scaled"}}]))
    result = _case(suite, "small_dense@0.1")
    assert result.status == "ok", result.error
    assert abs(result.density_achieved - 0.1) <= 0.02 and result.method_extras["scaled_widths"]["channels"][-1] < 512
    with pytest.raises(SuiteError, match="small_dense cannot train 'resnet18'.*layout scaled narrows a ResNet or ConvNeXt"):
        parse_suite(micro_suite(model=resnet, optimizer=SGD, methods=["small_dense"]))
    efficientnet = {"name": "efficientnet_b0", "num_classes": 7, "input_size": [3, 32, 32]}
    with pytest.raises(SuiteError, match="layout scaled narrows a VisionTransformer, ResNet or ConvNeXt, not a EfficientNet"):
        parse_suite(micro_suite(model=efficientnet, optimizer=SGD, methods=[{"name": "small_dense", "params": {"layout": "scaled"}}]))


def test_a_layout_more_than_0_01_off_its_density_warns() -> None:
    from tests.conftest import micro_vit

    # The micro ViT's uniform layout at 0.05: one head per block already holds more than the budget.
    with pytest.warns(UserWarning, match="holds 0.0[6-9].* more than 0.01 off"):
        dstbench.create_method("small_dense", micro_vit(), density=0.05, total_steps=4, optimizer=ADAMW, layout="uniform")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dstbench.create_method("small_dense", micro_vit(), density=0.5, total_steps=4, optimizer=ADAMW, layout="uniform")


def test_scaled_needs_the_models_name_and_kwargs() -> None:
    from tests.conftest import micro_vit

    with pytest.raises(ValueError, match="pass model_name and model_kwargs"):
        dstbench.create_method("small_dense", micro_vit(), density=0.5, total_steps=4, optimizer=ADAMW, layout="scaled")
    method = dstbench.create_method("small_dense", micro_vit(), density=0.5, total_steps=4, optimizer=ADAMW, layout="scaled",
                                    model_name=micro_suite()["model"]["name"], model_kwargs=MICRO)
    assert abs(method.density() - 0.5) <= 0.01 and method.model.embed_dim < 64


def test_a_checkpoint_of_the_full_model_is_refused_for_scaled(tmp_path: Any) -> None:
    checkpoint = tmp_path / "full.pt"
    torch.save({}, checkpoint)
    model = {**micro_suite()["model"], "checkpoint": str(checkpoint)}
    with pytest.raises(SuiteError, match="builds a model of other widths .* model.checkpoint cannot be loaded"):
        parse_suite(micro_suite(model=model, methods=[{"name": "small_dense", "params": {"layout": "scaled"}}]))


def test_scaled_trains_in_accuracy_mode() -> None:
    model = {**micro_suite()["model"], "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 4}
    data = {"name": "teacher", "teacher": {"classes": 4, "train_size": 64, "test_size": 32}}  # a generated test split
    suite = parse_suite(micro_suite(model=model, data=data, mode="accuracy", densities=[0.5],
                                    methods=[{"name": "small_dense", "params": {"layout": "scaled"}}]))
    result = _case(suite, "small_dense@0.5")
    assert result.status == "ok", result.error
    assert result.top1 is not None and result.method_extras["layout_rule"] == "scaled"
