"""Waiting for a device: the one host-device synchronisation the harness does around what it times."""

from __future__ import annotations

import torch


def synchronize(device: torch.device) -> None:
    """Wait until `device` has finished its queued work (a no-op on the CPU, which runs in order)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
