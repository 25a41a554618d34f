"""Training FLOPs of one step, as `torch.utils.flop_counter.FlopCounterMode` counts them, with
attention counted alike on every device.

torch registers FLOP formulas for the matmuls, convolutions and the CUDA attention kernels only:
on the CPU, `scaled_dot_product_attention` runs `_scaled_dot_product_flash_attention_for_cpu`
(forward and backward), which torch counts as 0, so a CPU count would leave attention out while a
CUDA count includes it. dstbench adds formulas for the attention kernels of the other devices (the
CPU's, MPS's math kernel, the `overrideable` one of XPU and out-of-tree backends) through
`FlopCounterMode(custom_mapping=...)`, never touching torch's global registry.

One basis on every device: attention is counted as the matmuls it is made of, forward `Q K^T` and
`P V`, backward their four gradients, i.e. what the same model with attention written as explicit
matmuls counts. torch's own formula for the fused CUDA backward adds a fifth matmul, the recompute
of `Q K^T` that flash-style kernels do instead of saving the scores; it is the kernel's choice, not
the model's work, and counting it would put the CUDA and CPU counts (and the fused and reference
attention paths) on different bases, so dstbench replaces it for the kernels whose inputs are
plain 4-d tensors. The variable-length kernels (`_flash_attention_*`, `_efficient_attention_*`,
used for nested tensors; never by the ViTs here) keep torch's formulas. Causal masking is not
discounted, as in torch. Elementwise work (softmax, norms, activations) is not counted at all.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable

from dstbench.measure.trackers.base import LATEST, RANK0, WARMUP, CaseContext, ResultField, Tracker
from dstbench.measure.trackers.registry import register_tracker

# torch is imported where it is used: the result record reads the declaration here without it.

# Kernels whose leading arguments are (query, key, value), and (grad_out, query, key, value).
ATTENTION_FORWARD = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)
ATTENTION_BACKWARD = tuple(f"{name}_backward" for name in ATTENTION_FORWARD if not name.endswith("_for_mps"))


def attention_forward_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """`Q K^T` and `P V`."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def attention_backward_flops(
    grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    """The gradients of `Q K^T` and `P V` (two matmuls each): torch's count less its recompute of
    `Q K^T` (its shape checks kept)."""
    from torch.utils.flop_counter import bmm_flop, sdpa_backward_flop_count

    b, heads, s_q, d_q = query_shape
    s_k = key_shape[2]
    recompute = bmm_flop((b * heads, s_q, d_q), (b * heads, d_q, s_k))
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape) - recompute


def attention_formulas() -> dict[Any, Callable[..., int]]:
    """`custom_mapping` for `FlopCounterMode`: every attention kernel of this torch build that takes
    plain (batch, heads, tokens, dim) tensors, forward and backward."""
    import torch

    aten = torch.ops.aten
    mapping: dict[Any, Callable[..., int]] = {}
    for names, formula in ((ATTENTION_FORWARD, attention_forward_flops), (ATTENTION_BACKWARD, attention_backward_flops)):
        for name in names:
            if hasattr(aten, name):
                mapping[getattr(aten, name)] = formula
    return mapping


@register_tracker("flops")
class FlopCounter(Tracker):
    """Counts the FLOPs of the operations run inside `with` (the first warm-up step): forward and
    backward matmuls, convolutions and attention (as matmuls, on every device; see the module
    docstring). What stays dense is counted too, so a ratio of two counts is the physical limit of a
    speedup."""

    runs = frozenset({WARMUP})
    fields = (
        ResultField("flops_per_step", int | None, LATEST, RANK0, "training FLOPs of one step (the first warm-up step)",
                    default=None, unit="FLOPs", over_segments="warm-up", better="lower", exact=True),
    )

    @classmethod
    def for_case(cls, context: CaseContext) -> "FlopCounter | None":
        return cls() if context.timed else None

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False, custom_mapping=attention_formulas())
        self.total: int | None = None

    def __enter__(self) -> "FlopCounter":
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._mode.__exit__(exc_type, exc, tb)
        self.total = int(self._mode.get_total_flops())

    def write(self, line: Any) -> None:
        line.flops_per_step = self.total
