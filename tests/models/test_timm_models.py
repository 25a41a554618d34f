"""Any timm model (dstbench.models.timm_models): the weights DST prunes by default in each family
(ViT and DeiT: the block linears; ResNet, ConvNeXt, Swin: every convolution and linear but the
stem and the classifier) and the input a model takes."""

from __future__ import annotations

import pytest

from dstbench.models.timm_models import create_model, default_prunable, input_shape, prunable_weights
from dstbench.models.vit import DEFAULT_PRUNABLE


def pruned(name: str, **kwargs: object) -> set[str]:
    return set(prunable_weights(create_model(name, device="meta", **kwargs)))


def test_a_resnet_prunes_every_convolution_but_the_stem_and_not_the_classifier() -> None:
    names = pruned("resnet18", num_classes=7)
    assert "layer1.0.conv1.weight" in names and "layer2.0.downsample.0.weight" in names  # shortcut projections too
    assert "conv1.weight" not in names and "fc.weight" not in names
    assert len(names) == 19 and all(name.endswith(".weight") for name in names)  # 20 convolutions less the stem
    assert not any("bn" in name for name in names)  # norms and biases stay dense


def test_a_convnext_prunes_its_depthwise_and_pointwise_layers_but_not_stem_or_head() -> None:
    names = pruned("convnext_atto", num_classes=7)
    assert {"stages.0.blocks.0.conv_dw.weight", "stages.0.blocks.0.mlp.fc1.weight", "stages.0.blocks.0.mlp.fc2.weight",
            "stages.1.downsample.1.weight"} <= names
    assert "stem.0.weight" not in names and "head.fc.weight" not in names


def test_deit_is_a_vit_and_swin_is_not() -> None:
    model = create_model("deit_tiny_patch16_224", device="meta", num_classes=7)
    assert default_prunable(model) == DEFAULT_PRUNABLE
    names = set(prunable_weights(model))
    assert "blocks.0.attn.qkv.weight" in names and "patch_embed.proj.weight" not in names and "head.weight" not in names
    swin = pruned("swin_tiny_patch4_window7_224", num_classes=7)
    assert {"layers.0.blocks.0.attn.qkv.weight", "layers.0.blocks.0.mlp.fc1.weight", "layers.1.downsample.reduction.weight"} <= swin
    assert "patch_embed.proj.weight" not in swin and "head.fc.weight" not in swin
    assert not any("relative_position_bias_table" in name for name in swin)  # a parameter, not a layer's weight


def test_the_input_is_the_suites_else_the_vits_else_timms_config() -> None:
    resnet = create_model("resnet18", device="meta")
    assert input_shape(resnet) == (3, 224, 224)  # timm's pretrained config
    assert input_shape(resnet, [3, 32, 32]) == (3, 32, 32)
    assert input_shape(create_model("vit_tiny_patch16_224", device="meta", img_size=32, patch_size=8)) == (3, 32, 32)
    assert input_shape(create_model("resnet18", device="meta", in_chans=1)) == (1, 224, 224)


def test_unknown_models_and_pretrained_downloads_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown timm model 'resnet_17'"):
        create_model("resnet_17")
    with pytest.raises(ValueError, match="pretrained downloads are not allowed"):
        create_model("resnet18", pretrained=True)
