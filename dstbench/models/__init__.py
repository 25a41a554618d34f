"""The models dstbench trains: timm Vision Transformers (`vit`) and the fused norm+linear op (`fused_norms`)."""
