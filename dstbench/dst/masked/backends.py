"""Execution backends of the masked methods: how the masked linears compute (`params.execution`).

    masked           full-size weights, zero where masked, dense kernels (the default)
    csr              only the active weights, CSR kernels on the CPU and CUDA (`dstbench.dst.masked.csr`)
    semi_structured  transposable 2:4 masks, cuSPARSELt 2:4 kernels on CUDA at density 0.5,
                     fp16/bf16 (`dstbench.dst.masked.semi_structured`; untested on hardware here)
    condensed        a constant fan-in stored as `[live, k]` values and input indices, a gather
                     and a batched dense product (`dstbench.dst.masked.condensed`; SRigL only)

Every masked method (SET, RigL, MEST, Chase, and any `MaskedMethod` subclass) gets them alike
(condensed only where the method keeps a constant fan-in: its `Params.executions`): its topology
update is written against the mask set's interface and never sees which one runs.
`MaskedMethod` talks to its backend through five members:

    mask_set_class                       the `MaskSet` class built over the prunable weights
    install(model, mask_set, allotment,  after the initial masks: swaps the prunable linears for the
            density=, precision=)        backend's and returns the mask set and layer allotment
                                         training continues with
    before_forward(mask_set, dense_grad) every step: whether this step's backward must keep the
                                         dense weight gradient (an update that grows by it follows)
    flops_basis                          what `flops_per_step` counts for the masked linears
    result_extras(mask_set)              the backend's fields of the result line's `method_extras`:
                                         `kernel_precision`, the dtype the masked linears' products
                                         run in (csr: fp32 under any autocast), and for
                                         semi_structured the exchange each update asked and did

Distributed (DDP): masked and semi_structured run; csr and condensed are refused (suite validation
and here): their gradients at update steps are per rank, and a soft budget (csr) or an ablated
neuron (condensed) resizes their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from dstbench.util import distributed
from dstbench.models.timm_models import create_model, prunable_weights
from dstbench.dst.masked.active_values import ActiveValuesMaskSet
from dstbench.dst.masked.condensed import CondensedMaskSet
from dstbench.dst.masked.csr import CsrMaskSet
from dstbench.dst.masked.masks import MaskSet
from dstbench.dst.masked import semi_structured
from dstbench.dst.masked.semi_structured import SemiStructuredMaskSet, half_allotment, swap_linears

class MaskedExecution:
    """Full-size weights and dense kernels: the mask set as it is."""

    name = "masked"
    mask_set_class: type[MaskSet] = MaskSet
    # FlopCounterMode counts the dense products over the zero-filled weights: what runs.
    flops_basis = "executed"
    # The suite's precision (set at install): dense products run in the autocast dtype.
    kernel_precision = "fp32"

    def install(
        self, model: torch.nn.Module, mask_set: Any, allotment: dict[str, int], *, density: float, precision: str
    ) -> tuple[Any, dict[str, int]]:
        self.kernel_precision = precision
        return mask_set, allotment

    def before_forward(self, mask_set: Any, dense_grad: bool) -> None:
        pass

    def result_extras(self, mask_set: Any) -> dict[str, Any]:
        return {"kernel_precision": self.kernel_precision}


class ActiveValuesExecution(MaskedExecution):
    """An execution whose layers store the active weights alone (`dstbench.dst.masked.active_values`)."""

    # The sparse operators carry FLOP formulas of their own: 2 * nnz * tokens per product.
    flops_basis = "executed"
    active_values_class: type[ActiveValuesMaskSet]
    kernels = ""  # named in the error on another device

    def install(
        self, model: torch.nn.Module, mask_set: Any, allotment: dict[str, int], *, density: float, precision: str
    ) -> tuple[Any, dict[str, int]]:
        if distributed.is_distributed():
            raise ValueError(f"execution {self.name} does not run distributed (DDP); use execution masked under torchrun")
        device = next(iter(mask_set.weights.values())).device
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"execution {self.name} runs on cpu or cuda ({self.kernels}), not {device.type}")
        self.kernel_precision = precision
        return self.active_values_class.convert(model, mask_set), allotment

    def before_forward(self, mask_set: Any, dense_grad: bool) -> None:
        mask_set.before_forward(dense_grad)


class CsrExecution(ActiveValuesExecution):
    name = "csr"
    active_values_class = CsrMaskSet
    kernels = "torch's CSR kernels"

    def install(
        self, model: torch.nn.Module, mask_set: Any, allotment: dict[str, int], *, density: float, precision: str
    ) -> tuple[Any, dict[str, int]]:
        csr, allotment = super().install(model, mask_set, allotment, density=density, precision=precision)
        # Not the suite's precision: the CSR products run in the values' dtype under any autocast.
        self.kernel_precision = csr.kernel_precision
        return csr, allotment


class CondensedExecution(ActiveValuesExecution):
    # Products in the autocast dtype under autocast (as masked's), else in the values'.
    name = "condensed"
    active_values_class = CondensedMaskSet
    kernels = "the condensed gather kernels registered there"


class SemiStructuredExecution(MaskedExecution):
    name = "semi_structured"
    # torch's counter sees the 2:4 products with their dense shapes: it counts the dense equivalent
    # (the 2:4 kernels execute half of those multiply-adds).
    flops_basis = "dense_equivalent"

    mask_set_class = SemiStructuredMaskSet

    def install(
        self, model: torch.nn.Module, mask_set: Any, allotment: dict[str, int], *, density: float, precision: str
    ) -> tuple[Any, dict[str, int]]:
        semi_structured.check_device(next(iter(mask_set.weights.values())).device, density, precision)
        swap_linears(model, mask_set)
        mask_set.begin_recording()  # the initial masks are set: what follows are updates
        self.kernel_precision = precision
        return mask_set, half_allotment({name: tuple(w.shape) for name, w in mask_set.weights.items()})

    def before_forward(self, mask_set: Any, dense_grad: bool) -> None:
        # A step starts: the masks set since the last one were one update.
        mask_set.close_update()

    def result_extras(self, mask_set: Any) -> dict[str, Any]:
        return {**super().result_extras(mask_set), **mask_set.exchange_extras()}


BACKENDS: dict[str, type[MaskedExecution]] = {
    backend.name: backend for backend in (MaskedExecution, CsrExecution, SemiStructuredExecution, CondensedExecution)
}
EXECUTIONS = tuple(BACKENDS)


def create_execution(name: str) -> MaskedExecution:
    if name not in BACKENDS:
        raise ValueError(f"execution must be one of {list(EXECUTIONS)}, got {name!r}")
    return BACKENDS[name]()


def prunable_shapes(model_name: str, model_kwargs: Mapping[str, Any], pattern: str | None) -> dict[str, tuple[int, ...]] | None:
    """The shapes of the weights `pattern` (None: the model's default) selects in the suite's model
    (built on the meta device: no memory, no weights), or None when the pattern is not a valid
    regular expression (the method's parameters are refused for it on their own)."""
    try:
        re.compile(pattern or "")
    except re.error:
        return None
    model = create_model(model_name, device="meta", **dict(model_kwargs))
    return {name: tuple(weight.shape) for name, weight in prunable_weights(model, pattern).items()}


def execution_problem(
    params: Mapping[str, Any],
    *,
    device: str,
    densities: list[float],
    precision: str,
    distributed: bool,
    model_name: str | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    model_prunable: str | None = None,
) -> str | None:
    """Why a masked method's `execution` cannot run in this suite, or None (suite validation: exit 2).
    With the suite's model (`model_name`, `model_kwargs`, its `model_prunable`), semi_structured
    also checks the shapes of the prunable weights."""
    execution = params.get("execution", "masked")
    backend = BACKENDS.get(execution)
    if backend is not None and issubclass(backend, ActiveValuesExecution):
        if distributed:
            return f"execution {execution} does not run distributed (DDP); use execution masked under torchrun"
        if device == "mps":
            return f"execution {execution} runs on cpu or cuda ({backend.kernels}), not mps"
    if execution == "semi_structured":
        shapes = None
        if model_name is not None:
            shapes = prunable_shapes(model_name, model_kwargs or {}, params.get("prunable") or model_prunable)
        return semi_structured.problem(device, densities, precision, shapes)
    return None
