"""Training under `torch.compile` (a suite's `compile:`), alike for every method.

What is compiled: the model's `__call__` (`nn.Module.compile`), so its forward and, through
AOTAutograd, its backward; the loss, the method's hooks, the optimizer step and the topology
updates stay eager. The model object stays the one the method holds, so a method that replaces
Parameters (a compact method's resize) or swaps layers keeps training compiled: the changed shapes
fail the compiled graph's guards and torch compiles a new graph at the next step (counted by
`dstbench.measure.trackers.compile`).

Never a silent fallback to eager: torch gives up on a frame that has been recompiled more than its
limit and runs it eagerly from then on; here the limit is `RECOMPILE_LIMIT` per model (its own
cache, `isolate_recompiles`, so cases sharing a process do not share a budget) and reaching it
raises (`fail_on_recompile_limit_hit`), as does any compile error (`suppress_errors` off). A case
that cannot be compiled fails, its error saying so (`compile_failure`).

Cold caches: inductor keeps compiled graphs and kernels on disk and reuses them for the same graph,
so a second run of a suite would compile in a fraction of the first's time (measured here: BARTER's
recompilation after a resize, 8.5 s cold, 1.0 s warm). A method's shapes after a topology update are
new to a real training run, so each case compiles into a cache folder of its own
(`compile_method` returns it; the caller removes it when the case's training is over, and a normal
exit removes it too): every `compile_s` and recompilation is what a first compilation costs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

from dstbench.dst.method_base import Method

# More graphs than any schedule makes (one per topology update, per train/eval mode): reaching it
# means shapes change at every step, which must fail loudly rather than run eagerly.
RECOMPILE_LIMIT = 4096
# Where torch's compiler stack raises from: an exception of these modules is a compile failure.
COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx")


def compile_method(method: Method, options: dict[str, Any]) -> str:
    """Compile `method`'s model in place with `torch.compile(**options)` (see the module docstring);
    compilation itself happens at the next step. Returns the case's compile cache folder."""
    import torch._dynamo.config as dynamo

    cache = tempfile.mkdtemp(prefix="dstbench-inductor-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    # Read by inductor at each compilation (`cache_dir()`), so the next case in a process gets its own.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    dynamo.suppress_errors = False
    dynamo.fail_on_recompile_limit_hit = True
    dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, RECOMPILE_LIMIT)
    method.model.compile(**options, recompile_limit=RECOMPILE_LIMIT, isolate_recompiles=True)
    return cache


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def compile_failure(exc: BaseException, method: str, options: dict[str, Any] | None) -> str | None:
    """The line a failed case's error ends with when torch's compiler raised it (anywhere in the
    exception's chain) in a case trained under `options`; None otherwise (or when eager)."""
    if options is None:
        return None
    culprit = next((e for e in _chain(exc) if type(e).__module__.startswith(COMPILER_MODULES)), None)
    if culprit is None:
        return None
    arguments = ", ".join(f"{k}={v!r}" for k, v in options.items())
    message = str(culprit).strip().splitlines()[0] if str(culprit).strip() else ""
    return (
        f"compile: {method} cannot be trained under torch.compile({arguments}): {type(culprit).__name__}: {message} "
        "(the case was not run eagerly in its place; `compile: false` times it eagerly)"
    )
