"""Case processes that never run the caller's `__main__`.

A `spawn` or `forkserver` child first re-imports its parent's main module (multiprocessing sends
the main script's path, or its module name, with every process it starts). A script that calls
`dstbench.run_suite` without an `if __name__ == "__main__":` guard would then start the whole run
again inside each case process and crash it; code fed on standard input (`python -`) names a file
`<stdin>` that does not exist. A case process needs nothing from the caller's main module: its
target and arguments are dstbench's own, and methods come from `plugins:` and entry points. So
while a case process starts, `sys.modules["__main__"]` is a bare module with neither a file nor a
spec, and the child imports only what unpickling its target needs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from typing import Iterator

# The parallel launcher starts case processes from several threads: one swap at a time.
_SWAP_LOCK = threading.RLock()


@contextlib.contextmanager
def main_module_withheld() -> Iterator[None]:
    """Within the block, `sys.modules["__main__"]` is an empty module (no `__file__`, no `__spec__`)."""
    with _SWAP_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is None:
                sys.modules.pop("__main__", None)
            else:
                sys.modules["__main__"] = main
