"""Methods that fail on purpose, for the launcher and runner tests. Suites load them with
`plugins: [tests.launchers.fault_methods]`."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any

import torch

from dstbench.method import Method
from dstbench.registry import register_method

PLUGIN = __name__


@register_method("fault_oom", kind="masked")
class FaultOOM(Method):
    """Raises the error a CUDA allocator raises when memory runs out."""

    def train_segment(self, batches: Any, steps: int) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


@register_method("fault_error", kind="masked")
class FaultError(Method):
    """Raises an ordinary exception during training."""

    @dataclasses.dataclass
    class Params:
        message: str = "injected failure"

    def train_segment(self, batches: Any, steps: int) -> Any:
        raise ValueError(self.params.message)


@register_method("fault_crash", kind="masked")
class FaultCrash(Method):
    """Kills its own process, as a segfault in a kernel would."""

    def train_segment(self, batches: Any, steps: int) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)


@register_method("fault_hang", kind="masked")
class FaultHang(Method):
    """Hangs in its segment: forever, or while the file named by `DSTBENCH_FAULT_HANG_FILE` exists
    (then it trains as dense does, so a resumed run can finish the same suite). With `at_density`,
    only the case at that density hangs; the others train as dense does."""

    @dataclasses.dataclass
    class Params:
        at_density: float = 0.0  # 0: at every density

    def train_segment(self, batches: Any, steps: int) -> Any:
        if self.params.at_density and self.target_density != self.params.at_density:
            return super().train_segment(batches, steps)
        hang_file = os.environ.get("DSTBENCH_FAULT_HANG_FILE")
        if hang_file is None:
            time.sleep(3600)
        while os.path.exists(hang_file):
            time.sleep(0.1)
        return super().train_segment(batches, steps)
