"""A plugin method whose construction ends the process (`sys.exit(0)`, or a stray
KeyboardInterrupt), as a careless script might: validation must call it the plugin's failure."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from dstbench.dst.method_base import Method
from dstbench.dst.registry import register_method

PLUGIN = __name__


@register_method("fault_init_exit", kind="masked")
class FaultInitExit(Method):
    @dataclasses.dataclass
    class Params:
        interrupt: bool = False  # raise KeyboardInterrupt instead of calling sys.exit(0)

    def __init__(self, model: Any, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        if self.params.interrupt:
            raise KeyboardInterrupt
        sys.exit(0)
