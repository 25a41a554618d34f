"""Methods that fail on purpose (and one that proves cases run at once), for the launcher and runner
tests. Suites load them with `plugins: [tests.execution.launchers.fault_methods]`."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch

from dstbench.dst.method_base import Method
from dstbench.dst.registry import register_method

PLUGIN = __name__


@register_method("fault_oom", kind="masked")
class FaultOOM(Method):
    """Raises the error a CUDA allocator raises when memory runs out."""

    def train_segment(self, batches: Any, steps: int) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


@register_method("fault_exit", kind="masked")
class FaultExit(Method):
    """Calls sys.exit during training, as a script's code might."""

    @dataclasses.dataclass
    class Params:
        code: int = 0

    def train_segment(self, batches: Any, steps: int) -> Any:
        sys.exit(self.params.code)


@register_method("fault_error", kind="masked")
class FaultError(Method):
    """Raises an ordinary exception during training."""

    @dataclasses.dataclass
    class Params:
        message: str = "injected failure"
        repeat: int = 1  # the message this many times on one line (a 20 MB error line)

    def train_segment(self, batches: Any, steps: int) -> Any:
        raise ValueError(self.params.message * self.params.repeat)


@register_method("fault_crash", kind="masked")
class FaultCrash(Method):
    """Kills its own process, as a segfault in a kernel would."""

    def train_segment(self, batches: Any, steps: int) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)


@register_method("fault_hang", kind="masked")
class FaultHang(Method):
    """Hangs in its segment: forever, or while the file named by `hang_file` (default: the
    environment's `DSTBENCH_FAULT_HANG_FILE`) exists; then it trains as dense does, so a resumed run
    can finish the same suite. With `pid_file` (or `DSTBENCH_FAULT_PID_FILE`) it first writes
    "pid ppid" there, so a test can watch its process. With `at_density` (`at_seed`), only the case
    at that density (seed, of a suite's `seeds:`) hangs; the others train as dense does."""

    @dataclasses.dataclass
    class Params:
        hang_file: str = ""
        pid_file: str = ""
        at_density: float = 0.0  # 0: at every density
        at_seed: int = -1  # -1: at every seed

    def train_segment(self, batches: Any, steps: int) -> Any:
        if self.params.at_density and self.target_density != self.params.at_density:
            return super().train_segment(batches, steps)
        if self.params.at_seed >= 0 and self.seed != self.params.at_seed:
            return super().train_segment(batches, steps)
        pid_file = self.params.pid_file or os.environ.get("DSTBENCH_FAULT_PID_FILE")
        if pid_file and not os.path.exists(pid_file):
            tmp = f"{pid_file}.tmp"
            with open(tmp, "w") as handle:
                handle.write(f"{os.getpid()} {os.getppid()}\n")
            os.replace(tmp, pid_file)
        hang_file = self.params.hang_file or os.environ.get("DSTBENCH_FAULT_HANG_FILE")
        if hang_file is None:
            time.sleep(3600)
        while os.path.exists(hang_file):
            time.sleep(0.1)
        return super().train_segment(batches, steps)


@register_method("fault_extras", kind="masked")
class FaultExtras(Method):
    """Trains as dense does, but its result extras hold what JSON cannot (a set, a tensor, an object)."""

    def result_extras(self) -> dict[str, Any]:
        return {"classes": {3, 1, 2}, "scores": torch.arange(3.0), "handle": object(), (1, 2): "tuple key"}


@register_method("rendezvous", kind="masked")
class Rendezvous(Method):
    """Trains as dense does, after waiting in its first segment until `expect` cases have arrived
    (a file each in `folder`): cases run one after another never all arrive, and each raises after
    `wait_s`. What tells a test that cases ran at once without timing anything."""

    @dataclasses.dataclass
    class Params:
        folder: str = ""
        expect: int = 2
        wait_s: float = 120.0

    def train_segment(self, batches: Any, steps: int) -> Any:
        if self.params.folder and not getattr(self, "_met", False):
            folder = Path(self.params.folder)
            (folder / f"{os.getpid()}").touch()
            deadline = time.monotonic() + self.params.wait_s
            while len(list(folder.iterdir())) < self.params.expect:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rendezvous: only {len(list(folder.iterdir()))} of {self.params.expect} cases arrived")
                time.sleep(0.05)
            self._met = True
        return super().train_segment(batches, steps)


@register_method("fault_flaky", kind="masked")
class FaultFlaky(Method):
    """Fails while `fail_file` exists (a failure that a retry, once the file is gone, gets past)."""

    @dataclasses.dataclass
    class Params:
        fail_file: str = ""

    def train_segment(self, batches: Any, steps: int) -> Any:
        if self.params.fail_file and Path(self.params.fail_file).exists():
            raise ValueError("flaky failure")
        return super().train_segment(batches, steps)
