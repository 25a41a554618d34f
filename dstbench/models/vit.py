"""timm Vision Transformers: the weights DST acts on in their blocks, and their own input size."""

from __future__ import annotations

from timm.models.vision_transformer import VisionTransformer

# The weights DST acts on; everything else (patch embedding, tokens, norms, biases, head) stays dense.
DEFAULT_PRUNABLE = r"blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(fc1|fc2))\.weight"


def vit_input_shape(model: VisionTransformer) -> tuple[int, int, int]:
    """(channels, height, width) the model's patch embedding expects."""
    embed = model.patch_embed
    height, width = embed.img_size
    return embed.proj.in_channels, height, width

