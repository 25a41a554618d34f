"""Without a driver every NVML helper answers None instead of raising."""

from __future__ import annotations

import pytest

from dstbench.trackers import nvml


@pytest.mark.skipif(nvml.available(), reason="this machine has NVML")
def test_without_nvml_everything_is_none() -> None:
    assert nvml.handle(0) is None
    assert nvml.snapshot(0) is None
    assert nvml.driver_version() is None
    assert nvml.total_energy_mj(0) is None
